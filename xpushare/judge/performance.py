"""Judgments of the performance suite PERF-001..011 (seed 000 sections 6 P1, 9, 16.4, 17.4).

Pure functions from a case's stored evidence (:class:`~xpushare.evidence.store.Evidence`: ``pods.json``,
``pods/*.log``, ``scheduler.log``, ``annotations.jsonl``, scraped metrics files) and the case's
``plan.json`` to a :class:`~xpushare.model.verdict.Verdict`; nothing here reads live state, so
``invoke judge --run-id X --set perf_quota_tolerance=0.1`` re-judges a stored run offline.

Quota model (docs/sut/scheduler.md §compute-quota): a core limit is a hard cap. A pod at ``q`` % alone on its GPU runs
``100 / q`` times as long as the same workload without a limit (its baseline ``B``). Limits of one GPU
that sum to ``S > 100`` are scaled by ``100 / S``. Hence the ideal runtime of a pod is
``B * 100 / q_eff`` and its **error** is ``runtime / ideal - 1`` (a fraction: -0.05 = 5 % faster than
ideal, i.e. the cap let through 5 % more compute than configured). Unlike the bash harness (±40 %), the
seed's tolerances are the defaults: ±8 % single task, ±10 % mixed on one GPU, ±12 % on a T4.

Every ratio is recorded with its inputs in the verdict's metrics (runtimes in seconds, ratios unitless).
Common measurements of every case (recorded, not judged): GPU utilisation p50/p95 per GPU from
``remote_<node>_dmon.txt`` (``sm`` column, percent) or the node sampler's ``sampler/<host>_gpu.csv``, and
the scheduler's LOCK_OK / DROP_LOCK counts and rates (per second over the log's time span).
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
    common_measurements,
    gpu_utilisation,
    ideal_factor,
    perf_premise_error,
    perf_skip,
    perf_verdict,
    read_jsonl,
    runtime_error,
    runtimes,
    scheduler_rates,
    tolerance_for,
)
from xpushare.judge.performance_dynamic import (
    gpu_groups,
    judge_dynamic_latency,
    judge_linearity,
    judge_scale_ladder,
    ladder_steps,
    metric_observations,
    probe_points,
    step_time,
    throughput_series,
)
from xpushare.judge.stats import median, rounded
from xpushare.model.premises import TWO_PODS_ONE_GPU
from xpushare.model.verdict import Check, Verdict

__all__ = [
    "baseline_drift",
    "check_colocated",
    "check_quota_precision",
    "common_measurements",
    "gpu_groups",
    "gpu_utilisation",
    "ideal_factor",
    "judge_baseline",
    "judge_dynamic_latency",
    "judge_linearity",
    "judge_mixed",
    "judge_overhead",
    "judge_oversub_cost",
    "judge_quota_ladder",
    "judge_scale_ladder",
    "ladder_steps",
    "metric_observations",
    "probe_points",
    "read_jsonl",
    "runtime_error",
    "runtimes",
    "scheduler_rates",
    "split_http",
    "step_time",
    "throughput_series",
    "tolerance_for",
]


# ------------------------------------------------------------------------------------------------ PERF-001


def judge_baseline(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-001: the baseline workload (W6 on CUDA, W7 on NPU) without a quota, per GPU model.

    PASS: every baseline pod succeeded and the median runtime >= ``perf_baseline_min_s``. Metrics:
    ``baseline_runtime_s`` (median), every sample, ``gpu_model``, ``workload``, node and GPU per pod.
    """
    pods = list(plan.get("baseline_pods") or plan.get("pods") or [])
    checks, base = check_baseline(ev, th, pods)
    samples = runtimes(ev, pods)
    where = {p: [r.node, r.gpu] for p in pods if (r := ev.pod(p))}
    metrics = {
        "gpu_model": plan.get("gpu_model"),
        "workload": plan.get("workload"),
        "baseline_runtime_s": rounded(base, 3),
        "samples_s": samples,
        "placement": where,
    }
    vals = [v for v in samples.values() if v is not None]
    if len(vals) > 1:
        mean = sum(vals) / len(vals)
        metrics["cv"] = rounded(math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) / mean)
    summary = f"baseline {plan.get('workload')} on {plan.get('gpu_model')}: {base:.2f} s" if base else ""
    return perf_verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-003 / 011


