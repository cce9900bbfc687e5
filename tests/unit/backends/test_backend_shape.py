"""The shape of the backend interface, checked on the source (issue 37: a narrow backend).

* :class:`~xpushare.backends.base.Backend` has at most :data:`MAX_PUBLIC` public members (methods and properties;
  plain data attributes such as ``mode`` or ``names`` are no members), each abstract or with a real shared body:
  none raises ``NotImplementedError``, none is a default that pretends (``pass``, ``return None``/``{}``/``[]``);
* the capability parts (:class:`~xpushare.backends.base.BackendParts`' field types) are ABCs whose every method is
  abstract, so a backend without a part gives None, never a part that refuses;
* no class of ``xpushare/backends/`` or ``xpushare/legacy/backend.py`` has more than :data:`MAX_METHODS` methods
  (every ``def``, private ones and properties included);
* the unit tests have one fake backend, ``tests/fakes/backend.py``'s: no test module under ``tests/unit`` defines
  a class whose name says Backend, and the fake is a :class:`Backend` with fake parts of the ABCs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import REPO_ROOT

BASE = REPO_ROOT / "xpushare" / "backends" / "base.py"
MAX_PUBLIC = 14
MAX_METHODS = 30
PARTS = ("Placement", "EvidenceRotation", "SchedulerControl", "Annotator", "KubeAccess")


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _abstract(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "abstractmethod")
               or (isinstance(d, ast.Attribute) and d.attr == "abstractmethod") for d in func.decorator_list)


def _raises_not_implemented(func: ast.AST) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _pretends(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body that does nothing: only a docstring, ``pass``/``...``, or ``return`` of None or an empty literal."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body:
        return not _abstract(func)
    if len(body) != 1:
        return False
    stmt = body[0]
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Return):
        value = stmt.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return True
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.Tuple)) and not getattr(value, "elts", None) \
                and not getattr(value, "keys", None):
            return True
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in (
                "frozenset", "set", "dict", "list", "tuple") and not value.args:
            return True
    return False


def backend_violations(path: Path = BASE) -> list[str]:
    """What is wrong with ``Backend`` and its parts in ``path`` (a base.py), one line each."""
    classes = _classes(path)
    out: list[str] = []
    public = [f for f in _methods(classes["Backend"]) if not f.name.startswith("_")]
    if len(public) > MAX_PUBLIC:
        out.append(f"Backend has {len(public)} public members (at most {MAX_PUBLIC}): {[f.name for f in public]}")
    for func in _methods(classes["Backend"]):
        if _raises_not_implemented(func):
            out.append(f"Backend.{func.name} raises NotImplementedError")
        elif not _abstract(func) and _pretends(func):
            out.append(f"Backend.{func.name} is a default that pretends (neither abstract nor a real body)")
    for name in PARTS:
        for func in _methods(classes[name]):
            if not _abstract(func):
                out.append(f"{name}.{func.name} is not abstract (a part is there whole, or None)")
    return out


def large_classes(paths: list[Path]) -> list[str]:
    """Classes of ``paths`` with more than :data:`MAX_METHODS` methods."""
    return [f"{p.name}: {c.name} has {len(_methods(c))} methods (at most {MAX_METHODS})"
            for p in paths for c in _classes(p).values() if len(_methods(c)) > MAX_METHODS]


def test_backend_is_narrow_and_has_no_optional_members() -> None:
    assert backend_violations() == []


def test_no_backend_class_is_large() -> None:
    paths = [*sorted((REPO_ROOT / "xpushare" / "backends").glob("*.py")), REPO_ROOT / "xpushare/legacy/backend.py"]
    assert large_classes(paths) == []


def test_the_unit_tests_have_one_fake_backend_and_it_is_a_backend() -> None:
    from tests.fakes import backend as fakes
    from xpushare.backends import base

    found = [f"{p.relative_to(REPO_ROOT)}: {c}" for p in sorted((REPO_ROOT / "tests" / "unit").rglob("*.py"))
             for c in _classes(p) if "backend" in c.lower()]
    assert found == [], "fake backends belong in tests/fakes/backend.py (FakeBackend)"
    assert issubclass(fakes.FakeBackend, base.Backend)
    for fake, part in ((fakes.FakeKube, base.KubeAccess), (fakes.FakeScheduler, base.SchedulerControl),
                       (fakes.FakeAnnotator, base.Annotator), (fakes.FakePlacement, base.Placement),
                       (fakes.FakeRotation, base.EvidenceRotation)):
        assert issubclass(fake, part) and not getattr(fake, "__abstractmethods__", None), fake


def test_the_checks_catch_what_they_describe(tmp_path: Path) -> None:
    """Each rule fails on a backend that breaks it (the interface before issue 37 had all three faults)."""
    wide = "\n".join(f"    def m{i}(self) -> None:\n        self.x = {i}\n" for i in range(MAX_PUBLIC + 1))
    parts = "".join(f"class {name}(ABC):\n    @abstractmethod\n    def f(self) -> None: ...\n" for name in PARTS)
    bad = tmp_path / "base.py"
    bad.write_text(f"""from abc import ABC, abstractmethod
class Backend(ABC):
{wide}
    def read_log(self, pod: str) -> str:
        raise NotImplementedError
    def gpu_count(self) -> int | None:
        return None
    def gpu_node_hosts(self) -> dict:
        return {{}}
{parts}
class Annotator2(ABC):
    def annotate(self) -> float:
        return 0.0
""".replace("class Annotator(ABC):\n    @abstractmethod\n", "class Annotator(ABC):\n"), encoding="utf-8")
    found = backend_violations(bad)
    assert any("public members" in f for f in found)
    assert "Backend.read_log raises NotImplementedError" in found
    assert any(f.startswith("Backend.gpu_count is a default") for f in found)
    assert any(f.startswith("Backend.gpu_node_hosts is a default") for f in found)
    assert "Annotator.f is not abstract (a part is there whole, or None)" in found
    big = tmp_path / "big.py"
    big.write_text("class K8sBackend:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_METHODS + 1)),
                   encoding="utf-8")
    (tmp_path / "small.py").write_text("class Small:\n    def m(self): ...\n", encoding="utf-8")
    assert large_classes([big, tmp_path / "small.py"]) == [
        f"big.py: K8sBackend has {MAX_METHODS + 1} methods (at most {MAX_METHODS})"]
