"""The import map of docs/development.md ("Layout"), checked on the source: every
module sits on one floor, imports only from its own floor or those below it (a
function's lazy import and a type-only one count too), and no modules import each
other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import corral

PACKAGE = Path(corral.__file__).parent
# Top to bottom: the first name after `corral.` (a module or a package) -> its floor.
# corral/__init__.py is the lazy door to the public names and sits above them all.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("faces", "cli", "mcp_server", "__main__"),
    ("integrations", "testing"),
    ("pool", "api"),
    ("host", "trust"),
    ("sandbox",),
    ("tools",),
    ("calls",),
    ("history",),
    ("config", "config_keys"),
    ("fs",),
    ("policy", "globs"),
    ("audit_verify",),
    ("audit",),
    ("seccomp",),
    ("_malloc", "_prctl"),
    ("_syscall", "jsonfast", "errors", "observe", "tool_table"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every corral module -> the corral modules it imports, at any depth."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names |= {f"{node.module}.{alias.name}" for alias in node.names}
        found[module_name(path)] = {name for name in names if name.startswith("corral.")}
    return {module: {resolved for name in names
                     if (resolved := owning_module(name, found)) not in ("", "corral", module)}
            for module, names in found.items()}


def owning_module(name: str, modules: dict[str, set[str]]) -> str:
    """`corral.fs.root.Root` -> `corral.fs.root` (a name imported from a module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def floor(module: str) -> int:
    first = module.split(".")[1]
    for index, names in enumerate(FLOORS):
        if first in names:
            return index
    raise AssertionError(f"{module} is on no floor: add it to FLOORS and to the Layout")


def test_every_module_is_on_a_floor() -> None:
    for module in imports():
        if module != "corral":
            floor(module)


def test_no_module_imports_a_floor_above_its_own() -> None:
    upward = [f"{module} -> {name}" for module, names in sorted(imports().items())
              if module != "corral" for name in sorted(names) if floor(name) < floor(module)]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    graph = imports()
    circles = [sorted(component) for component in strongly_connected(graph)
               if len(component) > 1]
    assert circles == []


def test_the_faces_import_each_other_in_no_circle() -> None:
    """drain.py drives the HTTP face through a Protocol of its own (drain.Served),
    never by importing http_server.py, which imports it."""
    graph = imports()
    faces = {module: {name for name in names if name.startswith("corral.faces.")}
             for module, names in graph.items() if module.startswith("corral.faces.")}
    assert [sorted(c) for c in strongly_connected(faces) if len(c) > 1] == []


def test_fs_is_in_no_circle_and_keeps_its_private_modules() -> None:
    """corral/fs/ in Go's shape: none of its modules is in a circle (a feature's verbs
    live with the feature, above Root), and code outside it reaches only its public
    modules (`fs/syscalls.py` and `fs/tree.py` are what the history store uses)."""
    graph = imports()
    in_fs = [sorted(component) for component in strongly_connected(graph)
             if len(component) > 1 and any(m.startswith("corral.fs") for m in component)]
    assert in_fs == []
    private = [f"{module} -> {name}" for module, names in sorted(graph.items())
               if not module.startswith("corral.fs") for name in sorted(names)
               if name.startswith("corral.fs.") and name.split(".")[2].startswith("_")]
    assert private == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of `graph`, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(component)
    return components
