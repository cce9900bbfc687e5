"""Isolation judged by what a workload could do: the memory probe's figures against the memory quota.

Pure functions over :class:`~xpushare.evidence.store.Evidence` (pod records, pod logs with the probe's
``[XPUSHARE][MEM_PROBE]`` lines, :mod:`xpushare.collect.mem_probe`; ``annotations.jsonl`` for the dynamic
cases). For one allocation path and a memory quota of Q bytes, with the probe's step S and tolerance T
(``iso_memory_tolerance_ratio`` x Q):

* **held**: accepted <= Q + T. Evaluable only when the probe could ask for more than Q + T (its cap above it,
  or a refusal); a probe capped at or below Q + T proves nothing (ERROR, never PASS).
* **usable**: accepted >= Q - S (the quota's room can really be taken, to within one block).
* **accuracy** = accepted / Q, reported (metrics ``accuracy``), not judged.

A probe line with ``status=unavailable`` (no torch, no CUDA, a driver without the entry point) is a missing
node prerequisite: ERROR, never a verdict on the SUT; ``status=error`` is the probe's own failure: ERROR.
Source: issue 26, docs/isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.collect.mem_probe import MemProbeLine, parse_text
from xpushare.evidence.store import Evidence
from xpushare.judge import quota as quota_judge
from xpushare.judge.checks import check_terminal
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict, combine

__all__ = [
    "HELD",
    "USABLE",
    "check_held",
    "check_probe_line",
    "check_usable",
    "judge_dynamic_memory",
    "judge_memory_path",
    "phase_lines",
    "probe_lines",
    "tolerance_bytes",
]

HELD = "accepted_bytes <= quota_bytes + tolerance_bytes"
USABLE = "accepted_bytes >= quota_bytes - step_bytes"


def probe_lines(ev: Evidence, pod: str) -> list[MemProbeLine]:
    """The pod's probe lines in order (empty without a log)."""
    return parse_text(ev.logs.get(pod) or "")


def tolerance_bytes(th: Mapping[str, Any], quota_bytes: int) -> int:
    """T = ``iso_memory_tolerance_ratio`` x the quota, in bytes (rounded down)."""
    return int(float(th["iso_memory_tolerance_ratio"]) * quota_bytes)


def check_probe_line(line: MemProbeLine | None, pod: str, *, name: str = "probe_measured") -> Check:
    """The probe measured (``status=ok``); unevaluable (ERROR) without a line or with another status."""
    expr = "a probe line with status=ok"
    if line is None:
        return Check(name, expr, {"pod": pod}, None, f"no [XPUSHARE][MEM_PROBE] line in {pod}'s log")
    values = {"pod": pod, "path": line.path, "status": line.status, "error": line.error}
    if line.status == "unavailable":
        return Check(name, expr, values, None,
                     f"node prerequisite missing for path {line.path}: {line.error} (not a verdict on the SUT)")
    if line.status != "ok":
        return Check(name, expr, values, None, f"the probe failed on path {line.path}: {line.error}")
    return Check(name, expr, values, True)


def _figures(line: MemProbeLine, quota: int, tol: int) -> dict[str, Any]:
    return {
        "accepted_bytes": line.accepted_bytes,
        "quota_bytes": quota,
        "tolerance_bytes": tol,
        "step_bytes": line.step_bytes,
        "cap_bytes": line.cap_bytes,
        "refused_bytes": line.refused_bytes,
        "error": line.error,
        "mem_free_bytes": line.mem_free,
        "mem_total_bytes": line.mem_total,
        "detail": line.detail,
        "phase": line.phase,
    }


def check_held(line: MemProbeLine, quota: int, tol: int, *, name: str = "quota_held") -> Check:
    """accepted <= Q + T; unevaluable when the probe never asked beyond Q + T (capped, no refusal)."""
    values = _figures(line, quota, tol)
    if line.accepted_bytes > quota + tol:
        return Check(name, HELD, values, False,
                     f"{line.path} held {_mib(line.accepted_bytes)} under a quota of {_mib(quota)} "
                     f"(+{_mib(tol)} tolerance): bypassed")
    if not line.refused and line.cap_bytes <= quota + tol:
        return Check(name, HELD, values, None,
                     f"the probe's cap {_mib(line.cap_bytes)} is not above the quota + tolerance: the card's free "
                     "memory or the probe's flags left nothing to refuse")
    return Check(name, HELD, values, True)


def check_usable(line: MemProbeLine, quota: int, *, name: str = "quota_usable") -> Check:
    """accepted >= Q - S; unevaluable when the cap itself was below Q - S."""
    values = _figures(line, quota, 0)
    if line.accepted_bytes >= quota - line.step_bytes:
        return Check(name, USABLE, values, True)
    if not line.refused and line.cap_bytes < quota - line.step_bytes:
        return Check(name, USABLE, values, None,
                     f"the probe's cap {_mib(line.cap_bytes)} is below the quota: the card cannot show it")
    return Check(name, USABLE, values, False,
                 f"{line.path} got only {_mib(line.accepted_bytes)} of a {_mib(quota)} quota "
                 f"(refused {_mib(line.refused_bytes)}: {line.error})")


