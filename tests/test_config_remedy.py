"""A ConfigError carries its fix as data (Remedy), and each face says it in its own
words: the command line its flags, the HTTP face the tenants file, Python both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import ConfigError, Remedy
from tests.helpers.cli_helpers import run
from tests.helpers.http_helpers import Server, call, post, start_http, stop

WIDENING = '[tools]\ndelete_file = "allow"\n'


def test_python_says_both_spellings_and_programs_read_the_keys(workspace: Path) -> None:
    (workspace / "corral.toml").write_text(WIDENING)
    with pytest.raises(ConfigError) as caught:
        Sandbox(workspace)
    assert caught.value.remedy == Remedy("operator", ("[tools] delete_file",))
    assert "--config" in str(caught.value) and "Sandbox.from_config" in str(caught.value)


def test_the_command_line_names_its_flag_and_the_keys_not_python(
    capsys: pytest.CaptureFixture[str], workspace: Path
) -> None:
    (workspace / "corral.toml").write_text(WIDENING)
    code, out, error = run(capsys, "tools", "--workspace", str(workspace))
    assert code == 2 and out == ""
    assert error.rstrip().endswith(
        "Set [tools] delete_file in a config passed with --config (or the user config)"), error
    assert "Sandbox.from_config" not in error


def test_a_symlinked_workspace_config_is_told_to_name_the_file(
    capsys: pytest.CaptureFixture[str], workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere.toml").write_text("")
    (workspace / "corral.toml").symlink_to(tmp_path / "elsewhere.toml")
    code, _, error = run(capsys, "tools", "--workspace", str(workspace))
    assert code == 2
    assert error.rstrip().endswith("To trust the file, name it with --config FILE"), error


def test_the_http_face_names_the_tenants_file_not_a_flag(tmp_path: Path) -> None:
    process, _, port = start_http(tmp_path, "127.0.0.1:0")
    try:
        # written after the server checked the tenant: met when a session starts
        (tmp_path / "ws" / "corral.toml").write_text(WIDENING)
        server = Server(port, process, tmp_path / "ws", tmp_path / "ws")
        _, _, body = post(server, call("stat_file", {"path": "secret.txt"}))
        message = json.loads(body)["error"]["message"]
        assert "cannot start the sandbox" in message, message
        assert message.endswith("Set [tools] delete_file in the tenant's own config (`config` "
                                "in its entry of the tenants file)"), message
        assert "--config" not in message and "Sandbox.from_config" not in message
    finally:
        stop(process)
