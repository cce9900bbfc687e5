"""What ``--output json|yaml`` prints for a run: :func:`result_record` after a run, :func:`stored_result_record`
for a stored one (``invoke judge``, ``invoke report``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xpushare.engine.run import exit_status_for
from xpushare.model.case_record import CaseRecord
from xpushare.model.exit_status import ExitStatus
from xpushare.report import build, run_store, summaries


def result_record(run_id: str, run_dir: Path, status: ExitStatus, results: Sequence[CaseRecord],
                  decision: summaries.ReleaseDecision, report: Path) -> dict[str, Any]:
    """What ``--output json|yaml`` prints after a run: ``{"run_id", "run_dir", "exit_status", "counts",
    "release_ready", "release_decision", "release_profiles", "release_reasons", "report", "cases": [{"cluster",
    "suite", "case_id", "status", "summary", "duration_s", ["verdicts", "pass_count"]}]}`` (paths as text,
    durations in seconds). ``release_ready`` is true only for YES; ``release_decision`` is ``YES``, ``NO`` or
    ``n/a (partial selection: N of M required cases)``; ``release_profiles`` the profile that decided each
    cluster."""
    cases = []
    for r in results:
        case: dict[str, Any] = {"cluster": r.cluster, "suite": r.suite, "case_id": r.case_id, "status": r.status,
                                "summary": r.summary, "duration_s": r.duration_s}
        if r.verdicts is not None:
            case.update(verdicts=r.verdicts, pass_count=r.pass_count)
        cases.append(case)
    return {
        "run_id": run_id, "run_dir": str(run_dir), "exit_status": int(status), "counts": summaries.counts(results),
        "release_ready": decision.ready, "release_decision": decision.label,
        "release_profiles": list(decision.profiles), "release_reasons": list(decision.reasons),
        "report": str(report), "cases": cases,
    }


def stored_result_record(run_dir: Path, paths: build.ReportPaths) -> dict[str, Any]:
    """The :func:`result_record` of a stored run as its records and run.json say now (the exit status and the
    release decision recomputed from them), plus ``"html"`` (the path of report.html): what ``invoke judge`` and
    ``invoke report`` print with ``--output json|yaml``."""
    meta = run_store.read_run_meta(run_dir) or {}
    results = run_store.load_results(run_dir)
    interrupted = bool(meta.get("interrupted"))
    decision = summaries.decision_of_run(results, meta)
    run_id = str(meta.get("run_id") or run_dir.parent.name)
    record = result_record(run_id, run_dir, exit_status_for(results, interrupted), results, decision, paths.markdown)
    return {**record, "html": str(paths.html)}
