"""COMBO-001..008 judgments (seed 000 §8, §16.3, §17.3): pure functions from evidence to a Verdict.

Every function reads the case directory through :class:`~xpushare.evidence.store.Evidence` and the case's
``plan.json`` (written by :mod:`xpushare.cases.combination`), never live state, so ``invoke judge``
re-judges a stored run offline. Thresholds are named parameters
(:data:`xpushare.judge.thresholds.COMBINATION` holds the seed's values; a key missing from ``th`` falls
back to its default and the verdict records what it used).

Each judgment is stricter than the bash harness (docs/sut/bash-harness.md §combination):

* COMBO-001: the pod is refused **by the quota** (the library's ``would exceed limit <quota> bytes``,
  not the physical limit and not "any failure"), it never held more than the quota (the rejection
  line's "already held" bytes), the scheduler applied the annotation, and the workload asked for more
  than the quota (otherwise nothing is proven: ERROR).
* COMBO-002: the two quota pods are confirmed on one GPU from the scheduler's registration lines (else
  SKIP, never PASS) and every pod passed, then ``runtime_low > runtime_high``.
* COMBO-003 / 007 / 008: quota series are read from ``metrics_mid*.txt`` (one capture per node where
  the case's pods ran, taken while they ran) **per pod** and compared with the configured values;
  a missing series is FAIL (the bash harness passed COMBO-003 with the metrics missing).
* COMBO-004 / 005 / 006: every annotate call must be followed by the scheduler's ``Memory limit
  changed`` / ``Compute limit changed`` line for that pod, in the order of the calls, and the pod-side
  update line, within ``dynamic_max_latency_s`` (seed §6 P1: 15 s) of the call; a pod line alone or a
  line for another value does not count (bash counted pod-log lines, one update giving two).
* COMBO-008 counts distinct GPUs from the registration lines (``client_info``'s ``gpu_index`` is always
  ``-1``, docs/sut/README.md §pitfalls item 8) and checks per-GPU isolation: each pod's quota series carry its
  own values, its ``gpu_uuid`` label is its registration GPU, and its effective compute quota is scaled
  only by the limits of clients on its own GPU (docs/sut/scheduler.md §compute-quota).

Evidence files (relative to the case directory): ``pods.json``, ``pods/<pod>.log``, ``scheduler.log``
(kubectl ``--timestamps``), ``annotations.jsonl`` (unix time of every annotate call), ``metrics_mid*.txt``,
``metrics_start.txt`` / ``metrics_end.txt`` (COMBO-004), ``scheduler_proc.txt``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import (
    check_pods_succeeded,
    check_rejected,
    check_scheduler_alive,
    check_terminal,
    plan_skip,
    pod_progress,
)
from xpushare.judge.combination_dynamic import ChangeFacts, change_facts, judge_dynamic_sequence
from xpushare.judge.combination_evidence import (
    annotation_quota_bytes,
    capture_series,
    check_captures,
    check_pod_quota_series,
    combo_th,
    combo_used,
    oversub_target_bytes,
    pods_in_capture,
    scheduler_summary,
    split_capture,
)
from xpushare.judge.quantity import annotation_bytes
from xpushare.judge.quota import check_higher_quota_faster
from xpushare.judge.thresholds import used
from xpushare.model.premises import TWO_PODS_ONE_GPU, unmet
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import pod_log
from xpushare.parsers.metrics import Exposition
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary

__all__ = [
    "ChangeFacts",
    "change_facts",
    "check_captures",
    "check_pod_quota_series",
    "judge_all_on",
    "judge_compute_pair",
    "judge_dynamic_sequence",
    "judge_multi_gpu",
    "judge_quota_over_oversub",
    "judge_static_both",
    "oversub_target_bytes",
    "pods_in_capture",
    "split_capture",
]


# ------------------------------------------------------------------------------------ COMBO-001


def _check_quota_held(rej: Sequence[pod_log.Rejection], quota: int) -> Check:
    """The quota was a hard limit from the first allocation on: every rejection line's "already held"
    bytes (its first number) are within the quota. More than the quota held means allocations that were
    never checked against it (e.g. made before the quota reached the client, findings.md #13)."""
    held = [r.allocated_bytes for r in rej]
    over = [h for h in held if h > quota]
    detail = "" if not over else (f"the client already held {max(over)} B, over the {quota} B quota, when it was "
                                  "refused: allocations before that were not checked against the quota")
    return Check("quota_held", f"bytes held at every rejection <= {quota}", {"held_bytes": held[:5],
                 "quota_bytes": quota}, not over, detail)


def judge_quota_over_oversub(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-001: with oversubscription on, the memory quota still refuses what exceeds it.

    ``plan``: ``pods`` (one oversub pod), ``namespace``, ``memory_limit`` (the annotation value, e.g.
    ``10Gi``), optional ``skip`` and ``seed_scope``. PASS needs: the pod ended, failed with a rejection
    marker, the library's rejection names the quota (``would exceed limit <quota> bytes``), no rejection
    line shows more than the quota already held (the quota bound every allocation, :func:`_check_quota_held`),
    the scheduler applied that quota to the pod, and the scheduler lives. ERROR when the workload never asked for more
    than the quota (nothing proven) or evidence is missing.
    """
    if (v := plan_skip(plan, th)) is not None:
        return v
    pod, ns = plan["pods"][0], plan.get("namespace", "default")
    quota = annotation_bytes(str(plan["memory_limit"]))
    log = ev.logs.get(pod)
    target = oversub_target_bytes(log)
    metrics: dict[str, Any] = {"quota_bytes": quota, "target_bytes": target, "seed_scope": plan.get("seed_scope")}
    if quota <= 0:
        return Verdict(Status.ERROR, f"memory_limit {plan['memory_limit']!r} is not a quantity the scheduler accepts",
                       [], used(th), metrics, ev.pod_files())
    if target is not None and target <= quota:
        return Verdict(Status.ERROR, f"the workload asked for {target} B, not more than the {quota} B quota: "
                       "nothing proven (raise oversub_factor or lower combo001_memory_limit)",
                       [], used(th), metrics, ev.pod_files())
    checks = [check_terminal(ev.pods, [pod]), check_rejected(ev, pod)]
    if log is None:
        checks.append(Check("rejected_by_quota", "pod log collected", {}, None, f"no log for {pod}"))
    else:
        rej = pod_log.rejections(log)
        by_quota = [r for r in rej if r.limit_bytes == quota]
        facts = [{"limit_bytes": r.limit_bytes, "physical_bytes": r.physical_bytes,
                  "requested_bytes": r.requested_bytes} for r in rej[:5]]
        detail = ""
        if not by_quota:
            detail = ("refused by the physical limit, not by the quota" if any(r.physical_bytes for r in rej)
                      else "no library rejection naming the quota")
        checks.append(Check("rejected_by_quota", f"a rejection line says 'would exceed limit {quota} bytes'",
                            {"rejections": facts, "quota_bytes": quota}, bool(by_quota), detail))
        metrics["rejection_limit_bytes"] = by_quota[0].limit_bytes if by_quota else None
        if rej:
            checks.append(_check_quota_held(rej, quota))
            metrics["held_bytes_at_rejection"] = max(r.allocated_bytes for r in rej)
    sched = scheduler_summary(ev)
    if sched is None:
        checks.append(Check("quota_applied_by_scheduler", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        applied = [c for c in sched.limit_changes
                   if c.kind == "memory" and c.pod == pod and c.namespace == ns and c.new == quota]
        checks.append(Check("quota_applied_by_scheduler",
                            f"scheduler: 'Applying initial memory limit for {ns}/{pod}: {quota} bytes'",
                            {"matches": len(applied)}, bool(applied), "" if applied else "no such scheduler line"))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary=f"quota {plan['memory_limit']} refused the over-quota allocation "
                              f"({target} B asked) although oversubscription was on")
    if plan.get("seed_scope") and status is Status.PASS:
        summary += f" (seed scope: {plan['seed_scope']})"
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-002


def judge_compute_pair(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-002: two pods with different core limits (and oversubscription on) on one GPU.

    ``plan``: ``pods`` (all, fillers included), ``pair`` ([low-quota pod, high-quota pod]), ``cores``
    ({pod: percent}). Every pod must pass ("scheduling stable"); then, only when the registration lines
    put the pair on one GPU (pods.json ``node``/``gpu``), ``runtime_low > runtime_high``. Not co-located,
    or no GPU in the registration lines: SKIP (never PASS).
    """
    names, (low, high) = plan["pods"], plan["pair"]
    cores = {str(k): int(v) for k, v in (plan.get("cores") or {}).items()}
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary="")
    a, b = ev.pod(low), ev.pod(high)
    placement = {p.name: [p.node, p.gpu] for p in (a, b) if p}
    metrics: dict[str, Any] = {"placement": placement, "cores": cores}
    if status is not Status.PASS:
        return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())
    assert a is not None and b is not None  # check_terminal saw both records
    if a.gpu is None or b.gpu is None:
        return Verdict(Status.ERROR, unmet(TWO_PODS_ONE_GPU, "co-location not confirmed: no registration GPU for "
                       f"the pair ({placement})"), checks, used(th), metrics, ev.pod_files())
    if (a.node, a.gpu) != (b.node, b.gpu):
        return Verdict(Status.ERROR, unmet(TWO_PODS_ONE_GPU, f"co-location on one GPU not obtained ({placement})"),
                       checks, used(th), metrics, ev.pod_files())
    r_low, r_high = pod_progress(ev, low)["runtime_s"], pod_progress(ev, high)["runtime_s"]
    q_low, q_high = cores.get(low, "low"), cores.get(high, "high")
    values = {f"runtime_{q_low}": r_low, f"runtime_{q_high}": r_high}
    check, ratio = check_higher_quota_faster(r_low, r_high, q_low=q_low, q_high=q_high, th=th,
                                             ratio_param="combo002_min_ratio")
    values["ratio"] = round(ratio, 4) if ratio is not None else None
    checks.append(check)
    metrics.update(values)
    status, summary = combine(checks, pass_summary=f"the {q_high} % pod finished faster than the {q_low} % pod "
                              f"on one GPU with oversubscription on")
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-003


