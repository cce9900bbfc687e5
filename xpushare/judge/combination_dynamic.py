"""COMBO-004/005/006: dynamic quota changes in sequence. Every annotate call must be followed, in order,
by the scheduler's ``... limit changed`` line for that pod and the pod-side update line, within
``dynamic_max_latency_s``; COMBO-006 also requires the throughput to follow each step. Evidence and
thresholds as in :mod:`xpushare.judge.combination` (the suite's public face, which re-exports these).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import (
    check_pods_succeeded,
    check_scheduler_alive,
    check_terminal,
    plan_skip,
    pod_progress,
)
from xpushare.judge.combination_evidence import (
    annotation_quota_bytes,
    check_captures,
    check_pod_quota_series,
    combo_th,
    combo_used,
    scheduler_summary,
)
from xpushare.judge.quota import annotation_calls, change_applied_at, phase_throughput
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import client_lines, pod_log
from xpushare.parsers.scheduler_log_records import LimitChange, SchedulerLogSummary


@dataclass(frozen=True)
class ChangeFacts:
    """What became of one planned annotation change.

    ``kind``: ``memory`` | ``compute``; ``value``: the annotation value; ``new``: bytes or percent;
    ``annotated_at``: unix s of the annotate call (None: not recorded); ``scheduler``: the scheduler line
    matched in order (None: none); ``out_of_order``: a line exists but only before the previous change's;
    ``pod_line``: the pod logged the library's update line; ``latency_s``: scheduler line time minus
    ``annotated_at`` (None when either is unknown).
    """

    kind: str
    value: str
    new: int
    annotated_at: float | None
    scheduler: LimitChange | None
    out_of_order: bool
    pod_line: bool
    latency_s: float | None

    @property
    def applied(self) -> bool:
        return self.scheduler is not None and self.pod_line

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "new": self.new, "scheduler_line": bool(self.scheduler),
                "lineno": self.scheduler.lineno if self.scheduler else None, "out_of_order": self.out_of_order,
                "pod_line": self.pod_line, "latency_s": None if self.latency_s is None else round(self.latency_s, 3)}


def _kind(key: str) -> str:
    return "compute" if key in ("core", "compute") else "memory"


def change_facts(
    sched: SchedulerLogSummary, log: str | None, *, pod: str, namespace: str,
    changes: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]],
) -> list[ChangeFacts]:
    """Match each planned change (in order) to the scheduler's change line and the pod's update line.

    The i-th change is matched to the first ``... limit changed for pod <ns>/<pod>: * -> <new>`` line of
    its kind after the line matched for change i-1 (so a change applied before an earlier one does not
    count); ``calls[i]["time"]`` is its annotate call.
    """
    out: list[ChangeFacts] = []
    prev = 0
    core_updates = client_lines.core_limit_updates(log) if log else []
    mem_updates = client_lines.memory_limit_updates(log) if log else []
    for i, ch in enumerate(changes):
        kind, new = _kind(str(ch["key"])), int(ch["new"])
        cands = [c for c in sched.limit_changes if c.kind == kind and not c.initial and c.pod == pod
                 and c.namespace == namespace and c.new == new]
        after = [c for c in cands if c.lineno > prev]
        match = after[0] if after else None
        if match is not None:
            prev = match.lineno
        if kind == "compute":
            pod_line = any(u.kind in ("applied", "received") and u.percent == new for u in core_updates)
        else:
            pod_line = any(u.kind in ("applied", "received") and u.new_bytes == new for u in mem_updates)
        when = calls[i].get("time") if i < len(calls) else None
        latency = match.ts.timestamp() - float(when) if match and match.ts and when is not None else None
        out.append(ChangeFacts(kind, str(ch["value"]), new, None if when is None else float(when), match,
                               bool(cands) and match is None, pod_line, latency))
    return out


def _change_checks(facts: Sequence[ChangeFacts], max_latency: float, pod: str, namespace: str) -> list[Check]:
    """Per-change checks (every change must arrive): scheduler line in order, pod line, latency."""
    checks: list[Check] = []
    for f in facts:
        line = "Compute limit changed" if f.kind == "compute" else "Memory limit changed"
        unit = "%" if f.kind == "compute" else " bytes"
        detail = "" if f.scheduler else ("logged out of order (before the previous change)" if f.out_of_order
                                         else "no such scheduler line")
        checks.append(Check(f"{f.kind}_change_logged[{f.value}]",
                            f"scheduler: '{line} for pod {namespace}/{pod}: * -> {f.new}{unit}', after the previous "
                            "change's line", f.to_dict(), f.scheduler is not None, detail))
        checks.append(Check(f"{f.kind}_update_in_pod[{f.value}]", "the client library logged the new limit",
                            f.to_dict(), f.pod_line, "" if f.pod_line else "no update line in the pod log"))
        if f.scheduler is not None:
            if f.latency_s is None:
                why = "annotate call not recorded" if f.annotated_at is None else "scheduler.log without timestamps"
                checks.append(Check(f"{f.kind}_latency[{f.value}]", "latency measurable", f.to_dict(), None, why))
            else:
                ok = f.latency_s <= max_latency
                checks.append(Check(f"{f.kind}_latency[{f.value}]", f"latency_s <= {max_latency}",
                                    {"latency_s": round(f.latency_s, 3)}, ok,
                                    "" if ok else f"took {f.latency_s:.1f} s"))
    return checks


def _why_not_applied(f: ChangeFacts) -> str:
    if f.out_of_order:
        return "out of order"
    return "no scheduler line" if f.scheduler is None else "no pod line"


def _count_checks(facts: Sequence[ChangeFacts], minimum: int, max_latency: float, kind: str) -> list[Check]:
    """At least ``minimum`` changes applied (scheduler line in order + pod line), each within the latency."""
    applied = [f for f in facts if f.applied]
    missing = [f"{f.value} ({_why_not_applied(f)})" for f in facts if not f.applied]
    ok = len(applied) >= minimum
    checks = [Check(f"{kind}_changes_applied", f"applied changes >= {minimum} of {len(facts)}",
                    {"applied": len(applied), "changes": [f.to_dict() for f in facts]}, ok,
                    "" if ok else f"{len(applied)}/{len(facts)} applied; missing: {', '.join(missing)}")]
    timed = {f.value: f.latency_s for f in applied if f.latency_s is not None}
    if applied and len(timed) < len(applied):
        checks.append(Check(f"{kind}_latency", "latency measurable for every applied change",
                            {"changes": [f.to_dict() for f in applied]}, None,
                            "annotate call not recorded or scheduler.log without timestamps"))
    elif timed:
        worst = max(timed.values())
        ok = worst <= max_latency
        checks.append(Check(f"{kind}_latency", f"max latency_s <= {max_latency}",
                            {"latency_s": {v: round(t, 3) for v, t in timed.items()}},
                            ok, "" if ok else f"took {worst:.1f} s"))
    return checks


def _check_no_crash(ev: Evidence, pod: str) -> Check:
    """The pod ended with PASS, or with a quota rejection (a lowered limit may refuse allocations)."""
    facts = pod_progress(ev, pod)
    log = ev.logs.get(pod)
    if log is None or facts["phase"] is None:
        return Check("pod_no_crash", "pod passed or refused an allocation", facts, None, "no pod evidence")
    passed = facts["phase"] == "Succeeded" and facts["exit_code"] == 0 and facts["pass_marker"]
    refused = bool(pod_log.oom_markers(log))
    ok = bool(passed or refused)
    return Check("pod_no_crash", "pod ended with PASS, or with a quota rejection (no other failure)",
                 {**facts, "refused": refused}, ok, "" if ok else "the pod failed for another reason")


def _check_probe_gaps(ev: Evidence, pod: str, max_gap: float) -> Check:
    """W5 kept progressing: QUOTA_PROBE lines exist and no two consecutive ones are more than ``max_gap`` s
    apart on the workload's own clock (its ``elapsed=``; a SIGSTOP or a hang shows as a gap)."""
    log = ev.logs.get(pod)
    if log is None:
        return Check("no_stall", "pod log collected", {}, None, f"no log for {pod}")
    probes = pod_log.quota_probes(log)
    if len(probes) < 2:
        return Check("no_stall", "at least 2 QUOTA_PROBE lines", {"probes": len(probes)}, False,
                     f"{len(probes)} QUOTA_PROBE line(s): the probe loop did not run")
    gaps = [(b.elapsed_s - a.elapsed_s, b.elapsed_s) for a, b in itertools.pairwise(probes)]
    worst, at = max(gaps)
    ok = worst <= max_gap
    return Check("no_stall", f"max gap between QUOTA_PROBE lines <= {max_gap} s",
                 {"probes": len(probes), "max_gap_s": round(worst, 3), "at_elapsed_s": at}, ok,
                 "" if ok else f"{worst:.1f} s without a probe line (at elapsed {at:.1f} s)")


