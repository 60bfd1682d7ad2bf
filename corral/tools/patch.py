"""apply_patch: a patch in the Codex CLI's format (tools/patch_format.py reads it
and locates its hunks) applied to several files as one change (fs/batch.py).

Every path is resolved and decided by the policy, and every hunk located,
before anything changes; the paths that need a person's yes are all asked
about in one round. Then the new files are staged beside their targets and
land together: a failure, or a kill followed by a settle, leaves all of the
patch or none of it.
"""

from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass
from typing import Any

from corral.errors import CorralError
from corral.fs import Root
from corral.fs import batch as fs_batch
from corral.fs.root import remove_made
from corral.fs.staged import Staged
from corral.tools import matching
from corral.tools.access import PathCheck, content, open_target, require_read
from corral.tools.base import (
    BOOLEAN,
    STRING,
    Context,
    Outcome,
    Tool,
    list_of,
    match_prop,
    mcp_hints,
    obj,
    shape,
)
from corral.tools.diff import capped, unified_diff
from corral.tools.encodings import decode
from corral.tools.patch_format import MAX_PATCH_FILES, FilePatch, apply_hunks, parse_patch
from corral.tools.write import utf8

DIFF_TEXT_LINES = 400  # diff lines shown to a model; the whole diff stays in result.diff
DIFF_TEXT_CHARS = 64 * 1024  # ...and characters (result.diff is capped at 4 MiB)
COMMON_BLOCK = 4096  # characters _common compares at a time
ACTIONS = ("add", "update", "delete", "move")


@dataclass
class Plan:
    """One file of the patch, decided and computed; nothing changed yet."""

    file: FilePatch
    root: Root
    rel: str
    check: PathCheck
    old: bytes | None = None  # what update, delete and move read
    link: str | None = None  # a deleted symlink's target (old is None)
    new: bytes | None = None  # what add, update and move write
    before: str = ""
    after: str = ""
    match: str = "exact"
    dest: tuple[Root, str, PathCheck] | None = None  # a move's destination
    version: str | None = None  # of the new file, once it is staged

    @property
    def action(self) -> str:
        return "move" if self.dest is not None else self.file.action


def apply_patch(ctx: Context, args: dict[str, Any]) -> Outcome:
    files = parse_patch(args["patch"])
    if len(files) > MAX_PATCH_FILES:
        raise CorralError(
            "too_large", f"the patch changes {len(files)} files, over the limit of "
            f"{MAX_PATCH_FILES} files a patch may change; split it.")
    _bound_new_bytes(ctx, files)
    tolerant = args["match"] != "exact" and ctx.policy.edit_match != "exact"
    plans = _plan(ctx, files, tolerant)
    diff, cut = capped("".join(_diff(plan) for plan in plans))
    if not args["dry_run"]:
        _land(ctx, plans)
    result = {
        "files": [_shown(plan, args["dry_run"]) for plan in plans],
        "match": matching.LEVELS[max(matching.LEVELS.index(p.match) for p in plans)],
        "diff": diff,
        "diff_truncated": cut,
        "dry_run": args["dry_run"],
    }
    written = sum(len(plan.new or b"") for plan in plans)
    return Outcome(result, _text(plans, result["match"], diff, args["dry_run"]), written)


def _bound_new_bytes(ctx: Context, files: tuple[FilePatch, ...]) -> None:
    """The text the patch brings (added files, added lines) within max_write_bytes."""
    size = sum(len((f.content or "").encode("utf-8", "surrogatepass")) + sum(
        len(text.encode("utf-8", "surrogatepass")) + 1
        for hunk in f.hunks for op, text in hunk.lines if op == "+") for f in files)
    if size > ctx.limits.max_write_bytes:
        raise CorralError(
            "too_large", f"the patch adds {size} bytes, over the write limit of "
            f"{ctx.limits.max_write_bytes} bytes.")


# -- deciding, before anything changes ------------------------------------------


