"""Stored runs: ``--run-id last``, ``invoke runs`` and ``invoke diff`` (verdict changes, metric deltas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.model.case_record import CaseRecord
from xpushare.report import run_store
from xpushare.report.runs import NO_CASES, diff_results, flat_numbers, list_runs

ROOT = REPO_ROOT


def store(root: Path, run_id: str, started: str | None, cases: list[dict[str, Any]], cluster: str = "c1") -> Path:
    run_dir = run_store.run_dir(root, run_id)
    run_dir.mkdir(parents=True)
    if started is not None:
        run_store.write_run_meta(run_dir, {"run_id": run_id, "clusters": [cluster], "started": started,
                                           "exit_status": 1, "interrupted": False})
    for case in cases:
        suite = "performance" if case["case_id"].startswith("PERF") else "functional"
        record = {"run_id": run_id, "cluster": cluster, "suite": suite, "summary": "", **case}
        run_store.write_result(run_store.case_dir(run_dir, cluster, suite, case["case_id"]), record)
    return run_dir


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args], cwd=ROOT, timeout=120)


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    # "b" started later although its id sorts first: last follows run.json, not the name
    store(tmp_path, "zz-a", "2026-01-01T10:00:00+00:00", [
        {"case_id": "FUNC-001", "status": "PASS", "metrics": {"runtime_s": 10.0}},
        {"case_id": "FUNC-002", "status": "PASS", "metrics": {"overlap_ratio": 0.9, "ok": True}},
        {"case_id": "PERF-011", "status": "FAIL", "metrics": {"ratios": {"25": {"error": 0.30}}, "q": [1, 2]}},
    ])
    store(tmp_path, "b", "2026-01-02T10:00:00+00:00", [
        {"case_id": "FUNC-001", "status": "PASS", "metrics": {"runtime_s": 12.5}},
        {"case_id": "FUNC-002", "status": "FAIL", "metrics": {"overlap_ratio": 0.9, "ok": False}},
        {"case_id": "PERF-011", "status": "PASS", "metrics": {"ratios": {"25": {"error": 0.02}}, "q": [1, 3]}},
        {"case_id": "FUNC-004", "status": "SKIP"},
    ])
    return tmp_path


def test_last_is_the_latest_started_run(two_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert run_store.stored_run_ids(two_runs) == ["zz-a", "b"]
    assert run_store.resolve_run_id(two_runs, "last") == "b"
    assert run_store.stored_run_dir(two_runs, "last") == run_store.run_dir(two_runs, "b")
    assert run_store.resolve_run_id(two_runs, "zz-a") == "zz-a"
    with pytest.raises(ValueError, match="no run stored"):
        run_store.resolve_run_id(tmp_path_factory.mktemp("empty"), "last")
    with pytest.raises(ValueError, match="invalid run id"):
        run_store.resolve_run_id(two_runs, "../x")


def test_list_runs_counts_and_overall(two_runs: Path) -> None:
    store(two_runs, "c-empty", None, [])
    runs = {r.run_id: r for r in list_runs(two_runs)}
    # the overall column is the release decision, never a verdict (docs/release.md)
    assert runs["zz-a"].overall == "NO" and runs["zz-a"].counts["PASS"] == 2 and runs["zz-a"].counts["FAIL"] == 1
    assert runs["zz-a"].verdicts == "FAIL" and runs["zz-a"].exit_status == 1
    assert runs["b"].overall == "NO" and runs["b"].counts["SKIP"] == 1
    assert runs["b"].suites == ("functional", "performance") and runs["b"].clusters == ("c1",)
    assert runs["c-empty"].overall == NO_CASES and runs["c-empty"].started is None
    assert not runs["c-empty"].started_cases and runs["b"].started_cases


def test_diff_reports_verdict_changes_and_metric_deltas(two_runs: Path) -> None:
    a = run_store.load_results(run_store.run_dir(two_runs, "zz-a"))
    b = run_store.load_results(run_store.run_dir(two_runs, "b"))
    d = diff_results(a, b, a_id="zz-a", b_id="b")
    assert [(v.case, v.before, v.after) for v in d.verdict_changes] == [
        ("functional/FUNC-002", "PASS", "FAIL"), ("performance/PERF-011", "FAIL", "PASS")]
    assert d.unchanged == 1 and d.only_in_b == ["functional/FUNC-004"] and d.only_in_a == []  # not a change
    deltas = {(m.case, m.metric): m for m in d.metric_deltas}
    assert set(deltas) == {("functional/FUNC-001", "runtime_s"), ("performance/PERF-011", "ratios.25.error"),
                           ("performance/PERF-011", "q.1")}  # bools and equal numbers are not deltas
    rt = deltas[("functional/FUNC-001", "runtime_s")]
    assert (rt.before, rt.after, rt.delta, rt.relative) == (10.0, 12.5, 2.5, 0.25)
    assert diff_results(a, a).verdict_changes == [] and diff_results(a, a).metric_deltas == []


def test_diff_matches_single_cluster_runs_across_clusters(tmp_path: Path) -> None:
    a = [CaseRecord.from_json({"cluster": "c1", "suite": "functional", "case_id": "FUNC-001", "status": "PASS"})]
    b = [CaseRecord.from_json({"cluster": "c2", "suite": "functional", "case_id": "FUNC-001", "status": "FAIL"})]
    assert [(v.case, v.before, v.after) for v in diff_results(a, b).verdict_changes] == [
        ("functional/FUNC-001", "PASS", "FAIL")]
    both = [*a, b[0].replace(status="PASS")]
    changes = diff_results(both, b).verdict_changes
    assert [(v.case, v.before, v.after) for v in changes] == [("c2/functional/FUNC-001", "PASS", "FAIL")]
    assert diff_results(both, b).only_in_a == ["c1/functional/FUNC-001"]


def test_flat_numbers_skips_what_is_not_a_number() -> None:
    got = dict(flat_numbers({"a": 1, "b": True, "c": "x", "d": float("nan"), "e": [{"f": 2.5}], "g": None}))
    assert got == {"a": 1.0, "e.0.f": 2.5}


def test_runs_and_diff_tasks(two_runs: Path) -> None:
    r = str(two_runs)
    listed = invoke("runs", "--root", r, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert [x["run_id"] for x in json.loads(listed.stdout)] == ["zz-a", "b"]
    table = invoke("runs", "--root", r)
    assert table.returncode == 0 and "PASS 2 FAIL 1" in table.stdout and "run id" in table.stdout
    shown = invoke("diff", "zz-a", "last", "--root", r)
    assert shown.returncode == 0, shown.stderr
    assert "zz-a -> b: 2 verdict change(s), 1 case(s) unchanged, 3 metric change(s)" in shown.stdout
    assert "+25.0%" in shown.stdout and "(absent)" not in shown.stdout
    assert "not selected by zz-a (1 case(s) only in b): functional/FUNC-004" in shown.stdout
    as_json = json.loads(invoke("diff", "zz-a", "b", "--root", r, "--output", "json").stdout)
    assert as_json["a"] == "zz-a" and len(as_json["verdict_changes"]) == 2 and as_json["only_in_b"]


def test_runs_shows_the_selection_and_hides_runs_without_a_case(two_runs: Path) -> None:
    store(two_runs, "refused", "2026-01-03T10:00:00+00:00", [])
    meta = run_store.read_run_meta(run_store.run_dir(two_runs, "b")) or {}
    run_store.write_run_meta(run_store.run_dir(two_runs, "b"), {**meta, "selection": "cases=FUNC-001,FUNC-004"})
    table = invoke("runs", "--root", str(two_runs))
    assert table.returncode == 0 and "refused" not in table.stdout and "cases=FUNC-001,FUNC-004" in table.stdout
    assert "(1 run(s) without any case result not shown; --all shows them)" in table.stdout
    assert "refused" in invoke("runs", "--root", str(two_runs), "--all").stdout


@pytest.mark.parametrize("args", [
    ["diff", "zz-a", "never-ran"],
    ["diff", "../x", "b"],
    ["runs", "--output", "xml"],
    ["diff", "zz-a", "b", "--output", "xml"],
    ["report", "--run-id", "never-ran"],
    ["func", "--cluster", "local", "--case", "FUNC-004", "--run-id", "last"],
])
def test_bad_input_is_one_line_and_exit_2(two_runs: Path, args: list[str]) -> None:
    proc = invoke(*args, "--root", str(two_runs))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr


def test_last_in_judge_report_and_resume(two_runs: Path) -> None:
    r = str(two_runs)
    report = invoke("report", "--run-id", "last", "--root", r)
    assert report.returncode == 0 and (run_store.run_dir(two_runs, "b") / "report.html").is_file(), report.stderr
    assert not (run_store.run_dir(two_runs, "zz-a") / "report.html").exists()
    judge = invoke("judge", "--run-id", "last", "--root", r)
    assert "FUNC-001" in judge.stdout and "Traceback" not in judge.stderr, judge.stderr
    resumed = invoke("func", "--cluster", "local", "--case", "FUNC-004", "--run-id", "last", "--resume", "--root", r)
    assert "run b on local" in resumed.stdout, resumed.stdout + resumed.stderr
    assert (run_store.run_dir(two_runs, "b") / "local" / "functional" / "FUNC-004" / "result.json").is_file()
