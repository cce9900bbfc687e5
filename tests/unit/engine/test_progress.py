"""The progress of a run as a person follows it: expected total, per-case elapsed/expected/waiting, ticks."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.engine.progress import Progress, case_line, duration, expected_line
from xpushare.transport import activity

ROOT = REPO_ROOT


def test_duration_reads_as_a_person_writes_it() -> None:
    assert [duration(s) for s in (0.4, 42, 185, 7440)] == ["0s", "42s", "3m05s", "2h04m"]


def test_expected_line_sums_history_and_names_what_it_cannot_estimate() -> None:
    plan: list[dict[str, Any]] = [
        {"plan": "RUN", "expected_duration_s": 60.0}, {"plan": "RUN", "expected_duration_s": 70.0},
        {"plan": "RUN", "expected_duration_s": None}, {"plan": "SKIP", "expected_duration_s": None}]
    line = expected_line(plan)
    assert line.startswith("expected ~2m10s (2 case(s) from earlier runs") and "no estimate for 1 case(s)" in line
    assert "1 will SKIP" in line
    assert expected_line([{"plan": "RUN", "expected_duration_s": None}]).startswith("expected: unknown")
    assert expected_line([{"plan": "SKIP", "expected_duration_s": None}]) == "expected ~0s (1 will SKIP)"


def test_case_line_says_elapsed_expected_phase_and_what_it_waits_for() -> None:
    state = activity.Activity("act", "waiting for 3 pod(s) to finish: 1 Running, 2 Succeeded")
    line = case_line("FUNC-003", "Spread", 90, 120, state)
    assert line == ("FUNC-003 Spread: 1m30s of ~2m00s expected; act: waiting for 3 pod(s) to finish: "
                    "1 Running, 2 Succeeded")
    assert "over the ~1m00s expected" in case_line("X", "t", 90, 60, activity.Activity())
    assert "(no estimate)" in case_line("X", "t", 5, None, activity.Activity())


def test_a_running_case_prints_a_line_every_tick_in_plain_output() -> None:
    out = io.StringIO()
    progress = Progress(out, tick_s=0.05)
    done = threading.Event()
    with progress.case("FUNC-003", "Spread", 10.0, position="3/12"):
        activity.note(phase="act")
        activity.pods(["Running", "Succeeded"], count=2, until="terminal")
        time.sleep(0.3)
        done.set()
    progress.done("FUNC-003 PASS")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[xpushare] FUNC-003 Spread (3/12, expected ~10s) ..."
    ticks = [ln for ln in lines if "act: waiting for 2 pod(s) to finish: 1 Running, 1 Succeeded" in ln]
    assert len(ticks) >= 2, lines
    assert lines[-1] == "[xpushare] FUNC-003 PASS"


def test_a_note_outside_a_tracked_thread_goes_nowhere() -> None:
    activity.note(phase="act", waiting="x")  # no state: nothing raised


def test_a_run_with_output_json_prints_one_record_and_its_progress_on_stderr(tmp_path: Path) -> None:
    proc = run_tool([sys.executable, "-m", "invoke", "func", "--cluster", "local", "--case", "FUNC-009", "-o",
                     "json", "--root", str(tmp_path)], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["counts"]["SKIP"] == 1 and record["release_ready"] is False and record["release_reasons"]
    assert [c["case_id"] for c in record["cases"]] == ["FUNC-009"]
    assert "[xpushare] done: SKIP 1; release_ready: NO" in proc.stderr
    # the local cluster has no SUT (host mode, no sut_lib): NO whatever it selected, and the profile that decided
    assert record["release_decision"] == "NO" and "profile local=host" in proc.stderr
    assert record["release_profiles"][0].startswith("local: host (default for host mode")
    assert any("cluster local has no SUT" in r for r in record["release_reasons"])
