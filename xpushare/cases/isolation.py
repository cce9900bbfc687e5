"""ISO-001..010: the memory quota judged by what a workload can hold, one allocation path per case (issue 26).

Each case runs the memory probe (``workloads/mem_probe.py``) once, on one path, under the memory quota
``iso_memory_limit``: by ``<PREFIX>_GPU_MEMORY_LIMIT`` in host mode, by the pod's memory annotation in
Kubernetes. The judgment is :func:`xpushare.judge.isolation.judge_memory_path`. docs/isolation.md explains the
paths and which frameworks take them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY, CAP_KUBERNETES
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.evidence.store import Evidence
from xpushare.judge import isolation
from xpushare.judge.quantity import parse_quantity
from xpushare.judge.thresholds import ISOLATION
from xpushare.model.verdict import Verdict

MEM_PROBE = "mem_probe"

#: Parameters every ISO case has (overridable per cluster, playbook and ``--set``).
ISO_PARAMS: dict[str, Any] = {
    "iso_memory_limit": "1Gi",
    "iso_step_mib": 64,
    "iso_cap_factor": 3,
    **ISOLATION,
    "iso_free_margin_mib": 512,
    # the annotation reaches the library just after its registration (docs/findings.md, 13): the probe
    # measures the path, so it starts after that
    "iso_start_delay_s": 3,
}

#: (case id, probe path, title, what takes that path)
PATHS: tuple[tuple[str, str, str, str], ...] = (
    ("ISO-001", "cuMemAlloc", "Memory quota on cuMemAlloc", "driver API, cudaMalloc, PyTorch's default allocator"),
    ("ISO-002", "cuMemAllocManaged", "Memory quota on cuMemAllocManaged", "cudaMallocManaged (unified memory)"),
    ("ISO-003", "cuMemAllocPitch", "Memory quota on cuMemAllocPitch", "cudaMallocPitch / 2-D arrays"),
    ("ISO-004", "cuMemAllocAsync", "Memory quota on cuMemAllocAsync (pool)", "cudaMallocAsync, stream-ordered pools"),
    ("ISO-005", "cuMemCreate", "Memory quota on cuMemCreate + cuMemMap (VMM)", "virtual memory management"),
    ("ISO-006", "torch-default", "Memory quota, PyTorch default allocator", "PyTorch without allocator settings"),
    ("ISO-007", "torch-expandable", "Memory quota, PyTorch expandable_segments",
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    ("ISO-008", "torch-async", "Memory quota, PyTorch cudaMallocAsync backend",
     "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"),
    ("ISO-009", "child-process", "Memory quota across a child process",
     "a process and its child under one quota (data loaders, launchers)"),
    ("ISO-010", "cuMemPool", "Memory quota on an explicit memory pool",
     "cuMemPoolCreate + cuMemAllocFromPoolAsync (cudaMallocFromPoolAsync: RMM, CuPy and JAX pools)"),
)


def probe_args(params: Mapping[str, Any], path: str, quota_bytes: int) -> tuple[str, ...]:
    """The probe's flags for one ISO case."""
    return (
        "--path", path,
        "--quota-bytes", str(quota_bytes),
        "--step-mib", str(int(params["iso_step_mib"])),
        "--cap-factor", f"{float(params['iso_cap_factor']):g}",
        "--free-margin-mib", str(int(params["iso_free_margin_mib"])),
        "--start-delay-s", f"{float(params['iso_start_delay_s']):g}",
    )


def _act(path: str) -> Any:
    def act(run: CaseRun) -> None:
        limit = str(run.params["iso_memory_limit"])
        quota = parse_quantity(limit)
        k8s = CAP_KUBERNETES in run.backend.capabilities
        limits = {"memory_limit": limit} if k8s else {"memory_limit_env": limit}
        run.plan.update(path=path, quota_bytes=quota, quota_source="annotation" if k8s else "env", memory_limit=limit)
        run.run_pods([run.pod("probe", MEM_PROBE, args=probe_args(run.params, path, quota), **limits)])

    return act


def _judge(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return isolation.judge_memory_path(ev, th, plan)


for _id, _path, _title, _takers in PATHS:
    register(
        CaseDef(
            _id,
            "isolation",
            _title,
            "mem_probe",
            f"1 pod probes path {_path} ({_takers}) in iso_step_mib MiB steps up to iso_cap_factor x the quota "
            "(never past the card's free memory) under iso_memory_limit (env in host mode, annotation in k8s)",
            "pods/*.log ([XPUSHARE][MEM_PROBE] accepted/refused bytes, cuMemGetInfo), pods.json",
            requires=frozenset({CAP_CLIENT_LIBRARY}),
            params=dict(ISO_PARAMS),
            act=_act(_path),
            judge=_judge,
        )
    )
