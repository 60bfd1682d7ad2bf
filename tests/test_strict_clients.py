"""Tool schemas as clients corral did not write use them: openai-agents' and the
OpenAI SDK's strict converters and anthropic's transform_schema accept every
tool; the call a strict model then sends (every property present, null where
nothing is meant) works; every result fits the tool's outputSchema; and
`corral tools --strict` is what strict grammars take as it is."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from agents.strict_schema import ensure_strict_json_schema
from anthropic import transform_schema
from openai.lib._pydantic import _ensure_strict_json_schema as openai_strict

from corral import Sandbox
from corral.policy import Policy
from corral.tools.formats import FORMATS, STRICT_KEYWORDS, strict_schema
from corral.tools.registry import TOOLS
from tests.helpers.mcp_helpers import PNG

# The arguments a strict model means for each tool, in an order that works on one
# workspace; every other property is sent as null.
MEANT: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "w.txt", "content": "one\ntwo\n"}),
    ("read_file", {"path": "w.txt"}),
    ("edit_file", {"path": "w.txt", "old_string": "two", "new_string": "2"}),
    ("edit_file", {"path": "w.txt",
                   "edits": [{"old_string": "one", "new_string": "1", "replace_all": None}]}),
    ("append_file", {"path": "w.txt", "content": "three\n"}),
    ("read_multiple_files", {"paths": ["w.txt", "missing.txt"]}),
    ("list_directory", {}),
    ("create_directory", {"path": "d"}),
    ("stat_file", {"path": "w.txt"}),
    ("copy_file", {"source": "w.txt", "destination": "d/c.txt"}),
    ("move_file", {"source": "d/c.txt", "destination": "m.txt"}),
    ("search_files", {"pattern": "**/*.txt"}),
    ("grep", {"pattern": "thr+ee"}),
    ("apply_patch", {"patch": "*** Begin Patch\n*** Update File: m.txt\n@@\n-three\n+3\n"
                              "*** End Patch\n"}),
    ("delete_file", {"path": "m.txt"}),
    ("delete_directory", {"path": "d"}),
    ("list_allowed_directories", {}),
]


def strictly(name: str, meant: dict[str, Any]) -> dict[str, Any]:
    """Every property of the tool present: what is meant, null for the rest."""
    properties = TOOLS[name].input_schema["properties"]
    return {key: meant.get(key) for key in properties}


def closed(schema: Any) -> Any:
    """The schema with every object closed: a result key the schema does not
    declare fails validation (published schemas stay open for later keys)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    shut = {key: closed(value) for key, value in schema.items()}
    if shut.get("type") == "object" and "properties" in shut:
        shut["additionalProperties"] = False
    return shut


def nodes(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, list):
        for item in schema:
            yield from nodes(item)
    elif isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from nodes(value)


@pytest.fixture(scope="module")
def pic_sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "pic.png").write_bytes(PNG)
    (ws / "link").symlink_to("pic.png")
    policy = Policy({"delete_file": "allow", "delete_directory": "allow"})
    with Sandbox(ws, policy=policy) as sandbox:
        yield sandbox


def test_every_tool_is_covered() -> None:
    assert {name for name, _ in MEANT} == set(TOOLS)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_strict_converters_accept_every_schema(name: str) -> None:
    schema = TOOLS[name].input_schema
    converted = ensure_strict_json_schema(copy.deepcopy(schema))
    root = copy.deepcopy(schema)
    openai_strict(root, path=(), root=root)
    transform_schema(copy.deepcopy(schema))
    for node in nodes(converted):
        assert not isinstance(node.get("type"), list), node
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])


def test_a_strict_models_calls_succeed_and_results_fit_the_output_schema(pic_sb: Sandbox) -> None:
    for name, meant in MEANT:
        arguments = strictly(name, meant)
        # what a strict model sends is valid under the converted (all-required) schema
        converted = ensure_strict_json_schema(copy.deepcopy(TOOLS[name].input_schema))
        jsonschema.validate(arguments, converted)
        response = pic_sb.call(name, arguments)
        assert response["ok"], (name, response)
        jsonschema.validate(response["result"], closed(TOOLS[name].output_schema))
    assert (Path(pic_sb.roots[0].path) / "w.txt").read_text() == "1\n2\nthree\n"


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "pic.png"}),  # an image
        ("read_file", {"path": "pic.png", "encoding": "base64", "max_bytes": 8}),  # cut
        ("read_file", {"path": "w.txt", "offset": -1, "limit": 1}),
        ("stat_file", {"path": "nothing-here"}),  # missing: every other key null
        ("stat_file", {"path": "link"}),  # a symlink: symlink_target
        ("list_directory", {"recursive": True, "max_entries": 1}),  # truncated
        ("read_multiple_files", {"paths": ["pic.png", "nope", "../x"]}),
        ("grep", {"pattern": "x", "glob": "*.md"}),
        ("edit_file", {"path": "w.txt", "old_string": "three", "new_string": "3",
                       "dry_run": True}),
    ],
)
def test_other_result_shapes_fit_the_output_schema(
    pic_sb: Sandbox, name: str, arguments: dict[str, Any]
) -> None:
    (Path(pic_sb.roots[0].path) / "w.txt").write_text("1\n2\nthree\n")
    response = pic_sb.call(name, arguments)
    assert response["ok"], response
    jsonschema.validate(response["result"], closed(TOOLS[name].output_schema))


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_strict_specs_need_no_converter(name: str) -> None:
    """--strict: every property required, no default or bound a strict grammar
    refuses (said in the description instead), and the converters change nothing."""
    strict = strict_schema(TOOLS[name].input_schema)
    for node in nodes(strict):
        if "type" in node or "anyOf" in node:
            assert set(node) <= STRICT_KEYWORDS, node
    assert ensure_strict_json_schema(copy.deepcopy(strict)) == strict
    transform_schema(copy.deepcopy(strict))
    if "offset" in strict["properties"]:
        assert "default: 1" in strict["properties"]["offset"]["description"]
    # and the strict model's call still validates against it
    jsonschema.validate(strictly(name, dict(MEANT)[name]), strict)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("strict", [False, True])
def test_formats(fmt: str, strict: bool) -> None:
    spec = TOOLS["edit_file"].spec()
    tool = FORMATS[fmt](spec, strict)
    json.dumps(tool)
    parameters = {
        "mcp": lambda t: t["inputSchema"],
        "openai": lambda t: t["function"]["parameters"],
        "openai-responses": lambda t: t["parameters"],
        "anthropic": lambda t: t["input_schema"],
    }[fmt](tool)
    assert (parameters == spec["input_schema"]) is not strict
    if fmt == "openai-responses":
        assert tool["strict"] is strict  # that API takes a missing `strict` as true
    elif fmt == "openai":
        assert tool["function"].get("strict", False) is strict
    elif fmt == "anthropic":
        assert tool.get("strict", False) is strict
