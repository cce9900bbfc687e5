"""Judgments of compute and memory quotas, static and dynamic (seed 000 sections 6 P1, 7, 17.2-17.3).

Pure functions over :class:`~xpushare.evidence.store.Evidence`: pod records and logs, ``scheduler.log``
(kubectl ``--timestamps`` lines) and ``annotations.jsonl`` (the unix time of each annotate call, written
by the backend). A dynamic change counts only when the scheduler logged ``... limit changed for pod
<ns>/<pod>: <old> -> <new>`` for that pod **and** the pod logged the library's update line; its latency
is the scheduler line's timestamp minus the annotate call (seed P1: <= 15 s). Without the annotate call's
time the latency is not evaluable (ERROR), never left out.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_scheduler_alive, check_terminal, pod_progress
from xpushare.judge.thresholds import shown, used
from xpushare.model.premises import TWO_PODS_ONE_GPU, unmet
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import client_lines, pod_log
from xpushare.parsers.scheduler_log import parse_text


def annotation_calls(ev: Evidence) -> list[dict[str, Any]]:
    """The annotate calls of the case (``annotations.jsonl``: time in unix seconds, pod, annotations)."""
    text = ev.text("annotations.jsonl") or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def check_dynamic_change(
    ev: Evidence, *, pod: str, namespace: str, kind: str, new: int, annotated_at: float | None, max_latency_s: float
) -> list[Check]:
    """Scheduler line, pod-side line and latency for one dynamic change (``kind``: memory | compute).

    ``new``: bytes (memory) or percent (compute); ``annotated_at``: unix s of the annotate call
    (``annotations.jsonl``), None when it was not recorded: the latency check is then present and not
    evaluable (ok None), so the change is never judged PASS without its latency.
    """
    sched_text = ev.text("scheduler.log")
    if sched_text is None:
        return [Check(f"{kind}_change_logged", "scheduler.log collected", {}, None, "no scheduler.log")]
    summary = parse_text(sched_text)
    changes = [
        c
        for c in summary.limit_changes
        if c.kind == kind and not c.initial and c.pod == pod and c.namespace == namespace and c.new == new
    ]
    unit = "%" if kind == "compute" else " bytes"
    line = "Compute limit changed" if kind == "compute" else "Memory limit changed"
    checks = [
        Check(
            f"{kind}_change_logged[{new}]",
            f"scheduler: '{line} for pod {namespace}/{pod}: * -> {new}{unit}'",
            {"matches": len(changes)},
            bool(changes),
            "" if changes else "no such scheduler line",
        )
    ]
    log = ev.logs.get(pod)
    if log is None:
        checks.append(Check(f"{kind}_update_in_pod[{new}]", "pod log collected", {}, None, f"no log for {pod}"))
    else:
        seen: list[client_lines.CoreLimitUpdate] | list[client_lines.MemoryLimitUpdate]
        if kind == "compute":
            seen = [
                u for u in client_lines.core_limit_updates(log)
                if u.kind in ("applied", "received") and u.percent == new
            ]
        else:
            seen = [
                u for u in client_lines.memory_limit_updates(log)
                if u.kind in ("applied", "received") and u.new_bytes == new
            ]
        checks.append(
            Check(
                f"{kind}_update_in_pod[{new}]",
                "the client library logged the new limit",
                {"matches": len(seen)},
                bool(seen),
                "" if seen else "no update line in the pod log",
            )
        )
    if annotated_at is None:
        checks.append(
            Check(
                f"{kind}_latency[{new}]",
                f"latency_s <= {max_latency_s}",
                {},
                None,
                "annotate time unknown (no annotations.jsonl entry for the change)",
            )
        )
    elif changes:
        ts = changes[0].ts
        if ts is None:
            checks.append(
                Check(
                    f"{kind}_latency[{new}]",
                    "scheduler line has a timestamp",
                    {},
                    None,
                    "scheduler.log without --timestamps",
                )
            )
        else:
            latency = ts.timestamp() - annotated_at
            checks.append(
                Check(
                    f"{kind}_latency[{new}]",
                    f"latency_s <= {max_latency_s}",
                    {"latency_s": round(latency, 3)},
                    latency <= max_latency_s,
                    "" if latency <= max_latency_s else f"took {latency:.1f} s",
                )
            )
    return checks


def judge_dynamic(
    ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, kind: str, require_pass: bool
) -> Verdict:
    """FUNC-010/011/012: every planned change logged by the scheduler and the pod, within the latency bound.

    ``plan["changes"]`` lists ``{"value": <annotation value>, "new": <bytes or percent>}`` in order; the
    annotate times come from ``annotations.jsonl``. ``plan["probe_started"]`` (set by the act): the W5
    probe loop was seen running before the changes were made; False or absent is not evaluable (ERROR),
    since the changes were then not made while the workload ran. ``require_pass``: the pod must also end
    with PASS (quota up / compute); otherwise it may end with PASS or a quota rejection, but not another
    failure.
    """
    pod, namespace = plan["pods"][0], plan.get("namespace", "default")
    calls = annotation_calls(ev)
    checks: list[Check] = [check_terminal(ev.pods, [pod])]
    if require_pass:
        checks.append(check_pods_succeeded(ev, [pod]))
    else:
        checks.append(_check_no_crash(ev, pod))
    checks.append(_check_probe_started(plan))
    latencies: dict[str, float] = {}
    for i, change in enumerate(plan["changes"]):
        when = calls[i]["time"] if i < len(calls) else None
        found = check_dynamic_change(
            ev,
            pod=pod,
            namespace=namespace,
            kind=kind,
            new=int(change["new"]),
            annotated_at=when,
            max_latency_s=float(th["dynamic_max_latency_s"]),
        )
        checks += found
        for c in found:
            if c.name.startswith(f"{kind}_latency") and "latency_s" in c.values:
                latencies[str(change["value"])] = c.values["latency_s"]
    alive = check_scheduler_alive(ev)
    if alive is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary=f"{len(plan['changes'])} {kind} change(s) applied in place")
    if status is Status.PASS and latencies:
        summary += f"; latency max {max(latencies.values()):.1f} s"
    return Verdict(status, summary, checks, used(th), {"latency_s": latencies}, ev.pod_files())


def _check_probe_started(plan: Mapping[str, Any]) -> Check:
    """The act saw the first ``QUOTA_PROBE`` line (within ``pod_timeout_s``) before it annotated."""
    started = plan.get("probe_started")
    if started is True:
        return Check("probe_started", "the probe loop ran before the first change", {"probe_started": True}, True)
    detail = (
        "plan.json does not record probe_started"
        if started is None
        else "no QUOTA_PROBE line within pod_timeout_s: the changes were not made while the probe loop ran"
    )
    return Check(
        "probe_started", "the probe loop ran before the first change", {"probe_started": started}, None, detail
    )


def _check_no_crash(ev: Evidence, pod: str) -> Check:
    facts = pod_progress(ev, pod)
    log = ev.logs.get(pod)
    if log is None or facts["phase"] is None:
        return Check("pod_no_crash", "pod passed or refused an allocation", facts, None, "no pod evidence")
    passed = facts["phase"] == "Succeeded" and facts["pass_marker"]
    refused = bool(pod_log.oom_markers(log))
    ok = passed or refused
    return Check(
        "pod_no_crash",
        "pod ended with PASS, or with a quota rejection (no other failure)",
        {**facts, "refused": refused},
        ok,
        "" if ok else "the pod failed for another reason",
    )


def phase_throughput(
    ev: Evidence, pod: str, boundaries: Sequence[float], *, starts: Sequence[float] | None = None
) -> list[float | None]:
    """Mean iterations/s of a W5 pod in each phase, from the deltas of its ``QUOTA_PROBE`` lines.

    Phase 0 runs from the first probe to ``boundaries[0]``; phase ``i`` (1..n) from ``starts[i - 1]`` to
    ``boundaries[i]`` (the last one to the end of the log). ``boundaries[i]``: unix s at which phase ``i``
    ends (change ``i`` may have taken effect from then on); ``starts[i]``: unix s at which phase ``i + 1``
    begins (change ``i`` certainly in force; default ``boundaries[i]``), so ``starts[i] - boundaries[i]`` s
    after each change are counted in no phase. Both lists have one entry per change, in order.

    Probe lines (seed 000 / docs/sut/workloads.md §inline: ``elapsed=<s> it=<cumulative>
    it_per_sec=<cumulative average>``) are timed by their kubectl ``--timestamps``; each delta
    (iterations / s of the workload's ``elapsed``, between consecutive probes) counts in the phase that
    holds both of its probes, so an interval straddling a boundary or inside a skipped span counts nowhere.
    Lines without a timestamp are ignored. Returns ``len(boundaries) + 1`` values (it/s); None where a phase
    has no delta.
    """
    probes = [p for p in pod_log.quota_probes(ev.logs.get(pod, "")) if p.ts is not None]
    opens = list(boundaries) if starts is None else list(starts)
    if len(opens) != len(boundaries):
        raise ValueError(f"{len(boundaries)} boundaries but {len(opens)} starts")
    phases = list(zip([float("-inf"), *opens], [*boundaries, float("inf")], strict=True))
    sums: list[list[float]] = [[] for _ in phases]
    for a, b in itertools.pairwise(probes):
        ta, tb = a.ts.timestamp(), b.ts.timestamp()  # type: ignore[union-attr]
        dt = b.elapsed_s - a.elapsed_s
        if dt <= 0:
            continue
        for i, (lo, hi) in enumerate(phases):
            if lo <= ta and tb <= hi:
                sums[i].append((b.iterations - a.iterations) / dt)
    return [sum(v) / len(v) if v else None for v in sums]


def change_applied_at(ev: Evidence, *, pod: str, namespace: str, kind: str, new: int) -> tuple[float | None, str]:
    """Unix s at which one dynamic change reached the pod, and where that time comes from.

    ``kind``: ``compute`` (``new`` in percent) or ``memory`` (bytes). Source, in order: ``pod``, the
    client library's first update line with the new value (INFO applied, else DEBUG received;
    docs/sut/client.md §memory-quota); ``scheduler``, the scheduler's ``<Compute|Memory> limit changed for pod
    <ns>/<pod>: * ->
    <new>`` line (docs/sut/log.md §dynamic-limits). Both are kubectl timestamps of the node, the clock of the probe
    lines. ``(None, "none")`` when neither line is there with a timestamp.
    """
    log = ev.logs.get(pod)
    if log is not None:
        updates: Sequence[Any] = (
            [u for u in client_lines.core_limit_updates(log) if u.percent == new]
            if kind == "compute"
            else [u for u in client_lines.memory_limit_updates(log) if u.new_bytes == new]
        )
        for wanted in ("applied", "received"):
            hit = next((u for u in updates if u.kind == wanted and u.ts is not None), None)
            if hit is not None:
                return hit.ts.timestamp(), "pod"
    sched_text = ev.text("scheduler.log")
    if sched_text is not None:
        for c in parse_text(sched_text).limit_changes:
            mine = c.kind == kind and not c.initial and c.pod == pod and c.namespace == namespace and c.new == new
            if mine and c.ts is not None:
                return c.ts.timestamp(), "scheduler"
    return None, "none"


def judge_dynamic_compute(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FUNC-012: 30 -> 80 -> 100 %: changes applied (scheduler + pod, <= 15 s) and throughput rises by phase.

    Thresholds: ``dynamic_max_latency_s`` (15), ``func012_min_gain`` (throughput(80) / throughput(30),
    default 1.3), ``func012_max_drop`` (throughput(100) may be at most this fraction below 80 %: 0.1),
    ``probe_interval_s`` (10, the W5 ``--interval-s``).

    Phases (:func:`phase_throughput`): the one before change ``i`` ends when the change reached the pod
    (:func:`change_applied_at`; else at its annotate call); the one after it starts one probe interval
    after the change reached the pod (else one probe interval after annotate time + ``dynamic_max_latency_s``),
    so no probe delta that mixes two quotas, or follows a change still settling, counts in a phase.
    Without the annotate times (``annotations.jsonl``) the throughput check is not evaluable (ERROR).
    Metrics: ``throughput_it_s`` (it/s per phase), ``phases``, ``applied_at`` (unix s per change),
    ``applied_from`` (pod | scheduler | annotate), ``phase_starts`` (unix s, phases 1..n).
    """
    verdict = judge_dynamic(ev, th, plan, kind="compute", require_pass=True)
    pod, namespace = plan["pods"][0], plan.get("namespace", "default")
    changes = list(plan["changes"])
    times = [float(c["time"]) for c in annotation_calls(ev)][: len(changes)]
    max_latency, interval = float(th["dynamic_max_latency_s"]), float(th["probe_interval_s"])
    applied = [change_applied_at(ev, pod=pod, namespace=namespace, kind="compute", new=int(c["new"])) for c in changes]
    values: dict[str, Any] = {
        "throughput_it_s": [None] * (len(changes) + 1),
        "phases": ["initial", *[str(c["value"]) for c in changes]],
        "applied_at": [None if at is None else round(at, 3) for at, _src in applied],
        "applied_from": [src if at is not None else "annotate" for at, src in applied],
    }
    checks = list(verdict.checks)
    if len(times) < len(changes):
        checks.append(Check("throughput_by_phase", "phase boundaries known", values, None, "annotate time missing"))
    else:
        ends = [at if at is not None else t for (at, _src), t in zip(applied, times, strict=True)]
        starts = [
            (at if at is not None else t + max_latency) + interval for (at, _src), t in zip(applied, times, strict=True)
        ]
        values["phase_starts"] = [round(t, 3) for t in starts]
        values["throughput_it_s"] = tp = phase_throughput(ev, pod, ends, starts=starts)
        if len(tp) < 3 or any(v is None for v in tp[:3]):
            checks.append(
                Check(
                    "throughput_by_phase",
                    "a probe delta in every phase",
                    values,
                    None,
                    "not enough QUOTA_PROBE lines per phase",
                )
            )
        else:
            t30, t80, t100 = tp[0], tp[1], tp[2]
            gain, drop = float(th["func012_min_gain"]), float(th["func012_max_drop"])
            ok = t80 >= t30 * gain and t100 >= t80 * (1 - drop)  # type: ignore[operator]
            checks.append(
                Check(
                    "throughput_by_phase",
                    f"tp80 >= {gain} * tp30 and tp100 >= (1 - {drop}) * tp80",
                    values,
                    ok,
                    "" if ok else f"throughput {[round(v or 0, 1) for v in tp]}",
                )
            )
    status, summary = combine(checks, pass_summary=verdict.summary if verdict.status is Status.PASS else "")
    return Verdict(status, summary, checks, used(th), {**verdict.metrics, **values}, verdict.evidence)


