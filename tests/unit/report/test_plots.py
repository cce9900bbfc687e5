"""Plots (xpushare/report/plots.py): PNG files in the case dir, linked from run-report.md; without matplotlib a note,
never a crash."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from xpushare.cases import performance
from xpushare.evidence.store import Evidence
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord, write_pod_records
from xpushare.report import build, plots, run_store

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 1000


def test_runtime_vs_quota_png(tmp_path: Path) -> None:
    made = plots.runtime_vs_quota(tmp_path / "a" / "rq.png", baseline_s=10.0,
                                  runtimes={25: 41.0, 50: 19.5, 75: None}, tolerance=0.08)
    assert made.path == tmp_path / "a" / "rq.png" and made.note == ""
    assert is_png(made.path)


def test_throughput_timeline_png_and_empty_series(tmp_path: Path) -> None:
    made = plots.throughput_timeline(tmp_path / "tp.png", series=[(100.0 + i, 25.0 if i < 5 else 75.0)
                                                                  for i in range(10)],
                                     markers=[(104.5, "annotate 25%→75%")])
    assert made.path is not None and is_png(made.path)
    empty = plots.throughput_timeline(tmp_path / "none.png", series=[])
    assert empty.path is None and "no throughput" in empty.note and not (tmp_path / "none.png").exists()


def test_scale_ladder_png(tmp_path: Path) -> None:
    steps = [{"n": n, "aggregate_runs_per_s": 0.02 * min(n, 4), "per_pod_runs_per_s": {f"p{i}": 0.08 / max(n, 4)
                                                                                       for i in range(n)}}
             for n in (2, 4, 8)]
    made = plots.scale_ladder(tmp_path / "ladder.png", steps=steps, cap=8)
    assert made.path is not None and is_png(made.path)


def test_missing_matplotlib_gives_a_note_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kw: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    made = plots.runtime_vs_quota(tmp_path / "rq.png", baseline_s=1.0, runtimes={50: 2.0})
    assert made.path is None and "matplotlib not installed" in made.note
    assert not (tmp_path / "rq.png").exists()


def test_a_drawing_error_is_a_note(tmp_path: Path) -> None:
    made = plots.scale_ladder(tmp_path / "bad.png", steps=[{"n": "x"}])
    assert made.path is None and "not drawn" in made.note


def _case(tmp_path: Path) -> Path:
    run_dir = run_store.run_dir(tmp_path, "p1")
    case_dir = run_store.case_dir(run_dir, "lab", "performance", "PERF-011")
    (case_dir / "pods").mkdir(parents=True)
    names = ["base", "q25", "q50", "q75"]
    write_pod_records(case_dir, [WorkloadRecord(n, "Succeeded", 0, "n1", "GPU-a", 0.0, 1.0) for n in names])
    for n, rt in zip(names, (100.0, 401.0, 199.0, 134.0), strict=True):
        (case_dir / "pods" / f"{n}.log").write_text(f"PASS\n--- {rt} seconds ---\n")
    plan = {"baseline_pods": ["base"], "quota_pods": {"25": "q25", "50": "q50", "75": "q75"}}
    (case_dir / "plan.json").write_text(json.dumps(plan))
    return case_dir


def test_case_judgment_draws_the_plot_and_the_report_links_it(tmp_path: Path) -> None:
    case_dir = _case(tmp_path)
    th = {**performance.COMMON, "perf_quota_tolerance": 0.08}
    v = performance._judge011(Evidence.load(case_dir), th, json.loads((case_dir / "plan.json").read_text()))
    assert v.status is Status.PASS, v.summary
    assert "runtime_vs_quota.png" in v.evidence and is_png(case_dir / "runtime_vs_quota.png")
    record = {"run_id": "p1", "cluster": "lab", "suite": "performance", "case_id": "PERF-011", "status": "PASS",
              "summary": v.summary, "evidence": v.evidence}
    run_store.write_result(case_dir, record)
    paths = build.build(run_store.run_dir(tmp_path, "p1"))
    text = paths.markdown.read_text()
    assert "lab/performance/PERF-011/runtime_vs_quota.png" in text


def test_case_judgment_without_matplotlib_notes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case_dir = _case(tmp_path)
    monkeypatch.setattr(plots, "_figure", lambda: "matplotlib not installed (test)")
    th = {**performance.COMMON, "perf_quota_tolerance": 0.08}
    v = performance._judge011(Evidence.load(case_dir), th, json.loads((case_dir / "plan.json").read_text()))
    assert v.status is Status.PASS and v.metrics["plot_notes"] == ["matplotlib not installed (test)"]
    assert not (case_dir / "runtime_vs_quota.png").exists()


def test_report_draws_the_plots_a_run_made_without_matplotlib_lacks(tmp_path: Path) -> None:
    from xpushare.engine import stored_run

    case_dir = _case(tmp_path)
    th = {**performance.COMMON, "perf_quota_tolerance": 0.08}
    record = {"run_id": "p1", "cluster": "lab", "suite": "performance", "case_id": "PERF-011", "status": "PASS",
              "summary": "stored", "evidence": [], "thresholds": th, "mode": "k8s"}
    run_store.write_result(case_dir, record)
    assert not (case_dir / "runtime_vs_quota.png").exists()
    paths = stored_run.rebuild_reports("p1", root=tmp_path)
    assert is_png(case_dir / "runtime_vs_quota.png")
    assert "lab/performance/PERF-011/runtime_vs_quota.png" in paths.markdown.read_text()
    assert json.loads((case_dir / "result.json").read_text())["summary"] == "stored"  # the verdict is kept