def judge_quota_ladder(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, judge_error: bool) -> Verdict:
    """PERF-011 (``judge_error``) and PERF-003: one pod at a time at each quota, against the baseline.

    ``plan``: ``baseline_pods`` (no quota; with ``perf_baseline_bracket`` one before and one after the
    quota pods) and ``quota_pods`` ``{"25": pod, ...}``. For each quota ``q``: ``ratio_q = runtime_q /
    baseline`` (the median sample, s) against the ideal ``100 / q``; ``error_q = ratio_q / ideal - 1``.
    Checks: baseline (guard), every pod succeeded, runtimes strictly decrease with the quota and, when
    ``judge_error``, ``|error_q| <= perf_quota_tolerance`` for every quota (seed P1: ±8 %) against every
    baseline sample: within against all of them is PASS, beyond against all of them is FAIL, and a
    verdict that the baseline's drift during the case decides is ERROR (inconclusive), never PASS.
    """
    quota_pods: dict[str, str] = dict(plan["quota_pods"])
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    samples = [v for v in runtimes(ev, plan["baseline_pods"]).values() if v is not None]
    checks.append(check_succeeded(ev, list(quota_pods.values()), "quota_pods_succeeded"))
    rts = {q: pod_progress(ev, p)["runtime_s"] for q, p in quota_pods.items()}
    qs = sorted(rts, key=float)
    tol, tol_name = tolerance_for(th, plan, mixed=False)
    metrics: dict[str, Any] = {"baseline_s": rounded(base, 3), "runtime_s": rts, "tolerance": tol,
                               "tolerance_param": tol_name}
    if len(samples) > 1:
        metrics.update(baseline_samples_s=[rounded(v, 3) for v in samples],
                       baseline_drift=rounded(baseline_drift(samples)))
    if all(rts[q] is not None for q in qs):
        mono = all(rts[a] > rts[b] for a, b in itertools.pairwise(qs))
        checks.append(Check("monotonic", " > ".join(f"runtime_{q}" for q in qs), {"runtime_s": rts}, mono,
                            "" if mono else f"runtimes {rts}"))
    if base is not None and all(rts[q] is not None for q in qs):
        rows = {}
        for q in qs:
            factor = ideal_factor(float(q))
            rows[q] = {
                "runtime_s": round(rts[q], 3),
                "ratio_vs_baseline": round(rts[q] / base, 4),
                "ideal_ratio": round(factor, 4),
                "error": round(runtime_error(rts[q], base, factor), 4),
            }
            if len(samples) > 1:  # the slowest baseline gives the lowest error
                rows[q]["error_range"] = [round(runtime_error(rts[q], b, factor), 4)
                                          for b in (max(samples), min(samples))]
        metrics["ratios"] = rows
        worst = max(rows, key=lambda q: abs(rows[q]["error"]))
        metrics["max_abs_error"] = abs(rows[worst]["error"])
        if judge_error:
            checks.append(check_quota_precision(rows, tol, tol_name, base, samples))
    errs = ", ".join(f"q{q} {r['error']:+.1%}" for q, r in (metrics.get("ratios") or {}).items())
    summary = f"runtime decreases with the quota; errors vs ideal 1/q: {errs}"
    if judge_error:
        summary = f"quota precision within ±{tol:.0%}: {errs}"
    return perf_verdict(ev, th, checks, metrics, summary)


def baseline_drift(samples: Sequence[float]) -> float:
    """Relative change of the baseline runtime from the first sample to the last (0.05: 5 % slower after)."""
    return samples[-1] / samples[0] - 1