def judge_static_compute(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FUNC-008: one pod per quota (25/50/75 %); runtimes strictly decrease with the quota.

    "Strictly" with a margin (seed 000 §7 "耗时与配额单调一致", §17.2 ``d25>d50>d75``): each runtime is at least
    ``func008_min_step_ratio`` (default 1.1) times the next higher quota's, so that the equal runtimes of an
    unenforced quota cannot pass by the order of their noise (the ideal steps are 2.0 and 1.5). The error
    of each runtime ratio against the ideal (runtime ~ 1/quota, relative to the highest quota) is recorded,
    not judged here (PERF-011 judges precision).
    """
    quota_pods: dict[str, str] = plan["quota_pods"]
    names = list(quota_pods.values())
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    runtimes = {q: pod_progress(ev, p)["runtime_s"] for q, p in quota_pods.items()}
    qs = sorted(runtimes, key=int)
    values: dict[str, Any] = {"runtime_s": runtimes}
    if all(runtimes[q] is not None for q in qs):
        step = float(th.get("func008_min_step_ratio", 1.0))
        steps = {f"d{a}/d{b}": round(runtimes[a] / runtimes[b], 4) for a, b in itertools.pairwise(qs)}
        values["step_ratio"] = steps
        mono = all(r >= step and r > 1 for r in steps.values())
        top = qs[-1]
        errors = {q: round((runtimes[q] / runtimes[top]) / (int(top) / int(q)) - 1, 4) for q in qs}
        values["error_vs_ideal"] = errors
        expr = " > ".join(f"d{q}" for q in qs) + f" (each step >= x{step:g})"
        checks.append(Check("monotonic", expr, values, mono, "" if mono else f"runtimes {runtimes}"))
    status, summary = combine(checks, pass_summary="runtime decreases with the compute quota")
    return Verdict(status, summary, checks, used(th), values, ev.pod_files())


def check_higher_quota_faster(r_low: float, r_high: float, *, q_low: object, q_high: object,
                              th: Mapping[str, Any], ratio_param: str) -> tuple[Check, float | None]:
    """``higher_quota_faster`` of a low/high core-quota pair on one GPU (FUNC-009, COMBO-002): the low-quota
    pod took longer, and ``runtime_low / runtime_high >= th[ratio_param]`` ("clearly faster", seed 000 §7/§8;
    a run stored before the threshold existed is judged at 1.0, the bash rule). Runtimes in seconds; returns
    the check and the ratio (None when ``r_high`` is 0)."""
    min_ratio = float(th.get(ratio_param, 1.0))
    ratio = r_low / r_high if r_high else None
    ok = ratio is not None and r_low > r_high and ratio >= min_ratio
    rounded = round(ratio, 4) if ratio is not None else None
    text = shown(ratio, min_ratio, digits=4) if ratio is not None else "unknown"
    return Check("higher_quota_faster", f"runtime_{q_low} > runtime_{q_high} and runtime_{q_low} / runtime_{q_high} "
                 f">= {ratio_param} ({min_ratio:g})", {f"runtime_{q_low}": r_low, f"runtime_{q_high}": r_high,
                                                       "ratio": rounded}, ok,
                 "" if ok else f"{r_low:.2f} s vs {r_high:.2f} s: ratio {text} < {min_ratio:g}"), ratio


def judge_mixed_compute(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FUNC-009: 30 % and 60 % pods on one GPU; the 60 % pod is faster (runtime_30 > runtime_60).

    ``plan``: ``pods`` (all, fillers included), ``pair`` ([30 % pod, 60 % pod]). As COMBO-002
    (:func:`~xpushare.judge.combination.judge_compute_pair`): every pod must pass first (a failed or unfinished pod
    is FAIL, missing pod evidence ERROR, whatever the placement); then only when the registration lines put
    both quota pods on one (node, GPU) (pods.json ``node``/``gpu``) is ``runtime_30 > runtime_60`` judged.
    Not co-located, or no registration GPU for either pod: SKIP (never PASS). Metrics: ``placement``
    ({pod: [node, gpu]}), ``runtime_30`` / ``runtime_60`` (s), ``ratio_30_over_60``.
    """
    low, high = plan["pair"]
    names = plan["pods"]
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    a, b = ev.pod(low), ev.pod(high)
    placement = {p.name: [p.node, p.gpu] for p in (a, b) if p}
    r_low, r_high = pod_progress(ev, low)["runtime_s"], pod_progress(ev, high)["runtime_s"]
    values: dict[str, Any] = {"runtime_30": r_low, "runtime_60": r_high, "placement": placement}
    status, summary = combine(checks, pass_summary="")
    if status is not Status.PASS:  # an unmet premise must not hide a failed pod or missing evidence
        return Verdict(status, summary, checks, used(th), values, ev.pod_files())
    if a is None or b is None or a.gpu is None or b.gpu is None:
        return Verdict(
            Status.ERROR,
            unmet(TWO_PODS_ONE_GPU, f"co-location not confirmed: no registration GPU for the pair ({placement})"),
            checks,
            used(th),
            values,
            ev.pod_files(),
        )
    if (a.node, a.gpu) != (b.node, b.gpu):
        return Verdict(
            Status.ERROR,
            unmet(TWO_PODS_ONE_GPU, f"co-location on one GPU not obtained ({placement})"),
            checks,
            used(th),
            values,
            ev.pod_files(),
        )
    if r_low is None or r_high is None:
        checks.append(Check("higher_quota_faster", "runtime_30 > runtime_60", values, None, "runtime missing"))
    else:
        check, ratio = check_higher_quota_faster(r_low, r_high, q_low=30, q_high=60, th=th,
                                                 ratio_param="func009_min_ratio")
        values["ratio_30_over_60"] = round(ratio, 4) if ratio is not None else None
        checks.append(check)
    status, summary = combine(checks, pass_summary="the 60 % pod finished faster than the 30 % pod on one GPU")
    return Verdict(status, summary, checks, used(th), values, ev.pod_files())
