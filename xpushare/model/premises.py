"""Premises: what must hold for a case's verdict to mean anything (docs/verdicts.md "Premises").

Each case declares the premises it rests on (``CaseDef.requires``, names of :data:`PREMISES`). A premise is
checked where it can be known:

* **before the act**, from the cluster (its mode, the inventory's ``sut_lib`` and ``scheduler`` settings) and the
  backend (its capabilities, the GPUs it found): unmet, the case SKIPs with "premise unmet: <name>: <why>" and
  runs nothing (:func:`unmet_before`);
* **in the evidence**, by the judgment (two pods did share one GPU, the SUT's client library was in every
  workload's path): unmet, the verdict is ERROR with the same wording (:func:`unmet`), never PASS and never a
  FAIL of the SUT.

A premise that cannot be known before (a GPU count the backend cannot tell) is left to the evidence; "not
applicable" is never a PASS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BEFORE", "CORE_QUOTA", "EVIDENCE", "FAULT_INJECTOR", "GPU", "NVML", "OVERSUBSCRIPTION", "PREMISES",
           "SCHEDULER_LOG",
           "SCHEDULER_METRICS", "SUT", "TENANT_NAMESPACES", "TWO_GPUS", "TWO_PODS_ONE_GPU", "UNMET", "ClusterFacts",
           "Premise", "is_unmet", "unmet", "unmet_before"]

# The premises that are no backend capability (those are named in ``backends/base.py``: ``kubernetes``,
# ``client-library``, ``annotations``, ``scheduler-process``).
SUT = "sut"
GPU = "gpu"
TWO_GPUS = "two-gpus"
TWO_PODS_ONE_GPU = "two-pods-one-gpu"
SCHEDULER_LOG = "scheduler-log"
SCHEDULER_METRICS = "scheduler-metrics"
NVML = "nvml"
TENANT_NAMESPACES = "tenant-namespaces"
FAULT_INJECTOR = "fault-injector"
CORE_QUOTA = "core-quota"
OVERSUBSCRIPTION = "oversubscription"

BEFORE = "before the act"
EVIDENCE = "in the evidence"


@dataclass(frozen=True)
class Premise:
    """One premise: its ``name`` (as cases declare it), what it means, and where it is checked (``checked``:
    :data:`BEFORE` and/or :data:`EVIDENCE`) and how."""

    name: str
    description: str
    checked: tuple[str, ...]
    how: str


_ROWS = (
    Premise("kubernetes", "a Kubernetes cluster (workloads are pods, kubectl on the master)", (BEFORE,),
            "before: the cluster's mode"),
    Premise("sut", "the SUT is in the workloads' path: Kubernetes mode (the device plugin preloads the client "
            "library), or host mode with the inventory's sut_lib (MPS: its daemon, no library)", (BEFORE, EVIDENCE),
            "before: the cluster's mode and sut_lib; evidence: every started workload registered with the "
            "scheduler (sut_in_path), or for hami-core and mps their own lines (sut_profiles: proof)"),
    Premise("gpu", "at least one GPU the workloads can use", (BEFORE,),
            "before: the GPUs the backend found (inventory gpus, nvidia-smi -L, the nodes' allocatable vGPUs)"),
    Premise("two-gpus", "at least two GPUs the workloads can be spread over", (BEFORE, EVIDENCE),
            "before: the GPUs the backend found; evidence: the count the act recorded, when unknown before"),
    Premise("two-pods-one-gpu", "two pods of the case were placed on one GPU", (EVIDENCE,),
            "evidence: the scheduler's registrations (else the tool's placement) put both pods on one GPU"),
    Premise("client-library", "the SUT's client library enforces quotas and oversubscription in each "
            "workload (Kubernetes, or host mode with sut_lib)", (BEFORE,),
            "before: the backend's capabilities"),
    Premise("core-quota", "a core quota can be set on a workload: a pod annotation (Kubernetes), or in host mode "
            "the system's core-quota variable (hami-core: CUDA_DEVICE_SM_LIMIT, mps: "
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)", (BEFORE,),
            "before: the cluster's mode and its sut's profile"),
    Premise("oversubscription", "a workload can be switched to allocate more GPU memory than the card has: the "
            "system's own switch (xpushare/nvshare: <PREFIX>_ENABLE_SINGLE_OVERSUB, hami-core: CUDA_OVERSUBSCRIBE; "
            "mps has none)", (BEFORE,), "before: the cluster's sut profile"),
    Premise("annotations", "quotas are set and changed as pod annotations (Kubernetes)", (BEFORE,),
            "before: the backend's capabilities"),
    Premise("scheduler-process", "the tool can follow the scheduler's process (RSS, FDs, restarts) and its "
            "/healthz and /metrics", (BEFORE,),
            "before: the backend's capabilities (host mode: scheduler.process_name and scheduler.metrics_url)"),
    Premise("scheduler-log", "the scheduler's log can be read (Kubernetes: the scheduler pods' logs; host "
            "mode: scheduler.log_file)", (BEFORE, EVIDENCE),
            "before: the cluster's mode and scheduler.log_file; evidence: scheduler.log was stored"),
    Premise("scheduler-metrics", "the scheduler's /metrics can be scraped (Kubernetes: each scheduler pod; "
            "host mode: scheduler.metrics_url)", (BEFORE, EVIDENCE),
            "before: the cluster's mode and scheduler.metrics_url; evidence: the scrapes were stored"),
    Premise("nvml", "NVML on the GPU nodes (nvidia-smi, the node sampler's per-process GPU memory)", (BEFORE, EVIDENCE),
            "before: the GPUs the backend found; evidence: the node sampler's NVML columns"),
    Premise("tenant-namespaces", "the workloads can live in namespaces of their own (Kubernetes)", (BEFORE,),
            "before: the cluster's mode"),
    Premise("fault-injector", "a GPU fault injector is configured for the workloads (fault_shim, or the shim "
            "invoke deploy installs)", (BEFORE,),
            "before: the cluster's configuration, where it tells; else the injected fault shows in the evidence"),
)

#: Every premise a case may declare, by name.
PREMISES: dict[str, Premise] = {p.name: p for p in _ROWS}


UNMET = "premise unmet: "


def unmet(name: str, why: str) -> str:
    """The verdict summary of an unmet premise: ``premise unmet: <name>: <why>`` (SKIP before the act, ERROR
    when found in the evidence). Raises ``KeyError`` for a name that is no premise."""
    return f"{UNMET}{PREMISES[name].name}: {why}"


def is_unmet(summary: str) -> bool:
    """Whether a verdict's ``summary`` says that a premise did not hold (:func:`unmet`)."""
    return summary.startswith(UNMET)


