"""``invoke judge`` without ``--apply``: what a stored run's verdicts would be with other thresholds (a what-if).

Each judged case of the run is judged again on a copy of its evidence in a temporary directory, from its original
parameters (``result.original.json`` when an earlier ``--apply`` kept one) with the overrides on top, exactly as
``--apply`` (:func:`xpushare.engine.stored_run.rejudge`) does. Nothing of the run changes: no ``result.json``, no
run.json entry, no report, no plot, so ``invoke runs`` lists the run as before. ``--apply`` is the one way to store
a re-judgment (beside the run's own verdicts). docs/verdicts.md "Re-judging a stored run".
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from xpushare.cases import REGISTRY
from xpushare.engine.lifecycle import judge_case
from xpushare.engine.plan import check_overrides
from xpushare.engine.run import exit_status_for
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import run_lock, run_store, summaries
from xpushare.report.output import plain, render

__all__ = ["judged_again", "whatif"]


def judged_again(stored: CaseRecord) -> bool:
    """Whether a re-judgment judges this stored record again: a case with a judgment that ended PASS, FAIL or
    ERROR on its evidence, run once. SKIP, INTERRUPTED, a harness error and a ``--repeat`` verdict over several
    attempts keep their status (the same rule as :func:`xpushare.engine.stored_run.rejudge`)."""
    case = REGISTRY.get(stored.case_id)
    if case is None or case.judge is None or stored.status in ("SKIP", "INTERRUPTED") or stored.error:
        return False
    return len(stored.verdicts or []) <= 1


def whatif(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout,
           fmt: str = "table") -> ExitStatus:
    """Re-judge stored run ``run_id`` with ``overrides`` (``name=value``) and print the outcome; store nothing.

    Returns the exit status the run would have with those verdicts (0, or 1 when a case would be FAIL, ERROR ...).
    ``fmt`` table: one line per re-judged case (``[xpushare] PERF-011 FAIL (was PASS)  summary``) then a closing
    line with the counts of changes, on ``out``. json or yaml: those lines on stderr, then one record alone on
    ``out``: ``{"run_id", "applied": false, "overrides", "exit_status", "counts", "release_ready",
    "release_decision", "cases": [{"cluster", "suite", "case_id", "status", "summary", "stored_status"}], "changes":
    [{"cluster", "case_id", "before", "after"}]}``.

    Raises:
        UsageError: no such run, a bad override; :class:`~xpushare.model.errors.StoredRunDamaged` for a run.json
        that cannot be read.
    """
    try:
        run_dir = run_store.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # a live run's records are still being written: what it would be is not known yet either
    run_lock.refuse_live(run_dir, what="it is not re-judged", force_hint=False)
    values = parse_overrides(overrides)
    meta = run_store.read_run_meta(run_dir) or {}
    results = run_store.load_results(run_dir)
    check_overrides([REGISTRY[r.case_id] for r in results if r.case_id in REGISTRY], values)
    lines = out if fmt == "table" else sys.stderr
    outcome: list[CaseRecord] = []
    changes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="xpushare-whatif-") as scratch:
        for record in results:
            if not judged_again(record):
                outcome.append(record)
                continue
            case_dir = run_store.case_dir(run_dir, record.cluster, record.suite, record.case_id)
            original = case_dir / run_store.ORIGINAL_RESULT_FILE
            first = run_store.load_one_result(run_dir, original) if original.is_file() else record
            params = first.replay_params or record.replay_params
            params.update({k: v for k, v in values.items() if k in params})
            copy = Path(scratch) / record.cluster / record.suite / record.case_id
            shutil.copytree(case_dir, copy, symlinks=True)
            verdict = judge_case(REGISTRY[record.case_id], copy, params, record.mode)
            after = verdict.status.value
            outcome.append(record.replace(status=after, summary=verdict.summary,
                                          thresholds=plain(verdict.thresholds)))
            change = "" if after == record.status else f" (was {record.status})"
            if change:
                changes.append({"cluster": record.cluster, "case_id": record.case_id, "before": record.status,
                                "after": after})
            print(f"[xpushare] {record.case_id} {after}{change}  {verdict.summary}", file=lines)
    status = exit_status_for(outcome, bool(meta.get("interrupted")))
    decision = summaries.decision_of_run(outcome, meta)
    given = ", ".join(f"{k}={v}" for k, v in values.items()) or "the stored parameters"
    print(f"[xpushare] what-if with {given}: {len(changes)} verdict change(s), exit status {int(status)}, "
          f"release_ready {decision.label}; nothing stored (--apply stores this re-judgment)", file=lines)
    if fmt != "table":
        stored_status = {(r.cluster, r.case_id): r.status for r in results}
        record_out = {
            "run_id": str(meta.get("run_id") or run_dir.parent.name), "applied": False, "overrides": plain(values),
            "exit_status": int(status), "counts": summaries.counts(outcome), "release_ready": decision.ready,
            "release_decision": decision.label,
            "cases": [{"cluster": r.cluster, "suite": r.suite, "case_id": r.case_id, "status": r.status,
                       "summary": r.summary, "stored_status": stored_status.get((r.cluster, r.case_id))}
                      for r in outcome],
            "changes": changes,
        }
        print(render(record_out, fmt), file=out)
    return status
