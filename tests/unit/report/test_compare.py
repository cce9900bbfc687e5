"""The cross-SUT comparison (report/compare, ``invoke compare``): system x isolation or functional case from stored
runs, with held / held-not-usable / bypassed and how far off, a workload's runtime; SKIP and ERROR never shown as
figures."""

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
from xpushare.report.compare import Comparison, compare_runs, plot
from xpushare.report.compare import compare_results as compare_records

MIB = 1 << 20
Q = 1024 * MIB


def compare_results(runs: list[tuple[str, list[dict[str, Any]]]]) -> Comparison:
    """:func:`xpushare.report.compare.compare_results` of stored records (as result.json holds them)."""
    return compare_records([(run_id, [CaseRecord.from_json(r) for r in records]) for run_id, records in runs])


def mem(case: str, path: str, sut: str, cluster: str, status: str, accepted: int | None, **m: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {"path": path, "quota_bytes": Q, "sut": sut, **m}
    if accepted is not None:
        metrics.update(accepted_bytes=accepted)
    return {"suite": "isolation", "cluster": cluster, "case_id": case, "status": status, "metrics": metrics,
            "summary": m.pop("summary", f"{case} {status}")}


RUN_X = [mem("ISO-001", "cuMemAlloc", "xpushare", "x1", "PASS", Q, outcome="held", held=True, usable=True),
         mem("ISO-002", "cuMemAllocManaged", "xpushare", "x1", "FAIL", 3 * Q, outcome="bypassed", held=False)]
RUN_M = [mem("ISO-001", "cuMemAlloc", "mps", "m1", "FAIL", 448 * MIB, outcome="held, not usable", held=True,
             usable=False),
         mem("ISO-002", "cuMemAllocManaged", "mps", "m1", "SKIP", None, summary="premise unmet: gpu: no GPU")]


def test_systems_are_columns_and_cells_keep_held_usable_and_bypassed_apart() -> None:
    c = compare_results([("r1", RUN_X), ("r2", RUN_M)])
    assert c.systems == ["xpushare", "mps"]
    assert c.rows() == [
        ["ISO-001", "cuMemAlloc", "held 1024 MiB PASS", "held, not usable 448 MiB (-56.2%) FAIL"],
        ["ISO-002", "cuMemAllocManaged", "bypassed 3072 MiB (+200.0%) FAIL", "SKIP"],
    ]
    md = c.markdown()
    assert md.startswith("| case | path | xpushare | mps |\n|---|---|---|---|\n")
    assert "- ISO-002 mps: SKIP: premise unmet: gpu: no GPU" in md
    doc = c.to_dict()
    assert doc["cells"]["ISO-001"]["mps"]["off"] == pytest.approx(448 / 1024 - 1)
    assert doc["cells"]["ISO-002"]["mps"]["held_mib"] is None


def test_one_system_on_two_runs_gets_two_columns_and_a_case_not_run_is_a_dot() -> None:
    c = compare_results([("r1", RUN_X), ("r3", RUN_X[:1])])
    assert c.systems == ["xpushare (x1, r1)", "xpushare (x1, r3)"]
    assert c.rows()[1][3] == "·"


def test_compute_cells_show_the_share_and_old_results_take_the_cluster_name() -> None:
    compute = {"suite": "isolation", "cluster": "h1", "case_id": "ISO-011", "status": "PASS",
               "metrics": {"path": "cuLaunchKernel", "core_limit": 50, "busy_events": 0.51, "ideal_share": 0.5,
                           "held": True}}
    c = compare_results([("r1", [compute])])
    assert c.systems == ["h1"] and c.rows() == [["ISO-011", "cuLaunchKernel", "share 0.510 (+2.0%) PASS"]]


def test_plot_needs_memory_figures() -> None:
    assert plot(compare_results([("r", [])]), Path("/nonexistent/x.png")).path is None


def _store(root: Path, run_id: str, records: list[dict[str, Any]]) -> None:
    for r in records:
        case_dir = run_store.run_dir(root, run_id) / r["cluster"] / "isolation" / r["case_id"]
        case_dir.mkdir(parents=True, exist_ok=True)
        run_store.write_result(case_dir, {**r, "title": r["case_id"], "checks": [], "thresholds": {},
                                          "evidence": [], "duration_s": 1.0})


def test_the_task_reads_stored_runs_and_writes_a_new_directory_only(tmp_path: Path) -> None:
    _store(tmp_path, "run-x", RUN_X)
    _store(tmp_path, "run-m", RUN_M)
    assert compare_runs(tmp_path, ["run-x", "run-m"]).systems == ["xpushare", "mps"]
    cmd = [sys.executable, "-m", "invoke", "compare", "--run-id", "run-x", "--run-id", "run-m", "--root",
           str(tmp_path), "--out", str(tmp_path / "cmp")]
    proc = run_tool(cmd, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "| ISO-001 | cuMemAlloc | held 1024 MiB PASS | held, not usable 448 MiB (-56.2%) FAIL |" in proc.stdout
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["systems"] == ["xpushare", "mps"]
    again = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and again.stderr.strip().startswith("error: --out") and "exists" in again.stderr
    bad = subprocess.run([*cmd[:4], "--root", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "error:" in bad.stderr


def func(case: str, cluster: str, status: str, **metrics: Any) -> dict[str, Any]:
    return {"suite": "functional", "cluster": cluster, "case_id": case, "status": status, "metrics": metrics,
            "summary": f"{case} {status}"}


def probe(accepted: int) -> dict[str, Any]:
    return {"quota_bytes": Q, "accepted_bytes": accepted, "step_bytes": 64 * MIB, "tolerance_bytes": 21474836,
            "path": "cuMemAlloc"}


def test_functional_cases_show_runtimes_and_the_static_quotas_probe() -> None:
    """FUNC-001 and FUNC-006 of xpushare and MPS on the H200 (docs/runs/2026-11-28-cross-sut, runs 5 and 6);
    FUNC-004 SKIPs on MPS (no oversubscription switch), and a verdict without figures is its status."""
    xp = [func("FUNC-001", "xpushare", "PASS", runtime_s=21.944), func("FUNC-004", "xpushare", "PASS", oom_markers=3),
          func("FUNC-006", "xpushare", "PASS", oom_markers=3, quota_probe=probe(Q))]
    mps = [func("FUNC-001", "mps", "PASS", runtime_s=21.71),
           {**func("FUNC-004", "mps", "SKIP"), "summary": "premise unmet: oversubscription: sut mps has no switch"},
           func("FUNC-006", "mps", "FAIL", quota_probe=probe(448 * MIB))]
    c = compare_results([("func-xpushare", xp), ("func-mps", mps), ("iso", RUN_X[:1])])
    assert c.systems == ["xpushare (xpushare, func-xpushare)", "mps", "xpushare (x1, iso)"]
    assert c.rows()[:3] == [
        ["FUNC-001", "-", "21.94 s PASS", "21.71 s PASS", "·"],
        ["FUNC-004", "-", "PASS", "SKIP", "·"],
        ["FUNC-006", "cuMemAlloc", "held 1024 MiB PASS", "held, not usable 448 MiB (-56.2%) FAIL", "·"],
    ]
    assert c.to_dict()["cells"]["FUNC-001"]["mps"]["runtime_s"] == pytest.approx(21.71)
    bypassed = compare_results([("r", [func("FUNC-007", "hami", "FAIL", quota_probe=probe(3 * Q))])])
    assert bypassed.rows() == [["FUNC-007", "cuMemAlloc", "bypassed 3072 MiB (+200.0%) FAIL"]]


def test_noisy_neighbour_cells_show_the_impact_per_slice_and_other_perf_cases_stay_out() -> None:
    def perf(case: str, sut: str, status: str, slices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"suite": "performance", "cluster": sut, "case_id": case, "status": status,
                "metrics": {"sut": sut, "path": "cuLaunchKernel", "slices": slices}, "summary": f"{case} {status}"}

    hami = perf("PERF-012", "hami-core", "FAIL", [{"slice": 25, "impact": -0.5}, {"slice": 75, "impact": -0.02}])
    mps = perf("PERF-012", "mps", "PASS", [{"slice": 25, "impact": 0.01}, {"slice": 75}])
    c = compare_results([("p1", [hami, perf("PERF-001", "hami-core", "PASS", [])]), ("p2", [mps])])
    assert c.rows() == [["PERF-012", "cuLaunchKernel", "impact 25 %: -50.0%, 75 %: -2.0% FAIL",
                         "impact 25 %: +1.0% PASS"]]
