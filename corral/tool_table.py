"""Every tool's facts, one row a tool: what the policy, the host's quotas, grants,
ledger and cleanup, and the history act on. A module that needs a fact of a tool
reads its row here, never a list of names of its own, so a tool added here is
decided, counted, recorded and cleaned up after without another edit; a writing
tool whose row leaves out what its writes cost or how history records them is
refused when this module is imported (fail closed: nothing would count them).

The tools' code (schema, run) is in tools/; tests/test_tool_table.py checks the
registry against this table.
"""

from __future__ import annotations

from typing import NamedTuple

# Kinds of access (policy.ACCESS_KINDS): `read` returns or relocates file content,
# `write` changes the tree, `list` returns names or metadata.
_READ, _WRITE, _LIST = frozenset({"read"}), frozenset({"write"}), frozenset({"list"})

# read_before_write: what a tool's call has to do with the versions a session knows
SESSION_ROLES = (
    "reads",    # its result names the version of each file it read
    "writes",   # it needs the file's known version; its result names the one it left
    "appends",  # it needs the file's known version; the worker reports the one it left
)
# What a call's written bytes cost ([quota] write_bytes_per_hour):
COSTS = (
    "sized",     # its content's length, fixed by the request: reserved before it runs
    "measured",  # the worker's figure: a file's new size, at most max_file_bytes plus
                 # max_write_bytes of the request's text, for each file it changes
    "copied",    # the worker's figure: a copied file, at most max_file_bytes
    "none",      # it writes no content (a move, a delete, a directory)
)
# Files and directories it may create ([quota] files_created_per_hour), besides
# the parent directories on its paths' way:
CREATES = ("none", "one", "per_added_file")
# What its history record names (history/records.py):
RECORDS = (
    "change",  # one change: one or two entries (a move: where from, where to)
    "batch",   # every file of one patch, changed together (up to MAX_PATCH_ENTRIES)
)
# The argument that holds a patch: its headers name the paths it changes (the host
# reads them once a call, tools/patch_format.files_of).
PATCH_ARGUMENT = "patch"
APPLY_PATCH = "apply_patch"  # the tool taking one (the integrations offer it by name)


class ToolRow(NamedTuple):
    name: str
    writes: bool  # it may change the tree: read_only denies it, history records it
    # kinds of access to a path it does not write, and to one it writes
    access: tuple[frozenset[str], frozenset[str]]
    default_off: bool = False  # denied unless [tools] enables it
    session: str | None = None  # SESSION_ROLES; None: read_before_write leaves it alone
    # arguments that name paths (a string, a list of strings, or PATCH_ARGUMENT):
    # the grants that may apply to a call, the path its audit line names
    path_arguments: tuple[str, ...] = ()
    # arguments that name where it puts a temp file: all the cleanup after a crash gets
    cleanup_arguments: tuple[str, ...] = ()
    # a writer's must be given (a reader's are None: it writes and records nothing)
    cost: str | None = None  # COSTS
    creates: str | None = None  # CREATES
    record: str | None = None  # RECORDS


ROWS = (
    ToolRow("read_file", False, (_READ, _WRITE), session="reads", path_arguments=("path",)),
    ToolRow("write_file", True, (_LIST, _WRITE), session="writes", path_arguments=("path",),
            cleanup_arguments=("path",), cost="sized", creates="one", record="change"),
    # the diff it answers shows the file's content
    ToolRow("edit_file", True, (_READ, _READ | _WRITE), session="writes",
            path_arguments=("path",), cleanup_arguments=("path",), cost="measured",
            creates="none", record="change"),
    ToolRow("read_multiple_files", False, (_READ, _WRITE), session="reads",
            path_arguments=("paths",)),
    ToolRow("append_file", True, (_LIST, _WRITE), session="appends", path_arguments=("path",),
            cleanup_arguments=("path",), cost="sized", creates="one", record="change"),
    ToolRow("list_directory", False, (_LIST, _WRITE), path_arguments=("path",)),
    ToolRow("create_directory", True, (_LIST, _WRITE), path_arguments=("path",),
            cleanup_arguments=("path",), cost="none", creates="one", record="change"),
    ToolRow("stat_file", False, (_LIST, _WRITE), path_arguments=("path",)),
    # Both ends: moving a file out of a place puts its content where it can be read.
    ToolRow("move_file", True, (_READ | _WRITE, _READ | _WRITE),
            path_arguments=("source", "destination"), cleanup_arguments=("destination",),
            cost="none", creates="none", record="change"),
    # the source is read, the destination written
    ToolRow("copy_file", True, (_READ, _WRITE), path_arguments=("source", "destination"),
            cleanup_arguments=("destination",), cost="copied", creates="one",
            record="change"),
    ToolRow("delete_file", True, (_LIST, _WRITE), default_off=True, path_arguments=("path",),
            cleanup_arguments=("path",), cost="none", creates="none", record="change"),
    ToolRow("search_files", False, (_LIST, _WRITE), path_arguments=("path",)),
    # file content, and the names of matching files
    ToolRow("grep", False, (_READ | _LIST, _WRITE), path_arguments=("path",)),
    ToolRow("list_allowed_directories", False, (_LIST, _WRITE)),
    ToolRow("delete_directory", True, (_LIST, _WRITE), default_off=True,
            path_arguments=("path",), cleanup_arguments=("path",), cost="none",
            creates="none", record="change"),
    # as edit_file, and a move relocates content; its temps are the patch's own
    # (history settles them), so a crash's cleanup gets nothing
    ToolRow(APPLY_PATCH, True, (_READ, _READ | _WRITE), session="writes",
            path_arguments=(PATCH_ARGUMENT,), cost="measured", creates="per_added_file",
            record="batch"),
)
TABLE = {row.name: row for row in ROWS}  # in the contract's order (DESIGN.md "Tools")
# Every argument some tool takes as a path: what a call of an unknown tool may name.
EVERY_PATH_ARGUMENT = tuple(dict.fromkeys(
    name for row in ROWS for name in row.path_arguments if name != PATCH_ARGUMENT))


def missing(row: ToolRow) -> tuple[str, ...]:
    """The facts a writing tool's row leaves out: without them its writes would
    escape the byte and file quotas, and history would not know its records."""
    if not row.writes:
        return ()
    return tuple(name for name in ("cost", "creates", "record") if getattr(row, name) is None)


def check(row: ToolRow) -> None:
    """ValueError if `row` is not one the modules reading it can act on."""
    if missing(row):
        raise ValueError(f"the writing tool {row.name} has no {', '.join(missing(row))}")
    for field, value, allowed in (("session", row.session, SESSION_ROLES),
                                  ("cost", row.cost, COSTS), ("creates", row.creates, CREATES),
                                  ("record", row.record, RECORDS)):
        if value is not None and value not in allowed:
            raise ValueError(f"{row.name}: {field} {value!r} is not one of {allowed}")


for _row in ROWS:
    check(_row)
