"""No module tests a cluster's mode string outside the backend factory and the inventory schema.

A cluster's ``mode`` (``k8s``, ``host``) is read in two places: :func:`xpushare.engine.backend_factory.make_backend`
(and its dry-run twin ``capabilities_of``) picks the backend by it, and :mod:`xpushare.inventory.schema`
validates it and answers :attr:`ClusterSpec.is_kubernetes` / :attr:`ClusterSpec.is_host` and
:func:`~xpushare.inventory.schema.is_kubernetes_mode` for a recorded mode. Everything else asks the cluster
object or the backend (a capability, a property, a method). The scan reads the AST of every module: a
comparison (``==``, ``!=``, ``in``, ``is``) or a ``match`` between an expression that names a mode and a mode
value (the literal ``"k8s"``/``"host"`` or ``MODE_K8S``/``MODE_HOST``) is a mode string test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import xpushare
from xpushare.inventory.schema import ClusterSpec

PACKAGE = Path(xpushare.__file__).resolve().parent
MODE_VALUES = frozenset({"k8s", "host"})
MODE_NAMES = frozenset({"MODE_K8S", "MODE_HOST"})
#: module (relative to the package) -> the functions allowed to test the mode (``*``: the whole module)
ALLOWED = {"inventory/schema.py": {"*"}, "engine/backend_factory.py": {"make_backend", "capabilities_of"}}


def _is_mode_value(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in MODE_VALUES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_mode_value(e) for e in node.elts)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name in MODE_NAMES


def _names_mode(node: ast.AST) -> bool:
    """The expression reads something called mode (``mode``, ``x.mode``, ``plan.get("mode")``, ``d["mode"]``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "mode" in sub.id.lower() and sub.id not in MODE_NAMES:
            return True
        if isinstance(sub, ast.Attribute) and "mode" in sub.attr.lower() and sub.attr not in MODE_NAMES:
            return True
        if isinstance(sub, ast.Constant) and sub.value == "mode":
            return True
    return False


def mode_tests(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, enclosing function)`` of every mode string test in a module's AST."""
    def visit(node: ast.AST, func: str) -> Iterator[tuple[int, str]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name if func == "" else func
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            values = [o for o in operands if _is_mode_value(o)]
            others = [o for o in operands if not _is_mode_value(o)]
            if values and any(_names_mode(o) for o in others):
                yield node.lineno, func
        if isinstance(node, ast.Match) and _names_mode(node.subject):
            for case in node.cases:
                if any(isinstance(p, ast.MatchValue) and _is_mode_value(p.value) for p in ast.walk(case.pattern)):
                    yield node.lineno, func
                    break
        for child in ast.iter_child_nodes(node):
            yield from visit(child, func)

    yield from visit(tree, "")


def offenders() -> list[str]:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        allowed = ALLOWED.get(rel, set())
        for line, func in mode_tests(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if "*" not in allowed and func not in allowed:
                found.append(f"xpushare/{rel}:{line} ({func or 'module level'})")
    return found


def test_no_mode_string_tests_outside_the_factory_and_the_schema() -> None:
    assert offenders() == [], "ask the ClusterSpec (is_kubernetes/is_host) or the backend instead"


def test_the_scan_finds_each_form_of_a_mode_test() -> None:
    source = '''
def f(cluster, plan, mode, backend):
    if cluster.mode == "k8s": pass
    if "host" != backend.mode: pass
    if plan.get("mode") in ("k8s", "x"): pass
    if mode is MODE_HOST: pass
    match cluster.mode:
        case "host": pass
    if cluster.is_kubernetes or role == "host" or mode == "ssh": pass
'''
    assert [line for line, _ in mode_tests(ast.parse(source))] == [3, 4, 5, 6, 7]


def test_the_factory_and_the_schema_do_test_the_mode() -> None:
    """The allowance is used: were the factory to stop reading the mode, the allow-list would be stale."""
    for rel, funcs in ALLOWED.items():
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        seen = {func for _, func in mode_tests(tree)}
        assert seen and ("*" in funcs or seen <= funcs), (rel, seen)


def test_kubernetes_operations_come_with_the_capability() -> None:
    """The Kubernetes part (a typed :class:`KubeAccess`) is there exactly when the backend has ``CAP_KUBERNETES``:
    the Kubernetes backend's parts have one (an object of its own, not the backend), the host backend's none; each
    backend's capabilities are those of its parts, and the dry run's (``capabilities_of``) the same."""
    from xpushare.backends.base import CAP_KUBERNETES, KubeAccess
    from xpushare.backends.host import HostBackend
    from xpushare.backends.k8s import K8sBackend
    from xpushare.engine.suite_run import capabilities_of
    from xpushare.inventory.schema import HostSpec, local_cluster

    k8s_cluster = ClusterSpec("k", "k8s", "xpushare", "cuda", None, None,
                              (HostSpec("m", ("master",), local=True), HostSpec("g", ("gpu",), local=True)))
    k8s = K8sBackend(k8s_cluster)
    assert isinstance(k8s.parts.kubernetes, KubeAccess) and not isinstance(k8s, KubeAccess)
    assert CAP_KUBERNETES in k8s.parts.capabilities and k8s.parts.capabilities == capabilities_of(k8s_cluster)
    host = HostBackend(local_cluster())
    assert host.parts.kubernetes is None and host.parts.annotations is None
    assert host.parts.capabilities == capabilities_of(local_cluster())


def test_kubectl_stays_inside_the_kubernetes_backend() -> None:
    """Callers ask :class:`KubeAccess` for what they need; none reads ``.kubectl`` off a backend (the
    Kubernetes backend's own modules, the legacy feature's backend subclass and transport aside)."""
    inside = ("backends/k8s", "transport/", "legacy/", "envcheck/", "metrics_check/probes.py", "inventory/")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(inside):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "kubectl"
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cluster", "spec"))):
                found.append(f"xpushare/{rel}:{node.lineno}")
    assert found == []