def check_quota_precision(rows: Mapping[str, Mapping[str, Any]], tol: float, tol_name: str, base: float,
                          samples: Sequence[float]) -> Check:
    """``|error_q| <= tol`` for every quota row, against every baseline sample (``error_range``, else ``error``).

    ok is True when every quota is within against every sample, False when some quota is beyond against
    every sample, and None (inconclusive: the baseline drifted across the tolerance) otherwise.
    """
    def errors(r: Mapping[str, Any]) -> list[float]:
        return list(r.get("error_range") or [r["error"]])

    beyond = [q for q, r in rows.items() if all(abs(e) > tol for e in errors(r))]
    unsure = [q for q, r in rows.items() if q not in beyond and any(abs(e) > tol for e in errors(r))]

    def span(q: str) -> str:
        e = errors(rows[q])
        return f"q{q} {min(e):+.1%}" if len(e) == 1 else f"q{q} {min(e):+.1%}..{max(e):+.1%}"

    if beyond:
        ok, detail = False, f"error beyond ±{tol:.0%}: {', '.join(span(q) for q in beyond)}"
    elif unsure:
        ok, detail = None, (f"inconclusive: the baseline drifted {baseline_drift(samples):+.1%} during the case "
                            f"({' -> '.join(f'{v:.2f}' for v in samples)} s); within ±{tol:.0%} against only "
                            f"some samples: {', '.join(span(q) for q in unsure)}")
    else:
        ok, detail = True, ""
    return Check(
        "quota_precision",
        f"|runtime_q / (baseline * 100/q) - 1| <= {tol_name} ({tol}) for q in {list(rows)}, against every "
        "baseline sample",
        {"baseline_s": rounded(base, 3), "baseline_samples_s": [rounded(v, 3) for v in samples], "ratios": dict(rows)},
        ok,
        detail,
    )


# ------------------------------------------------------------------------------------------------ PERF-004


def check_colocated(ev: Evidence, pair: Sequence[str]) -> tuple[bool | None, dict[str, Any]]:
    """Whether the two pods ran on one GPU (node and GPU UUID from ``pods.json``, filled from the
    scheduler's registration lines). None when a GPU identity is unknown."""
    recs = [ev.pod(p) for p in pair]
    placement = {p: [r.node, r.gpu] if r else None for p, r in zip(pair, recs, strict=True)}
    if any(r is None or r.gpu is None for r in recs):
        return None, placement
    a, b = recs
    return (a.node, a.gpu) == (b.node, b.gpu), placement  # type: ignore[union-attr]


