"""Expected case durations from the stored runs: how long the same case took last time on the same cluster.

A case's duration depends on the GPU, the sizes and the SUT far more than on anything the tool could compute
beforehand, so the estimate is what was measured: the ``duration_s`` of the newest stored ``result.json`` of
the same cluster, suite and case that ended PASS or FAIL (a measurement that ran to its end; SKIP, ERROR and
INTERRUPTED say nothing about the length). Written into each case's ``plan.json`` at its start
(``expected_duration_s``, ``expected_duration_basis``) and shown by ``--dry-run``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from xpushare.report import artifacts

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
        run_ids = artifacts.stored_run_ids(root)
    except (OSError, ValueError):
        return None
    for run_id in reversed(run_ids[-MAX_RUNS:]):
        if run_id == exclude_run:
            continue
        try:
            path = artifacts.case_dir(artifacts.run_dir(root, run_id), cluster, suite, case_id) / "result.json"
            record = json.loads(path.read_text(encoding="utf-8"))
            seconds = float(record["duration_s"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if record.get("status") in ("PASS", "FAIL") and seconds > 0:
            return Expected(round(seconds, 1), f"run {run_id} ({record['status']})")
    return None