def _step_factor(q0: int, q1: int, min_ratio: float, share: float) -> float:
    """The throughput ratio a quota step q0 -> q1 (%) must reach: at least ``max(min_ratio, (q1/q0)**share)`` when
    the quota rises, at most ``min(1/min_ratio, (q1/q0)**share)`` when it falls (1.0: no step)."""
    if q0 <= 0 or q1 == q0:
        return 1.0
    proportional = (q1 / q0) ** share
    return max(min_ratio, proportional) if q1 > q0 else min(1 / min_ratio, proportional)


def _check_throughput_steps(
    ev: Evidence, pod: str, namespace: str, facts: Sequence[ChangeFacts], initial: int, min_ratio: float, *,
    max_latency: float, interval: float, share: float,
) -> Check:
    """Throughput (probe it/s) moves with each compute step in its direction, by at least ``min_ratio`` and by at
    least ``share`` of the quota step in log terms (:func:`_step_factor`): with the quota unenforced the throughput
    stays flat, and a loaded machine's noise can move it by ``min_ratio`` but not by a share of a x2.5 step.

    Phases as for FUNC-012 (:func:`~xpushare.judge.quota.judge_dynamic_compute`, read by
    :func:`~xpushare.judge.quota.phase_throughput`): the one before change ``i`` ends when the change
    reached the pod (:func:`~xpushare.judge.quota.change_applied_at`: the pod's update line, else the
    scheduler's ``Compute limit changed`` line for the pod; else the annotate call); the one after it
    starts ``interval`` s later (one probe interval, the W5 ``--interval-s``), or ``max_latency`` +
    ``interval`` s after the annotate call when the change was not seen arriving, so no probe delta that
    mixes two quotas, or follows a change still settling, counts in a phase. ``initial``: the quota (%)
    before the first change.

    Values: ``quotas`` (%, initial then one per change), ``applied_at`` (unix s per change, None where
    neither line has a timestamp), ``applied_from`` (per change: pod | scheduler | annotate | none),
    ``phase_starts`` (unix s, phases 1..n; only when every phase is bounded), ``throughput_it_s`` (per phase).
    Without both the applied and the annotate time of a change the check is not evaluable (ok None).
    """
    quotas = [initial, *[f.new for f in facts]]
    applied = [change_applied_at(ev, pod=pod, namespace=namespace, kind="compute", new=f.new) for f in facts]
    values: dict[str, Any] = {
        "quotas": quotas,
        "applied_at": [None if at is None else round(at, 3) for at, _src in applied],
        "applied_from": [src if at is not None else "annotate" if f.annotated_at is not None else "none"
                         for (at, src), f in zip(applied, facts, strict=True)],
    }
    ends: list[float] = []
    starts: list[float] = []
    for (at, _src), f in zip(applied, facts, strict=True):
        if at is not None:
            ends.append(at)
            starts.append(at + interval)
        elif f.annotated_at is not None:
            ends.append(f.annotated_at)
            starts.append(f.annotated_at + max_latency + interval)
        else:
            return Check("throughput_follows_quota", "phase boundaries known", values, None,
                         f"change to {f.value} %: neither applied nor annotate time known")
    values["phase_starts"] = [round(t, 3) for t in starts]
    tp = phase_throughput(ev, pod, ends, starts=starts)
    values["throughput_it_s"] = [None if v is None else round(v, 3) for v in tp]
    if any(v is None for v in tp):
        return Check("throughput_follows_quota", "a probe delta in every phase", values, None,
                     "not enough timestamped QUOTA_PROBE lines per phase")
    bad = []
    needed = []
    for i, (q0, q1) in enumerate(itertools.pairwise(quotas)):
        t0, t1 = tp[i], tp[i + 1]
        assert t0 is not None and t1 is not None
        factor = _step_factor(q0, q1, min_ratio, share)
        needed.append(round(factor, 3))
        if (q1 > q0 and t1 < t0 * factor) or (q1 < q0 and t1 > t0 * factor):
            bad.append(f"{q0}->{q1} %: {t0:.1f} -> {t1:.1f} it/s (x{t1 / t0:.2f}, needs "
                       f"{'>=' if q1 > q0 else '<='} x{factor:.2f})")
    values["step_needed"] = needed
    return Check("throughput_follows_quota",
                 f"each step moves throughput in its direction by >= x{min_ratio} and by >= {share} of the quota "
                 "step (log)", values, not bad, "; ".join(bad))


