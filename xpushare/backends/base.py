"""What every backend (host processes, Kubernetes pods) offers a test case.

A case asks for :class:`PodSpec` workloads, waits, changes limits, and leaves evidence files in its
case directory; the backend decides how a "pod" exists (a process on a GPU node, or a Kubernetes pod).
Pod records are written to ``pods.json`` so judgments never read live state.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TERMINAL_PHASES = ("Succeeded", "Failed")

#: Capabilities a case may require; a backend lists those it has.
CAP_KUBERNETES = "kubernetes"
CAP_CLIENT_LIBRARY = "client-library"
CAP_ANNOTATIONS = "annotations"


@dataclass(frozen=True)
class PodSpec:
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


@dataclass
class PodRecord:
    """What became of a pod: phase, exit code, where it ran, and its run interval (unix seconds).

    ``gpu``: the GPU the backend itself knows of: host mode, the one it placed the process on (UUID, else
    index); None in Kubernetes, where only the scheduler's registration lines tell (the GPU the judgments
    use is derived from the evidence when it is loaded, :mod:`xpushare.evidence`).

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


def write_pod_records(case_dir: Path, records: Sequence[PodRecord]) -> Path:
    """Write ``pods.json`` (a list of pod records) and return its path."""
    path = case_dir / "pods.json"
    path.write_text(json.dumps([asdict(r) for r in records], indent=2) + "\n", encoding="utf-8")
    return path


def read_pod_records(case_dir: Path) -> list[PodRecord]:
    """Read ``pods.json``; an absent file is an empty list."""
    path = case_dir / "pods.json"
    if not path.exists():
        return []
    return [PodRecord(**r) for r in json.loads(path.read_text(encoding="utf-8"))]


class Backend(ABC):
    """How a case's workloads run and how evidence is gathered on one cluster."""

    mode: str
    capabilities: frozenset[str] = frozenset()

    def kubectl_calls(self) -> int | None:
        """kubectl invocations so far (None where there is no kubectl)."""
        return None

    @abstractmethod
    def prepare_run(self, run_id: str) -> None:
        """Once per run: remove leftovers of earlier runs (only what carries our labels/pid files)."""

    @abstractmethod
    def begin_case(self, case_dir: Path, case_id: str) -> None:
        """Start case-long evidence (samplers, dmon, log streams)."""

    @abstractmethod
    def start_pods(self, case_dir: Path, pods: Sequence[PodSpec]) -> None:
        """Create the pods. Raises :class:`~xpushare.errors.XpushareError` on failure."""

    @abstractmethod
    def wait_terminal(self, case_dir: Path, names: Sequence[str], timeout_s: float) -> list[PodRecord]:
        """Wait until the pods end or ``timeout_s`` passes; return their records either way."""

    @abstractmethod
    def wait_running(self, case_dir: Path, names: Sequence[str], timeout_s: float) -> list[PodRecord]:
        """Wait until the pods run (or ended); return their records."""

    def read_log(self, case_dir: Path, pod: str) -> str:
        """The pod's output so far (for waits on a workload line; evidence is still taken by harvest)."""
        raise NotImplementedError

    def gpu_count(self) -> int | None:
        """Physical GPUs the case's workloads can be placed on (schedulable nodes or GPU hosts); None where
        this backend cannot tell. FUNC-003 judges the spread only when it knows there is more than one."""
        return None

    def colocation_target(self) -> tuple[str | None, int]:
        """Where to put pods that must share one GPU: ``(node, gpu_count)``.

        ``node`` None means the backend places pods on one GPU itself (``PodSpec.same_gpu_as``);
        otherwise ``gpu_count + 1`` pods pinned to ``node`` are certain to put two on one GPU.
        """
        return None, 1

    def annotate(self, case_dir: Path, pod: str, annotations: dict[str, str]) -> float:
        """Set annotations on a running pod; return the unix time of the call. Needs ``annotations``."""
        raise NotImplementedError(f"{self.mode} mode has no annotations")

    @abstractmethod
    def harvest(self, case_dir: Path) -> list[str]:
        """Pull every evidence file into the case dir (pod logs, samplers, scheduler); return their paths."""

    @abstractmethod
    def cleanup(self, case_dir: Path) -> None:
        """Remove everything the case created (idempotent; runs in ``finally``)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections at the end of a run."""
