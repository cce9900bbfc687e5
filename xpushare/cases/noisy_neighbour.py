"""PERF-012: a noisy neighbour's impact on a workload at 25/50/75 % slices of one GPU (issue 38: the overheads a
user pays, side by side on every sharing system).

For each slice q of ``perf012_slices`` the compute probe (path ``cuLaunchKernel``, the ISO compute cases' flags
``iso_*``) runs alone under a core quota of q %, then beside a neighbour pod on the same GPU that launches kernels
back to back under the rest of the GPU (100 - q %). The quota is the pod's annotation in Kubernetes and the system's
core-quota variable in host mode (HAMi-core's ``CUDA_DEVICE_SM_LIMIT``, MPS's
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``); a system without one SKIPs, premise ``core-quota``. The judgment is
:func:`xpushare.judge.noisy_neighbour.judge_noisy_neighbour`; docs/performance.md explains the figures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.cases.functional import colocated_pair
from xpushare.cases.isolation import COMPUTE_PROBE, ISO_COMPUTE_PARAMS, compute_probe_args
from xpushare.judge.noisy_neighbour import judge_noisy_neighbour
from xpushare.model.premises import CORE_QUOTA, GPU, SUT, TWO_PODS_ONE_GPU

PATH = "cuLaunchKernel"

PARAMS: dict[str, Any] = {
    "perf012_slices": [25, 50, 75],
    **{k: v for k, v in ISO_COMPUTE_PARAMS.items() if k not in ("iso_core_limit", "iso_neighbour_core_limit",
                                                                  "perf_quota_tolerance")},
}


def _perf012(run: CaseRun) -> None:
    p = run.params
    slices = [int(q) for q in p["perf012_slices"]]
    if not slices or any(not 0 < q < 100 for q in slices):
        raise ValueError(f"perf012_slices must be percentages between 1 and 99, got {p['perf012_slices']!r}")
    intervals = int(p["iso_intervals"])
    k8s = run.backend.parts.kubernetes is not None
    profile = run.cluster.profile

    def quota(percent: int) -> dict[str, Any]:
        return {"core_limit": percent} if k8s else {"env": tuple(profile.core_env(percent).items())}

    planned: list[dict[str, Any]] = []
    run.plan.update(path=PATH, slices=planned, sut=profile.name, gpu_model=run.cluster.gpu_model,
                    quota_source="annotation" if k8s else "env", quota_var=None if k8s else profile.core_quota_var)
    probe_args = compute_probe_args(p, PATH, intervals)
    # the neighbour outlasts the probe by two intervals, so that every judged interval of the probe is beside it
    noisy_args = compute_probe_args(p, PATH, intervals + 2)
    for q in slices:
        alone = run.pod(f"q{q}-alone", COMPUTE_PROBE, args=probe_args, **quota(q))
        run.run_pods([alone])
        pods = colocated_pair(run, f"q{q}", COMPUTE_PROBE, {**quota(q), "args": probe_args},
                              {**quota(100 - q), "args": noisy_args})
        pods = [pods[0], *(dataclasses.replace(f, args=noisy_args) for f in pods[1:-1]), pods[-1]]
        planned.append({"slice": q, "alone": alone.name, "victim": pods[0].name, "noisy": pods[-1].name,
                        "noisy_core_limit": 100 - q})
        run.run_pods(pods)


register(CaseDef(
    "PERF-012", "performance", "Noisy neighbour at 25/50/75 % slices", COMPUTE_PROBE,
    "per slice q of perf012_slices: the compute probe (cuLaunchKernel) alone under a q % core quota, then beside "
    "a neighbour on the same GPU launching back to back under 100 - q %; impact = share beside / share alone - 1 "
    "within perf_mixed_tolerance (±10 %, T4 ±12 %)",
    "pods/*.log ([XPUSHARE][COMPUTE_PROBE] kernels, events and wall clock per interval), pods.json",
    requires=frozenset({CAP_CLIENT_LIBRARY, CORE_QUOTA, SUT, GPU, TWO_PODS_ONE_GPU}),
    params=PARAMS, act=_perf012, judge=judge_noisy_neighbour, measures_gpu=True,
))
