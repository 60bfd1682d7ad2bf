"""list_directory, create_directory, stat_file, move_file, copy_file, delete_file,
search_files and grep through Sandbox.call."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import Limits, SandboxOptions
from corral.fs import content_version
from corral.policy import Policy
from tests.helpers.calls import SECRET, err, ok


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, resolver: SandboxOptions) -> Path:
    base = tmp_path_factory.mktemp(f"files-{resolver.resolver}")
    tree_ws = base / "ws"
    (tree_ws / "src" / "pkg").mkdir(parents=True)
    (tree_ws / "src" / "app.py").write_text("import os\nprint('Hello')\n")
    (tree_ws / "src" / "pkg" / "mod.py").write_text("def hello():\n    return 'hello'\n")
    (tree_ws / "src" / "pkg" / "data.bin").write_bytes(b"\0hello\0")
    (tree_ws / "docs").mkdir()
    (tree_ws / "docs" / "readme.md").write_text("# Hello\nsee app.py\n")
    (tree_ws / ".hidden").mkdir()
    (tree_ws / ".hidden" / "h.txt").write_text("hello hidden\n")
    (tree_ws / ".env").write_text(f"hello={SECRET}\n")
    (tree_ws / "link-out").symlink_to("../outside")
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text(f"hello {SECRET}\n")
    return base


@pytest.fixture(scope="module")
def tree_ws(base: Path) -> Path:
    return base / "ws"


@pytest.fixture(scope="module")
def tree_sb(tree_ws: Path, resolver: SandboxOptions) -> Iterator[Sandbox]:
    policy = Policy(tool_modes={"delete_file": "allow"})
    with Sandbox(tree_ws, policy=policy, options=resolver) as sandbox:
        yield sandbox


@pytest.fixture
def scratch(tree_ws: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh directory per test for the tools that change things."""
    name = f"{request.node.cls.__name__}-{request.node.name}" if request.node.cls else "t"
    path = tree_ws / "scratch" / name.replace("[", "-").replace("]", "")
    path.mkdir(parents=True)
    return path


def rel(tree_ws: Path, path: Path) -> str:
    return str(path.relative_to(tree_ws))


