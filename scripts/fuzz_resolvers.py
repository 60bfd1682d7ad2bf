"""Differential fuzz of the two resolvers: random trees full of relative,
absolute, dotdot and looping symlinks, random paths through them; openat2 and
the walk must give the same answer (value or error code) for every read-only
operation, nothing may resolve outside the root, and every changing operation
must leave two copies of the tree (one per resolver) identical, with the
outside untouched.

    python scripts/fuzz_resolvers.py [--seconds 30] [--seed N]

tests/test_fs_fuzz.py runs a short, fixed-seed version of `fuzz` and `fuzz_changes`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.errors import CorralError
from corral.fs import Root

NAMES = ["a", "b", "c", "f", "l", "m"]  # few names, so random paths hit real entries
SECRET = "FUZZ-SECRET-OUTSIDE"
BIG = 1 << 20


def random_rel(rng: random.Random, max_parts: int = 5) -> str:
    parts = [rng.choice([*NAMES, *NAMES, "..", ".", ""]) for _ in range(rng.randint(1, max_parts))]
    return "/".join(parts)


def build(base: Path, rng: random.Random) -> Path:
    """ROOT with nested dirs, files and links; a sibling `outside` with a secret."""
    root = base / "ROOT"
    (base / "outside").mkdir()
    (base / "outside" / "f").write_text(SECRET)
    dirs = [root]
    root.mkdir()
    for _ in range(rng.randint(3, 12)):
        parent = rng.choice(dirs)
        p = parent / rng.choice(NAMES)
        if os.path.lexists(p):
            continue
        kind = rng.random()
        if kind < 0.35:
            p.mkdir()
            dirs.append(p)
        elif kind < 0.6:
            p.write_text(f"inside {p.relative_to(root)}")
        elif kind < 0.9:
            os.symlink(random_rel(rng) or ".", p)
        else:
            os.symlink(rng.choice([str(root), str(base / "outside"), "/etc", str(root / "f")]), p)
    return root


def outcome(fn: Callable[[], object]) -> object:
    try:
        value = fn()
    except CorralError as exc:
        return ("error", exc.code)
    if hasattr(value, "modified"):  # FileInfo: times differ between the two calls' reads
        return (value.type, value.size, value.symlink_target)  # type: ignore[attr-defined]
    return value


def ops(root: Root, rel: str) -> dict[str, Callable[[], object]]:
    return {
        "resolve": lambda: root.resolve(rel),
        "resolve_nofollow": lambda: root.resolve(rel, follow=False),
        "info": lambda: root.info(rel),
        "info_follow": lambda: root.info(rel, follow=True),
        "read": lambda: root.read_bytes(rel, max_file_bytes=BIG),
        "scandir": lambda: [e.path for e in root.scandir(rel)],
    }


def fuzz(base: Path, seed: int, paths: int) -> int:
    """One random tree, `paths` random paths; AssertionError on any disagreement or leak."""
    rng = random.Random(seed)
    root_dir = build(base, rng)
    checked = 0
    with Root(str(root_dir), resolver="openat2") as o, Root(str(root_dir), resolver="walk") as w:
        for _ in range(paths):
            rel = random_rel(rng, 7)
            if not rel:
                continue
            for name, fn in ops(o, rel).items():
                a, b = outcome(fn), outcome(ops(w, rel)[name])
                if a != b:
                    raise AssertionError(f"seed {seed}: {name}({rel!r}): openat2 {a!r}, walk {b!r}")
                if SECRET in repr(a):
                    raise AssertionError(f"seed {seed}: {name}({rel!r}) leaked the secret")
                if name.startswith("resolve") and isinstance(a, str) and a.startswith(".."):
                    raise AssertionError(f"seed {seed}: {name}({rel!r}) resolved to {a!r}")
                checked += 1
    return checked


def changes(root: Root, rel: str, i: int) -> dict[str, Callable[[], object]]:
    return {
        "write": lambda: root.write_atomic(rel, b"w%d" % i).created,
        "write_exclusive": lambda: root.write_atomic(rel, b"x%d" % i, exclusive=True).created,
        "append": lambda: root.append(rel, b"+", max_file_bytes=BIG),
        "mkdir": lambda: root.mkdir(rel),
        "unlink": lambda: root.unlink(rel),
        "rename_from": lambda: root.rename(rel, root, f"moved{i}"),
        "rename_to": lambda: root.rename("f", root, rel, overwrite=True),
    }


def snapshot(base: Path) -> dict[str, object]:
    """Everything under base, with base itself written as $B (link texts hold it)."""
    state: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            key = str(p.relative_to(base))
            if p.is_symlink():
                state[key] = ("link", os.readlink(p).replace(str(base), "$B"))
            elif p.is_dir():
                state[key] = "dir"
            else:
                state[key] = p.read_bytes()
    return state


def fuzz_changes(base: Path, seed: int, paths: int) -> int:
    """Two copies of one random tree; each change goes to both, one per resolver."""
    rng = random.Random(seed)
    copies = [base / "openat2", base / "walk"]
    roots = []
    for copy in copies:
        copy.mkdir()
        roots.append(Root(str(build(copy, random.Random(seed))), resolver=copy.name))
    secret = [snapshot(copy / "outside") for copy in copies]
    try:
        for i in range(paths):
            rel = random_rel(rng, 6)
            if not rel:
                continue
            name = rng.choice(list(changes(roots[0], rel, i)))
            a, b = (outcome(changes(r, rel, i)[name]) for r in roots)
            if a != b:
                raise AssertionError(f"seed {seed}: {name}({rel!r}): openat2 {a!r}, walk {b!r}")
            if snapshot(copies[0]) != snapshot(copies[1]):
                raise AssertionError(f"seed {seed}: {name}({rel!r}) left the copies different")
            if [snapshot(copy / "outside") for copy in copies] != secret:
                raise AssertionError(f"seed {seed}: {name}({rel!r}) changed the outside")
    finally:
        for r in roots:
            r.close()
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    deadline, seed, trees, checked = time.monotonic() + args.seconds, args.seed, 0, 0
    while time.monotonic() < deadline:
        with tempfile.TemporaryDirectory() as tmp:
            checked += fuzz(Path(tmp), seed, 200)
        with tempfile.TemporaryDirectory() as tmp:
            checked += fuzz_changes(Path(tmp), seed, 50)
        seed, trees = seed + 1, trees + 1
    print(f"{trees} trees from seed {args.seed}, {checked} comparisons, resolvers agree")


if __name__ == "__main__":
    main()
