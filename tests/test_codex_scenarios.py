"""The Codex CLI's own apply-patch scenarios (openai/codex,
codex-rs/apply-patch/tests/fixtures/scenarios: each an input/ tree, a patch.txt
and the expected/ tree), run through a real Sandbox when the folder is there: in
CI it lies beside the clone, at ../shared/peer/codex_scenarios; skipped when
absent (the fixtures are not part of this repository).

Every scenario gives Codex's tree byte for byte, except where corral's contract
differs on purpose, each refused cleanly with the tree unchanged: a patch is all
or nothing (015: Codex keeps the file added before the failing update), a patch
creates new files only (010, 011: Codex overwrites), and a lone "\\r" inside a
line is no line ending (024: the hunk's line is not in the file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from corral import Sandbox
from corral.policy import Policy

REPO = Path(__file__).resolve().parent.parent


def _scenarios_folder() -> Path:
    """../shared/peer/codex_scenarios beside the clone: for a `git worktree`, beside
    the clone it belongs to (the directory holding the common .git)."""
    try:
        common = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--path-format=absolute",
             "--git-common-dir"], capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()
        clone = Path(common).parent
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        clone = REPO
    return clone.parent / "shared" / "peer" / "codex_scenarios"


FOLDER = _scenarios_folder()
NAMES = sorted(p.name for p in FOLDER.iterdir() if (p / "patch.txt").is_file()) if (
    FOLDER.is_dir()) else []

# Where corral refuses on purpose, and with what: the tree is left as it was.
REFUSED = {
    "010_move_overwrites_existing_destination": "already_exists",
    "011_add_overwrites_existing_file": "already_exists",
    "015_failure_after_partial_success_leaves_changes": "not_found",
    "024_preserves_mixed_line_endings": "no_match",
}
# Every refusal's message has to tell a model what to do; these words say it.
HINTS = {
    "already_exists": ("Update File", "delete"),
    "no_match": ("closest region", "No line of the file"),
}


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry beneath `root`: a file's bytes, None for a directory."""
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _copy(source: Path, target: Path) -> None:
    """The input tree's bytes (not its modes: the fixtures are read-only copies)."""
    target.mkdir()
    for name, data in _tree(source).items():
        if data is None:
            (target / name).mkdir(parents=True, exist_ok=True)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(data)


@pytest.mark.skipif(not NAMES, reason=f"no Codex scenarios at {FOLDER}")
@pytest.mark.parametrize("name", NAMES)
def test_codex_scenario(name: str, tmp_path: Path) -> None:
    scenario = FOLDER / name
    ws = tmp_path / "ws"
    _copy(scenario / "input", ws)
    before = _tree(ws)
    patch = (scenario / "patch.txt").read_text(encoding="utf-8")
    with Sandbox(ws, policy=Policy(tool_modes={"delete_file": "allow"})) as sb:
        answer = sb.call("apply_patch", {"patch": patch})
    after = _tree(ws)
    if name in REFUSED:
        assert not answer["ok"] and answer["error"]["code"] == REFUSED[name], answer
        assert after == before
    elif after != _tree(scenario / "expected"):
        pytest.fail(f"{name}: the tree differs from Codex's: {answer}")
    if not answer["ok"]:
        assert after == before, answer  # all or nothing
        message = answer["error"]["message"]
        hints = HINTS.get(answer["error"]["code"])
        assert hints is None or any(hint in message for hint in hints), message


def test_the_scenarios_are_all_there_when_the_folder_is() -> None:
    if not FOLDER.is_dir():
        pytest.skip(f"no Codex scenarios at {FOLDER}")
    assert len(NAMES) >= 25 and set(REFUSED) <= set(NAMES)
