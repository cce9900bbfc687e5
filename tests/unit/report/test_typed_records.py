"""Reports consume :class:`~xpushare.model.case_record.CaseRecord` (docs/architecture.md): no function under
xpushare/report/ takes a case record as a string-keyed mapping.

An AST check over every report module: a parameter named like a case record (``record``, ``records``, ``result``,
``results``, ``case``, ``cases``, ``stored``, ``r``) must not be annotated with ``Mapping[str, Any]`` or
``dict[str, Any]``, nor with a name that stands for one (``Result = Mapping[str, Any]``), alone or inside another
type (``Sequence[...]``, ``list[...]``, ``X | None``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from xpushare.model.case_record import CaseRecord
from xpushare.report import run_store, summaries

REPORT = REPO_ROOT / "xpushare" / "report"
RECORD_NAMES = {"record", "records", "result", "results", "case", "cases", "stored", "r"}
UNTYPED = {"Mapping[str, Any]", "dict[str, Any]", "Dict[str, Any]", "MutableMapping[str, Any]"}


def _aliases(trees: dict[Path, ast.Module]) -> set[str]:
    """Module-level names bound to a string-keyed mapping type (``Result = Mapping[str, Any]``)."""
    names = set()
    for tree in trees.values():
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            if value is not None and any(u in ast.unparse(value) for u in UNTYPED):
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def untyped_record_parameters(root: Path) -> list[str]:
    """``module:line function(parameter: annotation)`` for each case-record parameter typed as a mapping."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(root.glob("*.py"))}
    aliases = _aliases(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                if arg.arg not in RECORD_NAMES or arg.annotation is None:
                    continue
                text = ast.unparse(arg.annotation)
                words = {n.id for n in ast.walk(arg.annotation) if isinstance(n, ast.Name)}
                if any(u in text for u in UNTYPED) or words & aliases:
                    name = getattr(node, "name", "<lambda>")
                    found.append(f"{path.name}:{node.lineno} {name}({arg.arg}: {text})")
    return found


def test_no_report_takes_a_case_record_as_a_string_keyed_mapping() -> None:
    assert untyped_record_parameters(REPORT) == []


def test_the_check_sees_a_mapping_parameter_and_an_alias_of_one(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from typing import Any, Mapping\nResult = Mapping[str, Any]\n"
                                   "def f(results: list[Result]) -> None: ...\n"
                                   "def g(x: int, *, record: dict[str, Any] | None = None) -> None: ...\n"
                                   "def h(meta: Mapping[str, Any]) -> None: ...\n")
    assert untyped_record_parameters(tmp_path) == ["a.py:3 f(results: list[Result])",
                                                   "a.py:4 g(record: dict[str, Any] | None)"]


@pytest.mark.parametrize("loader", ["load_results", "load_one_result"])
def test_stored_records_are_read_as_case_records_keeping_unknown_keys(tmp_path: Path, loader: str) -> None:
    case_dir = run_store.case_dir(tmp_path, "c1", "functional", "FUNC-001")
    case_dir.mkdir(parents=True)
    # a record of an older version (no params, premises, phases) with a key this version does not know
    (case_dir / "result.json").write_text('{"cluster": "c1", "suite": "functional", "case_id": "FUNC-001", '
                                          '"status": "PASS", "case_log_dir": "elsewhere", "future": [1]}')
    got = (run_store.load_results(tmp_path)[0] if loader == "load_results"
           else run_store.load_one_result(tmp_path, case_dir / "result.json"))
    assert isinstance(got, CaseRecord)
    assert got.case_log_dir == "c1/functional/FUNC-001"  # the reader's, never a stored one
    assert got.extra == {"future": [1]} and got.summary is None and got.params is None
    assert "case_log_dir" not in got.to_json() and got.to_json()["future"] == [1]


def test_repeat_fields_are_typed_and_stored_in_their_place() -> None:
    doc = {"cluster": "c1", "suite": "functional", "case_id": "FUNC-001", "status": "INTERMITTENT", "summary": "s",
           "repeat": 3, "verdicts": ["PASS", "FAIL", "FAIL"], "pass_count": 1,
           "attempts_run": [{"attempt": 1, "status": "PASS", "summary": "ok", "dir": "attempts/1"}], "other": 1}
    record = CaseRecord.from_json(doc)
    assert (record.repeat, record.verdicts, record.pass_count) == (3, ["PASS", "FAIL", "FAIL"], 1)
    assert record.extra == {"other": 1}
    assert list(record.to_json())[-5:] == ["repeat", "verdicts", "pass_count", "attempts_run", "other"]
    assert "attempts: 1 of 3 PASS (PASS, FAIL, FAIL)" in summaries.failure_text(record)
