"""PERF-013: how long a process waits for its first usable CUDA context with the sharing system in its path.

Each of ``plan["pods"]`` is one process of the context probe (``workloads/ctx_probe.py``: the driver library and
``cuInit``, the primary context, the first 1 MiB allocation, the first kernel; milliseconds by the process's own
clock). The figure is the median over the processes of each step and of the total; the verdict PASSes when every
process measured and the median total is at most ``perf013_max_total_ms``. What the system adds is the figure
against the same probe with no system in the path (``invoke compare`` beside a run without one, or the baseline
of tests/lab/gpu/cross-sut.sh). Source: docs/performance.md "PERF-013".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_terminal
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers.ctx_probe import STEPS, CtxProbeLine, parse_text

__all__ = ["check_latency", "judge_context_latency", "medians"]


def medians(lines: list[CtxProbeLine]) -> dict[str, float]:
    """The median of each step and of the total (ms) over complete lines; empty without one."""
    complete = [x for x in lines if x.complete]
    if not complete:
        return {}
    return {k: round(statistics.median(x.steps()[k] for x in complete), 3) for k in (*STEPS, "total_ms")}


def _measured(lines: list[CtxProbeLine], pod: str) -> Check:
    expr = "one complete [XPUSHARE][CTX_PROBE] line"
    values: dict[str, Any] = {"pod": pod, "lines": len(lines)}
    if not lines:
        return Check(f"measured_{pod}", expr, values, None, f"no [XPUSHARE][CTX_PROBE] line in {pod}'s log")
    line = lines[-1]
    values.update(status=line.status, error=line.error)
    if line.status == "unavailable":
        return Check(f"measured_{pod}", expr, values, None,
                     f"node prerequisite missing in {pod}: {line.error} (not a verdict on the SUT)")
    if not line.complete:
        return Check(f"measured_{pod}", expr, values, None, f"the probe failed in {pod}: {line.error}")
    return Check(f"measured_{pod}", expr, values, True)


def check_latency(med: Mapping[str, float], max_total_ms: float) -> Check:
    """``context_latency``: the median total wait (ms) at most ``max_total_ms``; FAIL names the slowest step."""
    expr = f"median total_ms <= perf013_max_total_ms ({max_total_ms:g})"
    values = {**med, "max_total_ms": max_total_ms}
    total = med["total_ms"]
    if total <= max_total_ms:
        return Check("context_latency", expr, values, True)
    slowest = max(STEPS, key=lambda k: med[k])
    return Check("context_latency", expr, values, False,
                 f"a process waited {total:.0f} ms (median) for its first context and kernel, over {max_total_ms:g} "
                 f"ms; the slowest step {slowest} {med[slowest]:.0f} ms")


def judge_context_latency(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-013 over ``plan["pods"]`` (one probe process each). Checks: every pod ended; each printed a complete
    probe line (no driver: ERROR, a node's prerequisite; a failed call: ERROR with the call); every pod that
    measured succeeded; :func:`check_latency`. That the system was in each workload's path is checked once for
    every performance case, after the judgment (:func:`xpushare.judge.sut_path.with_sut_checks`). Metrics:
    ``median_ms`` (per step and total), ``total_ms`` (each process's), ``processes``."""
    pods = list(plan.get("pods") or [])
    max_total = float(th["perf013_max_total_ms"])
    lines = {pod: parse_text(ev.logs.get(pod) or "") for pod in pods}
    measured = [_measured(lines[pod], pod) for pod in pods]
    checks: list[Check] = [check_terminal(ev.pods, pods),
                           check_pods_succeeded(ev, [c.values["pod"] for c in measured if c.ok]), *measured]
    if not pods:
        checks.append(Check("processes", "at least one probe process", {}, None, "no probe process in the plan"))
    complete = [lines[pod][-1] for pod in pods if lines[pod] and lines[pod][-1].complete]
    med = medians(complete)
    metrics: dict[str, Any] = {"sut": plan.get("sut"), "processes": len(pods), "median_ms": med,
                               "total_ms": [round(x.total_ms, 3) for x in complete],
                               "device": complete[0].device if complete else None}
    if med:
        checks.append(check_latency(med, max_total))
    status, summary = combine(checks, pass_summary="")
    if status is Status.PASS:
        summary = (f"first context and kernel after {med['total_ms']:.1f} ms (median of {len(complete)}; init "
                   f"{med['init_ms']:.1f}, context {med['context_ms']:.1f}, alloc {med['alloc_ms']:.1f}, launch "
                   f"{med['launch_ms']:.1f} ms), within {max_total:g} ms")
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())
