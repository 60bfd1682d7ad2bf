"""The zygote's control channel: what crosses from the host to the zygote and
back. A sandbox's setup crosses as one typed value (SandboxSetup), built in one
place (SandboxSetup.of) and checked where the zygote reads it, never a bag of keys.

Wire shapes (one JSON object per frame):
    start    {"setup": SandboxSetup | null}   the first frame
    ops      {"op": "spawn"} | {"op": "wait", "pid"}
    replies  {"pid"} (started; a spawn's, with fds [socket, pidfd]) | {"pid", "code"} (a
             wait's) | {"error"}
    template {"op": "zygote"} with fds [control socket] -> {"pid"} with fds [pidfd] | {"error"}
    worker   a shared pool's new worker, on its own socket: setup with fds [root, ...]
    setup    {"roots": [[path, mode], ...], "limits", "policy": JSON text, "options",
              "history": path | null}
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

from corral.calls.messages import Malformed, is_count
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec

ROOT_MODES = ("ro", "rw")
_Fields = TypeVar("_Fields", Limits, SandboxOptions)


class SandboxSetup(NamedTuple):
    """What a sandbox's workers serve with: its roots, limits, policy, options and
    history store. A private sandbox's zygote gets it in its start frame; a shared
    pool's zygote never does: each new worker gets it (and the sandbox's root fds)
    from the host on its own socket."""

    roots: tuple[RootSpec, ...]  # the workspace first
    limits: Limits
    policy: str  # as JSON text: compiled by the zygote (private) or the worker (shared)
    options: SandboxOptions
    history: str | None = None  # the workspace's history work directory; None: off

    @classmethod
    def of(
        cls, roots: Sequence[RootSpec], limits: Limits, policy: Policy,
        options: SandboxOptions, history: str | None = None,
    ) -> SandboxSetup:
        """The one place a setup is made (Broker, for a private sandbox or a lane)."""
        return cls(tuple(roots), limits, json.dumps(policy.to_dict()), options, history)

    def to_wire(self) -> dict[str, Any]:
        return {
            "roots": [[root.path, root.mode] for root in self.roots],
            "limits": dataclasses.asdict(self.limits), "policy": self.policy,
            "options": dataclasses.asdict(self.options), "history": self.history,
        }

    @classmethod
    def from_wire(cls, wire: Any) -> SandboxSetup:
        """The setup a frame holds; Malformed (saying what is wrong) otherwise."""
        if type(wire) is not dict:
            raise Malformed("a setup that is not an object")
        roots, policy, history = wire.get("roots"), wire.get("policy"), wire.get("history")
        if not (type(roots) is list and roots and all(_root(r) for r in roots)):
            raise Malformed("a setup without its roots ([absolute path, ro|rw] pairs)")
        if type(policy) is not str:
            raise Malformed("a setup without its policy")
        if not (history is None or (type(history) is str and os.path.isabs(history))):
            raise Malformed("a setup whose history store is not an absolute path")
        options = wire.get("options")
        if type(options) is dict and type(options.get("require")) is list:
            options = {**options, "require": tuple(options["require"])}
        return cls(
            tuple(RootSpec(path, mode) for path, mode in roots),
            _fields(Limits, wire.get("limits"), "limits"), policy,
            _fields(SandboxOptions, options, "options"), history,
        )


def _root(wire: Any) -> bool:
    return (type(wire) is list and len(wire) == 2 and type(wire[0]) is str
            and os.path.isabs(wire[0]) and wire[1] in ROOT_MODES)


def _fields(kind: type[_Fields], wire: Any, name: str) -> _Fields:
    """A Limits or SandboxOptions from its fields; they check their own values."""
    if type(wire) is not dict:
        raise Malformed(f"a setup without its {name}")
    try:
        return kind(**wire)
    except (TypeError, ValueError) as exc:
        raise Malformed(f"a setup whose {name} are refused: {exc}") from None


class ZygoteStart(NamedTuple):
    """The zygote's first frame: the sandbox it forks for (None: a shared pool's
    zygote, whose workers get their setup from the host)."""

    setup: SandboxSetup | None

    def to_wire(self) -> dict[str, Any]:
        return {"setup": None if self.setup is None else self.setup.to_wire()}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ZygoteStart:
        if "setup" not in wire:
            raise Malformed("a start frame without its setup")
        setup = wire["setup"]
        return cls(None if setup is None else SandboxSetup.from_wire(setup))


class ForkZygote(NamedTuple):
    """To the zygote template (sandbox/template.py): fork a zygote that serves the
    control socket attached (reply {"pid"} with fds [pidfd])."""

    def to_wire(self) -> dict[str, Any]:
        return {"op": "zygote"}


class Spawn(NamedTuple):
    """Fork one worker (reply {"pid"} with fds [socket, pidfd])."""

    def to_wire(self) -> dict[str, Any]:
        return {"op": "spawn"}


class Wait(NamedTuple):
    """How a worker ended (reply {"pid", "code"})."""

    pid: int

    def to_wire(self) -> dict[str, Any]:
        return {"op": "wait", "pid": self.pid}


ControlOp = Spawn | Wait


def control_from_wire(wire: dict[str, Any]) -> ControlOp | None:
    """The op a control frame holds; None if it is none (not our broker talking)."""
    op = wire.get("op")
    if op == "spawn" and len(wire) == 1:
        return Spawn()
    if op == "wait" and is_count(wire.get("pid")):
        return Wait(wire["pid"])
    return None


class Reply(NamedTuple):
    """The zygote's answer to its start frame, a spawn or a wait, or the template's to
    a ForkZygote: a pid (with a wait's exit code, None if unknown), or why it could
    not."""

    pid: int | None = None
    code: int | None = None
    error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        wire: dict[str, Any] = {"pid": self.pid}
        if self.code is not None:
            wire["code"] = self.code
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Reply:
        error, pid, code = wire.get("error"), wire.get("pid"), wire.get("code")
        if error is not None:
            return cls(error=str(error))
        if not is_count(pid) or not (code is None or type(code) is int):
            raise Malformed("a reply without a pid")
        return cls(pid, code)
