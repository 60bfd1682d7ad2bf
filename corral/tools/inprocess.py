"""An executor that runs tools in the calling process, over Roots opened here.

No kernel confinement: only openat2/walk resolution and the policy guard stand
between a tool and the host. It exists for the first build and for tests of
tool semantics; the confined worker pool has the same interface (submit,
asubmit, close, confinement).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from corral.config import Limits, SandboxOptions
from corral.fs import Root, Roots
from corral.policy import Policy, RootSpec
from corral.tools.base import Context
from corral.tools.registry import execute


class InProcessExecutor:
    def __init__(
        self, roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions
    ) -> None:
        opened: list[Root] = []
        try:
            for spec in roots:
                opened.append(Root(spec.path, mode=spec.mode, resolver=options.resolver))
        except BaseException:
            for root in opened:
                root.close()
            raise
        self._ctx = Context(Roots(opened[0], opened[1:]), limits, policy)

    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        # Through JSON both ways, as a worker's frames go: results look the same either way.
        response = execute(self._ctx, json.loads(json.dumps(request)))
        return json.loads(json.dumps(response))

    async def asubmit(self, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self.submit, request)

    def close(self) -> None:
        for root in self._ctx.roots.all():
            root.close()

    @property
    def confinement(self) -> dict[str, Any]:
        return {
            "level": "none",
            "landlock_abi": None,
            "seccomp": False,
            "openat2": self._ctx.roots.workspace.resolver == "openat2",
            "no_new_privs": False,
        }
