"""The workspace's corral.toml is read by the unconfined host, so it is opened as
the workspace's own regular file and nothing else: never through a symlink or a
hard link to a file elsewhere, never a FIFO or a device, never more than a bound;
and a refusal quotes nothing it could have read from outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral import ConfigError, Sandbox
from corral.config import WORKSPACE_CONFIG_MAX_BYTES, find_config
from corral.trust import operator_config

# Another tenant's operator config: its root, rule names and limits are secrets.
SECRETS = ("/srv/tenants/bob-7c1e", "bob-secret-rule", "987654321")
OTHER = f"""[workspace]
root = "{SECRETS[0]}"
[[rules]]
name = "{SECRETS[1]}"
action = "allow"
paths = ["**"]
[limits]
max_read_bytes = {SECRETS[2]}
"""


@pytest.fixture
def ws_with_a(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    return workspace


def refusal(ws_with_a: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        Sandbox(ws_with_a)
    with pytest.raises(ConfigError) as again:  # the command line and servers' way in
        operator_config(ws_with_a)
    assert str(again.value) == str(caught.value)
    for secret in SECRETS:
        assert secret not in str(caught.value)
    assert caught.value.file == str(ws_with_a / "corral.toml")
    return caught.value


def test_a_symlinked_config_is_refused_without_quoting_its_target(
    ws_with_a: Path, tmp_path: Path
) -> None:
    other = tmp_path / "bob.toml"
    other.write_text(OTHER)
    (ws_with_a / "corral.toml").symlink_to(other)
    assert "symbolic link" in str(refusal(ws_with_a))


def test_a_symlink_says_the_same_whether_its_target_exists_or_not(
    ws_with_a: Path, tmp_path: Path
) -> None:
    (tmp_path / "bob.toml").write_text(OTHER)
    answers = []
    for target in (tmp_path / "bob.toml", tmp_path / "nobody.toml", tmp_path):
        (ws_with_a / "corral.toml").unlink(missing_ok=True)
        (ws_with_a / "corral.toml").symlink_to(target)
        answers.append(str(refusal(ws_with_a)))
    assert len(set(answers)) == 1, answers


def test_a_hard_link_to_a_file_elsewhere_is_refused(ws_with_a: Path, tmp_path: Path) -> None:
    other = tmp_path / "bob.toml"
    other.write_text(OTHER)
    os.link(other, ws_with_a / "corral.toml")
    assert "hard link" in str(refusal(ws_with_a))


def test_a_fifo_is_refused_without_blocking(ws_with_a: Path) -> None:
    os.mkfifo(
        ws_with_a / "corral.toml"
    )  # nobody writes: an open for reading that waited would hang
    assert "not a regular file" in str(refusal(ws_with_a))


def test_a_file_over_the_bound_is_refused_unread(ws_with_a: Path) -> None:
    with open(ws_with_a / "corral.toml", "wb") as handle:  # sparse: 4 GiB on no disk
        handle.truncate(4 << 30)
    assert f"{WORKSPACE_CONFIG_MAX_BYTES}" in str(refusal(ws_with_a))


def test_a_file_at_the_bound_is_read(ws_with_a: Path) -> None:
    rule = '[[rules]]\nname = "no-a"\naction = "deny"\npaths = ["a.txt"]\n'
    padding = WORKSPACE_CONFIG_MAX_BYTES - len(rule)
    (ws_with_a / "corral.toml").write_text(rule + "#" * (padding - 1) + "\n")
    assert (ws_with_a / "corral.toml").stat().st_size == WORKSPACE_CONFIG_MAX_BYTES
    with Sandbox(ws_with_a) as sb:
        assert sb.call("read_file", {"path": "a.txt"})["error"]["rule"] == "no-a"


def test_a_directory_named_corral_toml_is_no_config(ws_with_a: Path) -> None:
    (ws_with_a / "corral.toml").mkdir()
    assert find_config(ws_with_a) is None
    with Sandbox(ws_with_a) as sb:
        assert sb.call("read_file", {"path": "a.txt"})["ok"]


def test_a_link_to_the_operators_own_file_is_that_file(ws_with_a: Path, tmp_path: Path) -> None:
    """--config naming the file the workspace's link points at: the operator's, trusted
    and applied once (nothing is read through the link)."""
    operator = tmp_path / "operator.toml"
    operator.write_text(f'[workspace]\nroot = "{ws_with_a}"\n[tools]\ndelete_file = "allow"\n')
    (ws_with_a / "corral.toml").symlink_to(operator)
    assert operator_config(config=operator).policy.tool_modes["delete_file"] == "allow"


@pytest.mark.parametrize("root", ["/srv", "/no/such/dir", "elsewhere", "../other"])
def test_a_workspace_root_elsewhere_is_refused_unresolved(
    ws_with_a: Path, tmp_path: Path, root: str
) -> None:
    """The host never looks at a path the workspace config names (an existence
    oracle, a symlink's target quoted back): root may only name the workspace."""
    hidden = tmp_path / "hidden-target-4e1f"
    hidden.mkdir()
    (ws_with_a / "elsewhere").symlink_to(hidden)
    (ws_with_a / "corral.toml").write_text(f'[workspace]\nroot = "{root}"\n')
    error = refusal(ws_with_a)
    assert error.key == "[workspace] root"
    assert "hidden-target" not in str(error) and root not in str(error)
    assert str(error).count("[workspace] root: only the workspace itself") == 1


@pytest.mark.parametrize("root", [".", "./", "{ws}", "../ws/sub/.."])
def test_a_workspace_root_naming_the_workspace_is_accepted(ws_with_a: Path, root: str) -> None:
    (ws_with_a / "corral.toml").write_text(f'[workspace]\nroot = "{root.format(ws=ws_with_a)}"\n')
    assert operator_config(ws_with_a).workspace == str(ws_with_a)


@pytest.mark.parametrize("text", ["x = " + "[" * 30000, "x = " + "{a=" * 15000])
def test_a_config_nested_too_deep_is_a_config_error(ws_with_a: Path, text: str) -> None:
    (ws_with_a / "corral.toml").write_text(text)
    assert "nested too deeply" in str(refusal(ws_with_a))