def judge_dynamic_sequence(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, case: str) -> Verdict:
    """COMBO-004 / 005 / 006: dynamic changes on one running W5 pod, judged from logs and metrics.

    ``plan``: ``pods`` (one), ``namespace``, ``changes`` ([{key: memory|core, value, new}] in annotate
    order), ``initial`` ({core, memory}), ``metrics_start`` / ``metrics_end`` (COMBO-004), ``skip``.

    * ``COMBO-004`` (alternating memory/core): every change logged by the scheduler in the order of the
      calls, logged by the pod, latency <= ``dynamic_max_latency_s``; the pod passes; no probe gap over
      ``max_probe_gap_s``; ``metrics_start`` shows the initial quotas and ``metrics_end`` the final ones.
    * ``COMBO-005`` (oversub + memory up/down): >= ``combo005_min_changes`` memory changes applied (in
      order, scheduler + pod line), each within the latency; the scheduler lives; the pod did not crash.
    * ``COMBO-006`` (oversub + compute): >= ``combo006_min_changes`` compute changes applied within the
      latency; the pod passes; no probe gap over ``max_probe_gap_s``; throughput follows each step by
      ``combo006_min_step_ratio`` and by ``combo006_min_step_share`` of the quota step (log), each phase
      starting ``probe_interval_s`` after its change reached the pod (:func:`_check_throughput_steps`). Extra
      metrics: ``throughput_it_s`` (it/s per phase), ``applied_at`` (unix s per change), ``applied_from``
      (pod | scheduler | annotate | none), ``phase_starts`` (unix s, phases 1..n; absent when a change has
      neither time).
    """
    if (v := plan_skip(plan, th)) is not None:
        return v
    pod, ns = plan["pods"][0], plan.get("namespace", "default")
    changes = list(plan["changes"])
    max_latency = float(combo_th(th, "dynamic_max_latency_s"))
    keys = ["dynamic_max_latency_s"]
    checks: list[Check] = [check_terminal(ev.pods, [pod])]
    checks.append(_check_no_crash(ev, pod) if case == "COMBO-005" else check_pods_succeeded(ev, [pod]))
    sched = scheduler_summary(ev)
    facts: list[ChangeFacts] = []
    if sched is None:
        checks.append(Check("changes_logged", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        # the calls on this pod (COMBO-004 annotates its memory probe beside it too)
        calls = [c for c in annotation_calls(ev) if c.get("pod") in (None, pod)]
        facts = change_facts(sched, ev.logs.get(pod), pod=pod, namespace=ns, changes=changes, calls=calls)
        if case == "COMBO-004":
            checks += _change_checks(facts, max_latency, pod, ns)
        else:
            key = "combo005_min_changes" if case == "COMBO-005" else "combo006_min_changes"
            keys.append(key)
            kind = "memory" if case == "COMBO-005" else "compute"
            checks += _count_checks(facts, int(combo_th(th, key)), max_latency, kind)
    if case in ("COMBO-004", "COMBO-006"):
        keys.append("max_probe_gap_s")
        checks.append(_check_probe_gaps(ev, pod, float(combo_th(th, "max_probe_gap_s"))))
    steps: Check | None = None
    if case == "COMBO-006" and facts:
        keys += ["combo006_min_step_ratio", "combo006_min_step_share", "probe_interval_s"]
        start_core = int((plan.get("initial") or {}).get("core", 100))
        steps = _check_throughput_steps(ev, pod, ns, facts, start_core, float(combo_th(th, "combo006_min_step_ratio")),
                                        max_latency=max_latency, interval=float(combo_th(th, "probe_interval_s")),
                                        share=float(combo_th(th, "combo006_min_step_share")))
        checks.append(steps)
    if case == "COMBO-004":
        initial: Mapping[str, Any] = plan.get("initial") or {}
        final = {"core": initial.get("core"), "memory": initial.get("memory")}
        for ch in changes:
            final["core" if _kind(str(ch["key"])) == "compute" else "memory"] = ch["value"]
        for what, q in (("metrics_start", initial), ("metrics_end", final)):
            name = plan.get(what)
            exps, cap = check_captures(ev, [name] if name else [], what)
            checks.append(cap)
            if cap.ok:
                core_value = q.get("core")
                core = None if core_value is None else int(core_value)
                mem_bytes = annotation_quota_bytes(q.get("memory"))
                checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=mem_bytes,
                                                     core=core, name=what))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    latencies = {f.value: round(f.latency_s, 3) for f in facts if f.latency_s is not None}
    status, summary = combine(checks, pass_summary=f"{sum(f.applied for f in facts)}/{len(changes)} change(s) "
                              "applied in order in place")
    if status is Status.PASS and latencies:
        summary += f"; latency max {max(latencies.values()):.1f} s"
    if status is Status.PASS and plan.get("seed_scope"):
        summary += f" (seed scope: {plan['seed_scope']})"
    metrics: dict[str, Any] = {"latency_s": latencies, "changes": [f.to_dict() for f in facts]}
    if steps is not None:
        metrics.update({k: steps.values[k] for k in ("throughput_it_s", "applied_at", "applied_from", "phase_starts")
                        if k in steps.values})
    return Verdict(status, summary, checks, combo_used(th, *keys), metrics, ev.pod_files())
