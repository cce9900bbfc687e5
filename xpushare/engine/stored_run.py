"""A stored run judged again, offline: :func:`rejudge` (``invoke judge --apply``) with other parameters, and
:func:`rebuild_reports` (``invoke report``) with the plots a run lacks drawn first (:func:`draw_missing_plots`).
No cluster is touched; the run's own verdicts are never lost."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from xpushare.cases import REGISTRY
from xpushare.engine.lifecycle import judge_case, store, utc_now
from xpushare.engine.output_record import stored_result_record
from xpushare.engine.plan import check_overrides
from xpushare.engine.run import exit_status_for, write_meta
from xpushare.model import atomic_file
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import build, run_lock, run_store
from xpushare.report.output import plain, render

PLOTTED_SUITES = ("performance",)
"""Suites whose judgments draw plots (:mod:`xpushare.report.plots`) next to their evidence."""


def draw_missing_plots(run_dir: Path) -> list[str]:
    """Draw the plots a stored run lacks: each PASS/FAIL case of :data:`PLOTTED_SUITES` without a PNG in its case
    directory is judged again on its evidence with its stored parameters (the judgment draws them; the stored
    verdict is left as it is). Nothing when matplotlib is not installed. Returns the case ids drawn for."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return []
    drawn = []
    for record in run_store.load_results(run_dir):
        case = REGISTRY.get(record.case_id)
        if (case is None or case.judge is None or case.suite not in PLOTTED_SUITES
                or record.status not in ("PASS", "FAIL") or record.error):
            continue
        case_dir = run_store.case_dir(run_dir, record.cluster, record.suite, record.case_id)
        if any(case_dir.glob("*.png")):
            continue
        judge_case(case, case_dir, record.replay_params, record.mode)
        if any(case_dir.glob("*.png")):
            drawn.append(record.case_id)
    return drawn


def rebuild_reports(run_id: str, *, root: Path = Path("."), force: bool = False) -> build.ReportPaths:
    """``invoke report``: draw the plots a stored run lacks (:func:`draw_missing_plots`), then rebuild its summaries
    and reports from the stored records. Raises :class:`UsageError` for an unknown run, :class:`LeaseHeld` for a
    live run (:mod:`xpushare.report.run_lock`; it writes the same files) unless ``force``."""
    try:
        run_dir = run_store.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not force:
        run_lock.refuse_live(run_dir, what="its reports are written by the run itself at its end", force_hint=True)
    draw_missing_plots(run_dir)
    meta = run_store.read_run_meta(run_dir) or {}
    return build.build(run_dir, required=set(meta.get("required") or []) or None)


def rejudge(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout,
            fmt: str = "table") -> ExitStatus:
    """Re-judge a stored run with other parameters, offline (no cluster is touched), and rebuild reports.

    Cases that ended SKIP, ERROR (harness) or INTERRUPTED keep their status: there is no evidence to judge; a case
    run several times (``--repeat``) keeps its verdicts over its attempts. The
    run's own verdicts are never lost: the first re-judgment of a case keeps its ``result.json`` whole as
    ``result.original.json``; each re-judgment starts from those original parameters with this call's
    ``overrides`` (never from an earlier re-judgment's), is listed in the case's ``rejudgments`` (when, the
    overrides, the status before and after) and in run.json's ``rejudgments`` (when, the overrides, the exit
    status it gives), and every report says the verdicts were re-judged and with what. run.json's own
    ``exit_status`` stays the run's.

    ``fmt`` table: one line per re-judged case on ``out``. json or yaml: those lines on stderr, then one record alone
    on ``out``: :func:`stored_result_record` plus ``"overrides"`` (name -> value) and ``"changes"`` (``[{"cluster",
    "case_id", "before", "after"}]``, the cases whose status the re-judgment changed).

    Raises:
        UsageError: no such run, a bad override; :class:`~xpushare.model.errors.StoredRunDamaged` for a run.json
        that cannot be read; :class:`~xpushare.model.errors.LeaseHeld` for a live run (no ``--force``).
    """
    try:
        run_dir = run_store.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # its cases' records are still being written: a re-judgment now would race the run and lose one or the other
    run_lock.refuse_live(run_dir, what="it is not re-judged", force_hint=False)
    atomic_file.claim_tree(run_dir)  # no link planted in the stored run is written through
    values = parse_overrides(overrides)
    meta = run_store.read_run_meta(run_dir) or {}
    results = run_store.load_results(run_dir)
    check_overrides([REGISTRY[r.case_id] for r in results if r.case_id in REGISTRY], values)
    at = utc_now().isoformat()
    entry = {"at": at, "overrides": plain(values)}
    lines = out if fmt == "table" else sys.stderr
    changes: list[dict[str, Any]] = []
    for record in results:
        case = REGISTRY.get(record.case_id)
        if case is None or case.judge is None or record.status in ("SKIP", "INTERRUPTED") or record.error:
            continue
        if len(record.verdicts or []) > 1:  # --repeat: one verdict over several attempts' evidence, kept
            continue
        case_dir = run_store.case_dir(run_dir, record.cluster, record.suite, record.case_id)
        original = run_store.keep_original_result(case_dir)
        first = run_store.load_one_result(run_dir, original) if original else record
        params = first.replay_params or record.replay_params
        params.update({k: v for k, v in values.items() if k in params})
        verdict = judge_case(case, case_dir, params, record.mode)
        old = record.status
        history = [*(record.rejudgments or []),
                   {**entry, "status_before": old, "status": verdict.status.value, "original_status": first.status}]
        record = record.replace(
            status=verdict.status.value,
            summary=f"{run_store.rejudgment_label(history)}: {verdict.summary}",
            thresholds=plain(verdict.thresholds),
            params=plain(params),
            metrics=plain(verdict.metrics),
            checks=plain(verdict.to_dict()["checks"]),
            evidence=sorted(set(record.evidence) | set(verdict.evidence)),
            rejudged=at,
            rejudgments=history,
        )
        store(case_dir, record)
        change = "" if old == record.status else f" (was {old})"
        if change:
            changes.append({"cluster": record.cluster, "case_id": record.case_id, "before": old,
                            "after": record.status})
        print(f"[xpushare] {record.case_id} {record.status}{change}  {verdict.summary}", file=lines)
    status = exit_status_for(run_store.load_results(run_dir), False)
    if meta:
        meta["rejudgments"] = [*(meta.get("rejudgments") or []), {**entry, "exit_status": int(status)}]
        write_meta(run_dir, meta)
    paths = build.build(run_dir, required=set(meta.get("required") or []) or None)
    if fmt != "table":
        result = {**stored_result_record(run_dir, paths), "overrides": plain(values), "changes": changes}
        print(render(result, fmt), file=out)
    return status
