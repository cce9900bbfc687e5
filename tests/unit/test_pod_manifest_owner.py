"""docs/architecture.md "One renderer of pods": every Pod the tool creates is rendered by
``backends/k8s_manifests.py`` from ``data/manifests/pod.yaml``. No other module builds a Pod object (a dict literal,
``dict(kind="Pod")``, an assignment whose ``"kind"`` is ``"Pod"``, YAML text with ``kind: Pod``) or names a pod
template (``pod.yaml``, ``gpu-pod.yaml``). Comparing a parsed object's kind (``doc.get("kind") == "Pod"``) builds
nothing and is not counted.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import xpushare

PACKAGE = Path(xpushare.__file__).resolve().parent
OWNER = "xpushare.backends.k8s_manifests"
POD_TEMPLATES = ("pod.yaml", "gpu-pod.yaml")
#: A Pod written as YAML text (a template filled by text substitution).
POD_YAML = re.compile(r"^\s*kind:\s*['\"]?Pod['\"]?\s*$", re.MULTILINE)


def _trees() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "data" in rel.parts:  # the workloads run on the nodes, not in the tool
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        yield ".".join(parts), ast.parse(path.read_text(encoding="utf-8"))


def _is_pod(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "Pod"


def pod_builds(tree: ast.Module) -> list[str]:
    """Where a module builds a Pod object or names a pod template, as ``"<line>: <what>"``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "kind" and _is_pod(v)
                                              for k, v in zip(node.keys, node.values, strict=True)):
            found.append((node.lineno, "{'kind': 'Pod'}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" \
                and any(kw.arg == "kind" and _is_pod(kw.value) for kw in node.keywords):
            found.append((node.lineno, "dict(kind='Pod')"))
        elif isinstance(node, ast.Assign) and _is_pod(node.value) and any(
                isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "kind"
                for t in node.targets):
            found.append((node.lineno, "[...]['kind'] = 'Pod'"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in POD_TEMPLATES:
            found.append((node.lineno, f"'{node.value}'"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and POD_YAML.search(node.value):
            found.append((node.lineno, "'kind: Pod' in YAML text"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_pods_are_rendered_in_one_place() -> None:
    found = {name: hits for name, tree in _trees() if name != OWNER
             and (hits := pod_builds(tree))}
    assert not found, f"a Pod built outside {OWNER} (describe it as a PodManifest and render it there): {found}"
    owner = dict(_trees())[OWNER]
    assert pod_builds(owner), f"{OWNER} no longer renders pod.yaml: update this rule and docs/architecture.md"


def test_the_pod_check_can_fail() -> None:
    tree = ast.parse("doc = {'apiVersion': 'v1', 'kind': 'Pod'}\nd = dict(kind='Pod')\nx['kind'] = 'Pod'\n"
                     "load('gpu-pod.yaml')\nif doc.get('kind') == 'Pod': pass\ny = {'kind': 'Job'}\n"
                     "'''pod.yaml in a docstring'''\ntext = 'apiVersion: v1\\nkind: Pod\\n'\n")
    assert pod_builds(tree) == ["1: {'kind': 'Pod'}", "2: dict(kind='Pod')", "3: [...]['kind'] = 'Pod'",
                                "4: 'gpu-pod.yaml'", "8: 'kind: Pod' in YAML text"]