def _check_initial_limits(sched: SchedulerLogSummary | None, pod: str, ns: str, *, memory_bytes: int | None,
                          core: int | None) -> Check:
    """The scheduler applied the pod's annotations at registration (docs/sut/log.md §registration steps 3 and 5)."""
    if sched is None:
        return Check(f"initial_limits_logged[{pod}]", "scheduler.log collected", {}, None, "no scheduler.log")
    found = {c.kind: c.new for c in sched.limit_changes if c.initial and c.pod == pod and c.namespace == ns}
    missing = []
    if core is not None and found.get("compute") != core:
        missing.append(f"compute {core}%")
    if memory_bytes is not None and found.get("memory") != memory_bytes:
        missing.append(f"memory {memory_bytes} bytes")
    return Check(f"initial_limits_logged[{pod}]", "scheduler: 'Applying initial compute/memory limit' with the "
                 "configured values", {"found": found}, not missing,
                 f"not applied: {', '.join(missing)}" if missing else "")


def _at_least(name: str, expected: str, found: Sequence[Any], minimum: int, observed: dict[str, Any],
              shortfall: str) -> Check:
    """Check ``name``: at least ``minimum`` of ``found`` (``shortfall``: the detail when there are fewer)."""
    ok = len(found) >= minimum
    return Check(name, expected, observed, ok, "" if ok else shortfall)


