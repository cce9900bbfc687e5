"""Functional suite (FUNC-001..007): pure functions from :class:`~xpushare.evidence.store.Evidence` and thresholds
to a Verdict.

They follow seed 000 sections 7, 16.2 and 17.2 but are stricter than the bash harness where it was
weak (docs/sut/bash-harness.md §functional): a pod "passes" only with exit 0, the ``PASS`` line and a parseable
runtime; quota rejection is recognised from ``cuMemAlloc rejected:`` / ``CUDA out of memory`` /
``OutOfMemoryError`` and never from the words ``memory limit``; concurrency is proven by overlapping
run intervals. No judgment reads live state, so ``invoke judge`` can re-run them offline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import SOURCE_REGISTRATION, Evidence
from xpushare.judge import thresholds
from xpushare.judge.checks import (
    check_pods_succeeded,
    check_rejected,
    check_scheduler_alive,
    check_terminal,
    overlap_ratio,
    pod_progress,
)
from xpushare.judge.thresholds import shown
from xpushare.model.premises import TWO_GPUS, TWO_PODS_ONE_GPU, unmet
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import scheduler_log

LOCK_SHARED = "lock-span overlap / shorter span > 0 (the lock went back to the first holder)"


def check_lock_shared(ev: Evidence, pair: Sequence[str]) -> Check | None:
    """``lock_shared``: both clients of the pair held the GPU lock in turns, not one after the other.

    Each pod's span under the lock runs from its client's first ``Sent LOCK_OK`` to its last ``released from
    running_list`` in ``scheduler.log`` (``SchedulerLogSummary.lock_spans``); the check passes
    when the spans overlap at all, i.e. the lock went back to the first holder after the second one got it
    (or both held it at once). How much they overlap depends on where the turns fall in the compute window
    (0.5-1.0 on a healthy lab, three runs), so only its presence is judged; the ratio (overlap / shorter span)
    is recorded. A lock holder that is never made to drop the lock while the other waits (no time-slicing)
    gives disjoint spans, ratio 0: the other pod starved until it ended. None when neither pod's client took
    the lock: unlimited clients never ask for it (docs/sut/client.md §lock-control), so the log says nothing of turns.
    Unevaluable (``ok=None``) when one pod held the lock and the other's client id is unknown (no registration
    matched it), since its lock lines cannot be attributed.
    """
    spans = scheduler_log.parse_text(ev.text("scheduler.log") or "").lock_spans
    held: dict[str, tuple[float, float] | None] = {}
    unknown: list[str] = []
    granted = False
    for pod in pair:
        assignment = ev.assignment(pod)
        if not (assignment and assignment.client_ids):
            unknown.append(pod)
        own = [spans[c] for c in (assignment.client_ids if assignment else ()) if c in spans]
        granted = granted or bool(own)
        ends = [x.last_release for x in own if x.last_release is not None]
        held[pod] = (min(x.first_grant for x in own), max(ends)) if own and ends else None
    if not granted:
        return None
    values: dict[str, Any] = {"lock_spans": {p: list(v) if v else None for p, v in held.items()}}
    if unknown:
        # Without the pod's client id its lock lines cannot be told apart: not evidence that it never held it.
        return Check("lock_shared", LOCK_SHARED, values, None,
                     f"no scheduler client id (registration) for {', '.join(unknown)}")
    if any(v is None for v in held.values()):
        return Check("lock_shared", LOCK_SHARED, values, False, "a pod of the pair never held and released the lock")
    (a0, a1), (b0, b1) = (v for v in held.values() if v is not None)
    shorter = min(a1 - a0, b1 - b0)
    ratio = max(0.0, min(a1, b1) - max(a0, b0)) / shorter if shorter > 0 else 0.0
    values["lock_overlap_ratio"] = round(ratio, 3)
    return Check("lock_shared", LOCK_SHARED, values, ratio > 0,
                 "" if ratio > 0 else f"lock spans overlap {ratio:.2f}: one pod waited for the other's end")


def judge_single_pass(ev: Evidence, th: Mapping[str, Any], *, pod: str) -> Verdict:
    """FUNC-001 / FUNC-007: one pod succeeds with PASS and a runtime (recorded as the baseline)."""
    checks = [check_terminal(ev.pods, [pod]), check_pods_succeeded(ev, [pod])]
    status, summary = combine(checks, pass_summary="pod passed")
    runtime = pod_progress(ev, pod)["runtime_s"]
    if status is Status.PASS:
        summary = f"pod passed in {runtime:.2f} s"
    return Verdict(status, summary, checks, thresholds.used(th), {"runtime_s": runtime}, ev.pod_files())


def sharing_pair(ev: Evidence, pods: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """Two pods of ``pods`` that ran on one GPU (by node and GPU UUID), and the placement seen.

    Without any GPU identity (a host with no GPU) the first two pods are the pair; with identities but
    no two pods on one GPU the pair is empty.
    """
    placement = {p: (r.node, r.gpu) for p in pods if (r := ev.pod(p)) is not None}
    if not any(g for _, g in placement.values()):
        return list(pods[:2]), placement
    groups: dict[tuple[str | None, str | None], list[str]] = {}
    for p, where in placement.items():
        if where[1] is not None:
            groups.setdefault(where, []).append(p)
    shared = next((names for names in groups.values() if len(names) >= 2), [])
    return shared[:2], placement


def judge_same_gpu_pair(
    ev: Evidence, th: Mapping[str, Any], *, pods: Sequence[str], pair: Sequence[str] | None = None
) -> Verdict:
    """FUNC-002: two pods on one GPU both progressed and completed, and their run intervals overlapped.

    Every pod of the case must pass. Threshold ``func002_min_overlap_ratio``: overlap / shorter run
    interval (default 0.5). ``pair``: the two pods meant to share a GPU (else any two that did). The premise
    ``two-pods-one-gpu`` is checked here: when they did not share one, or the GPU of the pair is in no
    evidence, the case is ERROR "premise unmet: two-pods-one-gpu: ..." (never PASS, never a FAIL of the SUT).
    """
    checks = [check_terminal(ev.pods, pods), check_pods_succeeded(ev, pods)]
    found, placement = sharing_pair(ev, pods)
    if pair is not None:
        where = [placement.get(p) for p in pair]
        known = all(w is not None and w[1] is not None for w in where)
        found = list(pair) if (not known or where[0] == where[1]) else []
    pair = found
    metrics: dict[str, Any] = {"placement": {p: list(w) for p, w in placement.items()}}
    if len(pair) < 2:
        why = f"co-location on one GPU not obtained (placement {metrics['placement']})"
        return Verdict(Status.ERROR, unmet(TWO_PODS_ONE_GPU, why), checks, thresholds.used(th), metrics,
                       ev.pod_files())
    a, b = (ev.pod(p) for p in pair)
    gpu_known = placement[pair[0]][1] is not None
    ratio = overlap_ratio(a, b) if a and b else None
    minimum = float(th["func002_min_overlap_ratio"])
    checks.append(
        Check(
            "intervals_overlap",
            f"overlap / shorter_interval >= {minimum}",
            {"pair": pair, "overlap_ratio": ratio, "intervals": {r.name: [r.started, r.finished] for r in (a, b) if r}},
            None if ratio is None else ratio >= minimum,
            "run intervals unknown" if ratio is None
            else ("" if ratio >= minimum else f"overlap {shown(ratio, minimum)}"),
        )
    )
    lock = check_lock_shared(ev, pair)
    if lock is not None:
        checks.append(lock)
    status, summary = combine(checks, pass_summary=f"{pair[0]} and {pair[1]} progressed concurrently on one GPU")
    if status is Status.PASS and not gpu_known:
        status, summary = Status.ERROR, unmet(TWO_PODS_ONE_GPU, f"the GPU of {pair[0]} and {pair[1]} is in no "
                                              f"evidence (placement {metrics['placement']}); was PASS: {summary}")
    metrics.update({"overlap_ratio": ratio, **{f"runtime_s[{p}]": pod_progress(ev, p)["runtime_s"] for p in pair}})
    return Verdict(status, summary, checks, thresholds.used(th), metrics, ev.pod_files())


def judge_spread(ev: Evidence, th: Mapping[str, Any], *, pods: Sequence[str], gpus_available: int | None) -> Verdict:
    """FUNC-003: every pod passes; with more than one GPU, the pods ran on more than one GPU.

    ``gpus_available``: GPUs the pods could be placed on (the backend's ``gpu_count``). The premise ``two-gpus``:
    fewer than two, or unknown (None), is ERROR "premise unmet: two-gpus: ..." (the run SKIPs the case before it
    acts where it knows; a stored run re-judged gets the ERROR), never a PASS that skipped the spread.

    A pod's GPU is the one the scheduler registered its client on (:class:`~xpushare.evidence.store.GpuAssignment`,
    matched by pod name in Kubernetes and by ``host_pid`` in host mode); only a pod with no registration in
    the evidence counts with the GPU ``pods.json`` recorded (host mode: the tool's own placement), and the
    check's values name those pods (``not_registered``) and where each GPU came from (``gpu_source``).
    """
    checks = [check_terminal(ev.pods, pods), check_pods_succeeded(ev, pods)]
    found = [a for p in pods if (a := ev.assignment(p)) is not None]
    used = sorted({f"{a.node}/{a.gpu}" for a in found if a.gpu is not None})
    values: dict[str, Any] = {"distinct_gpus": len(used), "gpus": used,
                              "gpu_source": {a.pod: a.describe() for a in found}}
    fallback = [a.pod for a in found if a.source != SOURCE_REGISTRATION]
    if fallback:
        values["not_registered"] = fallback
        values["fallback"] = ("no registration of these pods in the evidence: counted on the GPU pods.json "
                              "recorded (host mode: the tool's placement, not where the scheduler put them)")
    if gpus_available is None or gpus_available < 2:
        why = ("how many GPUs the cluster has is unknown" if gpus_available is None
               else f"the cluster had {gpus_available} GPU(s)")
        checks.append(Check("spread_over_gpus", "distinct_gpus > 1 (at least two GPUs exist)", values, None, why))
        return Verdict(Status.ERROR, unmet(TWO_GPUS, why), checks, thresholds.used(th),
                       {"distinct_gpus": len(used), "pods": len(pods)}, ev.pod_files())
    else:
        values["gpus_available"] = gpus_available
        # pods whose GPU nothing tells (no registration, none recorded): fewer than 2 GPUs seen is then no proof
        unplaced = [p for p in pods if (a := ev.assignment(p)) is None or a.gpu is None]
        if unplaced:
            values["gpu_unknown"] = unplaced
        spread = len(used) > 1
        checks.append(
            Check(
                "spread_over_gpus",
                "distinct_gpus > 1 (more than one GPU exists)",
                values,
                True if spread else (None if unplaced else False),
                "" if spread else (f"no GPU known for {', '.join(unplaced)}" if unplaced else "all pods on one GPU"),
            )
        )
    status, summary = combine(checks, pass_summary=f"{len(pods)}/{len(pods)} pods passed")
    if status is Status.PASS:
        summary += f" on {len(used)} GPU(s)"
        if fallback and used:
            summary += f" ({len(fallback)} pod(s) not registered: GPU from pods.json)"
    return Verdict(status, summary, checks, thresholds.used(th), {"distinct_gpus": len(used), "pods": len(pods)},
                   ev.pod_files())


def judge_rejected(ev: Evidence, th: Mapping[str, Any], *, pod: str) -> Verdict:
    """FUNC-004 / FUNC-006: the allocation beyond the limit is refused with an OOM/rejection marker."""
    checks = [check_terminal(ev.pods, [pod]), check_rejected(ev, pod)]
    status, summary = combine(checks, pass_summary="allocation refused as expected")
    markers = checks[1].values.get("markers") or []
    if status is Status.PASS and markers:
        summary += f": {markers[0].split(chr(13))[-1][:100]}"
    return Verdict(status, summary, checks, thresholds.used(th), {"oom_markers": len(markers)}, ev.pod_files())


def judge_oversub_on(ev: Evidence, th: Mapping[str, Any], *, pod: str) -> Verdict:
    """FUNC-005: with oversubscription on, the same over-sized workload runs to PASS; the scheduler lives."""
    checks = [check_terminal(ev.pods, [pod]), check_pods_succeeded(ev, [pod])]
    alive = check_scheduler_alive(ev)
    if alive is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary="over-sized allocation ran with oversubscription on")
    if status is Status.PASS and alive is None:
        summary += " (scheduler liveness not observable here)"
    runtime = pod_progress(ev, pod)["runtime_s"]
    return Verdict(status, summary, checks, thresholds.used(th), {"runtime_s": runtime}, ev.pod_files())
