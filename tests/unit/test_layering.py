"""The layout of ``xpushare/``: every module imports, no import cycles between xpushare modules, every row of
the layer table of docs/architecture.md holds, and no module of the judge layer over 600 lines.

The import graph is built from the AST of every module (no import-time tricks can hide an edge):
``import a.b`` and ``from a.b import c`` are edges to ``a.b`` (to ``a.b.c`` when that is a module), plus
the packages on the way (``a``'s ``__init__`` runs first) unless the importer lives inside them. Imports
under ``if TYPE_CHECKING:`` never run and are left out; imports inside functions run later but still
tie the layers together, so they count. A cycle is reported as the path that closes it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import xpushare

PACKAGE = Path(xpushare.__file__).resolve().parent
JUDGE_MAX_LINES = 600  # hard limit of a module under xpushare/judge/
JUDGE_WARN_LINES = 500  # the "about 500": reported, not failed


def module_name(path: Path) -> str:
    """``xpushare/judge/metrics.py`` -> ``xpushare.judge.metrics``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package (name -> file), ``data`` and other non-Python files aside."""
    # data/ holds the scripts the tool ships to nodes (workloads), not modules of the package; __main__ runs the CLI
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if "__pycache__" not in p.parts and p.relative_to(PACKAGE).parts[0] != "data" and p.name != "__main__.py"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements of a module, including those inside functions, without ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield from _imports_of(sub)
            continue
        yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The xpushare modules one import statement loads (before the ancestor packages are added)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = {source}
    out.update(f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the xpushare modules it imports (see the module doc for what counts); a copy the caller may change."""
    return {name: set(edges) for name, edges in _import_graph().items()}


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    # parsed once per test process (the tests of the layer table each read it: 2-12 s per parse on 2 cores)
    files = all_modules()
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(tree):
            for target in _targets(name, is_package, node, modules):
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    dep = ".".join(parts[:i])
                    # a package the importer lives in is already being initialised: no edge
                    if dep in modules and dep != name and not name.startswith(dep + "."):
                        edges.add(dep)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One closing path (``[a, b, ..., a]``) per strongly connected component with a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        # iterative would be longer; the package is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_closing_path(graph, comp) for comp in components]


