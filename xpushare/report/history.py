"""Expected case durations from the stored runs: how long the same case took last time on the same cluster.

A case's duration depends on the GPU, the sizes and the SUT far more than on anything the tool could compute
beforehand, so the estimate is what was measured: the ``duration_s`` of the newest stored ``result.json`` of
the same cluster, suite and case that ended PASS or FAIL (a measurement that ran to its end; SKIP, ERROR and
INTERRUPTED say nothing about the length). Written into each case's ``plan.json`` at its start
(``expected_duration_s``, ``expected_duration_basis``) and shown by ``--dry-run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xpushare.report import run_store

#: How many of the newest stored runs are looked at (each is one stat per case).
MAX_RUNS = 50


@dataclass(frozen=True)
class Expected:
    """An expected duration: ``seconds`` and where it comes from (``basis``, e.g. ``run r7 (PASS)``)."""

    seconds: float
    basis: str


def expected_duration(root: Path, cluster: str, suite: str, case_id: str, *,
                      exclude_run: str | None = None) -> Expected | None:
    """The newest PASS/FAIL duration of the case on ``cluster`` among the runs stored under ``root``
    (``<root>/.tmplog``), skipping ``exclude_run`` (the run now going); None when there is none. Unreadable or
    malformed results are passed over; raises nothing."""
    try:
        run_ids = run_store.stored_run_ids(root)
    except (OSError, ValueError):
        return None
    for run_id in reversed(run_ids[-MAX_RUNS:]):
        if run_id == exclude_run:
            continue
        try:
            run_dir = run_store.run_dir(root, run_id)
            path = run_store.case_dir(run_dir, cluster, suite, case_id) / run_store.RESULT_FILE
        except ValueError:
            continue
        if not path.is_file():
            continue
        record = run_store.load_one_result(run_dir, path)  # a damaged one is an ERROR record: passed over
        seconds = record.duration_s
        if record.status in ("PASS", "FAIL") and seconds is not None and seconds > 0:
            return Expected(round(float(seconds), 1), f"run {run_id} ({record.status})")
    return None
