"""The memory probe's figures beside the log-line checks of the memory-quota cases (issue 26).

FUNC-006/007 and COMBO-001 (a static quota) run the memory probe (``workloads/mem_probe.py``, path
``cuMemAlloc``) in a pod of its own under the case's quota after the case's workload; FUNC-010/011 and
COMBO-005 (a quota changed while it runs) run it for the whole case, measuring every ``probe_interval_s``;
COMBO-004 runs it in a pod beside its W5 pod, annotated with the same memory changes; STAB-004 runs it in a
pod of its own in every round of its soak, annotated with the W5 pods (:func:`soak_phase_checks`: every phase
of every round, from ``soak/rounds.jsonl``, ``soak/events.jsonl`` and ``soak/probe-pods/<pod>.log``).
These functions add what the probe could hold to the case's verdict, with the rules of
:mod:`xpushare.judge.isolation` (quota Q bytes, the probe's step S, tolerance T =
``iso_memory_tolerance_ratio`` x Q):

* held: accepted <= Q + T (after a decrease: allocations past the new limit are refused);
* usable: accepted >= Q - S (after a raise: the new room can really be taken).

A probe line that is missing, ``unavailable`` (a node prerequisite) or ``error`` is not evaluable (ERROR, never
PASS); a run stored before the case ran the probe (no ``quota_probe`` / ``memory_limits_bytes`` in its
``plan.json``) keeps its log-line verdict. Evidence: the probe pod's log (``pods/<pod>.log``, parsed by
:mod:`xpushare.parsers.mem_probe`), ``pods.json``, ``annotations.jsonl`` (annotate times).
Source: issue 26, docs/isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import (
    HELD,
    USABLE,
    check_held,
    check_probe_line,
    check_usable,
    phase_checks,
    phase_line,
    probe_lines,
    tolerance_bytes,
)
from xpushare.judge.quantity import parse_quantity
from xpushare.judge.quota import annotation_calls
from xpushare.judge.stability_evidence import load_soak
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers.mem_probe import MemProbeLine, parse_text

__all__ = [
    "PROBE_KEYS",
    "SOAK_PROBE_KEYS",
    "add_phase_figures",
    "add_soak_figures",
    "add_static_figures",
    "memory_phase_checks",
    "soak_phase_checks",
    "soak_probe_phases",
]


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
    checks, measured = phase_checks(lines, started, times, limits, th)
    phases = {label: {**_figures(chosen, quota), "round": chosen.round} for label, quota, chosen in measured}
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


# ------------------------------------------------------------------------------------------- STAB-004 (soak)

#: Thresholds and parameters STAB-004's probe judgment reads.
SOAK_PROBE_KEYS = (*PROBE_KEYS, "dynamic_probe_settle_s", "probe_interval_s", "dynamic_probe_start_delay_s")


def _soak_calls(events: Sequence[Mapping[str, Any]], round_no: int, pod: str) -> list[tuple[float, int]]:
    """``(unix s, quota bytes)`` of every memory annotate call of round ``round_no`` on ``pod``, in order: the
    pod's own call time (``times``), else the event's ``at``. A value that is no quantity is left out."""
    calls: list[tuple[float, int]] = []
    for e in events:
        if e.get("kind") != "annotate" or e.get("round") != round_no or pod not in (e.get("pods") or []):
            continue
        times = e.get("times")
        when = times.get(pod, e.get("at")) if isinstance(times, Mapping) else e.get("at")
        if not isinstance(when, (int, float)):
            continue
        try:
            calls.append((float(when), parse_quantity(str(e.get("value")))))
        except ValueError:
            continue
    return sorted(calls, key=lambda c: c[0])


def _soak_probe_pods(rounds: Sequence[Mapping[str, Any]], suffix: str) -> list[tuple[int, str, Mapping[str, Any]]]:
    """``(round, pod, its rounds.jsonl detail)`` of the probe pods of every round that ended (``completed`` or
    ``timeout``: their pods' logs were fetched)."""
    out = []
    for rec in rounds:
        if rec.get("status") not in ("completed", "timeout"):
            continue
        detail = rec.get("detail")
        if isinstance(detail, Mapping):
            out += [(int(rec.get("round", 0)), str(name), info) for name, info in detail.items()
                    if str(name).endswith(suffix) and isinstance(info, Mapping)]
    return out


def soak_probe_phases(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """STAB-004: every quota phase of every round's memory probe pod, with the line that measured it.

    ``plan``: ``memory_probe_suffix`` (the probe pods' name suffix), ``memory_base_bytes`` (the quota every
    pod starts with). Evidence: ``soak/rounds.jsonl`` (each probe pod's ``started``/``finished``, unix s),
    ``soak/events.jsonl`` (``annotate`` events: round, pods, value, each pod's call time ``times``),
    ``soak/probe-pods/<pod>.log`` (the probe's lines, kept by the soak loop). Phase 0 (``initial``, the base
    quota) is judged on the last line before the round's first call on the pod, phase i (``change<i>``) on
    the first line begun ``dynamic_probe_settle_s`` or more after call i and before call i + 1. A phase is
    ``expected`` when its window (settle and, for phase 0, ``dynamic_probe_start_delay_s`` excluded) to the
    next call or the pod's end lasts ``probe_interval_s`` or more: a shorter one (a change just before the pod
    ended) cannot be measured and is only listed. Returns one dict per phase: ``round``, ``pod``, ``phase``,
    ``direction`` (``start`` | ``raise`` | ``decrease`` | ``same``), ``quota_bytes``, ``expected``,
    ``window_s``, ``line`` (:class:`MemProbeLine` or None), ``log`` (whether the pod's log was kept),
    ``other`` (its lines whose status is not ``ok``).
    """
    data = load_soak(ev)
    suffix = str(plan.get("memory_probe_suffix") or "")
    base = int(plan.get("memory_base_bytes") or 0)
    settle = float(th["dynamic_probe_settle_s"])
    interval = float(th["probe_interval_s"])
    delay = float(th["dynamic_probe_start_delay_s"])
    out: list[dict[str, Any]] = []
    for round_no, pod, info in _soak_probe_pods(data.rounds, suffix) if suffix else []:
        text = ev.text(f"soak/probe-pods/{pod}.log")
        lines = parse_text(text or "")
        ok_lines = [x for x in lines if x.status == "ok"]
        other = [x for x in lines if x.status != "ok"]
        started = info.get("started")
        started_f = float(started) if isinstance(started, (int, float)) else None
        finished = info.get("finished")
        end = float(finished) if isinstance(finished, (int, float)) else None
        calls = _soak_calls(data.events, round_no, pod)
        times = [t for t, _ in calls]
        limits = [base, *(b for _, b in calls)]
        for i, quota in enumerate(limits):
            if i == 0:
                begin = None if started_f is None else started_f + delay
                stop = times[0] if times else end
            else:
                begin = times[i - 1] + settle
                stop = times[i] if i < len(times) else end
            window = None if begin is None or stop is None else round(stop - begin, 3)
            if i == 0 and not times:
                chosen = ok_lines[-1] if ok_lines else None
            else:
                chosen = phase_line(ok_lines, started_f, times, i, settle)
            prev = limits[i - 1] if i else None
            direction = ("start" if prev is None else "raise" if quota > prev
                         else "decrease" if quota < prev else "same")
            out.append({"round": round_no, "pod": pod, "phase": "initial" if i == 0 else f"change{i}",
                        "direction": direction, "quota_bytes": quota,
                        "expected": window is not None and window >= interval, "window_s": window,
                        "line": chosen, "log": text is not None, "other": other})
    return out


def _combined(name: str, expr: str, found: Sequence[tuple[str, Check]]) -> Check:
    """One check over every phase's check of one kind: False when one failed, None when one could not be
    evaluated (and none failed), True otherwise. ``values``: the failing or unevaluable phases' figures."""
    bad = [(label, c) for label, c in found if c.ok is False]
    unknown = [(label, c) for label, c in found if c.ok is None]
    shown = bad or unknown
    values: dict[str, Any] = {"phases": len(found), **{label: c.values for label, c in shown[:20]}}
    if bad:
        return Check(name, expr, values, False, "; ".join(f"{label}: {c.detail}" for label, c in bad[:5]))
    if unknown:
        return Check(name, expr, values, None, "; ".join(f"{label}: {c.detail}" for label, c in unknown[:5]))
    return Check(name, expr, values, True)


def soak_phase_checks(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]
                      ) -> tuple[list[Check], dict[str, Any]]:
    """STAB-004's probe checks over :func:`soak_probe_phases`: ``probe_measured`` (every expected phase has a
    ``status=ok`` line; a probe pod without a kept log, a missing line or a non-``ok`` line is not evaluable:
    ERROR, never PASS), ``probe_quota_held`` (accepted <= quota + tolerance in every measured phase: after a
    decrease, allocations past the new limit are refused) and ``probe_quota_usable`` (accepted >= quota -
    step: after a raise, the new room is usable). Returns the checks and ``{r<round>_<phase>: figures}``
    (``_figures`` plus round, pod, direction, window_s, measured, and the phase's ``held`` / ``usable``
    results: True, False or None)."""
    phases = soak_probe_phases(ev, th, plan)
    if not phases:
        return [Check("probe_measured", "a memory probe pod in a round that ended", {}, None,
                      "no memory probe pod in any round that ended (soak/rounds.jsonl)")], {}
    missing: list[str] = []
    held: list[tuple[str, Check]] = []
    usable: list[tuple[str, Check]] = []
    figures: dict[str, Any] = {}
    for p in phases:
        label = f"r{p['round']}_{p['phase']}"
        line: MemProbeLine | None = p["line"]
        quota = int(p["quota_bytes"])
        base = {"pod": p["pod"], "round": p["round"], "direction": p["direction"], "window_s": p["window_s"]}
        if line is None:
            if p["expected"]:
                why = "log not kept" if not p["log"] else "no status=ok line in the phase"
                if p["other"]:
                    first = p["other"][0]
                    why += f" ({first.status} on {first.path}: {first.error})"
                missing.append(f"{label} ({p['pod']}, quota {_mib(quota)}): {why}")
            figures[label] = {**base, "quota_bytes": quota, "measured": False, "expected": p["expected"]}
            continue
        tol = tolerance_bytes(th, quota)
        h, u = check_held(line, quota, tol, name=f"{label}_held"), check_usable(line, quota, name=f"{label}_usable")
        held.append((label, h))
        usable.append((label, u))
        figures[label] = {**base, **_figures(line, quota), "tolerance_bytes": tol, "round_line": line.round,
                          "measured": True, "held": h.ok, "usable": u.ok}
    checks = [Check("probe_measured", "a status=ok probe line in every expected phase",
                    {"phases": len(phases), "missing": missing[:20]}, None if missing else True,
                    "; ".join(missing[:5]))]
    if held:
        checks += [_combined("probe_quota_held", HELD, held), _combined("probe_quota_usable", USABLE, usable)]
    return checks, figures


def add_soak_figures(verdict: Verdict, ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """``verdict`` (STAB-004's soak judgment) with :func:`soak_phase_checks` added; metrics ``probe_phases``.
    A SKIP verdict, or a plan without ``memory_probe_suffix`` (a run stored before STAB-004 ran the probe), is
    returned as it is. Thresholds: :data:`SOAK_PROBE_KEYS`."""
    if verdict.status is Status.SKIP or not plan.get("memory_probe_suffix"):
        return verdict
    found, phases = soak_phase_checks(ev, th, plan)
    checks = [*verdict.checks, *found]
    status, summary = combine(checks, pass_summary=verdict.summary)
    measured = [p for p in phases.values() if p.get("measured")]
    if status is Status.PASS and measured:
        ups = sum(1 for p in measured if p["direction"] == "raise")
        downs = sum(1 for p in measured if p["direction"] == "decrease")
        summary += (f"; memory probe held and used its quota in {len(measured)} phase(s) ({ups} raise(s), "
                    f"{downs} decrease(s))")
    used_th = {**verdict.thresholds, **{k: th[k] for k in SOAK_PROBE_KEYS if k in th}}
    return Verdict(status, summary, checks, used_th, {**verdict.metrics, "probe_phases": phases}, verdict.evidence)
