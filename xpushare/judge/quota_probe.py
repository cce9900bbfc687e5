"""The memory probe's figures beside the log-line checks of the memory-quota cases (issue 26).

FUNC-006/007 and COMBO-001 (a static quota) run the memory probe (``workloads/mem_probe.py``, path
``cuMemAlloc``) in a pod of its own under the case's quota after the case's workload; FUNC-010/011 and
COMBO-005 (a quota changed while it runs) run it for the whole case, measuring every ``probe_interval_s``;
COMBO-004 runs it in a pod beside its W5 pod, annotated with the same memory changes.
These functions add what the probe could hold to the case's verdict, with the rules of
:mod:`xpushare.judge.isolation` (quota Q bytes, the probe's step S, tolerance T =
``iso_memory_tolerance_ratio`` x Q):

* held: accepted <= Q + T (after a decrease: allocations past the new limit are refused);
* usable: accepted >= Q - S (after a raise: the new room can really be taken).

A probe line that is missing, ``unavailable`` (a node prerequisite) or ``error`` is not evaluable (ERROR, never
PASS); a run stored before the case ran the probe (no ``quota_probe`` / ``memory_limits_bytes`` in its
``plan.json``) keeps its log-line verdict. Evidence: the probe pod's log (``pods/<pod>.log``, parsed by
:mod:`xpushare.collect.mem_probe`), ``pods.json``, ``annotations.jsonl`` (annotate times).
Source: issue 26, docs/isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.collect.mem_probe import MemProbeLine
from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import (
    check_held,
    check_probe_line,
    check_usable,
    phase_lines,
    probe_lines,
    tolerance_bytes,
)
from xpushare.judge.quota import annotation_calls
from xpushare.model.verdict import Check, Status, Verdict, combine

__all__ = ["PROBE_KEYS", "add_phase_figures", "add_static_figures", "memory_phase_checks"]


#: Thresholds and parameters a verdict records when the probe's figures are in it.
PROBE_KEYS = ("iso_memory_tolerance_ratio",)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def _figures(line: MemProbeLine, quota: int) -> dict[str, Any]:
    return {"path": line.path, "quota_bytes": quota, "accepted_bytes": line.accepted_bytes,
            "refused_bytes": line.refused_bytes, "error": line.error, "step_bytes": line.step_bytes,
            "cap_bytes": line.cap_bytes, "mem_free_bytes": line.mem_free, "mem_total_bytes": line.mem_total,
            "accuracy": round(line.accepted_bytes / quota, 4) if quota else None}


def add_static_figures(verdict: Verdict, ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """``verdict`` (the case's log-line judgment) with the static probe's checks and figures added.

    ``plan["quota_probe"]``: ``pod``, ``quota_bytes``, ``path``, ``quota_source`` (``env`` | ``annotation``).
    Checks: ``probe_measured`` (a ``status=ok`` line), ``probe_quota_held``, ``probe_quota_usable``. Metrics:
    ``quota_probe`` (quota, accepted and refused bytes, the refusal's error, step, cap, ``cuMemGetInfo`` free
    and total, accuracy = accepted / quota). A SKIP verdict, or a plan without ``quota_probe``, is returned
    as it is. Thresholds: ``iso_memory_tolerance_ratio``.
    """
    probe = plan.get("quota_probe")
    if verdict.status is Status.SKIP or not isinstance(probe, Mapping):
        return verdict
    pod, quota = str(probe["pod"]), int(probe["quota_bytes"])
    lines = probe_lines(ev, pod)
    line = lines[0] if lines else None
    checks = [*verdict.checks, check_probe_line(line, pod)]
    figures: dict[str, Any] = {"pod": pod, "quota_bytes": quota, "quota_source": probe.get("quota_source")}
    if line is not None and line.status == "ok":
        tol = tolerance_bytes(th, quota)
        checks += [check_held(line, quota, tol, name="probe_quota_held"),
                   check_usable(line, quota, name="probe_quota_usable")]
        figures.update(_figures(line, quota), tolerance_bytes=tol)
    status, summary = combine(checks, pass_summary=verdict.summary)
    if status is Status.PASS and line is not None:
        summary += (f"; probe ({line.path}) held {_mib(line.accepted_bytes)} of a {_mib(quota)} quota, "
                    f"refused {_mib(line.refused_bytes)}: {line.error}")
    used = {**verdict.thresholds, **{k: th[k] for k in PROBE_KEYS if k in th}}
    return Verdict(status, summary, checks, used, {**verdict.metrics, "quota_probe": figures}, verdict.evidence)


def _phase_line(lines: Sequence[MemProbeLine], started: float | None, times: Sequence[float], phase: int,
                settle_s: float) -> MemProbeLine | None:
    """Phase 0: the last line before the first call; phase i: the first line begun ``settle_s`` or more after
    call i (1-based) and before call i + 1. None when the phase has no line or its call is missing."""
    if phase == 0:
        if not times:
            return None
        before, _ = phase_lines(lines, started, times[0], settle_s)
        return before[-1] if before else None
    if phase - 1 >= len(times):
        return None
    _, after = phase_lines(lines, started, times[phase - 1], settle_s)
    if phase < len(times):
        after, _ = phase_lines(after, started, times[phase], 0.0)
    return after[0] if after else None


def memory_phase_checks(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> tuple[list[Check], dict]:
    """Held and usable checks for each phase of a dynamic memory quota, from the probe pod's lines.

    ``plan``: ``memory_probe`` (the probe pod; default the first of ``pods``), ``memory_limits_bytes``
    (initial quota, then one per memory change). Phase 0 is judged on the last probe line before the first
    annotate call on the probe pod (``annotations.jsonl``; a call without a pod counts for every pod), phase i
    on the first line begun ``dynamic_probe_settle_s`` or more after call i (and before call i + 1), named
    ``initial_held``/``_usable`` and ``change<i>_held``/``_usable``; a phase without a line is
    ``change<i>_measured`` not evaluable. Returns the checks and ``{label: {quota_bytes, accepted_bytes,
    refused_bytes, error, round, accuracy}}``.
    """
    pod = str(plan.get("memory_probe") or plan["pods"][0])
    limits = [int(b) for b in plan.get("memory_limits_bytes") or []]
    times = [float(c["time"]) for c in annotation_calls(ev) if c.get("pod") in (None, pod)]
    lines = [x for x in probe_lines(ev, pod) if x.status == "ok"]
    record = ev.pod(pod)
    started = record.started if record is not None else None
    settle = float(th["dynamic_probe_settle_s"])
    checks: list[Check] = []
    phases: dict[str, Any] = {}
    for i, quota in enumerate(limits):
        label = "initial" if i == 0 else f"change{i}"
        chosen = _phase_line(lines, started, times, i, settle)
        if chosen is None:
            checks.append(Check(f"{label}_measured", "a probe line in the phase", {"quota_bytes": quota}, None,
                                f"no probe measurement in phase {label} (quota {_mib(quota)})"))
            continue
        checks += [check_held(chosen, quota, tolerance_bytes(th, quota), name=f"{label}_held"),
                   check_usable(chosen, quota, name=f"{label}_usable")]
        phases[label] = {**_figures(chosen, quota), "round": chosen.round}
    return checks, phases


def add_phase_figures(verdict: Verdict, ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """``verdict`` (a dynamic case's log-line judgment) with :func:`memory_phase_checks` added; metrics
    ``probe_phases``. A SKIP verdict, or a plan without ``memory_limits_bytes`` (a run stored before the case
    ran the probe), is returned as it is. Thresholds: ``iso_memory_tolerance_ratio``, ``dynamic_probe_settle_s``."""
    if verdict.status is Status.SKIP or not plan.get("memory_limits_bytes"):
        return verdict
    found, phases = memory_phase_checks(ev, th, plan)
    status, summary = combine([*verdict.checks, *found], pass_summary=verdict.summary)
    if status is Status.PASS and phases:
        summary += "; probe held " + ", ".join(
            f"{_mib(p['accepted_bytes'])} of {_mib(p['quota_bytes'])}" for p in phases.values())
    used = {**verdict.thresholds,
            **{k: th[k] for k in (*PROBE_KEYS, "dynamic_probe_settle_s") if k in th}}
    return Verdict(status, summary, [*verdict.checks, *found], used, {**verdict.metrics, "probe_phases": phases},
                   verdict.evidence)