def _mid_captures(ev: Evidence, plan: Mapping[str, Any], checks: list[Check]) -> list[Exposition] | None:
    """The ``metrics_mid`` captures of the plan parsed (their check appended to ``checks``); None when that check
    is not ok (nothing to judge the quota series on)."""
    exps, cap = check_captures(ev, plan.get("metrics_mid") or [], "metrics_mid")
    checks.append(cap)
    return exps if cap.ok else None


def _quota_series_checks(exps: Sequence[Exposition], quotas: Mapping[str, Mapping[str, Any]], pods: Sequence[str],
                         ns: str) -> list[Check]:
    """:func:`check_pod_quota_series` of each of ``pods`` against its planned quota (``quotas[pod]``)."""
    return [check_pod_quota_series(exps, p, ns, memory_bytes=annotation_quota_bytes(quotas[p].get("memory")),
                                   core=quotas[p].get("core")) for p in pods]


def judge_static_both(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-003: static memory and compute quotas together: both pods pass, both quotas observable.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {"core": percent, "memory": "4Gi"}}),
    ``metrics_mid`` (capture files, one per node, taken while the pods ran). Per pod: the scheduler's
    initial-limit lines and the quota series of :func:`check_pod_quota_series`. Missing metrics: FAIL.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    exps = _mid_captures(ev, plan, checks)
    sched = scheduler_summary(ev)
    for pod, q in quotas.items():
        mem, core = annotation_quota_bytes(q.get("memory")), q.get("core")
        checks.append(_check_initial_limits(sched, pod, ns, memory_bytes=mem, core=core))
        if exps is not None:
            checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=mem, core=core))
    status, summary = combine(checks, pass_summary=f"{len(names)} pods passed; memory and compute quotas of every "
                              "pod observable in metrics_mid with the configured values")
    metrics = {"quotas": {p: dict(q) for p, q in quotas.items()}, "runtime_s": {
        p: pod_progress(ev, p)["runtime_s"] for p in names}}
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-004/005/006


