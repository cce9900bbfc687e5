"""PERF-007 (dynamic quota latency), PERF-008 (scale ladder) and PERF-009/010 (linearity on one card and
across cards) judgments and the W5 probe series they read. Model, evidence and thresholds as in
:mod:`xpushare.judge.performance` (the suite's public face, which re-exports these judgments).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.scrape_capture import split_http
from xpushare.evidence.store import Evidence
from xpushare.judge.checks import pod_progress
from xpushare.judge.performance_checks import (
    check_baseline,
    check_succeeded,
    perf_skip,
    perf_verdict,
    read_jsonl,
    runtimes,
)
from xpushare.judge.quota import annotation_calls, check_dynamic_change
from xpushare.judge.stats import rounded
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import pod_log
from xpushare.parsers.metrics import parse_exposition


def probe_points(ev: Evidence, pod: str) -> list[tuple[float, int]]:
    """``(unix time, cumulative iterations)`` of a W5 pod's QUOTA_PROBE lines (kubectl timestamps)."""
    return [(p.ts.timestamp(), p.iterations) for p in pod_log.quota_probes(ev.logs.get(pod, "")) if p.ts is not None]


def throughput_series(points: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """``(end time, iterations/s)`` of each interval between consecutive probe points."""
    return [(tb, (ib - ia) / (tb - ta)) for (ta, ia), (tb, ib) in itertools.pairwise(points) if tb > ta]


def step_time(points: Sequence[tuple[float, int]], at: float, settle_s: float) -> dict[str, Any]:
    """Equivalent step time of a throughput change after ``at`` (unix s), from cumulative iterations.

    ``r0``: mean rate before ``at`` (first probe to the last probe at or before ``at``); ``r1``: mean rate
    from ``at + settle_s`` to the end. With the last pre-change point ``(ta, ia)`` and the first point
    after ``at + settle_s`` ``(tm, im)``, a single step from ``r0`` to ``r1`` at ``t`` explains
    ``im - ia = r0 (t - ta) + r1 (tm - t)``, so ``t = (im - ia + r0 ta - r1 tm) / (r0 - r1)``, clipped to
    ``[ta, tm]``. Resolution is below one probe interval. Returns the inputs and ``t`` (None when there
    are not enough points or ``r0 == r1``).
    """
    pre = [p for p in points if p[0] <= at]
    post = [p for p in points if p[0] >= at + settle_s]
    out: dict[str, Any] = {"r0": None, "r1": None, "t": None, "pre_points": len(pre), "post_points": len(post)}
    if len(pre) < 2 or len(post) < 2:
        return out
    (t0, i0), (ta, ia) = pre[0], pre[-1]
    (tm, im), (te, ie) = post[0], post[-1]
    r0 = (ia - i0) / (ta - t0) if ta > t0 else None
    r1 = (ie - im) / (te - tm) if te > tm else None
    out.update(r0=rounded(r0, 3), r1=rounded(r1, 3))
    if r0 is None or r1 is None or r0 == r1:
        return out
    t = (im - ia + r0 * ta - r1 * tm) / (r0 - r1)
    out["t"] = min(max(t, ta), tm)
    return out


def metric_observations(ev: Evidence, pod: str, name: str = "metrics_probe.jsonl") -> list[dict[str, Any]]:
    """Each scrape of ``name`` (JSON lines ``{"t0", "t1", "file"}``) with the pod's configured and effective
    core quota (``client_core_quota_config_percent`` / ``..._effective_percent``; None when absent)."""
    out = []
    for rec in read_jsonl(ev, name):
        text = ev.text(str(rec.get("file"))) if rec.get("file") else None
        cfg = eff = None
        code = None
        if text is not None:
            body, code = split_http(text)
            expo = parse_exposition(body)
            cfg_v = [s.value for s in expo.values("client_core_quota_config_percent") if s.label("pod") == pod]
            eff_v = [s.value for s in expo.values("client_core_quota_effective_percent") if s.label("pod") == pod]
            cfg = cfg_v[-1] if cfg_v else None
            eff = eff_v[-1] if eff_v else None
        out.append({"t0": rec.get("t0"), "t1": rec.get("t1"), "http": code, "config": cfg, "effective": eff})
    return out


def judge_dynamic_latency(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-007: W5 at ``from`` %, annotated to ``to`` % while it runs; two latencies, each <= 15 s.

    * metric latency: first scrape (``metrics_probe.jsonl``) whose ``client_core_quota_config_percent`` of
      the pod equals ``to``, its completion time minus the annotate call (``annotations.jsonl``);
    * throughput latency: the equivalent step time of the W5 throughput (:func:`step_time`, from the
      probe lines' kubectl timestamps) minus the annotate call; the rate must rise by
      ``perf007_min_gain`` (after / before).
    The scheduler's ``Compute limit changed`` line and the pod's update line are checked too
    (:func:`~xpushare.judge.quota.check_dynamic_change`). Clocks: annotate times are taken on the
    machine running the tool, kubectl timestamps by the node: they must be NTP-synchronised.
    """
    pod = plan["pods"][0]
    q_to = int(plan["to"])
    limit = float(th["dynamic_max_latency_s"])
    calls = annotation_calls(ev)
    checks = [check_succeeded(ev, [pod])]
    metrics: dict[str, Any] = {"from": plan.get("from"), "to": q_to}
    if not calls:
        checks.append(Check("annotated", "annotations.jsonl has the annotate call", {}, None, "no annotate call"))
        return perf_verdict(ev, th, checks, metrics, "")
    at = float(calls[0]["time"])
    metrics["annotated_at"] = at
    checks += check_dynamic_change(ev, pod=pod, namespace=plan.get("namespace", "default"), kind="compute",
                                   new=q_to, annotated_at=at, max_latency_s=limit)
    obs = metric_observations(ev, pod)
    seen = next((o for o in obs if o["config"] is not None and int(o["config"]) == q_to and o["t1"]), None)
    metrics["metric_scrapes"] = len(obs)
    if seen is None:
        checks.append(Check("metric_latency", f"exported config percent == {q_to} within the polls",
                            {"scrapes": len(obs), "last": obs[-1] if obs else None},
                            False if obs else None,
                            "the exported value never changed" if obs else "no metrics scrape"))
    else:
        lat = float(seen["t1"]) - at
        metrics["metric_latency_s"] = round(lat, 3)
        checks.append(Check("metric_latency", f"scrape_time - annotate_time <= dynamic_max_latency_s ({limit})",
                            {"latency_s": round(lat, 3), "effective": seen["effective"]}, lat <= limit,
                            "" if lat <= limit else f"exported after {lat:.1f} s"))
    points = probe_points(ev, pod)
    settle = float(th["perf007_settle_s"])
    step = step_time(points, at, settle)
    metrics["throughput"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in step.items()}
    gain_min = float(th["perf007_min_gain"])
    r0, r1 = step["r0"], step["r1"]
    if r0 is None or r1 is None:
        checks.append(Check("throughput_latency", "probe lines before and after the change", step, None,
                            "not enough QUOTA_PROBE lines (with kubectl timestamps) around the change"))
    else:
        gain = r1 / r0 if r0 > 0 else math.inf
        metrics["throughput"]["gain"] = rounded(gain, 3)
        rose = gain >= gain_min
        checks.append(Check("throughput_changed", f"rate_after / rate_before >= perf007_min_gain ({gain_min})",
                            {"r0": r0, "r1": r1, "gain": rounded(gain, 3)}, rose,
                            "" if rose else f"throughput {r0:.1f} -> {r1:.1f} it/s"))
        if rose and step["t"] is not None:
            lat = step["t"] - at
            metrics["throughput_latency_s"] = round(lat, 3)
            checks.append(Check("throughput_latency",
                                f"step_time - annotate_time <= dynamic_max_latency_s ({limit})",
                                {"latency_s": round(lat, 3), "step_time": round(step["t"], 3)}, lat <= limit,
                                "" if lat <= limit else f"throughput changed after {lat:.1f} s"))
    summary = (f"{plan.get('from')}% -> {q_to}%: exported after {metrics.get('metric_latency_s')} s, "
               f"throughput changed after {metrics.get('throughput_latency_s')} s (<= {limit:g} s)")
    return perf_verdict(ev, th, checks, metrics, summary)


def ladder_steps(ev: Evidence, plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per step ``n``: per-pod throughput (runs/s = 1 / runtime), aggregate throughput
    ``n / makespan`` (runs/s; makespan = last finish - first start from ``pods.json``), and counts."""
    out = []
    for step in plan.get("steps") or []:
        pods = list(step["pods"])
        recs = [r for p in pods if (r := ev.pod(p)) is not None]
        rts = runtimes(ev, pods)
        per_pod = {p: (1 / v if v else None) for p, v in rts.items()}
        starts = [r.started for r in recs if r.started is not None]
        ends = [r.finished for r in recs if r.finished is not None]
        makespan = max(ends) - min(starts) if starts and ends and len(ends) == len(pods) else None
        ok = sum(1 for r in recs if r.phase == "Succeeded")
        tps = [v for v in per_pod.values() if v is not None]
        out.append({
            "n": int(step["n"]),
            "succeeded": ok,
            "makespan_s": rounded(makespan, 3),
            "aggregate_runs_per_s": rounded(len(pods) / makespan, 5) if makespan else None,
            "per_pod_runs_per_s": {p: rounded(v, 5) for p, v in per_pod.items()},
            "per_pod_mean": rounded(sum(tps) / len(tps), 5) if tps else None,
            "per_pod_min": rounded(min(tps), 5) if tps else None,
        })
    return out


def judge_scale_ladder(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-008: 2/4/8/16... pods (capped by capacity; the cap is in the summary), every pod succeeds, and
    no cliff: each step's aggregate throughput >= (1 - ``perf008_max_drop``) x the best earlier step.

    ``plan``: ``steps`` [{"n", "pods"}], ``cap``, ``cap_reason``, ``dropped`` (steps above the cap).
    """
    if plan.get("skip"):
        return perf_skip(ev, th, str(plan["skip"]))
    steps = ladder_steps(ev, plan)
    checks = [check_succeeded(ev, [p for s in plan["steps"] for p in s["pods"]], "all_pods_succeeded")]
    drop = float(th["perf008_max_drop"])
    cliffs = []
    best = 0.0
    for s in steps:
        agg = s["aggregate_runs_per_s"]
        if agg is None:
            continue
        if best and agg < (1 - drop) * best:
            cliffs.append(f"n={s['n']}: {agg:.4g} < {(1 - drop):.2f} x {best:.4g} runs/s")
        best = max(best, agg)
    known = all(s["aggregate_runs_per_s"] is not None for s in steps)
    checks.append(Check("no_cliff", f"aggregate_n >= (1 - perf008_max_drop ({drop})) * max(aggregate of earlier steps)",
                        {"aggregate_runs_per_s": {s["n"]: s["aggregate_runs_per_s"] for s in steps}},
                        (not cliffs) if known else None,
                        "; ".join(cliffs) if cliffs else ("" if known else "makespan unknown for a step")))
    cap = f"capped at {plan.get('cap')} pods ({plan.get('cap_reason')})"
    if plan.get("dropped"):
        cap += f"; steps dropped: {plan['dropped']}"
    metrics = {"steps": steps, "cap": plan.get("cap"), "cap_reason": plan.get("cap_reason"),
               "dropped": plan.get("dropped") or []}
    v = perf_verdict(ev, th, checks, metrics, f"ladder {[s['n'] for s in steps]} without a cliff; {cap}")
    if v.status is not Status.PASS:
        v.summary += f" ({cap})"
    return v


def gpu_groups(ev: Evidence, pods: Sequence[str]) -> dict[str, list[str]]:
    """Pods grouped by ``<node>/<gpu uuid>`` (from ``pods.json``); pods without a GPU identity are left out."""
    groups: dict[str, list[str]] = {}
    for p in pods:
        r = ev.pod(p)
        if r is not None and r.gpu is not None:
            groups.setdefault(f"{r.node}/{r.gpu}", []).append(p)
    return groups


def judge_linearity(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, multi_card: bool) -> Verdict:
    """PERF-009 (one card shared by ``c`` pods) and PERF-010 (pods across cards), no quotas.

    Per GPU with ``c`` pods: ``ratio = span / baseline`` against the ideal ``c`` (time-sharing one GPU), where
    ``span`` is the time from the first of the GPU's pods starting its work to the last one finishing (from the
    timestamped runtime lines: pods never start at once, and a pod that starts late runs part of its work with
    fewer neighbours, so their mean runtime is below ``c x baseline`` on a perfectly shared GPU); without
    timestamps, the mean runtime. ``|ratio / c - 1| <= perf_linearity_tolerance`` (default 0.10; the bash band
    was [0.6c, 1.9c]); PERF-010's pods on separate GPUs are each their own span.
    A missing runtime fails the case (the bash divided by the pod count anyway). PERF-009 judges the
    GPUs with >= 2 pods and is SKIP without one; PERF-010 judges every GPU and is SKIP on fewer than 2; but a
    load pod that failed is FAIL (and one without a record or log, or stopped by a missing Python module,
    ERROR) before any placement is looked at (a scheduler that crashed registers too few pods to show the
    placement, and that must not hide as SKIP).
    """
    pods = list(plan["load_pods"])
    groups = gpu_groups(ev, pods)
    placement = {g: len(ps) for g, ps in groups.items()}
    succeeded = check_succeeded(ev, pods, "load_pods_succeeded")
    if succeeded.ok is not True:  # FAIL, or ERROR (a pod's record/log missing, a node prerequisite): never SKIP
        status, summary = combine([succeeded], pass_summary="")
        return Verdict(status, summary, [succeeded], used(th), {"placement": placement}, ev.pod_files())
    if multi_card and len(groups) < 2:
        return perf_skip(ev, th, f"fewer than 2 distinct GPUs used ({placement})", metrics={"placement": placement})
    judged = groups if multi_card else {g: ps for g, ps in groups.items() if len(ps) >= 2}
    if not judged:
        return perf_skip(ev, th, f"no GPU shared by 2 or more pods ({placement or 'no GPU identity'})",
                     metrics={"placement": placement})
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    checks.append(succeeded)
    tol = float(th["perf_linearity_tolerance"])
    rows = {}
    for g, ps in judged.items():
        rts = [pod_progress(ev, p)["runtime_s"] for p in ps]
        if base is None or any(v is None for v in rts):
            continue
        mean = sum(rts) / len(rts)
        intervals = [pod_log.run_interval(ev.logs.get(p) or "") for p in ps]
        known = [iv for iv in intervals if iv is not None]
        span = max(e for _, e in known) - min(s for s, _ in known) if len(known) == len(ps) else None
        ratio = (span if span is not None else mean) / base
        rows[g] = {"pods": len(ps), "mean_runtime_s": round(mean, 3), "span_s": rounded(span, 3),
                   "ratio": round(ratio, 4),
                   "ratio_of": "span" if span is not None else "mean_runtime", "ideal": len(ps),
                   "error": round(ratio / len(ps) - 1, 4)}
    if base is not None:
        bad = [f"{g}: {r['ratio']} vs {r['ideal']}" for g, r in rows.items() if abs(r["error"]) > tol]
        complete = len(rows) == len(judged)
        checks.append(Check("linearity", f"|span / baseline / pods_on_gpu - 1| <= perf_linearity_tolerance "
                                         f"({tol}) per GPU", {"baseline_s": rounded(base, 3), "gpus": rows},
                            (not bad) if complete else None,
                            "; ".join(bad) if bad else ("" if complete else "a runtime is missing")))
    metrics = {"baseline_s": rounded(base, 3), "gpus": rows, "placement": placement, "tolerance": tol}
    what = "across cards" if multi_card else "on one card"
    return perf_verdict(ev, th, checks, metrics, f"{len(pods)} pods {what}: runtime ~ pods per GPU within ±{tol:.0%}")
