"""Every module of the project imports on its own, and no modules import each other in a loop.

The import graph is read from the code (the `import` and `from ... import` statements of
each module, wherever they stand: a lazy import inside a function and one for the type
checker alone tie two modules as much as any other), so a circle shows here before it
shows as an ImportError that depends on which module happens to be imported first.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rag", "cli", "api", "eval")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """The dotted names the module imports; `from X import y` gives X.y, which names the
    module X.y if there is one, else a name defined in X."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, up level - 1
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = project_modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        imported = _imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {m for m in map(owner, imported) if m is not None and m != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_every_kind_of_import() -> None:
    graph = import_graph()
    assert "rag.errors" in graph["rag.pipeline"]  # from rag.errors import ...
    assert "cli.commands.ask" in graph["cli.main"]  # from cli.commands import ask
    assert "rag.factory" in graph["cli.state"]  # inside a function


def test_no_project_modules_import_each_other_in_a_circle() -> None:
    found = cycles(import_graph())
    assert not found, "modules that import each other in a circle:\n" + "\n".join(
        " <-> ".join(circle) for circle in found
    )


def test_the_core_imports_nothing_from_the_front_ends() -> None:
    """`rag` is the core: the CLI and the API are thin front ends over it, never under it."""
    graph = import_graph()
    upward = {
        module: sorted(m for m in imported if m.split(".")[0] in ("cli", "api"))
        for module, imported in graph.items()
        if module.split(".")[0] == "rag"
    }
    assert not {m: up for m, up in upward.items() if up}, upward


# Imports each module first, in one fresh interpreter: the project's modules are forgotten
# before each (the third-party ones stay loaded, so it is quick), so a module that imports
# only when another was imported before it fails here.
_IMPORT_EACH = """
import importlib, json, sys, traceback
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m.split(".")[0] in %r]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


def test_every_module_imports_on_its_own() -> None:
    names = sorted(project_modules())
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH % (PACKAGES,), json.dumps(names)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{name}:\n{tb}" for name, tb in failures.items())
