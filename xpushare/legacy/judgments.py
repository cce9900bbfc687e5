"""Verdicts of the legacy scenarios: pure functions of a case's stored evidence and its ``plan.json``.

The same honesty rules as the matrix (:mod:`xpushare.judge.checks`, :func:`xpushare.model.verdict.combine`): a pod
passes only with phase Succeeded, exit 0, the ``PASS`` line and a runtime; a check whose evidence is
missing (no pod record, no log, no scheduler log, no dmon capture) is unevaluable, which makes the case
ERROR, never PASS. Where a legacy script's rule was weaker, the stricter rule is used and named:

* ``remote-test-memlimit.sh`` test 1 passed when the log matched ``memory limit`` -- the library's INFO
  line, present whenever the variable is set (docs/sut/legacy-scripts.md §memlimit): here it needs a real rejection /
  OOM line and a pod that did not pass;
* ``remote-test-dynamic-limit.sh`` accepted any ``Memory limit changed`` line: here each annotated value
  must appear as the new value for the pod;
* ``remote-test-compute-limit.sh`` / ``-complex.sh`` always exited 0 and read the decoder column of
  ``dmon -s u`` (docs/sut/workloads.md §dmon): here the ``sm`` column of the pod's own GPU is compared with the limits
  in force
  (the sum of the limits of the pods on that GPU, capped at 100) within ``legacy_util_tolerance``
  percentage points;
* ``remote-test-complex2.sh`` had no verdict: here every pod must pass and get its initial core limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.scrape_capture import split_trailer
from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_rejected
from xpushare.legacy import tables
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import dmon, nvidia_smi, scheduler_log, scheduler_log_records


def _scheduler(ev: Evidence) -> scheduler_log_records.SchedulerLogSummary | None:
    text = ev.text("scheduler.log")
    return scheduler_log.parse_text(text) if text is not None else None


def _verdict(checks: list[Check], pass_summary: str, metrics: Mapping[str, Any], ev: Evidence,
             extra_evidence: Sequence[str] = ()) -> Verdict:
    status, summary = combine(checks, pass_summary=pass_summary)
    evidence = [*ev.pod_files(), "pods.json", *extra_evidence]
    return Verdict(status, summary, checks, metrics=dict(metrics), evidence=evidence)


def pod_metrics(ev: Evidence, pods: Sequence[str]) -> dict[str, Any]:
    """Key metrics of the table: per-pod duration (s) and speed (it/s), and the statistics of the passed pods."""
    rows = tables.pod_rows(pods, ev.pods, ev.logs)
    s = tables.stats(rows)
    return {
        "pods_passed": s.passed,
        "pods_total": s.total,
        "duration_avg_s": s.duration_avg,
        "duration_min_s": s.duration_min,
        "duration_max_s": s.duration_max,
        "speed_avg_it_s": s.speed_avg,
        "durations_s": {r.name: r.duration_s for r in rows if not r.estimated},
        "speeds_it_s": {r.name: r.rate_it_s for r in rows},
    }


def pod_gpus(summary: scheduler_log_records.SchedulerLogSummary, namespace: str) -> dict[str, str | None]:
    """Pod -> GPU key of its last registration in ``namespace`` (``None`` for the nvshare generation)."""
    return {pod: gpu for (ns, pod), gpu in summary.pod_gpu.items() if ns == namespace}


def check_registered(ev: Evidence, pods: Sequence[str], namespace: str) -> tuple[Check, dict[str, Any]]:
    """Every pod registered with the scheduler (``Registered client ... Pod name = <pod>``), so it ran
    under the SUT; also returns the placement metrics (GPUs used, pods per GPU)."""
    summary = _scheduler(ev)
    if summary is None:
        return Check("registered_with_scheduler", "a Registered client line per pod", {}, None,
                     "no scheduler.log captured"), {}
    placed = pod_gpus(summary, namespace)
    missing = [p for p in pods if p not in placed]
    per_gpu: dict[str, int] = {}
    for p in pods:
        if p in placed:
            key = str(placed[p])
            per_gpu[key] = per_gpu.get(key, 0) + 1
    metrics: dict[str, Any] = {"gpu_of_pod": {p: placed.get(p) for p in pods}, "pods_per_gpu": per_gpu,
                               "gpus_used": len(per_gpu)}
    check = Check("registered_with_scheduler", f"{len(pods)}/{len(pods)} pods in the scheduler's registrations",
                  {"registered": sorted(set(pods) - set(missing)), "missing": missing}, not missing,
                  "" if not missing else f"never registered with the scheduler: {', '.join(missing)}")
    return check, metrics


# ---------------------------------------------------------------------------------- pods-run scenarios


def judge_all_pass(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """cross-gpu / small / idle-small: every pod passed and registered with the scheduler."""
    pods = list(plan["pods"])
    checks = [check_pods_succeeded(ev, pods)]
    metrics = pod_metrics(ev, pods)
    reg, placement = check_registered(ev, pods, str(plan.get("namespace", "default")))
    checks.append(reg)
    metrics.update(placement)
    return _verdict(checks, f"{len(pods)}/{len(pods)} pods passed on {placement.get('gpus_used', '?')} GPU(s)",
                    metrics, ev, ["scheduler.log"])


def judge_baseline(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """baseline: every native pod (``nvidia.com/gpu``, no SUT) passed; durations are the baseline."""
    pods = list(plan["pods"])
    metrics = pod_metrics(ev, pods)
    metrics["workloads"] = dict(plan.get("workloads") or {})
    return _verdict([check_pods_succeeded(ev, pods)], f"{len(pods)} native baseline pods passed", metrics, ev)


def judge_complex2(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """complex2: every pod passed and the scheduler applied its initial core limit."""
    pods, ns, limit = list(plan["pods"]), str(plan.get("namespace", "default")), int(plan["core_limit"])
    checks = [check_pods_succeeded(ev, pods)]
    summary = _scheduler(ev)
    if summary is None:
        checks.append(Check("initial_core_limit", f"Applying initial compute limit ...: {limit}% per pod", {}, None,
                            "no scheduler.log captured"))
    else:
        got = {c.pod: c.new for c in summary.limit_changes if c.kind == "compute" and c.initial and c.namespace == ns}
        bad = [p for p in pods if got.get(p) != limit]
        checks.append(Check("initial_core_limit", f"Applying initial compute limit for <pod>: {limit}% (each pod)",
                            {"applied": {p: got.get(p) for p in pods}}, not bad,
                            "" if not bad else f"no initial {limit}% limit for {', '.join(bad)}"))
    reg, placement = check_registered(ev, pods, ns)
    checks.append(reg)
    metrics = {**pod_metrics(ev, pods), **placement}
    return _verdict(checks, f"{len(pods)} pods with a {limit}% core limit passed", metrics, ev, ["scheduler.log"])


# --------------------------------------------------------------------------------------------- memlimit


def judge_memlimit(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """memlimit: test 1 (low limit) must be refused with a rejection/OOM line; tests 2 and 3 must pass."""
    checks: list[Check] = []
    results: dict[str, str] = {}
    for test in plan["tests"]:
        pod = str(test["pod"])
        rejected = test["expect"] == "rejected"
        check = check_rejected(ev, pod) if rejected else check_pods_succeeded(ev, [pod])
        check.name = f"test{test['n']}_{test['label'].replace(' ', '_')}"
        checks.append(check)
        results[f"Test {test['n']} ({test['label']})"] = {True: "PASS", False: "FAIL", None: "ERROR"}[check.ok]
    passed = sum(1 for v in results.values() if v == "PASS")
    metrics = {"tests": results, "passed": passed, "failed": len(results) - passed}
    return _verdict(checks, f"{passed}/{len(results)} memory-limit tests passed", metrics, ev)


def memlimit_summary(results: Mapping[str, str]) -> str:
    """The script's closing block: one line per test, the totals and the final word."""
    lines = [f"  {name}: {status}" for name, status in results.items()]
    passed = sum(1 for v in results.values() if v == "PASS")
    lines.append(f"Total: {passed} passed, {len(results) - passed} failed")
    lines.append("  All tests passed." if passed == len(results) else "  Some tests failed.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- dynamic limit


def judge_dynamic_limit(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """dynamic-limit: the manual pod registered; every annotated value logged as its new memory limit and
    sent (``Sending UPDATE_LIMIT``); the late client under the low limit got it at registration and was refused."""
    ns, manual, late = str(plan.get("namespace", "default")), str(plan["manual_pod"]), str(plan["late_pod"])
    summary = _scheduler(ev)
    checks: list[Check] = []
    if summary is None:
        checks.append(Check("scheduler_log", "scheduler.log captured", {}, None, "no scheduler.log captured"))
    else:
        regs = {r.pod for r in summary.registrations if r.namespace == ns}
        checks.append(Check("registered", f"Registered client ... Pod name = {manual}", {"pods": sorted(regs)},
                            manual in regs, "" if manual in regs else f"{manual} never registered"))
        changes = [c.new for c in summary.limit_changes if c.kind == "memory" and not c.initial
                   and c.namespace == ns and c.pod == manual]
        wanted = [int(s["bytes"]) for s in plan["steps"] if s.get("bytes") is not None]
        missing = [b for b in wanted if b not in changes]
        checks.append(Check("memory_changes_logged", "Memory limit changed for pod <manual>: <old> -> <value> bytes "
                            "for every annotated value", {"wanted": wanted, "logged": changes}, not missing,
                            "" if not missing else f"not logged: {missing}"))
        sent = [s.value for s in summary.limit_sends if s.kind == "memory"]
        missing_sent = [b for b in wanted if b not in sent]
        checks.append(Check("update_limit_sent", "Sending UPDATE_LIMIT to client ...: <value> bytes",
                            {"sent": sent}, not missing_sent, "" if not missing_sent else f"not sent: {missing_sent}"))
        low = int(plan["late_bytes"])
        initial = [c.new for c in summary.limit_changes if c.kind == "memory" and c.namespace == ns and c.pod == late]
        checks.append(Check("late_client_limit", f"Applying initial memory limit for <late pod>: {low} bytes",
                            {"logged": initial}, low in initial,
                            "" if low in initial else f"{late} did not get the {low}-byte limit"))
    rejected = check_rejected(ev, late)
    rejected.name = "late_client_refused"
    checks.append(rejected)
    metrics = {"steps": [s.get("value") for s in plan["steps"]], "late_limit": plan.get("late_value")}
    return _verdict(checks, "annotated memory limits logged, sent and enforced on a new client", metrics, ev,
                    ["scheduler.log", "annotations.jsonl"])


# ------------------------------------------------------------------------------ compute limit / complex


def phase_average(series: Sequence[float | None], start_s: float, end_s: float) -> tuple[float | None, int]:
    """Mean of the samples with index in ``[start_s, end_s)`` (one sample per second, ``None`` skipped).

    Returns ``(mean or None, number of samples used)``.
    """
    lo, hi = max(0, round(start_s)), max(0, round(end_s))
    values = [v for v in series[lo:hi] if v is not None]
    return (sum(values) / len(values) if values else None), len(values)


def _gpu_index(ev: Evidence, node: str, gpu: str | None) -> int | None:
    text = ev.text(f"nvidia_smi_L_{node}.txt")
    if text is None or gpu is None:
        return None
    return nvidia_smi.uuid_to_index(nvidia_smi.parse_list(text)).get(gpu)


def judge_compute(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """compute-limit / complex: each annotation logged as ``Compute limit changed ... -> <N>%`` for its
    pod, and in each phase the GPU's ``sm`` utilisation (dmon) within ``legacy_util_tolerance`` points of
    the sum of the limits of the pods on that GPU (capped at 100).

    ``plan``: ``pods``, ``namespace``, ``changes`` (``pod``, ``value`` in percent, 100 for a removal),
    ``phases`` (``name``, ``start_s``/``end_s`` seconds since the dmon start, ``targets`` pod -> percent).
    """
    ns, pods = str(plan.get("namespace", "default")), list(plan["pods"])
    tol = float(th["legacy_util_tolerance"])
    summary = _scheduler(ev)
    checks: list[Check] = []
    metrics: dict[str, Any] = {}
    if summary is None:
        checks.append(Check("compute_changes_logged", "Compute limit changed ... -> <N>%", {}, None,
                            "no scheduler.log captured"))
        placed: dict[str, str | None] = {}
    else:
        logged: dict[str, list[int]] = {}
        for c in summary.limit_changes:
            if c.kind == "compute" and not c.initial and c.namespace == ns:
                logged.setdefault(c.pod, []).append(c.new)
        wanted = [(str(c["pod"]), int(c["value"])) for c in plan["changes"]]
        missing = [f"{p} -> {v}%" for p, v in wanted if v not in logged.get(p, [])]
        checks.append(Check("compute_changes_logged", "Compute limit changed for pod <pod>: <old>% -> <N>% for every "
                            "annotation", {"wanted": [f"{p} -> {v}%" for p, v in wanted], "logged": logged},
                            not missing, "" if not missing else f"not logged: {', '.join(missing)}"))
        placed = pod_gpus(summary, ns)
    records = {r.name: r for r in ev.pods}
    gpu_of: dict[str, tuple[str, int | None]] = {}
    for p in pods:
        rec = records.get(p)
        if rec is not None and rec.node:
            gpu_of[p] = (rec.node, _gpu_index(ev, rec.node, placed.get(p)))
    metrics["gpu_of_pod"] = {p: f"{n}/GPU {i}" if i is not None else f"{n}/?" for p, (n, i) in gpu_of.items()}
    observed: dict[str, Any] = {}
    bad: list[str] = []
    unknown: list[str] = []
    for phase in plan["phases"]:
        groups: dict[tuple[str, int | None], list[str]] = {}
        for p in phase["targets"]:
            groups.setdefault(gpu_of.get(p, ("?", None)), []).append(p)
        for (node, index), members in groups.items():
            target = min(100.0, sum(float(phase["targets"][p]) for p in members))
            key = f"{phase['name']}: {'+'.join(members)}"
            dmon_text = ev.text(f"remote_{node}_dmon.txt") if node != "?" else None
            if dmon_text is None or index is None:
                reason = "no dmon capture" if dmon_text is None else "GPU index unknown"
                observed[key] = {"target": target, "actual": None, "reason": reason}
                unknown.append(f"{key} ({reason})")
                continue
            avg, n = phase_average(dmon.sm_series(dmon.parse(dmon_text), index), phase["start_s"], phase["end_s"])
            observed[key] = {"target": target, "actual": avg, "samples": n, "gpu": f"{node}/GPU {index}"}
            if avg is None:
                observed[key]["reason"] = "no samples in the phase"
                unknown.append(f"{key} (no samples in the phase)")
            elif abs(avg - target) > tol:
                bad.append(f"{key}: actual {avg:.1f}% vs target {target:.0f}%")
    metrics["utilisation"] = observed
    ok: bool | None = False if bad else (None if unknown else True)
    reasons = sorted({u.rsplit(" (", 1)[-1].rstrip(")") for u in unknown})
    detail = "; ".join(bad + ([f"{len(unknown)} phase window(s) unevaluable: {', '.join(reasons)}"] if unknown else []))
    checks.append(Check("utilisation_follows_limit", f"|dmon sm avg - target| <= {tol:g} points per phase and GPU",
                        {"tolerance": tol, "phases": observed}, ok, detail))
    extra = ["scheduler.log", "annotations.jsonl", *sorted({f"remote_{n}_dmon.txt" for n, _ in gpu_of.values()})]
    return _verdict(checks, "every core limit logged and followed by the GPU's utilisation", metrics, ev, extra)


def format_compute_analysis(verdict_metrics: Mapping[str, Any], tolerance: float) -> str:
    """The ``analyze_dmon.py`` / ``analyze_complex.py`` style lines for the stored utilisation metrics."""
    lines = ["Mapping Info:"]
    for pod, where in (verdict_metrics.get("gpu_of_pod") or {}).items():
        lines.append(f"  {pod} -> {where}")
    for key, obs in (verdict_metrics.get("utilisation") or {}).items():
        actual = obs.get("actual")
        if actual is None:
            lines.append(f"[{key}] Target: {obs['target']:.0f}% | Actual Avg: n/a")
            lines.append(f"  -> NOT EVALUATED: {obs.get('reason') or 'no utilisation samples'}")
            continue
        lines.append(f"[{key}] Target: {obs['target']:.0f}% | Actual Avg: {actual:.2f}% | Samples: {obs['samples']}")
        ok = abs(actual - obs["target"]) <= tolerance
        lines.append("  -> PASS: Within tolerance" if ok else f"  -> FAIL: Deviation > {tolerance:g}%")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ smoke


def judge_smoke(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """smoke (``remote-test-smoke.sh``): the probe pod passed; ``/healthz`` answered 200; ``/metrics``
    has ``<prefix>scheduler_messages_total``. A missing NVML sampler row is a warning in the metrics."""
    pod, prefix = str(plan["pods"][0]), str(plan.get("metric_prefix", "xpushare_"))
    checks = [check_pods_succeeded(ev, [pod])]
    health = ev.text("metrics_health.txt")
    checks.append(Check("healthz", "/healthz HTTP 200 (curl from the node to the scheduler pod)",
                        {"collected": health is not None}, None if health is None else split_trailer(health)[1] == 200,
                        "no metrics_health.txt (scheduler pod or node not reachable)" if health is None
                        else ("" if split_trailer(health)[1] == 200 else "health endpoint did not answer 200")))
    metrics_text = ev.text("metrics.txt")
    family = f"{prefix}scheduler_messages_total"
    has_family = metrics_text is not None and any(
        line.startswith(family) for line in metrics_text.splitlines())
    checks.append(Check("metrics_family", f"^{family} in /metrics", {"collected": metrics_text is not None},
                        None if metrics_text is None else has_family,
                        "no metrics.txt" if metrics_text is None else ("" if has_family else f"{family} missing")))
    nvml = metrics_text is not None and f'{prefix}gpu_sampler_backend_info{{backend="nvml"' in metrics_text
    status, summary = combine(checks, pass_summary="workload and metrics passed")
    if status is Status.PASS and not nvml and plan.get("backend", "cuda") == "cuda":
        summary += " (WARN: no NVML sampler backend row)"
    return Verdict(status, summary, checks, metrics={"nvml_sampler": nvml, **pod_metrics(ev, [pod])},
                   evidence=[*ev.pod_files(), "pods.json", "metrics.txt", "metrics_health.txt"])
