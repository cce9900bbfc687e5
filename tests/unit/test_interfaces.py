"""Honest interfaces, checked on the source: no probing of a backend with ``getattr``/``hasattr``, and no
use of another module's private (``_x``) names.

Rules, over the AST of every module under ``xpushare/``:

* ``getattr(<expr>, ...)`` or ``hasattr(<expr>, ...)`` where ``<expr>``'s source mentions ``backend``:
  what a backend offers is declared by :class:`xpushare.backends.base.Backend` (optional parts by
  ``Backend.parts``, each an object or None), not discovered at run time;
* ``from xpushare.<m> import _x`` (or a relative import of ``_x``);
* ``<obj>._x`` where ``<obj>`` is not ``self``, ``cls`` or ``super()``, ``_x`` is not defined in the module
  itself (a module may use its own private names on any object) and is defined in another xpushare module
  (as a function, class, method, assignment or ``self._x = ...`` attribute). Private names of the
  standard library or third parties (``sys._getframe``, ``tuple._replace``) are not xpushare's to judge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "xpushare"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(root: Path) -> dict[str, ast.Module]:
    return {p.relative_to(root.parent).as_posix(): ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
            for p in sorted(root.rglob("*.py")) if p.relative_to(root).parts[0] != "data"}  # shipped scripts


def _defined_private(tree: ast.Module) -> set[str]:
    """Private names a module defines: defs, classes, assignment targets, ``<obj>._x = ...`` attributes."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            out.add(node.name)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Name) and _private(t.id):
                    out.add(t.id)
                elif isinstance(t, ast.Attribute) and _private(t.attr):
                    out.add(t.attr)
    return out


def _own_object(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def violations(root: Path = PACKAGE) -> list[str]:
    """Every breach of the rules under ``root`` (a package directory), as ``path:line: what``."""
    modules = _modules(root)
    defined = {path: _defined_private(tree) for path, tree in modules.items()}
    found: list[tuple[str, int, str]] = []
    for path, tree in modules.items():
        others: set[str] = set().union(*(names for p, names in defined.items() if p != path))
        for node in ast.walk(tree):
            found += [(path, node.lineno, what) for what in _check(node, defined[path], others)]
    return [f"{path}:{line}: {what}" for path, line, what in sorted(found)]


def _check(node: ast.AST, own: set[str], others: set[str]) -> Iterator[str]:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and node.args and "backend" in ast.unparse(node.args[0]).lower()):
        yield f"{node.func.id} probes a backend: {ast.unparse(node)}"
    elif isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == "xpushare"):
        for alias in node.names:
            if _private(alias.name):
                yield f"imports private {alias.name} from {'.' * node.level}{node.module or ''}"
    elif (isinstance(node, ast.Attribute) and _private(node.attr) and not _own_object(node.value)
            and node.attr not in own and node.attr in others):
        yield f"private {node.attr} of another module: {ast.unparse(node)}"


def test_no_backend_probing_and_no_private_names_of_other_modules() -> None:
    found = violations()
    assert not found, "\n".join(found)


def test_the_rules_catch_what_they_describe(tmp_path: Path) -> None:
    pkg = tmp_path / "xpushare"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "class B:\n"
        "    def _gpu_host(self):\n"
        "        return self._cache\n"
        "    def __init__(self):\n"
        "        self._cache = 1\n"
        "def _helper():\n"
        "    return B()._gpu_host()\n",  # own module: allowed
        encoding="utf-8")
    (pkg / "b.py").write_text(
        "import sys\n"
        "from xpushare.a import _helper\n"
        "def f(run, b):\n"
        "    getattr(run.backend, 'kubectl', None)\n"
        "    hasattr(backend, 'names')\n"
        "    getattr(run, 'params')\n"  # not a backend: allowed
        "    sys._getframe()\n"  # not xpushare's: allowed
        "    return b._gpu_host()\n",
        encoding="utf-8")
    found = violations(pkg)
    assert [f.split(": ", 1)[0] for f in found] == ["xpushare/b.py:2", "xpushare/b.py:4", "xpushare/b.py:5",
                                                   "xpushare/b.py:8"], found
