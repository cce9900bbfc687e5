"""FUNC-013: two tenants at once, each in a namespace of its own, with pods of the same name and different memory
quotas; each judged against its own quota by what its memory probe could hold and by the scheduler's line
(:func:`xpushare.judge.tenancy.judge_tenants`). Production GPU sharing is multi-tenant: a scheduler that reads a
pod's annotations from another namespace than the pod's passes every single-namespace case.
"""

from __future__ import annotations

from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY, CAP_KUBERNETES, CAP_TENANT_NAMESPACES, require_part
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.cases.isolation import ISO_PARAMS, MEM_PROBE, probe_args
from xpushare.judge import tenancy
from xpushare.judge.quantity import parse_quantity
from xpushare.model.premises import GPU, SUT

#: The probe's allocation path: the one every framework's default allocator takes.
PATH = "cuMemAlloc"

#: Tenants and their memory quotas (annotation values), in order.
TENANTS: dict[str, Any] = {"func013_tenants": ["a", "b"], "func013_memory_limits": ["1Gi", "2Gi"]}


def _act(run: CaseRun) -> None:
    tenants = [str(t) for t in run.params["func013_tenants"]]
    limits = [str(q) for q in run.params["func013_memory_limits"]]
    if len(tenants) < 2 or len(limits) != len(tenants) or len(set(limits)) != len(limits):
        raise ValueError("func013_tenants: two tenants or more, func013_memory_limits: one distinct quota each")
    kube = require_part(run.backend.parts.kubernetes, CAP_KUBERNETES)
    specs, plan = [], []
    for tenant, limit in zip(tenants, limits, strict=True):
        quota = parse_quantity(limit)
        spec = run.pod("probe", MEM_PROBE, args=probe_args(run.params, PATH, quota), memory_limit=limit, tenant=tenant)
        specs.append(spec)
        plan.append({"tenant": tenant, "namespace": kube.pod_namespace(tenant), "pod": spec.name,
                     "memory_limit": limit, "quota_bytes": quota})
    run.plan.update(path=PATH, tenants=plan)
    run.run_pods(specs)


register(
    CaseDef(
        "FUNC-013",
        "functional",
        "Tenants in two namespaces",
        "mem_probe",
        "2 tenants at once, each in a namespace of its own, pods of the same name, memory quotas 1Gi and 2Gi "
        "(func013_memory_limits, annotations); each probe (cuMemAlloc) measures what it can hold",
        "pods.json (namespace of each pod), pods/<namespace>/<pod>.log (MEM_PROBE accepted/refused), scheduler.log "
        "(Applying initial memory limit for <namespace>/<pod>)",
        # premises: Kubernetes, the SUT in the path (checked on the evidence, judge/sut_path), tenant-namespaces
        requires=frozenset({CAP_KUBERNETES, CAP_CLIENT_LIBRARY, CAP_TENANT_NAMESPACES, SUT, GPU}),
        params={**ISO_PARAMS, **TENANTS},
        act=_act,
        judge=tenancy.judge_tenants,
    )
)
