"""No import cycles inside the package.

A cycle is how a layered package rots: once ``a`` imports ``b`` and ``b``
imports ``a`` (often through a function-level import added "to avoid the
cycle"), which module is the lower layer is no longer true of either, the
import order decides what is half-initialised, and the next import added
anywhere on the loop can fail with "cannot import name" at start-up only.

Every ``jobmaster/**/*.py`` is parsed with ``ast`` (nothing is imported) and
its imports become edges of a module graph:

- imports anywhere in the file count: module level, and inside functions
  and methods (a deferred import still ties the two modules together, it
  only moves the failure to run time);
- imports under ``if TYPE_CHECKING:`` count too, although they never run:
  a lower layer that names a higher layer's type in its annotations knows
  that layer's shape (the processor reaching into its manager's internals
  is this), and "put it under TYPE_CHECKING" must not be the way a cycle
  is made to pass. A lower layer that needs a type from above declares a
  ``Protocol`` of what it uses instead;
- ``import a.b.c`` is an edge to ``a.b.c`` (or the nearest enclosing module
  of the package); ``from pkg import name`` is an edge to ``pkg.name`` when
  that is a module, else to ``pkg`` (its ``__init__``); relative imports are
  resolved first;
- the parents that Python imports on the way (``jobmaster`` for
  ``jobmaster.keys``) are not edges: every submodule would otherwise form a
  cycle with an ``__init__`` that re-exports it. What the rule forbids
  instead is a submodule importing a package *by name*: ``from jobmaster
  import Job`` inside ``jobmaster/`` is an edge to ``jobmaster`` itself.

The strongly connected components with more than one module (Tarjan) are
the cycles; the test names each with one concrete loop through it. The
scanner is tested on small synthetic packages too, so a check that stopped
seeing edges would fail here rather than pass quietly.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]

Graph = dict[str, set[str]]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root/package``."""
    names: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth: module, function, class, ``if``, ``try``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _enclosing(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its nearest parent that is a module of the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - node.level + 1]
        base = ".".join([*here, base] if base else here)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(root: Path, package: str) -> Graph:
    modules = module_names(root, package)
    graph: Graph = {name: set() for name in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in _imports(tree):
            targets = _targets(node, module, is_package)
            if isinstance(node, ast.ImportFrom):
                # ``from pkg import a, b``: each name is a submodule or an attribute of pkg.
                *names, base = targets
                edges = [n if n in modules else base for n in names]
            else:
                edges = targets
            for target in edges:
                found = _enclosing(target, modules)
                if found is not None and found != module:
                    graph[module].add(found)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def one_loop(graph: Graph, component: list[str]) -> list[str]:
    """A shortest loop from the component's first module back to itself (BFS)."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no loop through {start}")  # a component always has one


def describe(graph: Graph) -> str:
    lines = []
    for component in cycles(graph):
        loop = " -> ".join(one_loop(graph, component))
        lines.append(f"{len(component)} modules {component}\n    e.g. {loop}")
    return "\n".join(lines)


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph(ROOT, "jobmaster")
    assert len(graph) > 100, "the scanner found too few modules: wrong root?"
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s) in jobmaster/:\n{describe(graph)}"


# The scanner, on synthetic packages.


def _package(tmp_path: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(tmp_path, "pkg")


def test_a_function_level_import_closes_a_cycle(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def f():\n    from pkg import a\n    return a\nthing = 1\n",
        },
    )
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert "pkg.a -> pkg.b -> pkg.a" in describe(graph)


def test_type_checking_and_nested_imports_are_edges(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": (
                "import typing\n"
                "if typing.TYPE_CHECKING:\n    from pkg.a import X\n"
                "class C:\n    def m(self):\n        try:\n            import pkg.c.d\n"
                "        except ImportError:\n            pass\n"
                "thing = 1\n"
            ),
            "pkg/c.py": "",
        },
    )
    # ``pkg.c.d`` is no module of the package: the edge goes to the nearest one, pkg.c.
    assert graph["pkg.b"] == {"pkg.a", "pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_importing_the_package_by_name_is_an_edge_to_its_init(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.sub.x import X\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/x.py": "from .. import helper\nX = 1\n",
            "pkg/helper.py": "from .sub import x\nimport pkg\n",
        },
    )
    assert graph["pkg"] == {"pkg.sub.x"}
    # ``from .. import helper`` names a module: the edge goes to it, not to pkg.
    assert graph["pkg.sub.x"] == {"pkg.helper"}
    assert graph["pkg.helper"] == {"pkg.sub.x", "pkg"}
    assert cycles(graph) == [["pkg", "pkg.helper", "pkg.sub.x"]]
    assert "pkg -> pkg.sub.x -> pkg.helper -> pkg" in describe(graph)
