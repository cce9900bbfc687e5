"""Checks every suite shares: pod progress (phase, exit code, PASS line, runtime), pods succeeded or
terminal, an allocation rejected, run-interval overlap, scheduler liveness.

Each returns a :class:`~xpushare.model.verdict.Check` (``ok=None`` when the evidence to decide is missing, so a
verdict built on it is ERROR, never PASS). Pure functions of the stored evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers import pod_log


def pod_progress(ev: Evidence, name: str) -> dict[str, Any]:
    """Facts of one pod: phase, exit code, PASS marker, runtime (s, the last ``--- N seconds ---``)."""
    rec = ev.pod(name)
    log = ev.logs.get(name)
    return {
        "phase": rec.phase if rec else None,
        "exit_code": rec.exit_code if rec else None,
        "log_collected": log is not None,
        "pass_marker": pod_log.has_pass_marker(log) if log is not None else False,
        "runtime_s": pod_log.runtime_seconds(log) if log is not None else None,
        "missing_module": pod_log.missing_module(log) if log is not None else None,
    }


def check_pods_succeeded(ev: Evidence, names: Sequence[str], *, check_name: str = "pods_succeeded") -> Check:
    """Every named pod: phase Succeeded, exit 0, ``PASS`` in its log and a parseable runtime.

    Unevaluable (``ok=None``) when a pod record or its log is missing, and when every pod that did not pass died
    on a Python module the node lacks (:func:`~xpushare.parsers.pod_log.missing_module`): the workload never
    reached the GPU or the SUT, so the case is ERROR (a node prerequisite), never FAIL of the SUT.
    """
    facts = {n: pod_progress(ev, n) for n in names}
    missing = [n for n, f in facts.items() if f["phase"] is None or not f["log_collected"]]
    if missing:
        return Check(check_name, "evidence for every pod", facts, None, f"no record/log for {', '.join(missing)}")
    bad = [
        n
        for n, f in facts.items()
        if not (f["phase"] == "Succeeded" and f["exit_code"] == 0 and f["pass_marker"] and f["runtime_s"] is not None)
    ]
    modules = sorted({str(facts[n]["missing_module"]) for n in bad if facts[n]["missing_module"]})
    if bad and all(facts[n]["missing_module"] for n in bad):
        return Check(check_name, f"{len(names)}/{len(names)} pods Succeeded with PASS and a runtime", facts, None,
                     f"the workload could not start on the node: no Python module {', '.join(modules)} "
                     f"({', '.join(bad)}): a node prerequisite, not a verdict on the SUT")
    ok = not bad
    detail = "" if ok else "not passed: " + ", ".join(f"{n} ({_why(facts[n])})" for n in bad)
    return Check(
        check_name,
        f"{len(names)}/{len(names)} pods Succeeded with PASS and a runtime",
        facts,
        ok,
        detail,
    )


def _why(f: Mapping[str, Any]) -> str:
    if f["phase"] != "Succeeded":
        return f"phase {f['phase']}, exit {f['exit_code']}"
    if not f["pass_marker"]:
        return "no PASS line"
    return "no runtime line"



def check_rejected(ev: Evidence, name: str) -> Check:
    """The pod did not pass AND its log shows a quota rejection or an out-of-memory error."""
    log = ev.logs.get(name)
    rec = ev.pod(name)
    if log is None or rec is None:
        return Check("allocation_rejected", "pod failed with an OOM/rejection marker", {}, None, f"no log for {name}")
    markers = pod_log.oom_markers(log)
    failed = rec.phase == "Failed" or not pod_log.has_pass_marker(log)
    values = {"phase": rec.phase, "exit_code": rec.exit_code, "markers": markers[:5]}
    ok = failed and bool(markers)
    detail = ""
    if not failed:
        detail = "the pod passed: the allocation was not refused"
    elif not markers:
        detail = "the pod failed without an OOM/rejection marker (a different failure)"
    return Check("allocation_rejected", "phase == Failed and oom_markers(log) != []", values, ok, detail)


def check_terminal(records: Sequence[WorkloadRecord], names: Sequence[str]) -> Check:
    """All pods reached Succeeded/Failed (no pod left Pending or Running at the timeout)."""
    phases = {r.name: r.phase for r in records if r.name in names}
    stuck = [n for n in names if phases.get(n) not in ("Succeeded", "Failed")]
    return Check(
        "pods_terminal",
        "every pod reached a terminal phase before the timeout",
        {"phases": phases},
        not stuck,
        f"not terminal: {', '.join(f'{n}={phases.get(n)}' for n in stuck)}" if stuck else "",
    )


def overlap_ratio(a: WorkloadRecord, b: WorkloadRecord) -> float | None:
    """Overlap of two run intervals as a fraction of the shorter one (0..1); None without times."""
    if None in (a.started, b.started, a.finished, b.finished):
        return None
    assert a.started is not None and b.started is not None and a.finished is not None and b.finished is not None
    overlap = min(a.finished, b.finished) - max(a.started, b.started)
    shorter = min(a.finished - a.started, b.finished - b.started)
    if shorter <= 0:
        return None
    return max(0.0, overlap / shorter)

def check_scheduler_alive(ev: Evidence) -> Check | None:
    """From ``scheduler_proc.txt`` (``SCHEDULER_ALIVE=1``); None when no scheduler was observed."""
    text = ev.text("scheduler_proc.txt")
    if text is None:
        return None
    alive = "SCHEDULER_ALIVE=1" in text
    return Check("scheduler_alive", "scheduler process alive after the case", {"alive": alive}, alive)


def plan_skip(plan: Mapping[str, Any], th: Mapping[str, Any]) -> Verdict | None:
    """SKIP with the reason the case's actions wrote to ``plan.json`` (``skip``); None when it ran."""
    reason = plan.get("skip")
    return Verdict(Status.SKIP, str(reason), [], used(th)) if reason else None
