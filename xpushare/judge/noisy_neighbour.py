"""PERF-012: what a noisy neighbour costs a workload at 25/50/75 % slices of one GPU.

For each slice q the compute probe (``workloads/compute_probe.py``, path ``cuLaunchKernel``) runs alone under a
core quota of q %, then again beside a neighbour that launches kernels back to back under the rest of the GPU
(100 - q %) on the same GPU. The **impact** of the neighbour is the probe's throughput beside it against its
throughput alone, ``kernels_per_s beside / kernels_per_s alone - 1``: every kernel is the same fixed work, so this
is the work the slice got done, 0 when it is isolated, -0.5 when the neighbour took half of it. Throughput, not the
GPU share of docs/isolation.md (kernels x the shortest kernel / wall time): two contexts that run at once stretch
each other's kernels (the project's SUT runs its quota clients at once; MPS puts them on SMs of their own), which
moves the share without moving the work done; on one H200 the share read +13.7 % for a 25 % slice whose throughput
changed by +0.1 %. The shares are reported beside the impact, and the two clocks must agree as in the ISO cases.
Beside the neighbour only the probe's intervals from ``iso_compute_skip_intervals`` on are judged. The tolerance is
the seed's for quotas mixed on one GPU (``perf_mixed_tolerance`` ±10 %, T4 ±12 %: seed 000 §6 P1).
Source: docs/performance.md "PERF-012"; the probe line: docs/isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_terminal
from xpushare.judge.isolation import (
    ComputeShare,
    check_compute_lines,
    check_sources_agree,
    compute_lines,
    compute_share,
    overlapping,
)
from xpushare.judge.performance_checks import tolerance_for
from xpushare.judge.thresholds import used
from xpushare.model.premises import TWO_PODS_ONE_GPU, unmet
from xpushare.model.verdict import Check, Status, Verdict, combine

__all__ = ["check_impact", "judge_noisy_neighbour"]

IMPACT = "|kernels per second beside the neighbour / alone - 1| <= tolerance"


def check_impact(q: int, alone: ComputeShare, beside: ComputeShare, tol: float, tol_name: str) -> Check:
    """The neighbour's impact on a q % slice: ``beside.kernels_per_s / alone.kernels_per_s - 1`` within ``±tol``
    (kernels of fixed work: the work the slice got done per second).

    Returns a :class:`Check` named ``neighbour_impact_q<q>``: FAIL when the slice lost (or gained) more than
    ``tol`` of its throughput alone; not evaluable when the probe ran no kernel alone."""
    name = f"neighbour_impact_q{q}"
    values: dict[str, Any] = {"slice": q, "kernels_per_s_alone": round(alone.kernels_per_s, 3),
                              "kernels_per_s_beside": round(beside.kernels_per_s, 3),
                              "share_alone": round(alone.busy_events, 4), "share_beside": round(beside.busy_events, 4),
                              "tolerance": tol, "tolerance_param": tol_name}
    expr = f"{IMPACT} ({tol_name} = {tol})"
    if alone.kernels_per_s <= 0:
        return Check(name, expr, values, None, f"the {q} % slice ran no kernel alone: nothing to compare")
    impact = beside.kernels_per_s / alone.kernels_per_s - 1
    values["impact"] = round(impact, 4)
    if abs(impact) <= tol:
        return Check(name, expr, values, True)
    what = "the neighbour took part of it" if impact < 0 else "it got more done beside the neighbour than alone"
    return Check(name, expr, values, False,
                 f"{q} % slice: {beside.kernels_per_s:.1f} kernels/s beside the neighbour against "
                 f"{alone.kernels_per_s:.1f} alone ({impact:+.1%}, beyond ±{tol:.0%}): {what}")


def _colocated(ev: Evidence, victim: str, noisy: str) -> tuple[bool, dict[str, Any]]:
    a, b = ev.pod(victim), ev.pod(noisy)
    placement = {p.name: [p.node, p.gpu] for p in (a, b) if p}
    ok = a is not None and b is not None and a.gpu is not None and (a.node, a.gpu) == (b.node, b.gpu)
    return ok, placement


def judge_noisy_neighbour(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-012 over ``plan["slices"]``: ``[{"slice": q, "alone": pod, "victim": pod, "noisy": pod,
    "noisy_core_limit": percent}, ...]`` (percent of the GPU; pods by name), ``plan["pods"]`` every pod started.

    Checks: every pod ended and succeeded; each probe measured (``status=ok`` lines past
    ``iso_compute_skip_intervals``; a probe that could not run is ERROR, never a verdict) with the two clocks
    agreeing (``iso_compute_sources_tolerance``); the victim and the noisy neighbour shared one GPU (else ERROR,
    premise ``two-pods-one-gpu``); and per slice :func:`check_impact`. That the system was in each workload's path
    is checked once for every performance case, after the judgment
    (:func:`xpushare.judge.sut_path.with_sut_checks`). Metrics: ``slices`` (per slice: throughput and share alone,
    beside, the neighbour's over the victim's intervals, impact) and ``worst_impact``."""
    pods = list(plan.get("pods") or [])
    skip = int(th["iso_compute_skip_intervals"])
    tol, tol_name = tolerance_for(th, plan, mixed=True)
    checks: list[Check] = [check_terminal(ev.pods, pods)]
    measured: list[Check] = []
    shares: dict[str, ComputeShare | None] = {}
    lines_of = {pod: compute_lines(ev, pod) for pod in pods}
    for pod in pods:
        measured.append(check_compute_lines(lines_of[pod], pod, skip, name=f"measured_{pod}"))
        shares[pod] = compute_share(lines_of[pod], skip)
    # a probe that could not measure exits 1: its line (ERROR) says why, its exit must not turn that into FAIL
    checks.append(check_pods_succeeded(ev, [c.values["pod"] for c in measured if c.ok]))
    checks += measured
    figures: list[dict[str, Any]] = []
    impacts: list[Check] = []
    misplaced: list[dict[str, Any]] = []
    for item in plan.get("slices") or []:
        q, alone_pod, victim, noisy = int(item["slice"]), item["alone"], item["victim"], item["noisy"]
        alone, beside = shares.get(alone_pod), shares.get(victim)
        row: dict[str, Any] = {"slice": q, "noisy_core_limit": item.get("noisy_core_limit")}
        colocated, placement = _colocated(ev, victim, noisy)
        if not colocated:
            misplaced.append(placement)
        judged = [x for x in lines_of.get(victim, []) if x.interval >= skip]
        n_lines = overlapping(lines_of.get(noisy, []), judged)
        n_share = compute_share(n_lines, 0) if n_lines is not None else shares.get(noisy)
        for key, share in (("alone", alone), ("beside", beside), ("noisy", n_share)):
            if share is not None:
                row[f"share_{key}"] = round(share.busy_events, 4)
                row[f"kernels_per_s_{key}"] = round(share.kernels_per_s, 3)
        for share in (alone, beside):
            if share is not None:
                checks.append(check_sources_agree(share, th, name=f"clocks_agree_q{q}"))
        if alone is not None and beside is not None:
            impact = check_impact(q, alone, beside, tol, tol_name)
            impacts.append(impact)
            row["impact"] = impact.values.get("impact")
        figures.append(row)
    metrics: dict[str, Any] = {"slices": figures, "path": plan.get("path"), "sut": plan.get("sut"),
                               "quota_source": plan.get("quota_source"), "quota_var": plan.get("quota_var")}
    known = [r["impact"] for r in figures if r.get("impact") is not None]
    if known:
        metrics["worst_impact"] = min(known, key=lambda x: -abs(x))
    if not figures:
        checks.append(Check("slices_run", "at least one slice planned", {}, None, "no slice in the plan"))
    status, summary = combine(checks, pass_summary="")
    if status is Status.PASS and misplaced:
        return Verdict(Status.ERROR, unmet(TWO_PODS_ONE_GPU, f"a slice's probe and its noisy neighbour were not "
                       f"confirmed on one GPU ({misplaced[0]})"), checks, used(th), metrics, ev.pod_files())
    checks += impacts
    status, summary = combine(checks, pass_summary="")
    if status is Status.PASS:
        summary = "noisy neighbour impact " + ", ".join(
            f"{r['slice']} %: {r['impact']:+.1%}" for r in figures if r.get("impact") is not None) + \
            f" (within ±{tol:.0%})"
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())