@dataclass(frozen=True)
class ClusterFacts:
    """What is known of a cluster before a case acts (from the inventory and, at run time, the backend).

    ``capabilities``: the backend's (``backends/base.py``: ``kubernetes``, ``client-library``, ``annotations``,
    ``scheduler-process``); ``kubernetes``: the cluster runs in Kubernetes mode; ``sut_lib``: host mode has the
    SUT's client library configured; ``gpu_count``: GPUs the workloads can use (None: unknown, e.g. a dry run
    of a cluster whose hosts do not list their ``gpus``); ``scheduler_log`` / ``scheduler_metrics``: where the
    scheduler's log / ``/metrics`` are known (host mode: the inventory's ``scheduler`` settings; None: not
    told); ``fault_injector``: whether a GPU fault injector is configured (None: the cluster does not tell);
    ``core_quota_unset``: in host mode, why the cluster's system cannot set a core quota on a workload (None: it
    can); ``oversub_unset``: why the cluster's system cannot be switched to oversubscribe GPU memory (None: it
    can); ``quota_change_unset``: in host mode, why a running workload's quota cannot change (premise
    ``annotations``, e.g. PERF-007's time until a change is enforced). A fact that is None leaves its premise to the
    evidence.
    """

    capabilities: frozenset[str]
    kubernetes: bool
    sut_lib: bool = False
    gpu_count: int | None = None
    scheduler_log: bool | None = None
    scheduler_metrics: bool | None = None
    fault_injector: bool | None = None
    core_quota_unset: str | None = None
    oversub_unset: str | None = None
    quota_change_unset: str | None = None


_HOST_MODE = "this cluster runs in host mode"


def _why_unmet(name: str, facts: ClusterFacts) -> str | None:
    """Why premise ``name`` does not hold on ``facts`` (None: it holds, or it is known only from the evidence)."""
    gpus = facts.gpu_count
    if name == "kubernetes":
        return None if facts.kubernetes or name in facts.capabilities else f"needs Kubernetes ({_HOST_MODE})"
    if name == "sut":
        return None if facts.kubernetes or facts.sut_lib else (
            "host mode without the SUT's client library in the workloads' path (set sut_lib in the inventory; "
            "invoke deploy installs it)")
    if name == "core-quota":
        return None if facts.kubernetes or facts.core_quota_unset is None else facts.core_quota_unset
    if name == "oversubscription":
        return facts.oversub_unset
    if name == "client-library":
        return None if facts.kubernetes or name in facts.capabilities else (
            "needs the SUT's client library (set sut_lib in the inventory; invoke deploy installs it)")
    if name in ("annotations", "tenant-namespaces"):
        change = f": {facts.quota_change_unset}" if name == "annotations" and facts.quota_change_unset else ""
        return None if facts.kubernetes or name in facts.capabilities else f"needs Kubernetes ({_HOST_MODE}{change})"
    if name == "scheduler-process":
        return None if facts.kubernetes or name in facts.capabilities else (
            "the scheduler's process is not known (host mode: set scheduler.process_name and scheduler.metrics_url)")
    if name == "scheduler-log":
        return None if facts.kubernetes or facts.scheduler_log is not False else (
            "no scheduler log (host mode: set scheduler.log_file)")
    if name == "scheduler-metrics":
        return None if facts.kubernetes or facts.scheduler_metrics is not False else (
            "no scheduler /metrics (host mode: set scheduler.metrics_url)")
    if name in ("gpu", "nvml"):
        return "no GPU on this cluster (the workloads would run on the CPU)" if gpus == 0 else None
    if name == "two-gpus":
        return f"this cluster has {gpus} GPU(s)" if gpus is not None and gpus < 2 else None
    if name == "fault-injector":
        return "no GPU fault injector is configured" if facts.fault_injector is False else None
    return None  # known only from the evidence (two-pods-one-gpu)


def unmet_before(requires: Iterable[str], facts: ClusterFacts) -> tuple[str, str] | None:
    """The first premise of ``requires`` (in :data:`PREMISES` order) that does not hold before the act, as
    ``(name, why)``; None when every premise that can be known before holds."""
    wanted = set(requires)
    for name in PREMISES:
        if name in wanted and (why := _why_unmet(name, facts)) is not None:
            return name, why
    return None
