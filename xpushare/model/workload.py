"""A case's workloads, whatever runs them: what a case asks for (:class:`WorkloadSpec`) and what became of it
(:class:`WorkloadRecord`), stored as ``pods.json`` in the case directory so judgments never read live state.

In Kubernetes a workload is a pod; in host mode it is a process on a GPU host. Both backends
(:mod:`xpushare.backends`) write the records; the evidence store reads them (:func:`read_pod_records`). The
file's name and its fields are a stored format: ``pods.json`` of every stored run reads the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xpushare.model.atomic_file import atomic_write_text

#: The phases after which a workload does not change (Kubernetes' pod phases; host mode uses the same names).
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload instance a case asks for.

    ``workload`` is a script of ``workloads/`` without ``.py`` (``w2_medium_add``); ``core_limit`` is a
    percent and ``memory_limit`` a quantity string (``4Gi``), both delivered as annotations (k8s);
    ``memory_limit_env`` goes into ``<PREFIX>_GPU_MEMORY_LIMIT``; ``same_gpu_as`` pins the pod to the
    GPU of another pod of the case.
    """

    name: str
    workload: str
    args: tuple[str, ...] = ()
    core_limit: int | None = None
    memory_limit: str | None = None
    memory_limit_env: str | None = None
    oversub: bool = False
    node: str | None = None
    same_gpu_as: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    tenant: str | None = None
    """Kubernetes with :data:`CAP_TENANT_NAMESPACES`: the tenant whose namespace the pod runs in (a DNS-1123
    label, ``a``); None: the run's own namespace. Pods of two tenants may have the same name."""


@dataclass
class WorkloadRecord:
    """What became of a pod: phase, exit code, where it ran, and its run interval (unix seconds).

    ``gpu``: the GPU the backend itself knows of: host mode, the one it placed the process on (UUID, else
    index); None in Kubernetes, where only the scheduler's registration lines tell (the GPU the judgments
    use is derived from the evidence when it is loaded, :mod:`xpushare.evidence.store`).

    ``host_pid``: host mode only, the pid of the workload process on its host (the process that loads
    the client library, so the pid the scheduler exports as ``client_info{host_pid}``); None in
    Kubernetes (a container's host pid is not known to the tool) and until the process started.

    ``gpu_key``: host mode only, the GPU key the client library reports for the environment the backend
    gave the process (first token of ``NVIDIA_VISIBLE_DEVICES``, else of ``CUDA_VISIBLE_DEVICES``), the
    same key space as the scheduler's registrations; None when the backend set no device.
    ``namespace``: Kubernetes only, the pod's namespace.
    """

    name: str
    phase: str
    exit_code: int | None = None
    node: str | None = None
    gpu: str | None = None
    started: float | None = None
    finished: float | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    """Log path relative to the case directory."""
    host_pid: int | None = None
    gpu_key: str | None = None
    namespace: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


def write_pod_records(case_dir: Path, records: Sequence[WorkloadRecord]) -> Path:
    """Write ``pods.json`` (a list of pod records) atomically, as it is rewritten at every poll; return its path."""
    return atomic_write_text(case_dir / "pods.json", json.dumps([asdict(r) for r in records], indent=2) + "\n")


def read_pod_records(case_dir: Path) -> list[WorkloadRecord]:
    """Read ``pods.json``; an absent file is an empty list."""
    path = case_dir / "pods.json"
    if not path.exists():
        return []
    return [WorkloadRecord(**r) for r in json.loads(path.read_text(encoding="utf-8"))]
