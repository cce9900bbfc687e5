"""The scheduler of a host-mode cluster: the process the inventory's ``scheduler`` settings describe
(``process_name``, ``metrics_url``, ``log_file``) on the first GPU host, as evidence and for the stability
suites (its facts, a restart, its log in pieces).

Pids are per host: only the pods of this host can be matched to this log's registrations, so the harvest also
names the host (``scheduler_node.txt``, :data:`xpushare.evidence.store.SCHEDULER_NODE_FILE`).
"""

from __future__ import annotations

import time
from pathlib import Path

from xpushare.backends import harvest_faults, scheduler_proc
from xpushare.backends.base import SchedulerFacts, SchedulerRestart
from xpushare.evidence.scrape_capture import raw_capture_on
from xpushare.evidence.store import SCHEDULER_NODE_FILE
from xpushare.inventory.schema import SchedulerSpec
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport.base import Host

__all__ = ["HostScheduler"]


class HostScheduler:
    """The scheduler on host ``name`` (connection ``host``) as ``settings`` describe it.

    Errors: :class:`~xpushare.model.errors.TransportError` when ``host`` cannot run a command.
    """

    def __init__(self, name: str, host: Host, settings: SchedulerSpec) -> None:
        self.name = name
        self.host = host
        self.settings = settings

    def log_size(self) -> int | None:
        """Bytes in the scheduler log now (0 when unreadable); None when the inventory names no log."""
        log = self.settings.log_file
        if not log:
            return None
        res = self.host.run(["sh", "-c", 'wc -c < "$1"', "sh", log], timeout=30)
        return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 0

    def read_log(self, start: int = 0) -> str:
        """The scheduler log from byte ``start`` on (``log_file`` must be set). Raises TransportError."""
        return self.host.run(["tail", "-c", f"+{start + 1}", str(self.settings.log_file)], timeout=120).stdout

    def harvest(self, case_dir: Path, log_offset: int | None, faults: list[str]) -> list[str]:
        """``metrics.txt`` and ``metrics_health.txt`` (curl captures), ``scheduler.log`` from byte ``log_offset``
        on with ``scheduler_node.txt``, ``scheduler_proc.txt``: each only when the inventory says where. A piece
        lost to a transport fault is noted and added to ``faults`` (:func:`harvest_faults.fault`); the others are
        still read."""
        files: list[str] = []
        if self.settings.metrics_url:
            base = self.settings.metrics_url.rstrip("/")
            for path, local in (("/metrics", "metrics.txt"), ("/healthz", "metrics_health.txt")):
                try:
                    capture = raw_capture_on(self.host, base + path)
                except TransportError as exc:
                    harvest_faults.fault(case_dir, f"scheduler {path}", exc, faults)
                    continue
                atomic_write_text(case_dir / local, capture)
                files.append(local)
        if self.settings.log_file:
            try:
                atomic_write_text(case_dir / "scheduler.log", self.read_log(log_offset or 0))
                atomic_write_text(case_dir / SCHEDULER_NODE_FILE, self.name + "\n")
                files += ["scheduler.log", SCHEDULER_NODE_FILE]
            except TransportError as exc:
                harvest_faults.fault(case_dir, "scheduler log", exc, faults)
        if self.settings.process_name:
            try:
                files.append(scheduler_proc.store_status(case_dir, self.host, self.settings.process_name))
            except TransportError as exc:
                harvest_faults.fault(case_dir, "scheduler /proc", exc, faults)
        return files

    def facts(self, cluster_name: str, *, metrics: bool = False) -> list[SchedulerFacts]:
        """Its processes, ``/healthz``, and ``/metrics`` when asked, in one command. ``instance`` is the oldest
        process's pid: a new pid is a restart; ``healthy`` needs a ``/healthz`` 200 (never without a
        ``metrics_url`` to ask). Raises :class:`XpushareError` without ``process_name``."""
        if not self.settings.process_name:
            raise XpushareError(f"cluster {cluster_name}: no scheduler.process_name in the inventory")
        base = self.settings.metrics_url.rstrip("/") if self.settings.metrics_url else None
        argv = scheduler_proc.argv(self.settings.process_name, base and base + "/healthz",
                                   base + "/metrics" if base and metrics else None)
        out = scheduler_proc.parse(self.host.run(argv, timeout=60).stdout)
        if out.error:
            return [SchedulerFacts(self.name, error=out.error)]
        first = out.processes[0].pid if out.processes else None
        return [SchedulerFacts(self.name, out.processes, None if first is None else str(first), 0,
                               bool(out.processes) and out.healthy is True, out.metrics_text,
                               "" if first is None else f"pid-{first}")]

    def restart(self, cluster_name: str) -> SchedulerRestart:
        """``kill -TERM`` every scheduler process. Whether it comes back is up to what runs it (``invoke
        deploy``'s supervisor restarts it within about a second; a hand-started one stays down). Raises
        :class:`XpushareError` when no scheduler process runs or the kill fails."""
        before = self.facts(cluster_name)
        facts = before[0]
        if not facts.processes:
            raise XpushareError(f"{facts.node}: no scheduler process to restart ({facts.error or 'not running'})")
        pids = [str(p.pid) for p in facts.processes]
        at = time.time()
        res = self.host.run(["kill", "-TERM", *pids], timeout=30)
        if not res.ok:
            raise XpushareError(f"{facts.node}: kill -TERM {' '.join(pids)}: {res.stderr.strip()}")
        return SchedulerRestart(f"kill -TERM scheduler pid {' '.join(pids)} on {facts.node}", at,
                                {f.node: f.instance for f in before})

    def copy_log(self, path: Path, start: int, size: int) -> None:
        """Bytes ``start`` to ``size`` of the scheduler log into ``path`` (``log_file`` must be set)."""
        res = self.host.run(["sh", "-c", 'tail -c "+$1" "$2" | head -c "$3"', "sh", str(start + 1),
                             str(self.settings.log_file), str(size - start)], timeout=120)
        atomic_write_text(path, res.stdout)
