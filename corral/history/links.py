"""Symbolic links made again: an undo or a rewind puts back a deleted link with the
target text its record holds.

A confined worker can never make a link (Landlock grants no MAKE_SYM right and
seccomp refuses symlink calls), so the host makes it, with one step that cannot
be steered out of the root: the parent directory is resolved beneath the root's
fd (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, or the component walk where
openat2 is missing: Root's resolvers) and symlinkat(2) gets that directory's fd
and one final name. symlinkat never follows its final name and fails if it is
taken (a conflict, as for a file), and the target is only text: nothing resolves
it when the link is made, and every later corral call resolves through it
beneath the root as through any link.

`make_link` is that step, for anything that puts links back (undo, rewind, a
whole-workspace snapshot); `check_target` is the check of a recorded target.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from corral.errors import CorralError, shown_path
from corral.fs import Root

# A link's target is at most PATH_MAX - 1 bytes (the kernel refuses a longer one).
MAX_TARGET_BYTES = 4095


def check_target(target: object) -> str | None:
    """Why `target` cannot be a link's target (None: it can): text of 1 to
    MAX_TARGET_BYTES bytes (encoded as a file name is) without a NUL. Whatever a
    record holds is input: a store file may have been forged."""
    if not isinstance(target, str) or not target:
        return "a link target must be non-empty text"
    if "\0" in target:
        return "a link target cannot hold a NUL byte"
    try:
        size = len(os.fsencode(target))
    except UnicodeEncodeError:
        return "a link target that is not valid text"
    if size > MAX_TARGET_BYTES:
        return f"a link target of {size} bytes, over the {MAX_TARGET_BYTES} byte limit"
    return None


def make_link(root: Root, rel: str, target: str, *, guard: Callable[[str], None] | None = None,
              op: str = "make the link") -> None:
    """Make the symbolic link `rel` (relative to `root`, a Root in mode "rw")
    holding `target`, as text, never followed. The parent must exist and is
    resolved beneath the root; the final name must be free. CorralError:
    invalid_arguments (a bad target or path), outside_workspace (`rel` leads out
    of the root), read_only, not_found (no parent), already_exists (the name is
    taken: nothing is replaced). `guard` gets the resolved path before anything is
    made (a policy's decision: raise to refuse)."""
    why = check_target(target)
    if why is not None:
        raise CorralError("invalid_arguments", f"cannot {op} {shown_path(rel)}: {why}.")
    # Root's resolution prelude (the path's text, the root's mode, the parent
    # resolved beneath, one final name), which its own verbs use: a link is made by
    # this step only.
    with root.at(op, rel, follow=False, guard=guard, changes=True, named=True) as at:
        # EEXIST (the name taken, even by a link made meanwhile: nothing is replaced)
        # comes out as already_exists
        os.symlink(target, at.name(), dir_fd=at.dir_fd)