# ------------------------------------------------------------------------------------ COMBO-007


def judge_all_on(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-007: 4 mixed pods (core + memory quotas, oversubscription on some) run and are observable.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {core, memory}}), ``metrics_mid``. PASS needs:
    every pod ended; >= ``combo007_min_success`` passed; the captures parse; >= that many pods seen in
    them, each seen pod's quota series equal to its configuration; the scheduler alive with no FATAL line.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    minimum = int(combo_th(th, "combo007_min_success"))
    checks = [check_terminal(ev.pods, names)]
    facts = {p: pod_progress(ev, p) for p in names}
    passed = [p for p, f in facts.items() if f["phase"] == "Succeeded" and f["exit_code"] == 0 and f["pass_marker"]
              and f["runtime_s"] is not None]
    checks.append(_at_least("success_count", f"pods passed >= {minimum} of {len(names)}", passed, minimum,
                            {"passed": passed, "facts": facts}, f"{len(passed)}/{len(names)} passed"))
    exps = _mid_captures(ev, plan, checks)
    if exps is not None:
        seen = set().union(*(pods_in_capture(e, ns) for e in exps)) if exps else set()
        observed = [p for p in quotas if p in seen]
        checks.append(_at_least("pods_observed", f"pods with series in metrics_mid >= {minimum}", observed, minimum,
                                {"observed": observed}, f"{len(observed)}/{len(quotas)} seen"))
        checks += _quota_series_checks(exps, quotas, observed, ns)
    sched = scheduler_summary(ev)
    if sched is None:
        checks.append(Check("scheduler_no_fatal", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        fatal = [line.text for line in sched.fatal_lines[:3]]
        checks.append(Check("scheduler_no_fatal", "no FATAL line in scheduler.log",
                            {"fatal_count": sched.fatal_count, "lines": fatal}, sched.fatal_count == 0,
                            "" if sched.fatal_count == 0 else f"{sched.fatal_count} FATAL line(s): {fatal[:1]}"))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary=f"{len(passed)}/{len(names)} mixed pods passed; quotas observable")
    return Verdict(status, summary, checks, combo_used(th, "combo007_min_success"),
                   {"success_count": len(passed), "pods": len(names)}, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-008


def _gpu_match(a: str | None, b: str | None) -> bool:
    """GPU keys agree (a UUID may be a prefix of the other, as NVML prefix-matches, docs/sut/metrics.md §catalogue)."""
    return bool(a and b and (a.startswith(b) or b.startswith(a)))


def _check_effective_scaling(exps: Sequence[Exposition], pods: Sequence[str], ns: str, tol: float) -> Check:
    """Per capture (one scheduler, one node) and per GPU key: each case pod's effective compute quota equals
    config x min(1, 100 / S), S = sum of the limits < 100 of the clients on **that** GPU
    (docs/sut/scheduler.md §compute-quota)."""
    rows: dict[str, Any] = {}
    bad: list[str] = []
    for exp in exps:
        cfg = exp.values("client_core_quota_config_percent")
        by_gpu: dict[str, float] = {}
        for s in cfg:
            if s.value < 100:
                by_gpu[s.label("gpu_uuid") or "?"] = by_gpu.get(s.label("gpu_uuid") or "?", 0.0) + s.value
        for s in cfg:
            pod = s.label("pod")
            if pod not in pods or s.label("namespace") != ns or s.value >= 100:
                continue
            gpu = s.label("gpu_uuid") or "?"
            total = by_gpu[gpu]
            expected = s.value * (100.0 / total if total > 100 else 1.0)
            eff = exp.values("client_core_quota_effective_percent", client_id=s.label("client_id") or "")
            got = eff[0].value if eff else None
            rows[f"{pod}/{s.label('client_id')}"] = {"gpu": gpu, "config": s.value, "gpu_limit_sum": total,
                                                    "expected": round(expected, 2), "effective": got}
            if got is None:
                bad.append(f"{pod}: no effective series")
            elif abs(got - expected) > tol:
                bad.append(f"{pod}: effective {got:g} != {expected:.1f} (sum {total:g} on {gpu})")
    if not rows:
        return Check("per_gpu_isolation", "effective quota scaled by its own GPU only", rows, False,
                     "no limited client of the case in the captures")
    return Check("per_gpu_isolation", f"|effective - config x min(1, 100/sum_on_own_gpu)| <= {tol}", rows,
                 not bad, "; ".join(bad))


def judge_multi_gpu(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-008: many W5 pods with mixed quotas spread over GPUs, and GPUs do not contaminate each other.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {core, memory}}), ``metrics_mid``,
    ``gpus_available`` (None: unknown). PASS needs: every pod passed; the registration lines (pods.json
    ``gpu``, from ``gpu_mapping``) put the pods on >= ``combo008_min_gpus`` distinct (node, GPU);
    per pod, the quota series equal its own configuration and its ``gpu_uuid`` label equals its
    registration GPU; per GPU, effective quotas are scaled only by that GPU's limits. SKIP when the
    cluster has fewer GPUs than ``combo008_min_gpus``.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    minimum = int(combo_th(th, "combo008_min_gpus"))
    tol = float(combo_th(th, "combo008_effective_tolerance_pct"))
    used = combo_used(th, "combo008_min_gpus", "combo008_effective_tolerance_pct")
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    available = plan.get("gpus_available")
    placement = {p: (r.node, r.gpu) for p in names if (r := ev.pod(p)) is not None}
    distinct = sorted({f"{n}/{g}" for n, g in placement.values() if g})
    metrics: dict[str, Any] = {"distinct_gpus": len(distinct), "gpus": distinct, "gpus_available": available,
                               "placement": {p: list(w) for p, w in placement.items()}}
    if available is not None and int(available) < minimum:
        status, _ = combine(checks, pass_summary="")
        if status is Status.PASS:
            return Verdict(Status.SKIP, f"the cluster offers {available} GPU(s), fewer than {minimum}", checks, used,
                           metrics, ev.pod_files())
    known = [p for p, (_n, g) in placement.items() if g]
    if not known:
        checks.append(Check("distinct_gpus", f"distinct registration GPUs >= {minimum}", metrics, None,
                            "no registration GPU for any pod (scheduler.log without 'on GPU')"))
    else:
        checks.append(_at_least("distinct_gpus", f"distinct registration GPUs >= {minimum}", distinct, minimum,
                                {"gpus": distinct, "gpus_available": available}, f"all pods on {distinct}"))
    exps = _mid_captures(ev, plan, checks)
    if exps is not None:
        checks += _quota_series_checks(exps, quotas, list(quotas), ns)
        labels = {p: sorted({s.label("gpu_uuid") or ""
                             for s in capture_series(exps, "client_info", pod=p, namespace=ns)})
                  for p in quotas}
        wrong = [f"{p}: label {labels[p]} vs registration {placement[p][1]}" for p in quotas
                 if placement.get(p, (None, None))[1] and labels[p]
                 and not all(_gpu_match(g, placement[p][1]) for g in labels[p])]
        checks.append(Check("gpu_label_matches_registration", "client_info gpu_uuid == registration GPU",
                            {"labels": labels}, not wrong, "; ".join(wrong)))
        checks.append(_check_effective_scaling(exps, list(quotas), ns, tol))
    status, summary = combine(checks, pass_summary=f"{len(names)} pods passed on {len(distinct)} GPUs; each pod's "
                              "quotas its own, effective quotas scaled per GPU")
    return Verdict(status, summary, checks, used, metrics, ev.pod_files())
