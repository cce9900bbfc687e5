"""Tenants in namespaces of their own, each judged against its own quota (FUNC-013).

Two tenants run the memory probe at once, each in a namespace of its own, with pods of the same name and
different memory quotas (pod annotations). Per tenant, from the evidence alone:

* **its pod**: the record of that name *in that tenant's namespace* (``pods.json``), terminal; the two records
  are in two different namespaces (else the premise ``tenant-namespaces`` did not hold: ERROR naming it);
* **behaviour**: what the tenant's probe could really hold on ``cuMemAlloc``
  (:mod:`xpushare.judge.isolation`: held = accepted <= Q + T, usable = accepted >= Q - S, Q the tenant's quota);
* **the scheduler's word**: ``Applying initial memory limit for <namespace>/<pod>: <Q> bytes`` in
  ``scheduler.log`` (docs/sut/log.md §registration), for that namespace and no other.

A scheduler that reads annotations from the wrong namespace applies no quota (or the other tenant's) to a
tenant's pod: the scheduler line is missing or wrong (FAIL ``quota_applied[<tenant>]``) and the probe holds
something else than its quota (FAIL ``quota_held[<tenant>]`` or ``quota_usable[<tenant>]``: on the lab the library
without a quota refused after the first block). Source: issue 35 item 3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import check_held, check_probe_line, check_usable, tolerance_bytes
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.mem_probe import parse_text as parse_probe
from xpushare.parsers.scheduler_log import parse_text as parse_scheduler
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary

__all__ = ["PREMISE", "judge_tenants"]

#: The premise of the tenancy cases: each tenant's pods in a namespace of its own.
PREMISE = "tenant-namespaces"


def _record(ev: Evidence, pod: str, namespace: str) -> WorkloadRecord | None:
    return next((r for r in ev.pods if r.name == pod and r.namespace == namespace), None)


def _check_namespaces(tenants: Sequence[Mapping[str, Any]]) -> Check:
    namespaces = [str(t.get("namespace") or "") for t in tenants]
    ok = len(tenants) >= 2 and all(namespaces) and len(set(namespaces)) == len(namespaces)
    return Check("tenant_namespaces", "each tenant's pods in a namespace of its own",
                 {"namespaces": {str(t["tenant"]): t.get("namespace") for t in tenants}}, True if ok else None,
                 "" if ok else f"premise {PREMISE} did not hold: the tenants' namespaces are {namespaces}")


def _check_pod(rec: WorkloadRecord | None, tenant: str, pod: str, namespace: str) -> Check:
    name = f"pod_terminal[{tenant}]"
    expr = "the tenant's pod (by name and namespace) reached a terminal phase"
    if rec is None:
        return Check(name, expr, {"pod": f"{namespace}/{pod}"}, None, f"no pod {namespace}/{pod} in pods.json")
    values = {"pod": f"{namespace}/{pod}", "phase": rec.phase, "exit_code": rec.exit_code}
    if rec.phase not in ("Succeeded", "Failed"):
        return Check(name, expr, values, False, f"{namespace}/{pod} is {rec.phase}")
    return Check(name, expr, values, True)


def _check_applied(sched: SchedulerLogSummary | None, tenant: str, pod: str, namespace: str, quota: int) -> Check:
    """The scheduler applied this tenant's quota to this tenant's pod (its namespace), and no other value."""
    name = f"quota_applied[{tenant}]"
    expr = f"scheduler: 'Applying initial memory limit for {namespace}/{pod}: {quota} bytes'"
    if sched is None:
        return Check(name, expr, {}, None, "no scheduler.log")
    found = sorted({c.new for c in sched.limit_changes
                    if c.kind == "memory" and c.initial and c.pod == pod and c.namespace == namespace})
    values = {"found_bytes": found, "quota_bytes": quota}
    if found != [quota]:
        return Check(name, expr, values, False,
                     f"{namespace}/{pod}: scheduler applied {found or 'no memory limit'}, not its quota {quota}")
    return Check(name, expr, values, True)


def judge_tenants(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FUNC-013: each tenant's probe held its own memory quota, and the scheduler applied exactly that quota to
    that tenant's pod.

    ``plan``: ``tenants`` (each ``tenant``, ``namespace``, ``pod``, ``memory_limit``, ``quota_bytes``), ``path``.
    Thresholds: ``iso_memory_tolerance_ratio``. Metrics per tenant: ``accepted_bytes``, ``quota_bytes``,
    ``held``, ``namespace``.
    """
    tenants: list[Mapping[str, Any]] = list(plan.get("tenants") or [])
    checks: list[Check] = [_check_namespaces(tenants)]
    if checks[0].ok is not True:  # a premise unmet: nothing of the tenants is a verdict on the SUT
        return Verdict(Status.ERROR, checks[0].detail, checks, used(th), {}, ["plan.json"])
    text = ev.text("scheduler.log")
    sched = parse_scheduler(text) if text is not None else None
    metrics: dict[str, Any] = {"path": plan.get("path"), "tenants": {}}
    held_by: dict[str, int] = {}
    for t in tenants:
        tenant, pod, ns, quota = str(t["tenant"]), str(t["pod"]), str(t.get("namespace") or ""), int(t["quota_bytes"])
        rec = _record(ev, pod, ns)
        checks.append(_check_pod(rec, tenant, pod, ns))
        lines = parse_probe(ev.logs.get(ev.key(rec)) or "") if rec is not None else []
        line = lines[0] if lines else None
        checks.append(check_probe_line(line, f"{ns}/{pod}", name=f"probe_measured[{tenant}]"))
        entry: dict[str, Any] = {"namespace": ns, "pod": pod, "quota_bytes": quota}
        if line is not None and line.status == "ok":
            held = check_held(line, quota, tolerance_bytes(th, quota), name=f"quota_held[{tenant}]")
            checks += [held, check_usable(line, quota, name=f"quota_usable[{tenant}]")]
            entry.update(accepted_bytes=line.accepted_bytes, held=held.ok)
            held_by[tenant] = line.accepted_bytes
        checks.append(_check_applied(sched, tenant, pod, ns, quota))
        metrics["tenants"][tenant] = entry
    status, summary = combine(checks, pass_summary="")
    if status is Status.PASS:
        summary = "; ".join(f"tenant {t['tenant']} ({t['namespace']}/{t['pod']}): held at "
                            f"{held_by[str(t['tenant'])] / 2**20:.0f} MiB of its {t['memory_limit']}" for t in tenants)
    files = ["pods.json", *ev.pod_files(), *(["scheduler.log"] if text is not None else [])]
    return Verdict(status, summary, checks, used(th), metrics, files)