def _plan(ctx: Context, files: tuple[FilePatch, ...], tolerant: bool) -> list[Plan]:
    """Every file decided and computed. The paths that need approval are gathered
    over the whole patch (one question about all of them); any other refusal
    answers at once and asks nothing."""
    plans: list[Plan] = []
    asking: CorralError | None = None
    for file in files:
        try:
            plans.append(_plan_one(ctx, file, tolerant))
        except CorralError as error:
            if error.code != "approval_required":
                ctx.needs_approval.clear()
                raise
            asking = asking or error
    if asking is not None:
        raise asking
    seen: dict[tuple[str, str], str] = {}
    for plan in plans:
        ends = [(plan.root, plan.rel)] + ([plan.dest[:2]] if plan.dest is not None else [])
        for root, rel in ends:
            # a deleted link is the link itself, not the file it leads to
            key = (root.path, _resolved(root, rel, follow=plan.link is None))
            if key in seen:
                raise CorralError(
                    "invalid_arguments", f"the patch changes {seen[key]} twice (also as "
                    f"{plan.file.path}); change each file once.")
            seen[key] = plan.file.path
    if sum(plan.file.action == "update" for plan in plans) > 1:
        _linked_once(plans)
    return plans


def _linked_once(plans: list[Plan]) -> None:
    """Two hard links of one file, both rewritten, are one file named twice: each
    name would be rewritten from the same old text, the link split, each name
    holding part of the patch. (A delete of one name beside them removes a name
    only: no conflict.) Only files with other links are looked at (one stat each)."""
    seen: dict[tuple[str, int], str] = {}
    for plan in plans:
        if plan.file.action != "update":
            continue
        # decided already (the guard would record the path again); a symlink's file
        info = plan.root.info(plan.rel, follow=True)
        if info is None or info.nlink < 2:
            continue
        key = (plan.root.path, info.ino)
        if key in seen:
            raise CorralError(
                "invalid_arguments", f"the patch changes {seen[key]} twice (also as "
                f"{plan.file.path}, a hard link to it); change each file once, under one "
                "name.")
        seen[key] = plan.file.path


def _resolved(root: Root, rel: str, follow: bool = True) -> str:
    """Where `rel` leads (a new file's missing directories: as spelled)."""
    try:
        return root.resolve(rel, follow=follow)
    except CorralError:
        return posixpath.normpath(rel)


def _plan_one(ctx: Context, file: FilePatch, tolerant: bool) -> Plan:
    path = file.path
    root, rel, check = open_target(ctx, path, write=True)
    if file.action == "add":
        if root.info(rel, follow=True, guard=check) is not None:
            raise CorralError(
                "already_exists", f"{path} exists; the patch's Add File makes new files "
                "only: use Update File to change it, or delete it first (delete_file, or a "
                "Delete File in an earlier patch: one patch changes each file once).")
        new = utf8(file.content or "", "patch")
        _fits(ctx, path, new)
        return Plan(file, root, rel, check, new=new, after=file.content or "")
    deleting = file.action == "delete"
    if deleting or file.move_to is not None:
        check = _deleting(ctx, root, path, "deletes" if deleting else "moves")
    if deleting:  # a symlink goes itself, as delete_file removes it (and Codex)
        info = root.info(rel, guard=check)
        if info is not None and info.type == "symlink" and info.symlink_target is not None:
            return Plan(file, root, rel, check, link=info.symlink_target)
    old = content(ctx, root, rel, check)
    require_read(ctx, root, path, old)
    decoded = decode(old, ctx.policy.fallback_encodings)
    if decoded is None:
        if not deleting:
            raise CorralError("binary_file", f"{path} is a binary file; a patch edits text only.")
        return Plan(file, root, rel, check, old=old)
    plan = Plan(file, root, rel, check, old=old, before=decoded.text)
    if deleting:
        return plan
    plan.after, plan.match = apply_hunks(decoded.text, file, exact=not tolerant) if (
        file.hunks) else (decoded.text, "exact")
    plan.new = decoded.encode(plan.after, "patch")
    _fits(ctx, path, plan.new)
    if file.move_to is not None:
        dest_root, dest_rel, dest_check = open_target(ctx, file.move_to, write=True)
        if dest_root.info(dest_rel, follow=True, guard=dest_check) is not None:
            raise CorralError(
                "already_exists", f"{file.move_to} exists; a patch moves a file only to a "
                f"new path: move it to another path, or delete {file.move_to} first "
                "(delete_file, or a Delete File in an earlier patch) and send this patch "
                "again.")
        plan.dest = (dest_root, dest_rel, dest_check)
    return plan