def judge_mixed(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-004: 30 % + 60 % on one GPU; runtime ratios against the ideal within ±10 % (T4 ±12 %).

    ``plan``: ``pair`` [low pod, high pod], ``pair_quotas`` [30, 60], ``baseline_pods``, ``pods``.
    Co-location is confirmed from ``pods.json`` (the GPU of each pod, from the registration lines);
    when it was not obtained (``plan["colocation_failed"]`` or different GPUs) the case is ERROR, premise
    ``two-pods-one-gpu``, never PASS.
    Checks: ``runtime_low / runtime_high`` against ``ideal_low / ideal_high`` (2.0 for 30/60) and each
    pod's runtime against ``baseline * 100 / q_eff``, all within the tolerance.
    """
    if plan.get("colocation_failed"):
        return perf_premise_error(ev, th, TWO_PODS_ONE_GPU, "co-location on one GPU not obtained after "
                                  f"{len(plan.get('attempts') or [])} attempt(s): {plan.get('attempts')}")
    low, high = plan["pair"]
    q_low, q_high = (float(q) for q in plan["pair_quotas"])
    same, placement = check_colocated(ev, [low, high])
    if same is False:
        return perf_premise_error(ev, th, TWO_PODS_ONE_GPU, f"co-location on one GPU not obtained (placement "
                                  f"{placement})", {"placement": placement})
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    checks.append(check_succeeded(ev, plan["pods"], "pods_succeeded"))
    if same is None:
        checks.append(Check("colocated", "both pods on one GPU (registration lines)", {"placement": placement},
                            None, "GPU of a pod unknown (no registration line)"))
    tol, tol_name = tolerance_for(th, plan, mixed=True)
    r_low, r_high = pod_progress(ev, low)["runtime_s"], pod_progress(ev, high)["runtime_s"]
    quotas = [q_low, q_high]
    f_low, f_high = ideal_factor(q_low, quotas), ideal_factor(q_high, quotas)
    metrics: dict[str, Any] = {"placement": placement, "baseline_s": rounded(base, 3), "runtime_low_s": r_low,
                               "runtime_high_s": r_high, "quotas": quotas, "tolerance": tol,
                               "tolerance_param": tol_name}
    if r_low is None or r_high is None or r_high <= 0:
        checks.append(Check("runtime_ratio", "runtimes of both pods", {"low": r_low, "high": r_high}, None,
                            "runtime missing"))
        return perf_verdict(ev, th, checks, metrics, "")
    ideal_ratio = f_low / f_high
    ratio = r_low / r_high
    err = ratio / ideal_ratio - 1
    metrics.update(ratio_low_over_high=rounded(ratio), ideal_ratio=rounded(ideal_ratio), ratio_error=rounded(err))
    ok = abs(err) <= tol
    checks.append(
        Check(
            "runtime_ratio",
            f"|(runtime_{q_low:g} / runtime_{q_high:g}) / {ideal_ratio:.3f} - 1| <= {tol_name} ({tol})",
            {"runtime_low_s": r_low, "runtime_high_s": r_high, "ratio": rounded(ratio), "ideal": rounded(ideal_ratio),
             "error": rounded(err)},
            ok,
            "" if ok else f"ratio {ratio:.3f} vs ideal {ideal_ratio:.3f} ({err:+.1%})",
        )
    )
    if base is not None:
        rows = {}
        for name, q, rt, f in ((low, q_low, r_low, f_low), (high, q_high, r_high, f_high)):
            rows[f"{q:g}"] = {"pod": name, "runtime_s": rounded(rt, 3), "ratio_vs_baseline": rounded(rt / base),
                              "ideal_ratio": rounded(f), "error": rounded(runtime_error(rt, base, f))}
        metrics["ratios"] = rows
        bad = [f"q{q} {r['error']:+.1%}" for q, r in rows.items() if abs(r["error"]) > tol]
        checks.append(
            Check(
                "runtime_vs_baseline",
                f"|runtime_q / (baseline * 100/q_eff) - 1| <= {tol_name} ({tol}) for both pods",
                {"baseline_s": rounded(base, 3), "ratios": rows},
                not bad,
                "" if not bad else f"error beyond ±{tol:.0%}: {', '.join(bad)}",
            )
        )
    summary = (f"{q_low:g}%+{q_high:g}% on one GPU: ratio {ratio:.3f} vs ideal {ideal_ratio:.3f} "
               f"({err:+.1%}, tolerance ±{tol:.0%})")
    return perf_verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-002


def judge_overhead(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-002: metrics overhead ``(runtime_on - runtime_off) / runtime_off * 100 <= perf_metrics_overhead_max_pct``.

    ``plan``: ``mode`` (``scrape``: not scraped vs scraped every ``interval_s``; ``exporter``: exporter
    disabled vs enabled and scraped), ``off_pods`` and ``on_pods`` (medians when repeated), ``scrapes``
    (``metrics_stress.jsonl``: one record per scrape, ``ok`` = HTTP 200). The "on" load must really have
    happened: no successful scrape during the on runs is ERROR, never PASS.
    """
    mode = plan.get("mode", "scrape")
    off, on = list(plan.get("off_pods") or []), list(plan.get("on_pods") or [])
    checks = [check_succeeded(ev, off + on)]
    r_off = [v for v in runtimes(ev, off).values() if v is not None]
    r_on = [v for v in runtimes(ev, on).values() if v is not None]
    scrapes = read_jsonl(ev, "metrics_stress.jsonl")
    ok_scrapes = 0
    for s in scrapes:
        body = ev.text(str(s.get("file"))) if s.get("file") else None
        code = split_http(body)[1] if body is not None else None
        ok_scrapes += code == 200
    interval = plan.get("interval_s")
    label = ("exporter disabled vs enabled (DaemonSet redeployed) and scraped" if mode == "exporter"
             else "not scraped vs scraped") + (f" every {interval:g} s" if interval else "")
    checks.append(Check("load_applied", "at least one successful scrape (HTTP 200) during the 'on' run(s)",
                        {"scrapes": len(scrapes), "ok": ok_scrapes}, True if ok_scrapes else None,
                        "" if ok_scrapes else "no successful scrape: the metrics load was not applied"))
    limit = float(th["perf_metrics_overhead_max_pct"])
    metrics: dict[str, Any] = {"mode": mode, "comparison": label, "runtime_off_s": r_off, "runtime_on_s": r_on,
                               "scrapes": len(scrapes), "scrapes_ok": ok_scrapes}
    m_off, m_on = median(r_off), median(r_on)
    if m_off is None or m_on is None or m_off <= 0:
        checks.append(Check("overhead", f"overhead_pct <= {limit}", {"off": r_off, "on": r_on}, None,
                            "runtime missing"))
        return perf_verdict(ev, th, checks, metrics, "")
    pct = (m_on - m_off) / m_off * 100
    metrics.update(runtime_off_median_s=rounded(m_off, 3), runtime_on_median_s=rounded(m_on, 3),
                   overhead_pct=rounded(pct, 3))
    ok = pct <= limit
    checks.append(
        Check(
            "overhead",
            f"(median_on - median_off) / median_off * 100 <= perf_metrics_overhead_max_pct ({limit})",
            {"median_off_s": rounded(m_off, 3), "median_on_s": rounded(m_on, 3), "overhead_pct": rounded(pct, 3)},
            ok,
            "" if ok else f"overhead {pct:.2f} % > {limit} % ({label})",
        )
    )
    return perf_verdict(ev, th, checks, metrics, f"metrics overhead {pct:+.2f} % <= {limit} % ({label})")


# ------------------------------------------------------------------------------------------------ PERF-005/006


def judge_oversub_cost(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-005/006: W1 with oversubscription off and on (both must pass), and the oversubscription workload
    at ``factors`` x GPU memory with it on (must pass): the cost curve ``runtime_on / runtime_off - 1``.

    ``plan``: ``skip`` (reason) or ``off_pod``, ``on_pod``, ``factor_pods`` ``{"1.25": pod}``. The cost is
    recorded; it is judged only when ``perf_oversub_max_cost_pct`` is set (default None: record only,
    as the seed asks).
    """
    if plan.get("skip"):
        return perf_skip(ev, th, str(plan["skip"]))
    off, on = plan["off_pod"], plan["on_pod"]
    factor_pods: dict[str, str] = dict(plan.get("factor_pods") or {})
    checks = [check_succeeded(ev, [off, on], "w1_off_on_succeeded")]
    if factor_pods:
        checks.append(check_succeeded(ev, list(factor_pods.values()), "oversubscribed_succeeded"))
    r_off, r_on = pod_progress(ev, off)["runtime_s"], pod_progress(ev, on)["runtime_s"]
    curve = {f: pod_progress(ev, p)["runtime_s"] for f, p in factor_pods.items()}
    metrics: dict[str, Any] = {"runtime_off_s": r_off, "runtime_on_s": r_on, "oversub_runtime_s": curve,
                               "gpu_model": plan.get("gpu_model")}
    cost = None
    if r_off and r_on is not None:
        cost = (r_on / r_off - 1) * 100
        metrics["cost_pct"] = rounded(cost, 3)
    limit = th.get("perf_oversub_max_cost_pct")
    if limit is not None:
        ok = cost is not None and cost <= float(limit)
        checks.append(Check("oversub_cost", f"(runtime_on / runtime_off - 1) * 100 <= {limit}",
                            {"cost_pct": rounded(cost, 3)}, None if cost is None else ok,
                            "" if ok else f"cost {cost} %"))
    summary = f"oversubscription cost {cost:+.2f} % (W1 on vs off); curve {curve}" if cost is not None else ""
    return perf_verdict(ev, th, checks, metrics, summary)
