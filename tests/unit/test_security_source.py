"""The package never unpickles, evals or imports by a name it could read from Redis.

Every ``jobmaster/**/*.py`` is parsed with ``ast`` and searched for:

- imports of modules that deserialise code or objects (pickle and friends,
  ``yaml``, whose ``load`` builds arbitrary objects, ``runpy``);
- calls to ``eval``, ``exec``, ``compile``, ``__import__`` and the
  namespace builtins (``globals()[name]`` is a lookup by name);
- dynamic imports (``importlib.import_module``, ``pkgutil.resolve_name``...)
  and ``getattr`` on a module with a computed name, which together turn a
  string into a callable. These are allowed only at the allow-listed sites
  that import what the operator's config names (``app``, ``middleware``),
  and each allow-listed site must still exist, so the list cannot rot into
  a blanket permission.

The scanner itself is tested on snippets, so a check that silently stopped
matching would fail here too.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobmaster

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(jobmaster.__file__).resolve().parent
ROOT = PACKAGE.parent

FORBIDDEN_MODULES = frozenset(
    {
        "pickle",
        "_pickle",
        "cPickle",
        "cloudpickle",
        "dill",
        "marshal",
        "shelve",
        "jsonpickle",
        "yaml",
        "runpy",
    }
)
FORBIDDEN_BUILTINS = frozenset(
    {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
)
DYNAMIC_IMPORTS = frozenset(
    {
        "importlib.import_module",
        "importlib.__import__",
        "importlib.reload",
        "importlib.util.spec_from_file_location",
        "importlib.util.module_from_spec",
        "pkgutil.resolve_name",
    }
)
GETATTR_ON_MODULE = "getattr on a module"


@dataclass(frozen=True)
class Finding:
    """One unsafe construct: where it is, what it is, and the function it is in."""

    path: str  # relative to the repository root
    line: int
    kind: str  # e.g. "importlib.import_module", "import pickle", "eval"
    scope: str  # the enclosing function's qualified name, "<module>" at top level

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} (in {self.scope})"


# Dynamic resolution is allowed only here: each imports a name from the
# operator's config file, never one taken from Redis. (path, scope, kind).
ALLOWED = frozenset(
    {
        # app = ["myapp.jobs"]: the modules that register the jobs.
        ("jobmaster/app.py", "import_app", "importlib.import_module"),
        # middleware = ["myapp.mw:Audit"]: a class, instantiated once at start.
        ("jobmaster/middleware/base.py", "load", "importlib.import_module"),
        ("jobmaster/middleware/base.py", "load", GETATTR_ON_MODULE),
    }
)


class _Scanner(ast.NodeVisitor):
    """Collects Findings in one module, resolving import aliases to full names."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted name it stands for
        self.modules: set[str] = set()  # local names bound to a whole module
        self.scopes: list[str] = []

    # -- helpers -----------------------------------------------------------------
    def report(self, node: ast.AST, kind: str) -> None:
        scope = ".".join(self.scopes) or "<module>"
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), kind, scope))

    def dotted(self, node: ast.expr) -> str | None:
        """``a.b.c`` with ``a`` replaced by what it was imported as; None if not a name."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        return None

    def is_module_object(self, node: ast.expr) -> bool:
        """An expression that evaluates to a module: an imported one, a dynamic
        import's result, or an entry of ``sys.modules``."""
        if isinstance(node, ast.Name) and node.id in self.modules:
            return True
        if isinstance(node, ast.Call) and self.dotted(node.func) in DYNAMIC_IMPORTS:
            return True
        if isinstance(node, ast.Subscript) and self.dotted(node.value) == "sys.modules":
            return True
        return isinstance(node, ast.Call) and self.dotted(node.func) == "sys.modules.get"

    def check_module(self, node: ast.AST, name: str) -> None:
        if name.split(".", maxsplit=1)[0] in FORBIDDEN_MODULES:
            self.report(node, f"import {name}")

    # -- visitors ----------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_module(node, alias.name)
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else local
            self.modules.add(local)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            self.check_module(node, node.module)
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name is not None:
            bare = name.removeprefix("builtins.")
            # A bare name, or one reached through ``builtins``: ``client.eval``
            # (Redis EVAL on some object) is not the builtin.
            if bare in FORBIDDEN_BUILTINS and (name == bare or name.startswith("builtins.")):
                self.report(node, bare)
            elif name in DYNAMIC_IMPORTS:
                self.report(node, name)
            elif name == "getattr" and self._computed_getattr_on_module(node):
                self.report(node, GETATTR_ON_MODULE)
        self.generic_visit(node)

    def _computed_getattr_on_module(self, node: ast.Call) -> bool:
        if len(node.args) < 2 or isinstance(node.args[1], ast.Constant):
            return False  # getattr(module, "constant") names its attribute in the source
        return self.is_module_object(node.args[0])