def _deleting(ctx: Context, root: Root, path: str, verb: str) -> PathCheck:
    """A path the patch removes needs delete_file allowed (supervised: asked about)."""
    mode = ctx.policy.tool_mode("delete_file", writes=True)
    if mode == "deny":
        why = ctx.policy.disabled_reason("delete_file", writes=True)
        raise CorralError("tool_disabled", f"the patch {verb} {path}, which needs delete_file: "
                          f"{why[0].lower()}{why[1:]}")
    supervised = ctx.supervised or mode == "supervised"
    # replace() copies the per-call lists by reference: decisions land in the call's own
    check = PathCheck(dataclasses.replace(ctx, supervised=supervised), root, path, write=True)
    if mode == "supervised":  # its own scope: a grant for the patch's edits does not cover it
        check.mode_tool = "delete_file"
    return check


def _fits(ctx: Context, path: str, data: bytes) -> None:
    if len(data) > ctx.limits.max_file_bytes:
        raise CorralError(
            "too_large", f"{path} would be {len(data)} bytes after the patch, over the file "
            f"limit of {ctx.limits.max_file_bytes} bytes.")


# -- changing ---------------------------------------------------------------------


def _land(ctx: Context, plans: list[Plan]) -> None:
    """Stage every file beside its target, then land them together (fs/batch.py)."""
    roots = list({id(r): r for p in plans for r in (p.root, *(p.dest or ())[:1])}.values())
    staged: list[Staged] = []
    made: list[tuple[Root, list[str]]] = []  # directories made on the way, by root
    try:
        with fs_batch.tree_locked(roots):
            for plan in plans:
                staged += _stage(plan, made)
            fs_batch.land(staged, ctx.keep, durable=any(r.durable for r in roots))
    except BaseException:
        fs_batch.discard(staged)
        for root, directories in made:  # once the tree lock is released: it takes it
            remove_made(root, directories)
        raise
    fs_batch.discard(staged)


def _stage(plan: Plan, made: list[tuple[Root, list[str]]]) -> list[Staged]:
    """The plan's changes staged; directories made for them go into `made` as they
    are made (a failure part-way removes them too)."""
    staged = _staged(plan, made)
    plan.version = staged[-1].version
    return staged


def _staged(plan: Plan, made: list[tuple[Root, list[str]]]) -> list[Staged]:
    """One plan's staged changes: one, or a move's two (the removal first)."""
    file, root, rel, check = plan.file, plan.root, plan.rel, plan.check
    if file.action == "add":
        assert plan.new is not None
        made.append((root, []))
        return [fs_batch.stage(root, rel, plan.new, given=file.path, old=None, guard=check,
                               made=made[-1][1])]
    if file.action == "delete":
        return [fs_batch.stage_removal(root, rel, given=file.path, old=plan.old,
                                       link=plan.link, guard=check)]
    assert plan.old is not None and plan.new is not None
    if plan.dest is None:
        return [fs_batch.stage(root, rel, plan.new, given=file.path, old=plan.old,
                               guard=check, made=[])]
    source = fs_batch.stage_removal(root, rel, given=file.path, old=plan.old, guard=check)
    dest_root, dest_rel, dest_check = plan.dest
    made.append((dest_root, []))
    try:
        added = fs_batch.stage(dest_root, dest_rel, plan.new, given=file.move_to or "",
                               old=None, mode=source.mode, guard=dest_check, made=made[-1][1])
    except BaseException:
        fs_batch.discard([source])
        raise
    source.partner, added.partner = added, source
    return [source, added]


# -- what the caller sees ----------------------------------------------------------


