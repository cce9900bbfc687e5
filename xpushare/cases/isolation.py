"""ISO-001..010: the memory quota judged by what a workload can hold, one allocation path per case (issue 26);
ISO-011..016: the core quota judged by the GPU time a workload gets, one kernel launch path per case.

Each case runs the memory probe (``workloads/mem_probe.py``) once, on one path, under the memory quota
``iso_memory_limit``: in host mode by the variable of the cluster's system (its profile,
:mod:`xpushare.inventory.sut_profiles`: ``<PREFIX>_GPU_MEMORY_LIMIT``, ``CUDA_DEVICE_MEMORY_LIMIT``,
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``), by the pod's memory annotation in Kubernetes. The core-quota cases set
theirs by the pod's annotation in Kubernetes and by the system's core-quota variable in host mode (a system
without one SKIPs, premise ``core-quota``). The judgment is :func:`xpushare.judge.isolation.judge_memory_path`.
docs/isolation.md explains the paths and which frameworks take them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.cases.functional import colocated_pair
from xpushare.evidence.store import Evidence
from xpushare.judge import isolation
from xpushare.judge.quantity import parse_quantity
from xpushare.judge.thresholds import ISOLATION, ISOLATION_COMPUTE
from xpushare.model.premises import CORE_QUOTA, GPU, SUT, TWO_PODS_ONE_GPU
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
        k8s = run.backend.parts.kubernetes is not None
        profile = run.cluster.profile
        # an annotation, or the environment variable of the cluster's system
        limits: dict[str, Any] = {"memory_limit": limit} if k8s else run.env_memory_quota(limit)
        run.plan.update(path=path, quota_bytes=quota, quota_source="annotation" if k8s else "env", memory_limit=limit,
                        sut=profile.name, quota_var=None if k8s else profile.memory_quota_var)
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
            requires=frozenset({CAP_CLIENT_LIBRARY, SUT, GPU}),
            params=dict(ISO_PARAMS),
            act=_act(_path),
            judge=_judge,
        )
    )


# ------------------------------------------------------------------------------------------------ compute
# ISO-011..016: the core (compute) quota on each kernel launch path, alone and beside a neighbour pod on the same
# GPU. The project's SUT takes core quotas only from the pod's annotation (docs/sut/scheduler.md §compute-quota);
# HAMi-core and MPS take them from a variable, so in host mode the cases run where the system's profile has one.

COMPUTE_PROBE = "compute_probe"

#: Parameters of the compute cases (overridable per cluster, playbook and ``--set``).
ISO_COMPUTE_PARAMS: dict[str, Any] = {
    "iso_core_limit": 50,
    "iso_neighbour_core_limit": 40,
    "iso_kernel_ms": 4,
    "iso_batch": 8,
    "iso_interval_s": 4,
    "iso_intervals": 5,
    "iso_start_delay_s": 3,
    **ISOLATION_COMPUTE,
    # the seed's compute-quota precision (seed 000 §6 P1): alone ±8 %, mixed on one GPU ±10 % (T4 ±12 %)
    "perf_quota_tolerance": 0.08,
    "perf_mixed_tolerance": 0.10,
    "perf_mixed_tolerance_t4": 0.12,
}

#: (case id, launch path, with a neighbour, title, what takes that path)
COMPUTE_PATHS: tuple[tuple[str, str, bool, str, str], ...] = (
    ("ISO-011", "cuLaunchKernel", False, "Core quota on cuLaunchKernel", "PyTorch eager, cuBLAS/cuDNN, most programs"),
    ("ISO-012", "cuLaunchKernelEx", False, "Core quota on cuLaunchKernelEx",
     "CUDA 12 launch configurations: CUTLASS cluster launches on Hopper, Triton 3"),
    ("ISO-013", "cuGraphLaunch", False, "Core quota on a CUDA graph (cuGraphLaunch)",
     "CUDA graphs: torch.compile reduce-overhead, TensorRT, vLLM/SGLang decode"),
    ("ISO-014", "cuLaunchKernel", True, "Core quota on cuLaunchKernel beside a neighbour", "as ISO-011"),
    ("ISO-015", "cuLaunchKernelEx", True, "Core quota on cuLaunchKernelEx beside a neighbour", "as ISO-012"),
    ("ISO-016", "cuGraphLaunch", True, "Core quota on a CUDA graph beside a neighbour", "as ISO-013"),
)


def compute_probe_args(params: Mapping[str, Any], path: str, intervals: int) -> tuple[str, ...]:
    """The compute probe's flags for one ISO case (``intervals`` lines of ``iso_interval_s``)."""
    return (
        "--path", path,
        "--kernel-ms", f"{float(params['iso_kernel_ms']):g}",
        "--batch", str(int(params["iso_batch"])),
        "--interval-s", f"{float(params['iso_interval_s']):g}",
        "--intervals", str(intervals),
        "--start-delay-s", f"{float(params['iso_start_delay_s']):g}",
    )


def _compute_act(path: str, with_neighbour: bool) -> Any:
    def act(run: CaseRun) -> None:
        p = run.params
        q, nq = int(p["iso_core_limit"]), int(p["iso_neighbour_core_limit"])
        intervals = int(p["iso_intervals"])
        k8s = run.backend.parts.kubernetes is not None
        profile = run.cluster.profile

        def quota(percent: int) -> dict[str, Any]:
            return {"core_limit": percent} if k8s else {"env": tuple(profile.core_env(percent).items())}

        run.plan.update(path=path, core_limit=q, quota_source="annotation" if k8s else "env", neighbour=None,
                        neighbour_core_limit=nq if with_neighbour else None, sut=profile.name,
                        quota_var=None if k8s else profile.core_quota_var)
        probe_args = compute_probe_args(p, path, intervals)
        if not with_neighbour:
            run.run_pods([run.pod("probe", COMPUTE_PROBE, args=probe_args, **quota(q))])
            return
        # the neighbour takes cuLaunchKernel under its own quota and outlasts the probe by two intervals
        neighbour_args = compute_probe_args(p, "cuLaunchKernel", intervals + 2)
        pods = colocated_pair(run, "probe", COMPUTE_PROBE, {**quota(q), "args": probe_args},
                              {**quota(nq), "args": neighbour_args})
        # fillers (other GPUs of the node, no quota) run the neighbour's flags
        pods = [pods[0], *(dataclasses.replace(f, args=neighbour_args) for f in pods[1:-1]), pods[-1]]
        run.plan.update(neighbour=pods[-1].name)
        run.run_pods(pods)

    return act


def _compute_judge(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return isolation.judge_compute_path(ev, th, plan)


for _id, _path, _beside, _title, _takers in COMPUTE_PATHS:
    _op = (f"1 pod runs the compute probe on path {_path} ({_takers}) for iso_intervals x iso_interval_s s under "
           "a core quota of iso_core_limit % (gpu-core-limit annotation in k8s, the system's variable in host mode)")
    if _beside:
        _op += ", beside a neighbour pod on the same GPU (cuLaunchKernel, iso_neighbour_core_limit %)"
    register(
        CaseDef(
            _id,
            "isolation",
            _title,
            COMPUTE_PROBE,
            _op,
            "pods/*.log ([XPUSHARE][COMPUTE_PROBE] kernels, events and wall clock per interval), pods.json",
            requires=frozenset({CAP_CLIENT_LIBRARY, CORE_QUOTA, SUT, GPU}
                               | ({TWO_PODS_ONE_GPU} if _beside else set())),
            params=dict(ISO_COMPUTE_PARAMS),
            act=_compute_act(_path, _beside),
            judge=_compute_judge,
        )
    )
