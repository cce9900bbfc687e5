"""The parts of the host backend (:class:`~xpushare.backends.base.BackendParts`): placement on the GPU hosts,
evidence rotation of the scheduler's log file, and the scheduler as a process (where the inventory's
``scheduler`` settings name its process and endpoint).

Each part is a view of one :class:`~xpushare.backends.host.HostBackend` and reads its state when called: a GPU
host lost during the run is placed on and read no more by every part at once.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from xpushare.backends.base import EvidenceRotation, Placement, SchedulerControl, SchedulerFacts, SchedulerRestart

if TYPE_CHECKING:  # the backend builds its parts: no import cycle at run time
    from xpushare.backends.host import HostBackend
    from xpushare.transport.base import Host


class HostPlacement(Placement):
    """The GPU hosts that answer and the GPUs found on them at run start."""

    def __init__(self, backend: HostBackend) -> None:
        self.backend = backend

    def gpu_node_hosts(self) -> dict[str, Host]:
        return dict(self.backend.hosts)

    def gpu_count(self) -> int | None:
        """GPUs found on the GPU hosts at run start (inventory ``gpus`` or ``nvidia-smi -L``). Raises
        :class:`~xpushare.model.errors.HostUnreachable` naming a GPU host that did not answer: a case that counts
        the cluster's GPUs (to spread pods over every GPU, or to find two) needs every GPU host."""
        b = self.backend
        if b.dead:
            raise b.dead_error(next(iter(b.dead)), f"the GPU count of cluster {b.cluster.name} needs every GPU host")
        return sum(len(v) for v in b.gpus.values())

    def colocation_target(self) -> tuple[str | None, int]:
        """``(None, 1)``: the backend puts pods on one GPU itself (``same_gpu_as``)."""
        return None, 1


class HostRotation(EvidenceRotation):
    """The scheduler log file, copied in pieces (it goes on by itself); forgetting pods restarts placement."""

    def __init__(self, backend: HostBackend) -> None:
        self.backend = backend

    def forget_pod_specs(self) -> None:
        """Forget the pods placed so far (their files stay on the hosts until cleanup; placement starts over)."""
        self.backend.placed = {}

    def restart_log_streams(self, dest: Path, tag: str, *, since: datetime | None = None) -> list[Path]:
        """Copy the scheduler log's bytes since the last rotation (or the case start) to
        ``dest/scheduler-<tag>.log``; the file itself goes on (``since`` is not needed: nothing is lost)."""
        b = self.backend
        if not b.cluster.scheduler.log_file:
            return []
        dest.mkdir(parents=True, exist_ok=True)
        start = b.rotated_offset if b.rotated_offset is not None else (b.log_offset or 0)
        size = b.scheduler.log_size() or 0
        if size < start:  # the log was truncated or replaced: take it from its beginning
            start = 0
        path = dest / f"scheduler-{tag}.log"
        b.scheduler.copy_log(path, start, size)
        b.rotated_offset = size
        return [path]


class HostSchedulerControl(SchedulerControl):
    """The first GPU host's scheduler process (:class:`~xpushare.backends.host_scheduler.HostScheduler`)."""

    def __init__(self, backend: HostBackend) -> None:
        self.backend = backend

    def scheduler_facts(self, *, metrics: bool = False) -> list[SchedulerFacts]:
        return self.backend.scheduler.facts(self.backend.cluster.name, metrics=metrics)

    def restart_scheduler(self) -> SchedulerRestart:
        """``kill -TERM`` every process of the first GPU host's scheduler (:meth:`HostScheduler.restart`)."""
        return self.backend.scheduler.restart(self.backend.cluster.name)