def _shown(plan: Plan, dry_run: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {"path": plan.file.path, "action": plan.action}
    if plan.version is not None and not dry_run:
        shown["version"] = plan.version
    if plan.file.move_to is not None:
        shown["to"] = plan.file.move_to
    return shown


def _diff(plan: Plan) -> str:
    before, after = plan.before, plan.after
    return unified_diff(plan.file.move_to or plan.file.path, before, after,
                        (_common(before, after, 1), _common(before, after, -1)),
                        old_path=plan.file.path)


def _common(a: str, b: str, way: int) -> int:
    """How many characters `a` and `b` share at their start (way 1) or end (-1), so
    the diff looks only at what the patch changed: compared a block at a time, then
    by a binary search inside the first block that differs. Slices are copies, so
    each comparison stays within one block (comparing whole prefixes, as a plain
    binary search does, copied the file ~17 times: most of a one-hunk patch's diff)."""
    size = min(len(a), len(b))

    def same(start: int, end: int) -> bool:  # the shared run [start, end) from that side
        if way == 1:
            return a[start:end] == b[start:end]
        return a[len(a) - end:len(a) - start] == b[len(b) - end:len(b) - start]

    low = 0
    while low + COMMON_BLOCK <= size and same(low, low + COMMON_BLOCK):
        low += COMMON_BLOCK
    high = min(low + COMMON_BLOCK, size)
    while low < high:  # a[:low] and b[:low] (from that side) are known equal
        mid = (low + high + 1) // 2
        low, high = (mid, high) if same(low, mid) else (low, mid - 1)
    return low


_VERBS = {"add": "A", "update": "M", "delete": "D", "move": "R"}


def _text(plans: list[Plan], match: str, diff: str, dry_run: bool) -> str:
    count = f"{len(plans)} file{'s' if len(plans) != 1 else ''}"
    head = f"{'Would apply' if dry_run else 'Applied'} the patch to {count}:"
    names = [f"{_VERBS[p.action]} {p.file.path}" + (f" -> {p.file.move_to}" if p.dest else "")
             for p in plans]
    lines = [head, *names]
    if match != "exact":
        lines.append(f"(some hunks matched ignoring {matching.LOOSENED[match]}.)")
    return "\n".join([*lines, *_shown_diff(diff)])


def _shown_diff(diff: str) -> list[str]:
    """The diff's lines a model sees: at most DIFF_TEXT_LINES, and DIFF_TEXT_CHARS in
    all (a deleted one-line minified file would be megabytes), the last one cut."""
    diff_lines = diff.splitlines()
    shown: list[str] = []
    room, cut = DIFF_TEXT_CHARS, len(diff_lines) > DIFF_TEXT_LINES
    for line in diff_lines[:DIFF_TEXT_LINES]:
        if len(line) > room:
            shown.append(line[:room] + "...")
            cut = True
            break
        shown.append(line)
        room -= len(line) + 1
    if cut:
        shown.append(f"[diff cut: {len(diff_lines)} lines, {len(diff)} characters in "
                     "result.diff]")
    return shown


EXAMPLE = """*** Begin Patch
*** Add File: src/util.py
+def helper():
+    return 42
*** Update File: src/app.py
@@ def main():
     setup()
-    print('hello')
+    print('hello, patch')
     return 0
*** Delete File: old.txt
*** End Patch"""

PATCH_TOOLS = [
    Tool(
        name="apply_patch",
        title="Apply patch",
        description=(
            "Change several files at once with one patch: '*** Begin Patch', then for each "
            "file '*** Add File: path' followed by its lines each prefixed '+', '*** Delete "
            "File: path', or '*** Update File: path' (optionally '*** Move to: new/path') "
            "followed by hunks: an '@@' line (it may name the class or function the change "
            "is in), about three unchanged context lines prefixed ' ', removed lines "
            "prefixed '-', added lines prefixed '+'; then '*** End Patch'. Either every file "
            "changes or none does. A hunk is found exactly, else ignoring trailing "
            "whitespace, indentation or look-alike quotes and dashes (result.match says "
            "which); a miss names the closest lines. dry_run=true returns the diff without "
            "changing anything."
        ),
        input_schema=obj(
            {
                "patch": {"type": "string", "minLength": 1,
                          "description": "The whole patch, from '*** Begin Patch' to "
                          "'*** End Patch', e.g.\n" + EXAMPLE},
                "dry_run": {"type": "boolean", "default": False,
                            "description": "Return the diff without changing anything."},
                "match": match_prop("context and removed lines must match"),
            },
            ("patch",),
        ),
        output_schema=shape({
            "files": list_of(shape({"path": STRING, "action": {"type": "string",
                                                               "enum": list(ACTIONS)},
                                    "version": STRING, "to": STRING},
                                   optional=("version", "to"))),
            "match": {"type": "string", "enum": list(matching.LEVELS)},
            "diff": STRING, "diff_truncated": BOOLEAN, "dry_run": BOOLEAN,
        }),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=False),
        writes=True,
        run=apply_patch,
    ),
]
