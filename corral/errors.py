"""The one exception every layer raises for a failure the caller should see.

Error codes are stable API; messages are one sentence that
names the path as the caller gave it, never the host's absolute path.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

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
    }
)


class CorralError(Exception):
    """A tool failure with a stable code; `rule` names the policy rule that decided it."""

    def __init__(self, code: str, message: str, *, rule: str | None = None) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.rule = rule

    def to_dict(self) -> dict[str, str]:
        error = {"code": self.code, "message": self.message}
        if self.rule is not None:
            error["rule"] = self.rule
        return error


def did_you_mean(word: object, choices: Iterable[str], end: str = "") -> str:
    """"; did you mean 'x'?" for the choice closest to a misspelt name, else `end`."""
    if not isinstance(word, str):
        return end
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else end