def judge_memory_path(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """ISO-0xx: one allocation path under a memory quota holds it and can use it.

    ``plan``: ``pods`` (one), ``path`` (the probe's ``--path``), ``quota_bytes``, ``quota_source``
    (``env`` | ``annotation``). Thresholds: ``iso_memory_tolerance_ratio``. Metrics: ``accuracy``
    (accepted / quota), ``accepted_bytes``, ``quota_bytes``, ``held`` (True/False/None) for the isolation table.
    """
    pod = plan["pods"][0]
    quota = int(plan["quota_bytes"])
    tol = tolerance_bytes(th, quota)
    lines = probe_lines(ev, pod)
    line = lines[0] if lines else None
    checks: list[Check] = [check_terminal(ev.pods, [pod]), check_probe_line(line, pod)]
    metrics: dict[str, Any] = {"path": plan.get("path"), "quota_bytes": quota, "quota_source": plan.get("quota_source")}
    if line is not None and line.status == "ok":
        held = check_held(line, quota, tol)
        checks += [held, check_usable(line, quota)]
        metrics.update(accepted_bytes=line.accepted_bytes, accuracy=round(line.accepted_bytes / quota, 4),
                       held=held.ok, refused_error=line.error, detail=line.detail)
    status, summary = combine(checks, pass_summary="")
    if status is Status.PASS and line is not None:
        summary = (f"{line.path}: held at {_mib(line.accepted_bytes)} of a {_mib(quota)} quota "
                   f"(accuracy {line.accepted_bytes / quota:.3f}; refused: {line.error})")
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def phase_lines(
    lines: Sequence[MemProbeLine], started: float | None, boundary: float, settle_s: float
) -> tuple[list[MemProbeLine], list[MemProbeLine]]:
    """Probe lines measured before ``boundary`` (unix s) and those begun at least ``settle_s`` after it.

    A line's time is its ``kubectl logs --timestamps`` prefix when present, else the process start
    (``started``, unix s) + its ``elapsed_s``; lines without either are in neither list.
    """
    before: list[MemProbeLine] = []
    after: list[MemProbeLine] = []
    for line in lines:
        when = line.timestamp.timestamp() if line.timestamp is not None else (
            started + line.elapsed_s if started is not None else None)
        if when is None:
            continue
        if when < boundary:
            before.append(line)
        elif when >= boundary + settle_s:
            after.append(line)
    return before, after


def judge_dynamic_memory(
    ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, require_pass: bool
) -> Verdict:
    """FUNC-010/011: the log-line checks of :func:`xpushare.judge.quota.judge_dynamic`, plus what the probe could
    hold through ``cuMemAlloc`` in each phase.

    ``plan``: ``pods`` (the probe), ``memory_limits_bytes`` (the initial quota, then one per change, in order),
    ``changes``. Phases: the last probe line before the first annotate call (``annotations.jsonl``) is judged
    against the initial quota; for each change, the first line begun ``dynamic_probe_settle_s`` or more after
    its annotate call (and before the next call) against the new quota: held (accepted <= Q + T) and usable
    (accepted >= Q - step). So a raise whose new room cannot be used, or a decrease that still lets the old
    quota through, is FAIL whatever the log lines say. A phase without a probe line is not evaluable (ERROR).
    Thresholds: ``iso_memory_tolerance_ratio``, ``dynamic_probe_settle_s`` and those of ``judge_dynamic``.
    """
    base = quota_judge.judge_dynamic(ev, th, plan, kind="memory", require_pass=require_pass)
    pod = plan["pods"][0]
    limits = [int(b) for b in plan.get("memory_limits_bytes") or []]
    times = [float(c["time"]) for c in quota_judge.annotation_calls(ev)]
    lines = [x for x in probe_lines(ev, pod) if x.status == "ok"]
    record = ev.pod(pod)
    started = record.started if record is not None else None
    settle = float(th["dynamic_probe_settle_s"])
    checks = list(base.checks)
    phases: dict[str, Any] = {}
    if not limits:
        checks.append(Check("probe_phases", "plan.json records memory_limits_bytes", {}, None,
                            "plan.json has no memory_limits_bytes: no behaviour to judge"))
    for i, quota in enumerate(limits):
        label = "initial" if i == 0 else f"change{i}"
        chosen = _phase_line(lines, started, times, i, settle)
        if chosen is None:
            checks.append(Check(f"{label}_measured", "a probe line in the phase", {"quota_bytes": quota}, None,
                                f"no probe measurement in phase {label} (quota {_mib(quota)})"))
            continue
        checks += [check_held(chosen, quota, tolerance_bytes(th, quota), name=f"{label}_held"),
                   check_usable(chosen, quota, name=f"{label}_usable")]
        phases[label] = {"quota_bytes": quota, "accepted_bytes": chosen.accepted_bytes, "round": chosen.round,
                         "accuracy": round(chosen.accepted_bytes / quota, 4)}
    status, summary = combine(checks, pass_summary=base.summary)
    if status is Status.PASS and phases:
        summary += "; probe held " + ", ".join(
            f"{_mib(p['accepted_bytes'])} of {_mib(p['quota_bytes'])}" for p in phases.values())
    return Verdict(status, summary, checks, used(th), {**base.metrics, "probe_phases": phases}, base.evidence)


def _phase_line(
    lines: Sequence[MemProbeLine], started: float | None, times: Sequence[float], phase: int, settle_s: float
) -> MemProbeLine | None:
    """Phase 0: the last line before the first annotate call; phase i: the first line begun ``settle_s`` or more
    after call i (1-based) and before call i + 1. None when the phase has no line (or its call is missing)."""
    if phase == 0:
        if not times:
            return None
        before, _ = phase_lines(lines, started, times[0], settle_s)
        return before[-1] if before else None
    if phase - 1 >= len(times):
        return None
    _, after = phase_lines(lines, started, times[phase - 1], settle_s)
    if phase < len(times):
        after, _ = phase_lines(after, started, times[phase], 0.0)  # only those before the next call
    return after[0] if after else None