def scan_source(source: str, path: str = "<snippet>") -> list[Finding]:
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source, filename=path))
    return scanner.findings


@functools.cache  # parsed once per run: several tests read it
def scan_package() -> tuple[Finding, ...]:
    findings: list[Finding] = []
    for file in sorted(PACKAGE.rglob("*.py")):
        findings += scan_source(file.read_text(), file.relative_to(ROOT).as_posix())
    return tuple(findings)


def allowed(finding: Finding) -> bool:
    return (finding.path, finding.scope, finding.kind) in ALLOWED


# -- the package -------------------------------------------------------------------


def test_the_package_has_no_pickle_eval_or_dynamic_import_outside_the_allow_list() -> None:
    files = list(PACKAGE.rglob("*.py"))
    assert len(files) > 20, f"found only {len(files)} modules under {PACKAGE}: wrong folder?"
    bad = [str(finding) for finding in scan_package() if not allowed(finding)]
    assert not bad, "unsafe constructs (see this test's docstring):\n" + "\n".join(bad)


@pytest.mark.parametrize("site", sorted(ALLOWED), ids=lambda site: f"{site[0]}:{site[1]}")
def test_each_allow_listed_site_still_exists(site: tuple[str, str, str]) -> None:
    """A site that moved or went away must leave the allow-list too."""
    found = {(f.path, f.scope, f.kind) for f in scan_package()}
    assert site in found, f"allow-listed {site} is gone: update ALLOWED"


def test_the_allow_listed_imports_take_names_from_the_config() -> None:
    """The two sites are fed from the config's ``app`` and ``middleware`` lists."""
    app = (PACKAGE / "app.py").read_text()
    assert "import_app(config.app)" in app
    assert "middleware.load(config.middleware" in app


# -- the scanner itself -------------------------------------------------------------

CAUGHT = [
    ("import pickle", "import pickle"),
    ("import pickle as p", "import pickle"),
    ("from pickle import loads", "import pickle"),
    ("import _pickle", "import _pickle"),
    ("import dill", "import dill"),
    ("import marshal", "import marshal"),
    ("import shelve", "import shelve"),
    ("import jsonpickle", "import jsonpickle"),
    ("from yaml import load", "import yaml"),
    ("import yaml.constructor", "import yaml.constructor"),
    ("import runpy", "import runpy"),
    ("eval(text)", "eval"),
    ("exec(text)", "exec"),
    ("compile(text, 'x', 'exec')", "compile"),
    ("__import__(name)", "__import__"),
    ("globals()[name]()", "globals"),
    ("import builtins\nbuiltins.eval(text)", "eval"),
    ("from builtins import exec as run\nrun(text)", "exec"),
    ("import importlib\nimportlib.import_module(name)", "importlib.import_module"),
    ("import importlib as il\nil.import_module(name)", "importlib.import_module"),
    ("from importlib import import_module\nimport_module(name)", "importlib.import_module"),
    ("import importlib\nimportlib.__import__(name)", "importlib.__import__"),
    ("import pkgutil\npkgutil.resolve_name(name)", "pkgutil.resolve_name"),
    ("import os\ngetattr(os, name)()", GETATTR_ON_MODULE),
    ("import sys\ngetattr(sys.modules[module], name)()", GETATTR_ON_MODULE),
]


@pytest.mark.parametrize(("source", "kind"), CAUGHT, ids=[c[0] for c in CAUGHT])
def test_the_scanner_catches(source: str, kind: str) -> None:
    wrapped = "def handler(name, text, module):\n" + "".join(
        f"    {line}\n" for line in source.splitlines()
    )
    findings = scan_source(wrapped, "jobmaster/example.py")
    last_line = len(wrapped.splitlines())
    assert Finding("jobmaster/example.py", last_line, kind, "handler") in findings, findings
    assert str(findings[-1]).startswith(f"jobmaster/example.py:{last_line}: ")  # file:line


SAFE = [
    "client.eval(script, 0)",  # Redis EVAL on a connection, not the builtin
    "self.redis.execute_command('EXEC')",
    "getattr(self, f'handle_{name}', None)",
    "getattr(record, field, None)",
    "import os\ngetattr(os, 'sched_getaffinity', None)",
    "registry.lookup(name)",
    "json.loads(text)",
    "from jobmaster import registry",
]


@pytest.mark.parametrize("source", SAFE)
def test_the_scanner_leaves_alone(source: str) -> None:
    wrapped = "def handler(self, name, text, record, field):\n" + "".join(
        f"    {line}\n" for line in source.splitlines()
    )
    assert scan_source(wrapped) == []
