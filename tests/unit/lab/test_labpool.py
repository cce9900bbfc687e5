"""tests/lab/labpool.py: every job runs once, on one lab at a time; a failed job's exception is its outcome."""

from __future__ import annotations

import threading
import time

import pytest

from tests.lab.labpool import outcome_of, run_on_labs


def test_each_job_runs_once_and_a_lab_runs_one_job_at_a_time() -> None:
    busy: dict[str, int] = {"a": 0, "b": 0}
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def run(lab: str, job: int) -> str:
        with lock:
            busy[lab] += 1
            assert busy[lab] == 1
            seen.append((lab, job))
        time.sleep(0.01)
        with lock:
            busy[lab] -= 1
        return f"{lab}:{job}"

    outcomes = run_on_labs(["a", "b"], list(range(6)), run)
    assert sorted(outcomes) == list(range(6)) and sorted(j for _, j in seen) == list(range(6))
    assert all(outcome_of(outcomes, j).endswith(f":{j}") for j in range(6))


def test_a_failed_job_is_raised_by_the_test_that_asks_and_the_others_still_run() -> None:
    def run(lab: str, job: str) -> str:
        if job == "bad":
            pytest.fail("broken lab run")  # a BaseException, as pytest's outcomes are
        return job

    outcomes = run_on_labs(["a"], ["bad", "good"], run)
    assert outcome_of(outcomes, "good") == "good"
    with pytest.raises(pytest.fail.Exception, match="broken lab run"):
        outcome_of(outcomes, "bad")
