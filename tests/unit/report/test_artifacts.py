"""Run directory handling: names, result.json/analysis.txt writing, attempts, loading, run.json."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from xpushare.model.case_record import CaseRecord
from xpushare.model.verdict import Check, Status
from xpushare.report import run_store


def make_record(cluster: str = "c1", suite: str = "functional", case_id: str = "FUNC-001", **kw: Any) -> dict:
    """A complete result record as the engine writes it; keyword arguments override fields."""
    record = {
        "run_id": "r1",
        "cluster": cluster,
        "suite": suite,
        "case_id": case_id,
        "title": f"title of {case_id}",
        "mode": "k8s",
        "attempt": 1,
        "status": "PASS",
        "summary": "ok",
        "started": "2026-02-15T13:45:01+00:00",
        "ended": "2026-02-15T13:45:11+00:00",
        "duration_s": 10.0,
        "thresholds": {},
        "metrics": {},
        "checks": [],
        "evidence": [],
        "required": True,
        "operation": "",
        "sampling": "",
        "kubectl_calls": None,
        "error": None,
    }
    record.update(kw)
    return record


def case_record(cluster: str = "c1", suite: str = "functional", case_id: str = "FUNC-001", **kw: Any) -> CaseRecord:
    """:func:`make_record` as the reports take it: a :class:`CaseRecord`."""
    return CaseRecord.from_json(make_record(cluster, suite, case_id, **kw))


def put(run: Path, **kw: Any) -> Path:
    """Write a record into its case dir under ``run``; return the case dir."""
    rec = make_record(**kw)
    cdir = run_store.case_dir(run, rec["cluster"], rec["suite"], rec["case_id"])
    run_store.write_result(cdir, rec)
    return cdir


# --------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("good", ["20260215-134501", "a", "run.1_x-Y", "x" * 64, "..a", "a..b"])
def test_validate_run_id_accepts_safe_names(good: str) -> None:
    assert run_store.validate_run_id(good) == good


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "..", ".", "a b", "x" * 65, "a\\b", "/abs", "a\x00", "é", "a\n"])
def test_validate_run_id_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        run_store.validate_run_id(bad)


def test_run_dir_layout_and_traversal(tmp_path: Path) -> None:
    assert run_store.run_dir(tmp_path, "r1") == tmp_path / ".tmplog" / "r1" / "xpushare"
    with pytest.raises(ValueError):
        run_store.run_dir(tmp_path, "../x")


def test_stored_run_dir_needs_a_stored_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no run 'r1' under"):
        run_store.stored_run_dir(tmp_path, "r1")
    with pytest.raises(ValueError, match="invalid run id"):
        run_store.stored_run_dir(tmp_path, "../x")
    run_store.run_dir(tmp_path, "r1").mkdir(parents=True)
    assert run_store.stored_run_dir(tmp_path, "r1") == tmp_path / ".tmplog" / "r1" / "xpushare"


def test_case_dir_layout_and_rejects_unsafe_components(tmp_path: Path) -> None:
    assert run_store.case_dir(tmp_path, "c1", "metrics", "MET-003") == tmp_path / "c1" / "metrics" / "MET-003"
    for parts in (("..", "functional", "F"), ("c1", "a/b", "F"), ("c1", "functional", "../../etc")):
        with pytest.raises(ValueError):
            run_store.case_dir(tmp_path, *parts)


def test_new_run_id_format() -> None:
    # 2026-02-15 13:45:01 -> YYYYmmdd-HHMMSS
    run_id = run_store.new_run_id(datetime(2026, 2, 15, 13, 45, 1))
    assert run_id == "20260215-134501"
    assert run_store.validate_run_id(run_id) == run_id


# --------------------------------------------------------------------------------------------- write_result


def test_write_result_is_strict_utf8_json_with_indent(tmp_path: Path) -> None:
    check = Check("ratio", "runtime_30 > runtime_60", {"runtime_30": 20.5, "runtime_60": 11.0}, True)
    rec = make_record(
        status=Status.SKIP,
        summary="显存 not available",
        checks=[check],
        metrics={"nan_metric": math.nan, "inf_metric": math.inf, "ok": 1.5},
        evidence=[Path("pods") / "a.log"],
    )
    path = run_store.write_result(tmp_path / "case", rec)
    raw = path.read_bytes()
    assert "显存".encode() in raw  # UTF-8, not \\u escapes

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(raw.decode("utf-8"), parse_constant=no_constants)
    assert raw.decode().splitlines()[1].startswith('  "')  # indent 2
    assert data["status"] == "SKIP"  # stored as SKIP, never as PASS
    assert data["checks"] == [
        {
            "name": "ratio",
            "expression": "runtime_30 > runtime_60",
            "values": {"runtime_30": 20.5, "runtime_60": 11.0},
            "ok": True,
            "detail": "",
        }
    ]
    assert data["metrics"] == {"nan_metric": "NaN", "inf_metric": "Infinity", "ok": 1.5}
    assert data["evidence"] == ["pods/a.log"]


@pytest.mark.parametrize("status", ["OK", "SKIPPED", "pass", None, ""])
def test_write_result_rejects_unknown_status(tmp_path: Path, status: Any) -> None:
    with pytest.raises(ValueError):
        run_store.write_result(tmp_path, make_record(status=status))
    assert not (tmp_path / "result.json").exists()


def test_write_result_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cdir = tmp_path / "case"
    run_store.write_result(cdir, make_record(summary="first"))
    before = (cdir / "result.json").read_bytes()

    def broken_dump(obj: Any, fh: Any, **kw: Any) -> None:
        fh.write('{"run_id": "r1", "stat')  # a partial document, then the failure
        raise OSError("disk full")

    monkeypatch.setattr(run_store.json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        run_store.write_result(cdir, make_record(summary="second", status="FAIL"))
    assert (cdir / "result.json").read_bytes() == before
    assert sorted(p.name for p in cdir.iterdir()) == ["result.json"]  # no temp file left behind


# --------------------------------------------------------------------------------------------- analysis


def test_write_analysis_sections_and_judgment(tmp_path: Path) -> None:
    rec = make_record(
        status="FAIL",
        summary="quota not enforced",
        operation="created pods p30, p60 (workload W2)\nannotated p30 with compute=30",
        sampling="pods/p30.log, metrics_mid.txt",
        kubectl_calls=7,
        phases_s={"begin": 0.5, "act": 20.25, "harvest": 2.0, "cleanup": 1.0, "judge": 0.01},
        thresholds={"min_ratio": 1.2},
        metrics={"runtime_30": 20.0, "runtime_60": 25.25},
        checks=[
            Check(
                "ordering",
                "runtime_30 > runtime_60",
                {"runtime_30": 20.0, "runtime_60": 25.25},
                False,
                "30% ran faster",
            ),
            {"name": "health", "expression": "HTTP_CODE == 200", "values": {"HTTP_CODE": 200}, "ok": True},
            {"name": "dmon", "expression": "sm_util > 0", "values": {}, "ok": None, "detail": "dmon missing"},
        ],
        evidence=["pods/p30.log"],
    )
    text = run_store.write_analysis(tmp_path, CaseRecord.from_json(rec)).read_text(encoding="utf-8")
    lines = text.splitlines()
    order = ["Operation", "Sampling", "Judgment", "Thresholds", "Key metrics", "Conclusion"]
    positions = [lines.index(title) for title in order]
    assert positions == sorted(positions)
    assert "annotated p30 with compute=30" in text
    assert "kubectl calls: 7" in text
    assert "phases: begin 0.5 s, act 20.25 s, harvest 2 s, cleanup 1 s, judge 0.01 s" in text
    assert "[FAIL] ordering: runtime_30 > runtime_60" in text
    assert "runtime_30 = 20" in text and "runtime_60 = 25.25" in text
    assert "[ok]   health: HTTP_CODE == 200" in text
    assert "[n.a.] dmon: sm_util > 0" in text
    assert "min_ratio = 1.2" in text
    conclusion = "\n".join(lines[lines.index("Conclusion") :])
    assert "FAIL: quota not enforced" in conclusion


def test_analysis_makes_control_characters_visible(tmp_path: Path) -> None:
    text = run_store.render_analysis(case_record(summary="red \x1b[31mtext"))
    assert "\x1b" not in text and "\\x1b[31m" in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12.0, "12"),
        (0.5, "0.5"),
        (2.0 / 3.0, "0.6667"),
        (1234.56789, "1234.568"),
        (7, "7"),
        (True, "true"),
        (None, "n/a"),
    ],
)
def test_format_value(value: Any, text: str) -> None:
    assert run_store.format_value(value) == text


# --------------------------------------------------------------------------------------------- attempts


def test_archive_previous_attempt_nothing_to_do(tmp_path: Path) -> None:
    assert run_store.archive_previous_attempt(tmp_path / "missing") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_store.archive_previous_attempt(empty) is None
    (empty / "attempts" / "1").mkdir(parents=True)
    assert run_store.archive_previous_attempt(empty) is None  # only attempts/ there


def test_archive_previous_attempt_moves_and_numbers(tmp_path: Path) -> None:
    cdir = put(tmp_path, status="FAIL", summary="first try")
    (cdir / "pods").mkdir()
    (cdir / "pods" / "a.log").write_text("log 1")
    assert run_store.archive_previous_attempt(cdir) == 1
    assert [p.name for p in cdir.iterdir()] == ["attempts"]
    first = cdir / "attempts" / "1"
    assert json.loads((first / "result.json").read_text())["summary"] == "first try"
    assert (first / "pods" / "a.log").read_text() == "log 1"

    run_store.write_result(cdir, make_record(status="ERROR", summary="second try"))
    assert run_store.archive_previous_attempt(cdir) == 2
    assert json.loads((cdir / "attempts" / "2" / "result.json").read_text())["summary"] == "second try"
    assert (first / "pods" / "a.log").exists()  # earlier attempt untouched

    (cdir / "attempts" / "9").mkdir()  # numbering continues after the highest one
    (cdir / "x.txt").write_text("x")
    assert run_store.archive_previous_attempt(cdir) == 10


# --------------------------------------------------------------------------------------------- loading


def test_load_results_reads_latest_attempt_only(tmp_path: Path) -> None:
    cdir = put(tmp_path, status="FAIL", summary="old")
    run_store.archive_previous_attempt(cdir)
    put(tmp_path, status="PASS", summary="new", attempt=2)
    results = run_store.load_results(tmp_path)
    assert [(r.status, r.summary, r.attempt) for r in results] == [("PASS", "new", 2)]
    assert results[0].case_log_dir == "c1/functional/FUNC-001"
    assert run_store.latest_statuses(tmp_path) == {("c1", "functional", "FUNC-001"): Status.PASS}


def test_load_results_order(tmp_path: Path) -> None:
    for cluster, suite, case_id in [
        ("c2", "functional", "FUNC-001"),
        ("c1", "stability", "STAB-001"),
        ("c1", "combination", "COMBO-001"),
        ("c1", "functional", "FUNC-010"),
        ("c1", "functional", "FUNC-002"),
        ("c1", "metrics", "MET-001"),
        ("c1", "performance", "PERF-001"),
    ]:
        put(tmp_path, cluster=cluster, suite=suite, case_id=case_id)
    got = [(r.cluster, r.suite, r.case_id) for r in run_store.load_results(tmp_path)]
    # Suite order is the seed's execution order (functional before combination), not alphabetical.
    assert got == [
        ("c1", "functional", "FUNC-002"),
        ("c1", "functional", "FUNC-010"),
        ("c1", "combination", "COMBO-001"),
        ("c1", "performance", "PERF-001"),
        ("c1", "metrics", "MET-001"),
        ("c1", "stability", "STAB-001"),
        ("c2", "functional", "FUNC-001"),
    ]


def test_load_results_reports_damaged_files_as_error(tmp_path: Path) -> None:
    broken = tmp_path / "c1" / "functional" / "FUNC-001"
    broken.mkdir(parents=True)
    (broken / "result.json").write_text('{"status": "PA')
    odd = tmp_path / "c1" / "functional" / "FUNC-002"
    odd.mkdir(parents=True)
    (odd / "result.json").write_text(json.dumps(make_record(case_id="FUNC-002", status="SKIPPED")))
    results = run_store.load_results(tmp_path)
    assert [(r.case_id, r.status) for r in results] == [("FUNC-001", "ERROR"), ("FUNC-002", "ERROR")]
    assert "unreadable result.json" in str(results[0].summary)
    assert "SKIPPED" in str(results[1].summary)
    assert run_store.load_results(tmp_path / "nope") == []


# --------------------------------------------------------------------------------------------- run.json


def test_run_meta_round_trip(tmp_path: Path) -> None:
    assert run_store.read_run_meta(tmp_path) is None
    meta = {"run_id": "r1", "clusters": ["c1", "c2"], "interrupted": False, "argv": ["invoke", "func"]}
    run_store.write_run_meta(tmp_path, meta)
    back = run_store.read_run_meta(tmp_path)
    assert back is not None
    assert {k: back[k] for k in meta} == meta
    assert back["tool_version"]
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ValueError):
        run_store.read_run_meta(tmp_path)