def _closing_path(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # unreachable for a real component


@pytest.mark.parametrize("name", sorted(all_modules()))
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles between xpushare modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_find_cycles_reports_the_closing_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


#: What the judge layer may import: itself and the layers below it (evidence and its formats, parsers,
#: the model, the pod record). Never a case, the engine, a feature (soak, metrics_check ...) or a backend.
JUDGE_MAY_IMPORT = ("xpushare.judge", "xpushare.evidence", "xpushare.model", "xpushare.parsers",
                    "xpushare.backends.base")


def test_judge_imports_only_lower_layers() -> None:
    graph = import_graph()
    wrong = {name: sorted(d for d in deps if d != "xpushare.backends"
                          and not any(d == a or d.startswith(a + ".") for a in JUDGE_MAY_IMPORT))
             for name, deps in graph.items() if name == "xpushare.judge" or name.startswith("xpushare.judge.")}
    wrong = {n: d for n, d in wrong.items() if d}
    assert not wrong, f"judge modules importing above their layer: {wrong}"


#: Units of the package graph that are not a top-level package: ``backends.base`` is the backend *interface*
#: (``Backend`` and its parts; the records the evidence layer reads are ``model/workload.py``'s); the backends that
#: implement it (``k8s``, ``host``) sit above evidence and may import it (docs/architecture.md).
SUB_UNITS = ("xpushare.backends.base",)

#: Module -> package edges allowed to close a package cycle, each a known exception listed in
#: docs/architecture.md. Remove an entry once its edge is gone (the test says so).
ALLOWED_UPWARD = {("xpushare.cases.stability", "xpushare.soak")}


def unit_of(module: str) -> str:
    """The layer unit of a module: its top-level package (``xpushare.<unit>``), or one of :data:`SUB_UNITS`."""
    return next((u for u in SUB_UNITS if module == u or module.startswith(u + ".")), ".".join(module.split(".")[:2]))


def package_graph() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Unit -> the units it imports, without the :data:`ALLOWED_UPWARD` edges; and the allowed edges seen.

    An edge to a package whose ``__init__`` imports nothing (it runs on the way to a submodule) is no dependency:
    the submodule's own edge says where the import goes.
    """
    graph = import_graph()
    packages = {name for name, path in all_modules().items() if path.name == "__init__.py"}
    units: dict[str, set[str]] = {}
    seen: set[tuple[str, str]] = set()
    for a, deps in graph.items():
        ua = unit_of(a)
        for b in deps:
            if b in packages and not graph[b]:
                continue
            ub = unit_of(b)
            if (a, ub) in ALLOWED_UPWARD:
                seen.add((a, ub))
            elif ub != ua:
                units.setdefault(ua, set()).add(ub)
        units.setdefault(ua, set())
    return units, seen


def test_no_package_cycles() -> None:
    """No cycle between the layer units of ``xpushare/`` (``xpushare.<unit>``): a layer imports only the layers
    below it, except the edges of :data:`ALLOWED_UPWARD`."""
    units, seen = package_graph()
    cycles = find_cycles(units)
    assert not cycles, "package cycles (a layer importing a higher one):\n" + "\n".join(" -> ".join(c) for c in cycles)
    stale = sorted(ALLOWED_UPWARD - seen)
    if stale:
        warnings.warn(f"allowed upward edges no longer present, remove them from ALLOWED_UPWARD: {stale}",
                      stacklevel=1)


def test_package_graph_counts_backends_base_apart() -> None:
    assert unit_of("xpushare.backends.base") == "xpushare.backends.base"
    assert unit_of("xpushare.backends.k8s") == "xpushare.backends"
    assert unit_of("xpushare.backends") == "xpushare.backends"


def test_judge_modules_are_small() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in all_modules().items() if name.startswith("xpushare.judge.")}
    assert sizes, "no modules under xpushare/judge/"
    over = {n: s for n, s in sizes.items() if s > JUDGE_MAX_LINES}
    assert not over, f"judge modules over {JUDGE_MAX_LINES} lines (split them by concern): {over}"
    large = {n: s for n, s in sizes.items() if s > JUDGE_WARN_LINES}
    if large:
        warnings.warn(f"judge modules over {JUDGE_WARN_LINES} lines: {large}", stacklevel=1)


#: The only modules left flat in ``xpushare/``: the package, its ``__main__`` and the features built on the core
#: (docs/architecture.md "Layers"); everything else lives in its layer package.
FLAT_MODULES = {"__init__.py", "__main__.py", "adhoc.py"}


def test_no_flat_modules_but_the_features() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert set(flat) <= FLAT_MODULES, f"modules flat in xpushare/ (move them into their layer package): " \
        f"{sorted(set(flat) - FLAT_MODULES)}"


def test_layer_packages_have_an_init() -> None:
    """Every directory of modules is a regular package (no namespace packages: ``pip install .`` finds them)."""
    dirs = {p.parent for p in all_modules().values()}
    missing = sorted(str(d.relative_to(PACKAGE)) for d in dirs if not (d / "__init__.py").exists())
    assert not missing, f"directories of modules without __init__.py: {missing}"


# ------------------------------------------------------------------------------ the layer table of the docs

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


@dataclass(frozen=True)
class Row:
    """One row of the table under docs/architecture.md "Layers": its floor (1 = the bottom), the packages on it
    and the packages it may import (names as in :func:`unit_of`, without ``xpushare.``)."""

    floor: int
    packages: tuple[str, ...]
    may_import: frozenset[str]

    @property
    def name(self) -> str:
        return "+".join(self.packages)


def layer_table(text: str) -> list[Row]:
    """The rows of the "Layers" table of ``text`` (docs/architecture.md), top to bottom: a row is a table line whose
    first cell is a floor number; the backquoted names of its second cell are its packages, those of its last cell
    what it may import ("nothing": none)."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        names = re.findall(r"`([a-z_.]+)`", cells[1])
        rows.append(Row(int(cells[0]), tuple(names), frozenset(re.findall(r"`([a-z_.]+)`", cells[3]))))
    return rows


ROWS = layer_table(ARCHITECTURE.read_text(encoding="utf-8"))


def _short(unit: str) -> str:
    return unit.removeprefix("xpushare.")


def test_the_layer_table_names_every_package_once() -> None:
    units, _ = package_graph()
    in_code = {_short(u) for u in units if u != "xpushare"}
    named = [p for row in ROWS for p in row.packages]
    assert len(ROWS) >= 8 and len(named) == len(set(named)), f"a package on two rows: {named}"
    assert set(named) == in_code, (f"packages missing from docs/architecture.md: {sorted(in_code - set(named))}; "
                                   f"named there but not in the code: {sorted(set(named) - in_code)}")


def test_the_floors_go_down_and_a_row_may_import_only_lower_floors() -> None:
    floors = [row.floor for row in ROWS]
    assert floors == sorted(floors, reverse=True) and len(set(floors)) == len(floors), floors
    for i, row in enumerate(ROWS):
        below = {p for lower in ROWS[i + 1:] for p in lower.packages}
        assert row.may_import <= below, f"floor {row.floor} ({row.name}) may import higher or equal floors: " \
            f"{sorted(row.may_import - below)}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_every_row_of_the_layer_table_holds(row: Row) -> None:
    """What each package of the row imports (other packages; :data:`ALLOWED_UPWARD` aside) is in the row's
    "may import" cell. A permission no package of the row uses any more is reported, not failed."""
    units, _ = package_graph()
    wrong = {p: sorted(_short(d) for d in units[f"xpushare.{p}"] if _short(d) not in row.may_import)
             for p in row.packages}
    wrong = {p: d for p, d in wrong.items() if d}
    assert not wrong, f"imports docs/architecture.md does not allow on floor {row.floor}: {wrong}"
    used = {_short(d) for p in row.packages for d in units[f"xpushare.{p}"]}
    if row.may_import - used:
        warnings.warn(f"floor {row.floor} ({row.name}) may import {sorted(row.may_import - used)} but does not",
                      stacklevel=1)


def test_layer_table_parsing_and_a_broken_row() -> None:
    text = ("# A\n\n## Layers\n\n| floor | packages | what | may import |\n|---|---|---|---|\n"
            "| 2 | `engine`, `cases` | a `x` \\| y | `model` |\n| 1 | `model` | m | nothing |\n"
            "\n## Next\n| 9 | `z` | | |\n")
    assert layer_table(text) == [Row(2, ("engine", "cases"), frozenset({"model"})), Row(1, ("model",), frozenset())]
    units, _ = package_graph()
    engine_imports = {_short(d) for d in units["xpushare.engine"]}
    assert not engine_imports <= {"model"}  # the row above would fail against the real engine


# ------------------------------------------------------------------------- the rules the docs state in prose

def _trees(prefix: str = "xpushare") -> Iterator[tuple[str, ast.Module]]:
    """(module name, AST) of every module whose name is ``prefix`` or starts with ``prefix + "."``."""
    for name, path in all_modules().items():
        if name == prefix or name.startswith(prefix + "."):
            yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imported_modules(tree: ast.Module) -> set[str]:
    """The absolute module names a module's ``import`` / ``from ... import`` statements name (a ``from a import b``
    gives ``a`` and ``a.b``), ``if TYPE_CHECKING:`` bodies left out, relative imports left out."""
    out: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif not node.level and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _enclosing_functions(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the name of the top-level function or class the node is in ("" at module level)."""
    where: dict[int, str] = {}
    for top in tree.body:
        label = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""
        for node in ast.walk(top):
            where[id(node)] = label
    return where


#: Libraries a parser must not import: processes, sockets, HTTP, SSH (docs/architecture.md "Parsers are pure").
IO_LIBRARIES = ("subprocess", "socket", "urllib", "http", "requests", "paramiko", "fabric", "invoke")
#: Calls that open, read or write a file, start a process or reach the network: ``open(...)`` and these methods
#: (``Path.read_text``, ``os.system``, ``urllib.request.urlopen`` ...).
IO_CALLS = frozenset({"open", "read_text", "read_bytes", "write_text", "write_bytes", "urlopen", "Popen", "run",
                      "check_output", "check_call", "call", "system", "popen", "connect", "mkdir", "makedirs",
                      "unlink", "remove", "rename", "replace_file", "touch"})
#: The one read under parsers/, named in docs/architecture.md: the Xid catalogue the tool ships (package data).
COLLECT_READS = {("xpushare.parsers.xid", "_load")}


def io_in_module(name: str, tree: ast.Module) -> list[str]:
    """What of :data:`IO_LIBRARIES` / :data:`IO_CALLS` a module imports or calls, as ``"<line>: <what>"``, the
    :data:`COLLECT_READS` aside."""
    found = [f"imports {m}" for m in sorted(_imported_modules(tree))
             if m.split(".")[0] in IO_LIBRARIES]
    where = _enclosing_functions(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if called in IO_CALLS and (name, where.get(id(node), "")) not in COLLECT_READS:
            found.append(f"{node.lineno}: calls {called}()")
    return found


def test_collect_does_no_io() -> None:
    """docs/architecture.md "Parsers are pure and fixture-tested": no module of ``xpushare/parsers/`` opens, reads
    or writes a file, runs a process or reaches the network (no :data:`IO_CALLS` call, no :data:`IO_LIBRARIES`
    import), the Xid catalogue's read (:data:`COLLECT_READS`) aside. An argv (a list of strings that a caller's
    transport runs) is no I/O: a command whose output is a format is built beside that format's parser."""
    found = {name: hits for name, tree in _trees("xpushare.parsers") if (hits := io_in_module(name, tree))}
    assert not found, f"I/O in the parsers of xpushare/parsers/ (move it to evidence/ or a backend): {found}"


def test_the_io_check_can_fail() -> None:
    tree = ast.parse("import subprocess\nfrom pathlib import Path\n\ndef f(p):\n    return Path(p).read_text()\n"
                     "def _load():\n    return open('x').read()\n")
    assert io_in_module("xpushare.parsers.fake", tree) == ["imports subprocess", "5: calls read_text()",
                                                           "7: calls open()"]
    assert io_in_module("xpushare.parsers.xid", tree) == ["imports subprocess", "5: calls read_text()"]


#: run.json's owner (its file name, writing and reading it) and the one module that has it written
#: (docs/architecture.md "One run for every kind": ``engine/run.write_meta``).
RUN_JSON_OWNER = "xpushare.report.run_store"
RUN_JSON_WRITER = "xpushare.engine.run"


def run_json_uses(name: str, tree: ast.Module) -> list[str]:
    """Where a module names run.json's file (the string ``"run.json"``, ``RUN_META_FILE``) or its writer
    (``write_run_meta``), other than the definition of that writer."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "run.json":
            found.append(f"{node.lineno}: 'run.json'")
        elif isinstance(node, ast.Name) and node.id in ("RUN_META_FILE", "write_run_meta"):
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in ("RUN_META_FILE", "write_run_meta"):
            found.append(f"{node.lineno}: {node.attr}")
        elif isinstance(node, ast.alias) and node.name in ("RUN_META_FILE", "write_run_meta"):
            found.append(f"import {node.name}")
    return found


def test_one_writer_of_run_json() -> None:
    """docs/architecture.md: ``engine/run.write_meta`` is the one writer of run.json. Checked as: the file name
    (the string ``"run.json"``, its constant ``RUN_META_FILE``) appears in code only in its owner
    :data:`RUN_JSON_OWNER` (which writes it in ``write_run_meta`` and reads it back), and ``write_run_meta`` is
    called only from :data:`RUN_JSON_WRITER`. A docstring or comment that mentions run.json writes nothing and is
    not counted (only an exact ``"run.json"`` string is)."""
    found = {name: hits for name, tree in _trees() if name != RUN_JSON_OWNER
             and (hits := [h for h in run_json_uses(name, tree)
                           if not (name == RUN_JSON_WRITER and h.endswith("write_run_meta"))])}
    assert not found, f"run.json written or named outside {RUN_JSON_OWNER} / {RUN_JSON_WRITER}.write_meta: {found}"
    assert run_json_uses(RUN_JSON_WRITER, dict(_trees(RUN_JSON_WRITER))[RUN_JSON_WRITER]), \
        f"{RUN_JSON_WRITER} no longer writes run.json: update the rule and docs/architecture.md"


def test_the_run_json_check_can_fail() -> None:
    tree = ast.parse("from x import artifacts\nartifacts.write_run_meta(d, {})\n"
                     "open(d / 'run.json', 'w')\n\"\"\"run.json in a docstring\"\"\"\n")
    assert run_json_uses("xpushare.engine.suite_run", tree) == ["2: write_run_meta", "3: 'run.json'"]


#: Modules that run kubectl besides transport/ (its kubectl API) and the k8s backend (``backends/k8s*``),
#: each named in docs/architecture.md "Where kubectl runs": the legacy scenarios' backend (a ``K8sBackend``) and
#: the features that work on a cluster without a case's backend.
KUBECTL_FEATURES = {
    "xpushare.legacy.backend": "legacy/backend.py",
    "xpushare.backends.leftovers": "backends/leftovers.py",
    "xpushare.deploy.k8s": "deploy/k8s.py",
    "xpushare.deploy.k8s_pipeline": "deploy/k8s_pipeline.py",
    "xpushare.engine.lease": "engine/lease.py",
    "xpushare.envcheck.runner": "envcheck/runner.py",
    "xpushare.metrics_check.targets": "metrics_check/targets.py",
}
KUBECTL_MODULES = ("xpushare.transport.kubectl", "xpushare.transport.cluster_kubectl")


def kubectl_uses(tree: ast.Module) -> list[str]:
    """How a module runs kubectl: it imports transport's kubectl API (:data:`KUBECTL_MODULES`), names the
    ``Kubectl`` class, writes an argv that starts with the word ``"kubectl"``, or calls a method of something's
    ``kubectl`` (``backend.kubectl.delete(...)``)."""
    found = [f"imports {m}" for m in sorted(_imported_modules(tree)) if m in KUBECTL_MODULES]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Kubectl":
            found.append(f"{node.lineno}: Kubectl")
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "kubectl":
            found.append(f"{node.lineno}: argv ['kubectl', ...]")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "kubectl":
            found.append(f"{node.lineno}: .kubectl.{node.func.attr}()")
    return found


def test_kubectl_only_in_the_transport_and_the_k8s_backend() -> None:
    """docs/architecture.md "Where kubectl runs": kubectl is run (see :func:`kubectl_uses`) only by
    ``transport/``, the k8s backend (``backends/k8s*.py``) and the modules of :data:`KUBECTL_FEATURES`, each
    named in that section. A case, a judgment, a soak step or a legacy act asks the backend. (What the check
    cannot see: a ``Kubectl`` handed on as an untyped value; the modules above are where one is made.)"""
    found = {name: hits for name, tree in _trees()
             if not (name.startswith("xpushare.transport.") or name.startswith("xpushare.backends.k8s")
                     or name in KUBECTL_FEATURES) and (hits := kubectl_uses(tree))}
    assert not found, f"kubectl outside transport/ and the k8s backend (go through the backend): {found}"
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    assert "\n### Where kubectl runs\n" in doc, "docs/architecture.md lost its section 'Where kubectl runs'"
    section = re.split(r"\n##", doc.split("\n### Where kubectl runs\n", 1)[1], maxsplit=1)[0]
    unnamed = sorted(path for path in KUBECTL_FEATURES.values() if f"`{path}`" not in section)
    assert not unnamed, f"docs/architecture.md 'Where kubectl runs' does not name: {unnamed}"
    stale = sorted(n for n, tree in _trees() if n in KUBECTL_FEATURES and not kubectl_uses(tree))
    assert not stale, f"no longer run kubectl, remove from KUBECTL_FEATURES and the doc: {stale}"


def test_the_kubectl_check_can_fail() -> None:
    tree = ast.parse("from xpushare.transport.kubectl import Kubectl\nk: Kubectl\n"
                     "argv = ['kubectl', 'get', 'pods']\nbackend.kubectl.delete('app=x')\n"
                     "headers = ['host', 'kubectl']\ncluster.kubectl\n")
    assert kubectl_uses(tree) == ["imports xpushare.transport.kubectl", "2: Kubectl", "3: argv ['kubectl', ...]",
                                  "4: .kubectl.delete()"]


#: A module of the package as docs/architecture.md names it: ``engine/run.py``, ``engine/run.Run``, ``soak/loop*.py``.
DOC_MODULE = re.compile(r"`(?:xpushare/)?([a-z_]+)/([a-z_0-9*]+)(?:\.py)?(\.[A-Za-z_][\w.]*)?`")
#: What follows a file name that is not a module's (``soak/params.json``, ``data/xid.yaml``).
DATA_SUFFIXES = (".json", ".jsonl", ".yaml", ".txt", ".log", ".md", ".csv")


def test_every_module_the_architecture_names_exists() -> None:
    """A rename that leaves docs/architecture.md naming the old module fails here: every ``pkg/module`` it names in
    backquotes (``engine/run.Run``, ``soak/loop*.py``) is a module (or a package) of ``xpushare/``."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    named = {(pkg, mod) for pkg, mod, rest in DOC_MODULE.findall(text)
             if pkg in packages and not rest.startswith(DATA_SUFFIXES)}
    assert len(named) > 40, named  # the scan sees the document
    missing = sorted(f"{pkg}/{mod}" for pkg, mod in named
                     if not (list((PACKAGE / pkg).glob(f"{mod}.py")) or (PACKAGE / pkg / mod / "__init__.py").exists()))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