class TestListDirectory:
    def test_one_level_sorted_with_types(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        response = ok(tree_sb, "list_directory", path="src")
        result = response["result"]
        assert [(e["name"], e["type"]) for e in result["entries"]] == [
            ("app.py", "file"), ("pkg", "dir"),
        ]
        app = result["entries"][0]
        assert app["size"] == (tree_ws / "src" / "app.py").stat().st_size
        assert app["modified"] == pytest.approx((tree_ws / "src" / "app.py").stat().st_mtime)
        assert (result["count"], result["truncated"]) == (2, False)
        assert response["text"].splitlines() == ["app.py  (25 bytes)", "pkg/"]

    def test_recursive_gives_relative_paths(self, tree_sb: Sandbox) -> None:
        entries = ok(tree_sb, "list_directory", path="src", recursive=True)["result"]["entries"]
        assert [e["name"] for e in entries] == [
            "app.py", "pkg", "pkg/data.bin", "pkg/mod.py",
        ]

    def test_symlinks_are_listed_not_followed(self, tree_sb: Sandbox) -> None:
        entries = ok(tree_sb, "list_directory", recursive=True, max_entries=100)["result"][
            "entries"
        ]
        names = {e["name"]: e["type"] for e in entries}
        assert names["link-out"] == "symlink"
        assert not any(name.startswith("link-out/") for name in names)
        assert SECRET not in str(entries)

    def test_denied_paths_are_not_listed(self, tree_sb: Sandbox) -> None:
        names = [e["name"] for e in ok(tree_sb, "list_directory")["result"]["entries"]]
        assert ".env" not in names and ".hidden" in names

    def test_hidden_can_be_left_out(self, tree_sb: Sandbox) -> None:
        entries = ok(tree_sb, "list_directory", recursive=True, include_hidden=False,
                     max_entries=100)["result"]["entries"]
        assert entries and not any(e["name"].startswith(".") for e in entries)

    def test_max_entries_is_capped_by_the_limit(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        with Sandbox(tree_ws, limits=Limits(max_list_entries=4)) as capped:
            response = ok(capped, "list_directory", recursive=True, max_entries=100)
            assert (response["result"]["count"], response["result"]["truncated"]) == (4, True)
            assert "[listing cut at 4 entries" in response["text"]
            result = ok(capped, "list_directory", recursive=True, max_entries=2)["result"]
            assert (result["count"], result["truncated"]) == (2, True)
        result = ok(tree_sb, "list_directory", path="docs")["result"]
        assert (result["count"], result["truncated"]) == (1, False)

    @pytest.mark.parametrize(
        ("path", "code"),
        [("nope", "not_found"), ("src/app.py", "not_a_directory"),
         ("..", "outside_workspace"), ("link-out", "outside_workspace")],
    )
    def test_errors(self, tree_sb: Sandbox, path: str, code: str) -> None:
        assert err(tree_sb, "list_directory", path=path)["code"] == code


class TestCreateDirectory:
    def test_creates_parents_and_is_idempotent(
        self, tree_sb: Sandbox, tree_ws: Path, scratch: Path
    ) -> None:
        path = rel(tree_ws, scratch / "a" / "b")
        assert ok(tree_sb, "create_directory", path=path)["result"] == {
            "path": path,
            "created": True,
        }
        assert (scratch / "a" / "b").is_dir()
        assert ok(tree_sb, "create_directory", path=path)["result"]["created"] is False

    def test_a_file_in_the_way(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        (scratch / "f").write_text("x")
        assert (
            err(tree_sb, "create_directory", path=rel(tree_ws, scratch / "f"))["code"]
            == "already_exists"
        )

    def test_no_directory_outside(self, tree_sb: Sandbox, base: Path) -> None:
        assert err(tree_sb, "create_directory", path="link-out/new")["code"] == "outside_workspace"
        assert not (base / "outside" / "new").exists()


class TestStatFile:
    def test_file(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        path = tree_ws / "src" / "app.py"
        response = ok(tree_sb, "stat_file", path="src/app.py")
        st = path.stat()
        assert response["result"] == {
            "path": "src/app.py", "exists": True, "type": "file", "size": st.st_size,
            "modified": pytest.approx(st.st_mtime), "mode": st.st_mode & 0o7777,
            "version": content_version(path.read_bytes()),
        }
        assert "mode 0" in response["text"] and "file" in response["text"]

    def test_directory_and_symlink(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "stat_file", path="src")["result"]
        assert (result["type"], result["version"]) == ("dir", None)
        result = ok(tree_sb, "stat_file", path="link-out")["result"]
        assert (result["type"], result["symlink_target"]) == ("symlink", "../outside")

    @pytest.mark.parametrize("path", ["missing.txt", "missing/deeper.txt"])
    def test_missing_is_not_an_error(self, tree_sb: Sandbox, path: str) -> None:
        response = ok(tree_sb, "stat_file", path=path)
        assert response["result"] == {"path": path, "exists": False, "type": None, "size": None,
                                      "modified": None, "mode": None, "version": None}

    def test_refusals(self, tree_sb: Sandbox) -> None:
        assert (
            err(tree_sb, "stat_file", path="../outside/secret.txt")["code"] == "outside_workspace"
        )
        assert err(tree_sb, "stat_file", path=".env")["code"] == "path_denied"


class TestMoveFile:
    def test_moves(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        (scratch / "a.txt").write_text("a")
        src, dst = rel(tree_ws, scratch / "a.txt"), rel(tree_ws, scratch / "b.txt")
        response = ok(tree_sb, "move_file", source=src, destination=dst)
        assert response["result"] == {"source": src, "destination": dst}
        assert (scratch / "b.txt").read_text() == "a" and not (scratch / "a.txt").exists()

    def test_no_overwrite_unless_asked(
        self, tree_sb: Sandbox, tree_ws: Path, scratch: Path
    ) -> None:
        (scratch / "a.txt").write_text("a")
        (scratch / "b.txt").write_text("b")
        src, dst = rel(tree_ws, scratch / "a.txt"), rel(tree_ws, scratch / "b.txt")
        assert err(tree_sb, "move_file", source=src, destination=dst)["code"] == "already_exists"
        assert (scratch / "b.txt").read_text() == "b"
        ok(tree_sb, "move_file", source=src, destination=dst, overwrite=True)
        assert (scratch / "b.txt").read_text() == "a"

    def test_directory_moves_but_never_into_itself(
        self, tree_sb: Sandbox, tree_ws: Path, scratch: Path
    ) -> None:
        (scratch / "d" / "e").mkdir(parents=True)
        into = rel(tree_ws, scratch / "d" / "e" / "d")
        error = err(tree_sb, "move_file", source=rel(tree_ws, scratch / "d"), destination=into)
        assert error["code"] == "invalid_arguments"
        ok(
            tree_sb,
            "move_file",
            source=rel(tree_ws, scratch / "d"),
            destination=rel(tree_ws, scratch / "d2"),
        )
        assert (scratch / "d2" / "e").is_dir()

    def test_refusals(self, tree_sb: Sandbox, base: Path, tree_ws: Path, scratch: Path) -> None:
        (scratch / "a.txt").write_text("a")
        src = rel(tree_ws, scratch / "a.txt")
        assert err(tree_sb, "move_file", source="missing", destination="x")["code"] == "not_found"
        assert err(tree_sb, "move_file", source=src, destination="../moved")["code"] == (
            "outside_workspace"
        )
        assert err(tree_sb, "move_file", source=src, destination=".env")["code"] == "path_denied"
        assert err(tree_sb, "move_file", source=".env", destination="e")["code"] == "path_denied"
        assert (scratch / "a.txt").exists() and not (base / "moved").exists()


class TestCopyFile:
    def test_copies(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        (scratch / "a.txt").write_text("abc")
        src, dst = rel(tree_ws, scratch / "a.txt"), rel(tree_ws, scratch / "new" / "b.txt")
        result = ok(tree_sb, "copy_file", source=src, destination=dst)["result"]
        assert result == {"source": src, "destination": dst, "bytes_copied": 3}
        assert (scratch / "new" / "b.txt").read_text() == "abc"

    def test_no_overwrite_unless_asked(
        self, tree_sb: Sandbox, tree_ws: Path, scratch: Path
    ) -> None:
        (scratch / "a.txt").write_text("a")
        (scratch / "b.txt").write_text("b")
        src, dst = rel(tree_ws, scratch / "a.txt"), rel(tree_ws, scratch / "b.txt")
        assert err(tree_sb, "copy_file", source=src, destination=dst)["code"] == "already_exists"
        assert (scratch / "b.txt").read_text() == "b"
        ok(tree_sb, "copy_file", source=src, destination=dst, overwrite=True)
        assert (scratch / "b.txt").read_text() == "a"

    def test_regular_files_only(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        os.mkfifo(scratch / "fifo")
        dst = rel(tree_ws, scratch / "x")
        assert err(tree_sb, "copy_file", source="src", destination=dst)["code"] == "is_a_directory"
        assert err(tree_sb, "copy_file", source=rel(tree_ws, scratch / "fifo"), destination=dst)[
            "code"
        ] == ("not_a_regular_file")
        assert not (scratch / "x").exists()

    def test_secrets_do_not_leave(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        assert err(tree_sb, "copy_file", source="link-out/secret.txt", destination="s.txt")[
            "code"
        ] == ("outside_workspace")
        assert (
            err(tree_sb, "copy_file", source=".env", destination="s.txt")["code"] == "path_denied"
        )
        assert not (tree_ws / "s.txt").exists()


class TestDeleteFile:
    def test_deletes_files_and_links_not_targets(
        self, tree_sb: Sandbox, tree_ws: Path, scratch: Path
    ) -> None:
        (scratch / "a.txt").write_text("a")
        (scratch / "link").symlink_to("a.txt")
        assert ok(tree_sb, "delete_file", path=rel(tree_ws, scratch / "link"))["result"] == {
            "path": rel(tree_ws, scratch / "link"), "deleted": True,
        }
        assert (scratch / "a.txt").exists()
        ok(tree_sb, "delete_file", path=rel(tree_ws, scratch / "a.txt"))
        assert not (scratch / "a.txt").exists()

    def test_never_directories(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        assert err(tree_sb, "delete_file", path=rel(tree_ws, scratch))["code"] == "is_a_directory"
        assert scratch.is_dir()

    def test_refusals(self, tree_sb: Sandbox, base: Path) -> None:
        assert err(tree_sb, "delete_file", path="missing.txt")["code"] == "not_found"
        assert (
            err(tree_sb, "delete_file", path="link-out/secret.txt")["code"] == "outside_workspace"
        )
        assert err(tree_sb, "delete_file", path=".env")["code"] == "path_denied"
        assert (base / "outside" / "secret.txt").exists()

    def test_off_by_default(self, tree_ws: Path) -> None:
        with Sandbox(tree_ws) as default:
            assert err(default, "delete_file", path="src/app.py")["code"] == "tool_disabled"
            assert "delete_file" not in [t["name"] for t in default.tools()]
        assert (tree_ws / "src" / "app.py").exists()


class TestSearchFiles:
    def test_glob_with_double_star(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "search_files", pattern="**/*.py")["result"]
        assert result["matches"] == ["src/app.py", "src/pkg/mod.py"]
        assert result["truncated"] is False

    def test_single_star_stays_in_one_level(self, tree_sb: Sandbox) -> None:
        assert ok(tree_sb, "search_files", pattern="*.py", path="src")["result"]["matches"] == [
            "src/app.py"
        ]

    def test_paths_can_be_passed_back(self, tree_sb: Sandbox) -> None:
        match = ok(tree_sb, "search_files", pattern="*/mod.py", path="src")["result"]["matches"]
        assert match == ["src/pkg/mod.py"]
        assert ok(tree_sb, "read_file", path=match[0])["result"]["lines_read"] == 2

    def test_max_results_and_truncated(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "search_files", pattern="**", max_results=3)["result"]
        assert len(result["matches"]) == 3 and result["truncated"] is True

    def test_denied_and_outside_never_match(self, tree_sb: Sandbox) -> None:
        matches = ok(tree_sb, "search_files", pattern="**")["result"]["matches"]
        assert ".env" not in matches and "link-out" in matches
        assert not any("secret" in m for m in matches)

    def test_errors(self, tree_sb: Sandbox) -> None:
        assert err(tree_sb, "search_files", pattern="*", path="nope")["code"] == "not_found"
        assert err(tree_sb, "search_files", pattern="../*")["code"] == "invalid_arguments"
        assert err(tree_sb, "search_files", pattern="*", path="..")["code"] == "outside_workspace"


class TestGrep:
    def test_finds_lines_with_numbers(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "grep", pattern=r"hello\(")
        result = response["result"]
        assert result["matches"] == [{"path": "src/pkg/mod.py", "line": 1, "text": "def hello():"}]
        assert response["text"] == "src/pkg/mod.py:1:def hello():"

    def test_ignore_case_and_files_searched(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "grep", pattern="hello", path="src", ignore_case=True)["result"]
        assert [(m["path"], m["line"]) for m in result["matches"]] == [
            ("src/app.py", 2), ("src/pkg/mod.py", 1), ("src/pkg/mod.py", 2),
        ]
        assert result["files_searched"] == 2  # data.bin is binary: skipped, not searched

    def test_glob_filters_by_name_at_any_depth(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "grep", pattern="hello", glob="*.md", ignore_case=True)["result"]
        assert [m["path"] for m in result["matches"]] == ["docs/readme.md"]
        result = ok(tree_sb, "grep", pattern="hello", glob="src/*.py", ignore_case=True)["result"]
        assert [m["path"] for m in result["matches"]] == ["src/app.py"]

    def test_one_file(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "grep", pattern="print", path="src/app.py")["result"]
        assert result["matches"] == [{"path": "src/app.py", "line": 2, "text": "print('Hello')"}]
        assert result["files_searched"] == 1
        assert err(tree_sb, "grep", pattern="x", path="src/pkg/data.bin")["code"] == "binary_file"

    def test_max_results(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "grep", pattern="hello", ignore_case=True, max_results=2)["result"]
        assert len(result["matches"]) == 2 and result["truncated"] is True

    def test_never_reads_denied_or_outside_files(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "grep", pattern="hello", max_results=200)
        assert SECRET not in str(response)
        paths = {m["path"] for m in response["result"]["matches"]}
        assert ".hidden/h.txt" in paths and ".env" not in paths
        assert err(tree_sb, "grep", pattern="hello", path=".env")["code"] == "path_denied"

    def test_errors(self, tree_sb: Sandbox) -> None:
        error = err(tree_sb, "grep", pattern="(unclosed")
        assert error["code"] == "invalid_arguments" and "'pattern'" in error["message"]
        assert err(tree_sb, "grep", pattern="x", glob="../*")["code"] == "invalid_arguments"
        assert err(tree_sb, "grep", pattern="x", path="nope")["code"] == "not_found"
        assert err(tree_sb, "grep", pattern="x", path="link-out")["code"] == "outside_workspace"

    def test_long_lines_are_cut(self, tree_sb: Sandbox, tree_ws: Path, scratch: Path) -> None:
        (scratch / "long.txt").write_text("needle" + "x" * 1000 + "\n")
        result = ok(tree_sb, "grep", pattern="needle", path=rel(tree_ws, scratch))["result"]
        assert len(result["matches"][0]["text"]) < 600
