"""Host mode: a workload "pod" is a process on a GPU host (this machine for ``local``, or a node over SSH).

Each pod runs under a small ``sh`` wrapper that records its start time, end time and exit code next to
its output in the host's spawn directory, so phases come from files, not from a live process table:
Pending (no start file), Running (started, no exit code), Succeeded (exit 0), Failed (other exit).
The process gets the SUT's environment for its naming generation, ``LD_PRELOAD`` of the client library
when the inventory names one (``sut_lib``), and ``CUDA_VISIBLE_DEVICES`` from the host's GPU list.
When the inventory names a scheduler on the host (``scheduler.metrics_url/log_file/process_name``),
its metrics, log and ``/proc`` figures are harvested as evidence too.

Each record carries the workload process's pid (``host_pid``): outside Kubernetes the scheduler knows
every client as pod ``none`` in namespace ``none``, so the pid (and the ``Client ID`` line of the
process's output) is how its clients are told apart (:mod:`xpushare.evidence.client_match`). A record's ``gpu`` is
the backend's own placement and ``gpu_key`` the GPU key the client library reports for it (the
``CUDA_VISIBLE_DEVICES`` the backend set); where the scheduler actually registered each client is derived
from the harvested ``scheduler.log`` when the evidence is loaded for judging (:mod:`xpushare.evidence.store`),
and ``scheduler_node.txt`` names the host whose scheduler wrote that log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from xpushare.backends import harvest_faults, host_harvest
from xpushare.backends import host_procs as procs
from xpushare.backends.base import (
    CAP_CLIENT_LIBRARY,
    CAP_SCHEDULER_PROCESS,
    Backend,
    BackendParts,
    CaseContext,
    exact_part,
    run_spawn_prefix,
)
from xpushare.backends.host_parts import HostPlacement, HostRotation, HostSchedulerControl
from xpushare.backends.host_scheduler import HostScheduler
from xpushare.data import workloads_dir
from xpushare.evidence import events, gpu_health
from xpushare.inventory.schema import MODE_HOST, ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.model.errors import HostUnreachable, TransportError, XpushareError
from xpushare.model.unreached import Unreached
from xpushare.model.workload import WorkloadRecord, WorkloadSpec, write_pod_records
from xpushare.transport import activity, interrupt, reach
from xpushare.transport.base import Host
from xpushare.transport.hosts import connect
from xpushare.transport.local import LocalHost

WORKLOADS_DIR = workloads_dir()


@dataclass
class _Placed:
    spec: WorkloadSpec
    host: str
    gpu_index: int | None
    gpu_uuid: str | None
    spawn_name: str
    gpu_key: str | None = None


def reaches_client_library(cluster: ClusterSpec) -> bool:
    """Whether the workloads on ``cluster`` reach the SUT: its preload library is named, or the system needs
    none (MPS: the CUDA driver is its client)."""
    return bool(cluster.sut_lib) or not cluster.profile.needs_preload


def follows_scheduler(cluster: ClusterSpec) -> bool:
    """Whether the inventory names the scheduler's process and endpoint: the stability suites follow its
    ``/proc`` figures and ``/metrics``."""
    return bool(cluster.scheduler.process_name and cluster.scheduler.metrics_url)


def host_capabilities(cluster: ClusterSpec) -> frozenset[str]:
    """What a host backend on ``cluster`` can do, from its inventory alone (nothing is contacted; for dry
    runs): the capabilities of the parts :class:`HostBackend` gives (:attr:`BackendParts.capabilities`)."""
    caps = {CAP_CLIENT_LIBRARY} if reaches_client_library(cluster) else set()
    if follows_scheduler(cluster):
        caps.add(CAP_SCHEDULER_PROCESS)
    return frozenset(caps)


class HostBackend(Backend):
    """Workloads as processes on the cluster's GPU hosts. Its parts (:mod:`xpushare.backends.host_parts`):
    placement, evidence rotation, the first GPU host's scheduler (where the inventory names its process and
    endpoint) and that host's connection; no Kubernetes, no annotations."""

    mode = MODE_HOST

    def __init__(self, cluster: ClusterSpec, *, poll_s: float | None = None) -> None:
        self.cluster = cluster
        self.names = sut_names(cluster.generation)
        self.hosts_are_local = all(h.local for h in cluster.hosts)
        # A poll is a few milliseconds on this machine and one SSH round trip elsewhere.
        self.poll_s = poll_s if poll_s is not None else (0.2 if self.hosts_are_local else 1.0)
        specs = cluster.by_role("gpu") or list(cluster.hosts)
        self.hosts: dict[str, Host] = {h.name: connect(h) for h in specs}
        """The GPU hosts that answer (after :meth:`prepare_run`; every GPU host before it)."""
        self.dead: dict[str, HostUnreachable] = {}
        """The GPU hosts that did not answer at :meth:`prepare_run`, with why (inventory order)."""
        # The inventory's ``scheduler`` settings describe the first GPU host's scheduler.
        first = next(iter(self.hosts))
        self.scheduler = HostScheduler(first, self.hosts[first], cluster.scheduler)
        self.gpus: dict[str, list[tuple[int, str]]] = {}
        self.workload_dir: dict[str, str] = {}
        self.python: dict[str, str] = {}
        self.run_id = ""
        self.placed: dict[str, _Placed] = {}
        self.case_prefix = ""
        self.log_offset: int | None = None
        self.rotated_offset: int | None = None
        """Scheduler log bytes already copied by :meth:`restart_log_streams` (None: none yet this case)."""

    @property
    def parts(self) -> BackendParts:
        """Built at each call: the scheduler's host is replaced when it stops answering."""
        return BackendParts(placement=HostPlacement(self), rotation=HostRotation(self),
                            scheduler=HostSchedulerControl(self) if follows_scheduler(self.cluster) else None,
                            scheduler_host=self.scheduler.host,
                            client_library=reaches_client_library(self.cluster))

    # -- run level -------------------------------------------------------------------------------
    def prepare_run(self, run_id: str) -> None:
        """Probe every GPU host (:func:`~xpushare.transport.reach.probe`); go on with those that answer (each
        one that does not is replaced by an :class:`~xpushare.transport.reach.UnreachableHost`, :meth:`unreachable`
        lists it); then clear what earlier invocations of this run left, find the GPUs and copy the workloads.
        Raises :class:`HostUnreachable` when no GPU host answers."""
        self.run_id = run_id
        self.dead = reach.probe(list(self.hosts.values()))
        for name in self.dead:
            self.hosts.pop(name).close()
        if self.scheduler.name in self.dead:  # whatever reads that scheduler fails at once, naming its host
            self.scheduler = HostScheduler(self.scheduler.name, reach.UnreachableHost(self.dead[self.scheduler.name]),
                                           self.cluster.scheduler)
        if not self.hosts:
            first = next(iter(self.dead.values()))
            raise HostUnreachable(first.host, f"{first.describe()}; no GPU host of cluster {self.cluster.name} "
                                              "answers", first.why)
        for name, host in self.hosts.items():
            # the cluster in the name: two clusters may share a machine (``local`` beside a host-mode cluster)
            self._stop_leftovers(host, self._cluster_prefix())
            self.gpus[name] = self._detect_gpus(host, name)
            if isinstance(host, LocalHost):
                self.workload_dir[name] = str(WORKLOADS_DIR)
                self.python[name] = sys.executable if self.cluster.python == "python3" else self.cluster.python
                continue
            home = host.run(["sh", "-c", "pwd"], timeout=30, check=True).stdout.strip()
            target = self.cluster.workdir or f"{home}/.xpushare/workloads"
            host.run(["mkdir", "-p", target], timeout=30, check=True)
            for script in sorted(WORKLOADS_DIR.glob("*.py")):
                host.put(script, f"{target}/{script.name}")
            self.workload_dir[name] = target
            self.python[name] = self.cluster.python

    def _cluster_prefix(self) -> str:
        """How the spawn names of this run on this cluster begin, exactly (:func:`run_spawn_prefix`)."""
        return procs.safe(f"{run_spawn_prefix(self.run_id)}{exact_part(self.cluster.name)}-")

    def _stop_leftovers(self, host: Host, prefix: str) -> None:
        """Stop processes an interrupted earlier invocation of this run left behind and remove their files
        (resume safety; a new attempt's names carry a new token, so those files would not be read anyway)."""
        host.run(["sh", "-c", procs.STOP_LEFTOVERS, "sh", host.spawn_dir, prefix], timeout=60)

    def _detect_gpus(self, host: Host, name: str) -> list[tuple[int, str]]:
        spec = self.cluster.host(name) if name in {h.name for h in self.cluster.hosts} else None
        res = host.run(["sh", "-c", 'command -v nvidia-smi >/dev/null && exec "$@"', "sh", *procs.GPU_QUERY],
                       timeout=60)
        found = procs.parse_gpus(res.stdout) if res.ok else []
        if spec is not None and spec.gpus is not None:
            by_index = dict(found)
            return [(i, by_index.get(i, f"GPU-index-{i}")) for i in spec.gpus]
        return found

    # -- case level ------------------------------------------------------------------------------
    def begin_case(self, case_dir: Path, case_id: str) -> CaseContext:
        self.case = CaseContext(case_dir, case_id)
        self.placed = {}
        # the attempt's token in every name: the .rc/.end/.log of a dead attempt of this case are never read
        self.case_prefix = procs.safe(f"{self._cluster_prefix()}{case_id}-{self.case.attempt}")
        for name, host in self.hosts.items():
            sampler = [
                self.python[name],
                f"{self.workload_dir[name]}/node_sampler.py",
                "--out-dir",
                f"{self.case_prefix}-sampler",
                "--interval-s",
                "1",
            ]
            self._spawn_quiet(host, f"{self.case_prefix}-sampler", sampler)
            if self.gpus.get(name):
                self._spawn_quiet(host, f"{self.case_prefix}-dmon", ["nvidia-smi", "dmon", "-s", "u", "-d", "1"])
                try:
                    gpu_health.capture(host, case_dir, name, "before")
                except TransportError as exc:
                    print(f"warning: GPU health of {name} not captured ({exc})", file=sys.stderr)
        self.log_offset = self.scheduler.log_size()
        self.rotated_offset = None
        return self.case

    def _spawn_quiet(self, host: Host, name: str, argv: list[str]) -> None:
        try:
            host.spawn(name, argv)
        except TransportError as exc:
            print(f"warning: {exc}", file=sys.stderr)

    def unreachable(self) -> list[Unreached]:
        return [Unreached.of(error, "gpu") for error in self.dead.values()]

    def _lost(self, name: str, error: HostUnreachable) -> None:
        """A GPU host that stopped answering during the run: placed on no more, read no more (an
        :class:`~xpushare.transport.reach.UnreachableHost` for its scheduler), listed by :meth:`unreachable`;
        the next run (or a resumed one) probes it again."""
        if name in self.dead:
            return
        self.dead[name] = error
        lost = self.hosts.pop(name, None)
        if lost is not None:
            lost.close()
        if self.scheduler.name == name:
            self.scheduler = HostScheduler(name, reach.UnreachableHost(error), self.cluster.scheduler)
        print(f"warning: {name}: {error.describe()}; the run goes on without it", file=sys.stderr)

    def dead_error(self, name: str, needs: str) -> HostUnreachable:
        """The error for ``needs`` (what needed the host) on the unreachable GPU host ``name``."""
        error = self.dead[name]
        return HostUnreachable(name, f"{error.describe()} ({needs})", error.why)

    def _choose(self, spec: WorkloadSpec) -> tuple[str, int | None, str | None]:
        if spec.node in self.dead:
            raise self.dead_error(spec.node, f"pod {spec.name} is placed on it")
        if spec.same_gpu_as:
            other = self.placed[spec.same_gpu_as]
            return other.host, other.gpu_index, other.gpu_uuid
        candidates = [spec.node] if spec.node else list(self.hosts)
        load: dict[tuple[str, int | None], int] = {}
        for host in candidates:
            if host not in self.hosts:
                raise XpushareError(f"pod {spec.name}: no GPU host {host!r} in cluster {self.cluster.name}")
            indexes: list[int | None] = [i for i, _ in self.gpus.get(host) or []] or [None]
            for gpu_index in indexes:
                load[(host, gpu_index)] = 0
        for p in self.placed.values():
            if (p.host, p.gpu_index) in load:
                load[(p.host, p.gpu_index)] += 1
        host, idx = min(load, key=lambda k: load[k])
        uuid = dict(self.gpus.get(host) or []).get(idx) if idx is not None else None
        return host, idx, uuid

    def pod_env(self, spec: WorkloadSpec, spawn_name: str, gpu_index: int | None,
                gpu_uuid: str | None = None) -> dict[str, str]:
        """Environment of a workload process: SUT variables, preload library, GPU placement.

        The GPU is decided here whatever the tool's or the host's environment holds: with the inventory's
        ``visible_devices: unset`` (default) ``CUDA_VISIBLE_DEVICES`` is the assigned GPU's index and
        ``NVIDIA_VISIBLE_DEVICES`` is removed (:meth:`unset_vars`); with ``uuid`` both are the GPU's UUID, as a
        Kubernetes device plugin gives a pod (a UUID selects the same GPU whether or not a container runtime
        narrowed the visible set). The client library takes its GPU key from ``NVIDIA_VISIBLE_DEVICES`` first
        (its ``read_visible_device``), so a value left over from the tool's environment would name every
        workload's GPU ``0``."""
        profile = self.cluster.profile
        env = {**profile.client_env(self.cluster.scheduler.state_dir, spawn_name), "PYTHONUNBUFFERED": "1"}
        if spec.oversub:  # the system's own switch; a case that needs one has the premise oversubscription
            env.update(profile.oversub_env or {})
        if spec.memory_limit_env:  # the project's SUT's variable; other systems' quotas come in spec.env
            env[self.names.env_memory_limit] = spec.memory_limit_env
        if self.cluster.sut_lib and profile.needs_preload:
            env["LD_PRELOAD"] = self.cluster.sut_lib
        if gpu_index is not None:
            if self.cluster.visible_devices == "uuid" and gpu_uuid:
                env["CUDA_VISIBLE_DEVICES"] = env["NVIDIA_VISIBLE_DEVICES"] = gpu_uuid
            else:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
        env.update(dict(spec.env))
        return env

    def unset_vars(self, env: dict[str, str], gpu_index: int | None) -> list[str]:
        """Variables removed from a workload's environment (``env -u``): ``NVIDIA_VISIBLE_DEVICES`` when the
        backend placed the workload on a GPU and :meth:`pod_env` did not set it."""
        return ["NVIDIA_VISIBLE_DEVICES"] if gpu_index is not None and "NVIDIA_VISIBLE_DEVICES" not in env else []

    def start_pods(self, pods: Sequence[WorkloadSpec]) -> None:
        case_dir = self.case_dir
        if any(p.core_limit is not None or p.memory_limit is not None for p in pods):
            raise XpushareError("host mode cannot apply annotation limits (core_limit / memory_limit)")
        for spec in pods:
            host_name, idx, uuid = self._choose(spec)
            spawn_name = f"{self.case_prefix}-{procs.safe(spec.name)}"
            env = self.pod_env(spec, spawn_name, idx, uuid)
            self.placed[spec.name] = _Placed(spec, host_name, idx, uuid, spawn_name, procs.gpu_key(env))
            host = self.hosts[host_name]
            unset = [arg for name in self.unset_vars(env, idx) for arg in ("-u", name)]
            argv = [
                *(["env", *unset] if unset else []),
                "sh",
                "-c",
                procs.WRAPPER,
                "sh",
                spawn_name,
                self.python[host_name],
                f"{self.workload_dir[host_name]}/{spec.workload}.py",
                *spec.args,
            ]
            try:
                host.spawn(spawn_name, argv, env=env)
            except HostUnreachable as exc:
                self._lost(host_name, exc)
                raise
        self._write_records(case_dir, self._poll())

    def _poll(self) -> list[WorkloadRecord]:
        by_host: dict[str, list[_Placed]] = {}
        for p in self.placed.values():
            by_host.setdefault(p.host, []).append(p)
        records: list[WorkloadRecord] = []
        for host_name, placed in by_host.items():
            rows: dict[str, list[str]] = {}
            if host_name not in self.dead:
                host = self.hosts[host_name]
                try:
                    res = host.run(["sh", "-c", procs.POLL, "sh", host.spawn_dir, *(p.spawn_name for p in placed)],
                                   timeout=60, check=True)
                    rows = procs.poll_rows(res.stdout)
                except HostUnreachable as exc:  # its pods' phase is Unknown, as for a pod on a lost node
                    self._lost(host_name, exc)
            for p in placed:
                rc, start, end, pid = rows.get(p.spawn_name, ["-", "-", "-", "-"])
                records.append(
                    WorkloadRecord(
                        name=p.spec.name,
                        phase=procs.phase(rc, start) if host_name not in self.dead else "Unknown",
                        exit_code=int(rc) if rc not in ("-", "") and rc.lstrip("-").isdigit() else None,
                        node=host_name,
                        gpu=p.gpu_uuid if p.gpu_uuid else (str(p.gpu_index) if p.gpu_index is not None else None),
                        started=procs.to_float(start),
                        finished=procs.to_float(end),
                        spec=asdict(p.spec),
                        log=f"pods/{p.spec.name}.log",
                        host_pid=int(pid) if pid.isdigit() else None,
                        gpu_key=p.gpu_key,
                    )
                )
        return records

    def _write_records(self, case_dir: Path, records: list[WorkloadRecord]) -> None:
        write_pod_records(case_dir, records)

    def _wait(self, case_dir: Path, names: Sequence[str], timeout_s: float, done: set[str]) -> list[WorkloadRecord]:
        deadline = time.monotonic() + timeout_s
        while True:
            interrupt.check()
            records = self._poll()
            self._write_records(case_dir, records)
            wanted = [r for r in records if r.name in names]
            lost = next((r for r in wanted if r.node in self.dead), None)
            if lost is not None and lost.node is not None:  # a case's pod is never waited for on a lost host
                raise self.dead_error(lost.node, f"pod {lost.name} ran there")
            activity.pods([r.phase for r in wanted], count=len(names),
                          until="running" if "Running" in done else "terminal")
            if all(r.phase in done for r in wanted) or time.monotonic() >= deadline:
                return wanted
            time.sleep(self.poll_s)

    def wait_terminal(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        case_dir = self.case_dir
        records = self._wait(case_dir, names, timeout_s, {"Succeeded", "Failed"})
        events.pod_phases(records, "terminal")
        return records

    def wait_running(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        case_dir = self.case_dir
        records = self._wait(case_dir, names, timeout_s, {"Running", "Succeeded", "Failed"})
        events.pod_phases(records, "running")
        return records

    def read_log(self, pod: str, *, timestamps: bool = False) -> str:
        p = self.placed.get(pod)
        if p is None:
            return ""
        host = self.hosts[p.host]
        res = host.run(["cat", f"{host.spawn_dir}/{p.spawn_name}.log"], timeout=30)
        return res.stdout if res.ok else ""

    # -- evidence --------------------------------------------------------------------------------
    def harvest(self) -> list[str]:
        """Store the case's evidence (``pods.json``, :mod:`~xpushare.backends.host_harvest`, the scheduler's);
        each piece on its own, so that a transport fault in one loses only that piece. Raises
        :class:`~xpushare.model.errors.HarvestIncomplete` (with the files stored) when a piece was lost to such
        a fault rather than absent (:mod:`xpushare.backends.harvest_faults`)."""
        case_dir = self.case_dir
        faults: list[str] = []
        files: list[str] = []
        if self.placed:
            try:
                self._write_records(case_dir, self._poll())
                files.append("pods.json")
            except TransportError as exc:
                harvest_faults.fault(case_dir, "pods", exc, faults)
        spawned = [(p.spec.name, self.hosts[p.host], p.spawn_name) for p in self.placed.values()]
        files += host_harvest.pod_logs(case_dir, spawned, faults)
        files += host_harvest.pod_environs(case_dir, spawned, faults)
        for name, host in self.hosts.items():
            files += host_harvest.node_evidence(case_dir, name, host, self.case_prefix, faults)
            if self.gpus.get(name):
                files += host_harvest.gpu_health_after(case_dir, name, host, faults)
        files += self.scheduler.harvest(case_dir, self.log_offset, faults)
        return harvest_faults.complete(files, faults)

    def case_pods(self) -> list[WorkloadRecord]:
        """Records of the case's pods started since the last :meth:`forget_pod_specs` (one poll per host)."""
        return self._poll()

    def delete_case_pods(self, timeout_s: float) -> None:
        """Stop the case's pods (TERM to each process group, see ``Host.stop``) and forget them: as deleted pods,
        they are no longer listed by :meth:`case_pods`. The sampler and dmon keep running; the pods' files stay
        on the hosts until the case's cleanup."""
        for p in self.placed.values():
            try:
                self.hosts[p.host].stop(p.spawn_name, timeout=max(1.0, timeout_s))
            except TransportError:
                continue
        self.placed = {}

    def cleanup(self) -> None:
        for p in self.placed.values():
            try:
                self.hosts[p.host].stop(p.spawn_name, timeout=30)
            except TransportError:
                continue
        for host in self.hosts.values():
            host.run(["sh", "-c", procs.CLEANUP, "sh", host.spawn_dir, self.case_prefix], timeout=60)

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()

