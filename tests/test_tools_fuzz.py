"""Random arguments to every tool: each call answers with a result or a stable
error code, never an exception, and nothing outside the workspace is read or
changed. A short, seeded run; the same generator with more rounds finds more."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits
from corral.errors import ERROR_CODES
from corral.policy import Policy
from corral.tools.registry import TOOLS
from tests.helpers.calls import SECRET

ROUNDS = 40  # per tool: enough to hit every argument with junk, quick enough for the suite

PATHS = [
    "a.txt", "sub/b.txt", "sub", ".", "..", "../outside/secret.txt", "/etc/passwd", "",
    "a\0b", "x" * 5000, "sub/../../outside", "link-out/secret.txt", "link-out", "loop",
    ".env", ".git/config", "new/deeper/file.txt", "sub/", "a.txt/", "-rf", "*", "~",
]
JUNK: list[Any] = [None, True, False, 0, -1, 1, 2**63, 1.5, "", "x", [], {}, ["a.txt"],
                   {"path": "a.txt"}, "\ud800", "(", "**/*", "[", "../*"]


def value_for(schema: dict[str, Any], rng: random.Random) -> Any:
    """Mostly plausible values of the declared type, sometimes junk."""
    if rng.random() < 0.25:
        return rng.choice(JUNK)
    types = schema.get("type")
    kind = rng.choice(types) if isinstance(types, list) else types
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind == "string":
        return rng.choice([*PATHS, "hello", "a", "(a|b)+", "**/*.txt", "", "x" * 300])
    if kind == "integer":
        return rng.choice([-5, -1, 0, 1, 2, 3, 100, 10**9])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items", {})
        return [value_for(items, rng) for _ in range(rng.choice([0, 1, 2, 3, 60]))]
    if kind == "object":
        return arguments_for(schema, rng)
    return None


def arguments_for(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    props = schema.get("properties", {})
    arguments = {k: value_for(p, rng) for k, p in props.items() if rng.random() < 0.7}
    if rng.random() < 0.1:
        arguments["bogus_argument"] = 1
    return arguments


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text(SECRET)
    return base


@pytest.fixture(scope="module")
def fuzz_sb(base: Path) -> Iterator[Sandbox]:
    ws = base / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("hello\nworld\n")
    (ws / "sub" / "b.txt").write_text("b\n")
    (ws / ".env").write_text(SECRET)
    (ws / "link-out").symlink_to("../outside")
    (ws / "loop").symlink_to("loop")
    everything = Policy(tool_modes={"delete_file": "allow"})
    with Sandbox(ws, policy=everything, limits=Limits(max_file_bytes=4096)) as sandbox:
        yield sandbox


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_random_arguments_never_break_a_call(fuzz_sb: Sandbox, base: Path, name: str) -> None:
    rng = random.Random(f"corral-{name}")
    for _ in range(ROUNDS):
        arguments = arguments_for(TOOLS[name].input_schema, rng)
        response = fuzz_sb.call(name, arguments)
        assert response["tool"] == name
        if response["ok"]:
            assert set(response) == {"ok", "tool", "result", "text"}
        else:
            assert response["error"]["code"] in ERROR_CODES, (arguments, response)
            assert response["error"]["message"]
            assert "failed unexpectedly" not in response["error"]["message"], (arguments, response)
        assert SECRET not in str(response), arguments
    assert [p.name for p in (base / "outside").iterdir()] == ["secret.txt"]
    assert (base / "outside" / "secret.txt").read_text() == SECRET
