"""The one exception every layer raises for a failure the caller should see.

Error codes are stable API; messages are one sentence that
names the path as the caller gave it, never the host's absolute path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ERROR_CODES = frozenset(
    {
        "invalid_arguments",
        "unknown_tool",
        "tool_disabled",
        "path_denied",
        "outside_workspace",
        "not_found",
        "already_exists",
        "is_a_directory",
        "not_a_directory",
        "not_a_regular_file",
        "too_large",
        "binary_file",
        "no_match",
        "ambiguous_match",
        "conflict",
        "read_only",
        "approval_required",
        "approval_denied",
        "symlink_loop",
        "timeout",
        "worker_crashed",
        "io_error",
        "quota_exceeded",
    }
)


class CorralError(Exception):
    """A tool failure with a stable code; `rule` names the policy rule that decided it,
    `retry_after_s` (quota_exceeded) the seconds until the call would be accepted.

    A file system failure carries its parts: the operation (`op`), the path as the
    layer that failed knew it (`path`) and why (`reason`); its message is made from
    them when it is read ("cannot read a.txt: no such file or directory."), so a
    layer above can put the caller's own spelling in with `given()`. Any other
    failure is its message."""

    def __init__(
        self, code: str, message: str = "", *, rule: str | None = None,
        op: str | None = None, path: str | None = None, reason: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        self.code = code
        self.rule = rule
        self.retry_after_s = retry_after_s
        self.op, self.path, self.reason = op, path, reason
        self._message = message
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if self.op is None or self.path is None:
            return self._message
        return f"cannot {self.op} {shown_path(self.path)}: {self.reason}."

    def given(self, spellings: Mapping[str, str]) -> CorralError:
        """This error naming its path as the caller spelled it (spellings: the
        path this layer knows -> the caller's), or itself."""
        if self.path is None or self.path not in spellings:
            return self
        return CorralError(self.code, self._message, rule=self.rule, op=self.op,
                           path=spellings[self.path], reason=self.reason,
                           retry_after_s=self.retry_after_s)

    def to_dict(self) -> dict[str, str | float]:
        """As a result carries it: rendered here, once, at the edge."""
        error: dict[str, str | float] = {"code": self.code, "message": self.message}
        if self.rule is not None:
            error["rule"] = self.rule
        if self.retry_after_s is not None:
            error["retry_after_s"] = self.retry_after_s
        return error


SHOWN_PATH_CHARS = 200  # an overlong path is cut in messages so one error stays one readable line


def shown_path(path: str) -> str:
    """A path fit for one line of a message: repr() if it holds control characters,
    cut at SHOWN_PATH_CHARS."""
    shown = path if path.isprintable() else repr(path)
    if len(shown) > SHOWN_PATH_CHARS:
        shown = shown[:SHOWN_PATH_CHARS] + "..."
    return shown


class PolicyError(ValueError):
    """A policy that cannot be built: bad action, bad glob or regex, a system root."""


class SandboxError(Exception):
    """The sandbox cannot start, or has halted (failing closed)."""


def did_you_mean(word: object, choices: Iterable[str], end: str = "") -> str:
    """"; did you mean 'x'?" for the choice closest to a misspelt name, else `end`."""
    if not isinstance(word, str):
        return end
    import difflib  # here: only a misspelled name needs it, and corral's start does not

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else end
