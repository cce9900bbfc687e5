"""FUNC-013: two tenants in namespaces of their own, same-named pods, each judged against its own memory quota by
what its probe held and by the scheduler's line for its namespace; a scheduler that reads annotations from
namespace ``default`` (the mutant ``annotations-default-namespace``) FAILs it."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tests.paths import REPO_ROOT
from xpushare.evidence.store import Evidence
from xpushare.judge.tenancy import judge_tenants
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord

sys.path.insert(0, str(REPO_ROOT / "xpushare" / "data" / "workloads"))
probe: Any = importlib.import_module("mem_probe")

MIB = 1 << 20
POD = "func-013-probe"
NS = {"a": "xpushare-r1-a", "b": "xpushare-r1-b"}
QUOTA = {"a": 1024 * MIB, "b": 2048 * MIB}
TH = {"iso_memory_tolerance_ratio": 0.02}


def line(accepted: int, cap: int) -> str:
    a = probe.Attempt("cuMemAlloc", cap, 64 * MIB, accepted, 64 * MIB, "cuMemAlloc_v2 returned OOM", "ok", 1, 2, "-")
    return str(probe.format_line(a, 0, "start", 0.5))


def plan() -> dict[str, Any]:
    return {"path": "cuMemAlloc", "tenants": [
        {"tenant": t, "namespace": NS[t], "pod": POD, "memory_limit": f"{QUOTA[t] // 2**30}Gi", "quota_bytes": QUOTA[t]}
        for t in ("a", "b")]}


def evidence(held: dict[str, int], applied: dict[str, int | None]) -> Evidence:
    recs = [WorkloadRecord(POD, "Succeeded", 0, "n1", namespace=NS[t], log=f"pods/{NS[t]}/{POD}.log")
            for t in ("a", "b")]
    logs = {f"{NS[t]}/{POD}": line(held[t], 3 * QUOTA[t]) + "\n" for t in ("a", "b")}
    sched = "".join(f"2026-11-28T12:00:00.000000000Z [XPUSHARE][INFO]: Applying initial memory limit for "
                    f"{NS[t]}/{POD}: {q} bytes\n" for t, q in applied.items() if q is not None)
    return Evidence.from_parts(recs, logs, {"scheduler.log": sched}, mode="k8s")


def test_each_tenant_held_at_its_own_quota_passes() -> None:
    v = judge_tenants(evidence(QUOTA, dict(QUOTA)), TH, plan())
    assert v.status is Status.PASS, v.summary
    assert v.metrics["tenants"]["a"]["accepted_bytes"] == QUOTA["a"] and v.metrics["tenants"]["b"]["held"] is True
    assert f"pods/{NS['a']}/{POD}.log" in v.evidence and "scheduler.log" in v.evidence


def test_quotas_read_from_the_wrong_namespace_fail_both_tenants() -> None:
    # the scheduler found no pod of that name in `default`: no quota, each probe held up to its cap
    v = judge_tenants(evidence({"a": 3 * QUOTA["a"], "b": 3 * QUOTA["b"]}, {"a": None, "b": None}), TH, plan())
    assert v.status is Status.FAIL
    failed = {c.name for c in v.checks if c.ok is False}
    assert {"quota_held[a]", "quota_held[b]", "quota_applied[a]", "quota_applied[b]"} <= failed


def test_one_tenant_given_the_others_quota_fails_that_tenant() -> None:
    v = judge_tenants(evidence({"a": QUOTA["b"], "b": QUOTA["b"]}, {"a": QUOTA["b"], "b": QUOTA["b"]}), TH, plan())
    assert v.status is Status.FAIL
    assert {c.name for c in v.checks if c.ok is False} == {"quota_held[a]", "quota_applied[a]"}


def test_tenants_in_one_namespace_are_an_unmet_premise() -> None:
    p = plan()
    p["tenants"][1]["namespace"] = NS["a"]
    v = judge_tenants(evidence(QUOTA, dict(QUOTA)), TH, p)
    assert v.status is Status.ERROR and "tenant-namespaces" in v.summary


def test_a_missing_pod_is_never_a_pass() -> None:
    ev = evidence(QUOTA, dict(QUOTA))
    ev.pods = [p for p in ev.pods if p.namespace == NS["a"]]
    assert judge_tenants(ev, TH, plan()).status is Status.ERROR
