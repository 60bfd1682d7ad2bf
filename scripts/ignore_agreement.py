"""corral's ignore rules against `git check-ignore` on generated cases: random
.gitignore files (negation, directory-only patterns, anchoring, `**`, character
classes, escapes, nested files) over random trees. Each case is a directory of one
git repository; corral lists it recursively through a Sandbox (the rules read in the
confined worker), git names what it ignores, and the two must agree on every path.

    python scripts/ignore_agreement.py --cases 2000 --seed 1
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from corral import Sandbox

NAMES = ["a", "b", "ab", "d", "build", "x.log", "keep.log", "y.txt", "#c", "!n", "sp ace"]
EXCLUDE = "*.tmp\n!keep.tmp\n"  # .git/info/exclude, for every case


def pattern(rng: random.Random) -> str:
    parts = [rng.choice(["a", "b", "d", "build", "*", "*.log", "?b", "[ab]", "a*", "**",
                         "keep.log", "[!a]b", "x.*", "\\#c", "\\!n"])
             for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    text = "/".join(parts)
    if rng.random() < 0.2:
        text = "/" + text
    if rng.random() < 0.2:
        text = "**/" + text
    if rng.random() < 0.3:
        text += "/"
    elif rng.random() < 0.1:
        text += "/**"
    if rng.random() < 0.3:
        text = "!" + text
    if rng.random() < 0.05:
        text = "# " + text
    if rng.random() < 0.05:
        text += "  "  # trailing spaces: git strips them
    return text


def tree(rng: random.Random, base: Path, depth: int = 0) -> None:
    for name in rng.sample(NAMES, rng.randint(2, 5)):
        if depth < 3 and rng.random() < 0.45:
            (base / name).mkdir()
            tree(rng, base / name, depth + 1)
        else:
            (base / name).write_text("x\n")


def make_case(rng: random.Random, case: Path) -> None:
    case.mkdir()
    tree(rng, case)
    (case / ".gitignore").write_text("\n".join(pattern(rng) for _ in range(rng.randint(1, 6))))
    dirs = [p for p in case.rglob("*") if p.is_dir()]
    if dirs and rng.random() < 0.6:  # a nested file: overrides its parents beneath it
        nested = rng.choice(dirs)
        (nested / ".gitignore").write_text(
            "\n".join(pattern(rng) for _ in range(rng.randint(1, 4))))


def git_ignored(repo: Path, paths: list[str]) -> set[str]:
    done = subprocess.run(
        ["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(paths) + "\n", capture_output=True, text=True, check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr)
    return {line.strip('"') for line in done.stdout.splitlines()}


def disagreements(workdir: Path, seed: int, cases: int) -> list[str]:
    """Every path where corral and git disagree (empty: they agree on all)."""
    rng = random.Random(seed)
    repo = workdir / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text(EXCLUDE)
    for index in range(cases):
        make_case(rng, repo / f"c{index}")
    every = sorted(str(p.relative_to(repo)) for p in repo.rglob("*")
                   if ".git" not in p.relative_to(repo).parts[:1])
    hidden = git_ignored(repo, every)
    problems = []
    with Sandbox(repo) as sb:
        for index in range(cases):
            answer = sb.call("list_directory", {"path": f"c{index}", "recursive": True,
                                                "max_entries": 500})
            assert answer["ok"] and not answer["result"]["truncated"], answer
            listed = {f"c{index}/{e['name']}" for e in answer["result"]["entries"]}
            mine = [p for p in every if p.startswith(f"c{index}/")]
            for path in mine:
                if (path in listed) == (path in hidden):
                    problems.append(f"{path}: corral {'shows' if path in listed else 'hides'},"
                                    f" git {'ignores' if path in hidden else 'does not'}; "
                                    + _rules(repo, path))
    return problems


def _rules(repo: Path, path: str) -> str:
    files = [p for p in (repo / path).parents if p != repo.parent and (p / ".gitignore").exists()]
    return " | ".join(f"{f.relative_to(repo)}/.gitignore: "
                      f"{(f / '.gitignore').read_text()!r}" for f in files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        problems = disagreements(Path(tmp), args.seed, args.cases)
    for line in problems[:50]:
        print(line)
    print(f"{args.cases} cases, {len(problems)} disagreements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
