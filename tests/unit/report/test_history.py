"""Expected case durations from stored runs (report/history.py)."""

from __future__ import annotations

import json
from pathlib import Path

from xpushare.report import history, run_store


def store(root: Path, run_id: str, started: str, status: str, seconds: float, case: str = "FUNC-001") -> None:
    run_dir = run_store.run_dir(root, run_id)
    case_dir = run_store.case_dir(run_dir, "c1", "functional", case)
    case_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "started": started}))
    (case_dir / "result.json").write_text(json.dumps({"status": status, "duration_s": seconds}))


def test_the_newest_finished_measurement_is_the_estimate(tmp_path: Path) -> None:
    store(tmp_path, "old", "2026-01-01T00:00:00+00:00", "PASS", 100.0)
    store(tmp_path, "mid", "2026-01-02T00:00:00+00:00", "FAIL", 80.0)
    store(tmp_path, "new", "2026-01-03T00:00:00+00:00", "ERROR", 3.0)  # an ERROR says nothing of the length
    got = history.expected_duration(tmp_path, "c1", "functional", "FUNC-001")
    assert got == history.Expected(80.0, "run mid (FAIL)")
    assert history.expected_duration(tmp_path, "c1", "functional", "FUNC-001", exclude_run="mid") == \
        history.Expected(100.0, "run old (PASS)")


def test_no_earlier_run_no_estimate(tmp_path: Path) -> None:
    assert history.expected_duration(tmp_path, "c1", "functional", "FUNC-001") is None
    store(tmp_path, "r1", "2026-01-01T00:00:00+00:00", "PASS", 10.0, case="FUNC-002")
    assert history.expected_duration(tmp_path, "c1", "functional", "FUNC-001") is None
    assert history.expected_duration(tmp_path, "c2", "functional", "FUNC-002") is None


def test_a_broken_result_is_passed_over(tmp_path: Path) -> None:
    store(tmp_path, "good", "2026-01-01T00:00:00+00:00", "PASS", 42.0)
    store(tmp_path, "bad", "2026-01-02T00:00:00+00:00", "PASS", 1.0)
    bad = run_store.case_dir(run_store.run_dir(tmp_path, "bad"), "c1", "functional", "FUNC-001") / "result.json"
    bad.write_text('{"status": "PASS", "duration_')
    got = history.expected_duration(tmp_path, "c1", "functional", "FUNC-001")
    assert got == history.Expected(42.0, "run good (PASS)")
