"""Integers and booleans given as their exact text (the MCP Inspector's CLI sends
every optional argument as a string): read as the value, checked as it would be;
any other spelling refused as before."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import CorralError
from corral.tools.registry import TOOLS, validate


def _read(**arguments: Any) -> dict[str, Any]:
    return validate(TOOLS["read_file"], {"path": "a", **arguments})


@pytest.mark.parametrize(("text", "value"), [("3", 3), ("0", 0), ("-5", -5),
                                             ("9" * 19, int("9" * 19))])
def test_canonical_decimal_text_is_an_integer(text: str, value: int) -> None:
    assert _read(offset=text)["offset"] == value


@pytest.mark.parametrize("text", ["03", "-0", "+3", " 3", "3 ", "3\n", "3.0", "1e3", "0x10",
                                  "", "-", "1_000", "\uff13", "9" * 20])
def test_any_other_spelling_is_refused(text: str) -> None:
    with pytest.raises(CorralError, match="'offset' must be an integer") as caught:
        _read(offset=text)
    assert caught.value.code == "invalid_arguments"


def test_bounds_are_checked_on_the_number() -> None:
    with pytest.raises(CorralError, match="'limit' must be at least 1, got 0"):
        _read(limit="0")
    assert _read(limit="2")["limit"] == 2


def test_booleans_as_true_or_false() -> None:
    tool = TOOLS["delete_directory"]
    assert validate(tool, {"path": "d", "recursive": "true"})["recursive"] is True
    assert validate(tool, {"path": "d", "recursive": "false"})["recursive"] is False
    for text in ("True", "1", "yes", ""):
        with pytest.raises(CorralError, match="'recursive' must be a boolean"):
            validate(tool, {"path": "d", "recursive": text})


def test_a_string_argument_stays_a_string() -> None:
    assert validate(TOOLS["write_file"], {"path": "a", "content": "3"})["content"] == "3"
