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

import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from xpushare.backends import scheduler_proc
from xpushare.backends.base import (
    CAP_CLIENT_LIBRARY,
    CAP_SCHEDULER_PROCESS,
    Backend,
    PodRecord,
    PodSpec,
    SchedulerFacts,
    SchedulerRestart,
    write_pod_records,
)
from xpushare.data import workloads_dir
from xpushare.evidence.scrape_capture import curl_capture_argv
from xpushare.evidence.store import SCHEDULER_NODE_FILE
from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport import interrupt
from xpushare.transport.base import Host
from xpushare.transport.hosts import connect
from xpushare.transport.local import LocalHost

WORKLOADS_DIR = workloads_dir()

# The workload runs in the foreground of the wrapper, through an inner ``sh`` that writes its own pid to
# ``<name>.hostpid`` and then execs the workload: that pid is the workload process's, the one whose
# socket the scheduler sees (SO_PEERCRED) and exports as ``client_info{host_pid}`` (sut-interfaces.md §6.3).
_WRAPPER = (
    'n=$1; shift; date +%s.%N > "$n.start"; sh -c \'echo $$ > "$0.hostpid"; exec "$@"\' "$n" "$@"; rc=$?; '
    'date +%s.%N > "$n.end"; echo $rc > "$n.rc"'
)
_POLL = (
    'cd "$1" || exit 97; shift; for n in "$@"; do '
    'printf "%s|%s|%s|%s|%s\\n" "$n" "$(cat "$n.rc" 2>/dev/null || echo -)" '
    '"$(cat "$n.start" 2>/dev/null || echo -)" "$(cat "$n.end" 2>/dev/null || echo -)" '
    '"$(cat "$n.hostpid" 2>/dev/null || echo -)"; done'
)
_GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
# End of a case: whatever of the case still has a pid file is stopped (TERM to its process group) before the
# case's files go. The node sampler and dmon of begin_case are stopped by harvest; a caller that skips the
# harvest (metrics-check's probes) would otherwise leave them running with no pid file to find them by.
_CLEANUP = (
    'cd "$1" 2>/dev/null || exit 0; for f in "$2"-*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
    'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done; rm -rf -- "$2"-*'
)


@dataclass
class _Placed:
    spec: PodSpec
    host: str
    gpu_index: int | None
    gpu_uuid: str | None
    spawn_name: str
    gpu_key: str | None = None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)


class HostBackend(Backend):
    """Workloads as processes on the cluster's GPU hosts."""

    mode = "host"

    def __init__(self, cluster: ClusterSpec, *, poll_s: float | None = None) -> None:
        self.cluster = cluster
        self.names = sut_names(cluster.sut)
        self.hosts_are_local = all(h.local for h in cluster.hosts)
        # A poll is a few milliseconds on this machine and one SSH round trip elsewhere.
        self.poll_s = poll_s if poll_s is not None else (0.2 if self.hosts_are_local else 1.0)
        caps = {CAP_CLIENT_LIBRARY} if cluster.sut_lib else set()
        if cluster.scheduler.process_name and cluster.scheduler.metrics_url:
            caps.add(CAP_SCHEDULER_PROCESS)  # the stability suites follow its /proc figures and /metrics
        self.capabilities = frozenset(caps)
        specs = cluster.by_role("gpu") or list(cluster.hosts)
        self.hosts: dict[str, Host] = {h.name: connect(h) for h in specs}
        self.gpus: dict[str, list[tuple[int, str]]] = {}
        self.workload_dir: dict[str, str] = {}
        self.python: dict[str, str] = {}
        self.run_id = ""
        self.placed: dict[str, _Placed] = {}
        self.case_prefix = ""
        self.log_offset: int | None = None
        self.rotated_offset: int | None = None
        """Scheduler log bytes already copied by :meth:`restart_log_streams` (None: none yet this case)."""

    # -- run level -------------------------------------------------------------------------------
    def prepare_run(self, run_id: str) -> None:
        self.run_id = run_id
        for name, host in self.hosts.items():
            # the cluster in the name: two clusters of one run may share a machine (``--cluster local,bm1``)
            self._stop_leftovers(host, _safe(f"xp-{run_id}-{self.cluster.name}-"))
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

    def _stop_leftovers(self, host: Host, prefix: str) -> None:
        """Stop processes an interrupted earlier invocation of this run left behind (resume safety)."""
        script = (
            'cd "$1" 2>/dev/null || exit 0; for f in "$2"*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
            'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; rm -f "$f"; done'
        )
        host.run(["sh", "-c", script, "sh", host.spawn_dir, prefix], timeout=60)

    def _detect_gpus(self, host: Host, name: str) -> list[tuple[int, str]]:
        spec = self.cluster.host(name) if name in {h.name for h in self.cluster.hosts} else None
        res = host.run(["sh", "-c", 'command -v nvidia-smi >/dev/null && exec "$@"', "sh", *_GPU_QUERY], timeout=60)
        found: list[tuple[int, str]] = []
        if res.ok:
            for line in res.stdout.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0].isdigit():
                    found.append((int(parts[0]), parts[1]))
        if spec is not None and spec.gpus is not None:
            by_index = dict(found)
            return [(i, by_index.get(i, f"GPU-index-{i}")) for i in spec.gpus]
        return found

    # -- case level ------------------------------------------------------------------------------
    def begin_case(self, case_dir: Path, case_id: str) -> None:
        self.placed = {}
        self.case_prefix = _safe(f"xp-{self.run_id}-{self.cluster.name}-{case_id}")
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
        self.log_offset = self._scheduler_log_size()
        self.rotated_offset = None

    def _spawn_quiet(self, host: Host, name: str, argv: list[str]) -> None:
        try:
            host.spawn(name, argv)
        except TransportError as exc:
            print(f"warning: {exc}", file=sys.stderr)

    def _choose(self, spec: PodSpec) -> tuple[str, int | None, str | None]:
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

    def pod_env(self, spec: PodSpec, gpu_index: int | None) -> dict[str, str]:
        """Environment of a workload process: SUT variables, preload library, GPU placement."""
        env = {self.names.env_debug: "1", "PYTHONUNBUFFERED": "1"}
        if spec.oversub:  # presence-based in the SUT: omit the variable to disable (sut-interfaces §11.2)
            env[self.names.env_oversub] = "1"
        if spec.memory_limit_env:
            env[self.names.env_memory_limit] = spec.memory_limit_env
        if self.cluster.sut_lib:
            env["LD_PRELOAD"] = self.cluster.sut_lib
        if gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
        env.update(dict(spec.env))
        return env

    def start_pods(self, case_dir: Path, pods: Sequence[PodSpec]) -> None:
        if any(p.core_limit is not None or p.memory_limit is not None for p in pods):
            raise XpushareError("host mode cannot apply annotation limits (core_limit / memory_limit)")
        for spec in pods:
            host_name, idx, uuid = self._choose(spec)
            spawn_name = f"{self.case_prefix}-{_safe(spec.name)}"
            env = self.pod_env(spec, idx)
            self.placed[spec.name] = _Placed(spec, host_name, idx, uuid, spawn_name, _gpu_key(env))
            host = self.hosts[host_name]
            argv = [
                "sh",
                "-c",
                _WRAPPER,
                "sh",
                spawn_name,
                self.python[host_name],
                f"{self.workload_dir[host_name]}/{spec.workload}.py",
                *spec.args,
            ]
            host.spawn(spawn_name, argv, env=env)
        self._write_records(case_dir, self._poll())

    def _poll(self) -> list[PodRecord]:
        by_host: dict[str, list[_Placed]] = {}
        for p in self.placed.values():
            by_host.setdefault(p.host, []).append(p)
        records: list[PodRecord] = []
        for host_name, placed in by_host.items():
            host = self.hosts[host_name]
            res = host.run(
                ["sh", "-c", _POLL, "sh", host.spawn_dir, *(p.spawn_name for p in placed)], timeout=60, check=True
            )
            rows = {}
            for line in res.stdout.splitlines():
                fields = [f.strip() or "-" for f in line.split("|")]
                if len(fields) == 5:
                    rows[fields[0]] = fields[1:]
            for p in placed:
                rc, start, end, pid = rows.get(p.spawn_name, ["-", "-", "-", "-"])
                if rc != "-":
                    phase = "Succeeded" if rc == "0" else "Failed"
                else:
                    phase = "Running" if start != "-" else "Pending"
                records.append(
                    PodRecord(
                        name=p.spec.name,
                        phase=phase,
                        exit_code=int(rc) if rc not in ("-", "") and rc.lstrip("-").isdigit() else None,
                        node=host_name,
                        gpu=p.gpu_uuid if p.gpu_uuid else (str(p.gpu_index) if p.gpu_index is not None else None),
                        started=_float(start),
                        finished=_float(end),
                        spec=asdict(p.spec),
                        log=f"pods/{p.spec.name}.log",
                        host_pid=int(pid) if pid.isdigit() else None,
                        gpu_key=p.gpu_key,
                    )
                )
        return records

    def _write_records(self, case_dir: Path, records: list[PodRecord]) -> None:
        write_pod_records(case_dir, records)

    def _wait(self, case_dir: Path, names: Sequence[str], timeout_s: float, done: set[str]) -> list[PodRecord]:
        deadline = time.monotonic() + timeout_s
        while True:
            interrupt.check()
            records = self._poll()
            self._write_records(case_dir, records)
            wanted = [r for r in records if r.name in names]
            if all(r.phase in done for r in wanted) or time.monotonic() >= deadline:
                return wanted
            time.sleep(self.poll_s)

    def wait_terminal(self, case_dir: Path, names: Sequence[str], timeout_s: float) -> list[PodRecord]:
        return self._wait(case_dir, names, timeout_s, {"Succeeded", "Failed"})

    def gpu_count(self) -> int | None:
        """GPUs found on the GPU hosts at run start (inventory ``gpus`` or ``nvidia-smi -L``)."""
        return sum(len(v) for v in self.gpus.values())

    def wait_running(self, case_dir: Path, names: Sequence[str], timeout_s: float) -> list[PodRecord]:
        return self._wait(case_dir, names, timeout_s, {"Running", "Succeeded", "Failed"})

    def read_log(self, case_dir: Path, pod: str) -> str:
        p = self.placed.get(pod)
        if p is None:
            return ""
        host = self.hosts[p.host]
        res = host.run(["cat", f"{host.spawn_dir}/{p.spawn_name}.log"], timeout=30)
        return res.stdout if res.ok else ""

    # -- evidence --------------------------------------------------------------------------------
    def _scheduler_host_name(self) -> str:
        """The host whose scheduler the inventory's ``scheduler`` settings describe: the first GPU host."""
        return next(iter(self.hosts))

    def _scheduler_host(self) -> Host:
        return self.hosts[self._scheduler_host_name()]

    def scheduler_host(self) -> Host | None:
        """The first GPU host's connection (where the inventory's ``scheduler`` settings apply); None when
        the cluster has no host."""
        return next(iter(self.hosts.values()), None)

    def _scheduler_log_size(self) -> int | None:
        log = self.cluster.scheduler.log_file
        if not log:
            return None
        res = self._scheduler_host().run(["sh", "-c", 'wc -c < "$1"', "sh", log], timeout=30)
        return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 0

    def harvest(self, case_dir: Path) -> list[str]:
        files: list[str] = []
        if self.placed:
            self._write_records(case_dir, self._poll())
            files.append("pods.json")
        for p in self.placed.values():
            host = self.hosts[p.host]
            local = case_dir / "pods" / f"{p.spec.name}.log"
            try:
                host.get(f"{host.spawn_dir}/{p.spawn_name}.log", local)
                files.append(str(local.relative_to(case_dir)))
            except TransportError as exc:
                (case_dir / "harvest-errors.txt").open("a").write(f"{exc}\n")
        for name, host in self.hosts.items():
            files += self._harvest_node(case_dir, name, host)
        files += self._harvest_scheduler(case_dir)
        return files

    def _harvest_node(self, case_dir: Path, name: str, host: Host) -> list[str]:
        files: list[str] = []
        smi = host.run(
            ["sh", "-c", "command -v nvidia-smi >/dev/null || { echo 'nvidia-smi: not found'; exit 0; }; nvidia-smi"],
            timeout=60,
        )
        (case_dir / f"remote_{name}_nvidia_smi.txt").write_text(smi.stdout + smi.stderr, encoding="utf-8")
        files.append(f"remote_{name}_nvidia_smi.txt")
        for kind, local_name in (("dmon", f"remote_{name}_dmon.txt"),):
            spawn = f"{self.case_prefix}-{kind}"
            try:
                log = host.stop(spawn)
                host.get(log, case_dir / local_name)
                files.append(local_name)
            except TransportError:
                pass  # not started: no GPU on this host (recorded by the sampler)
        try:
            host.stop(f"{self.case_prefix}-sampler")
        except TransportError as exc:
            (case_dir / "harvest-errors.txt").open("a").write(f"{exc}\n")
        sampler_dir = f"{host.spawn_dir}/{self.case_prefix}-sampler"
        for fname in ("gpu.csv", "procs.csv", "no_gpu.txt"):
            local = case_dir / "sampler" / f"{name}_{fname}"
            try:
                host.get(f"{sampler_dir}/{fname}", local)
                files.append(str(local.relative_to(case_dir)))
            except TransportError:
                continue
        return files

    def _harvest_scheduler(self, case_dir: Path) -> list[str]:
        sched = self.cluster.scheduler
        host = self._scheduler_host()
        files: list[str] = []
        if sched.metrics_url:
            base = sched.metrics_url.rstrip("/")
            for path, local in (("/metrics", "metrics.txt"), ("/healthz", "metrics_health.txt")):
                res = host.run(curl_capture_argv(base + path, 10), timeout=30)
                (case_dir / local).write_text(res.stdout + res.stderr, encoding="utf-8")
                files.append(local)
        if sched.log_file:
            offset = (self.log_offset or 0) + 1
            res = host.run(["tail", "-c", f"+{offset}", sched.log_file], timeout=120)
            (case_dir / "scheduler.log").write_text(res.stdout, encoding="utf-8")
            # Pids are per host: only the pods of this host can be matched to this log's registrations.
            (case_dir / SCHEDULER_NODE_FILE).write_text(self._scheduler_host_name() + "\n", encoding="utf-8")
            files += ["scheduler.log", SCHEDULER_NODE_FILE]
        if sched.process_name:
            script = (
                'p=$(pgrep -o -f "^(\\S*/)?$1( |\\$)") || { echo "SCHEDULER_ALIVE=0"; exit 0; }; '
                'echo "SCHEDULER_ALIVE=1"; '
                'echo "PID=$p"; cat "/proc/$p/status"; echo "FD_COUNT=$(ls "/proc/$p/fd" | wc -l)"'
            )
            res = host.run(["sh", "-c", script, "sh", sched.process_name], timeout=30)
            (case_dir / "scheduler_proc.txt").write_text(res.stdout, encoding="utf-8")
            files.append("scheduler_proc.txt")
        return files

    # -- the scheduler as a process (stability suites) -------------------------------------------
    def scheduler_facts(self, *, metrics: bool = False) -> list[SchedulerFacts]:
        """The first GPU host's scheduler (the inventory's ``scheduler.process_name`` and ``metrics_url``): its
        processes, ``/healthz``, and ``/metrics`` when asked, in one command on that host. ``instance`` is the
        oldest process's pid: a new pid is a restart; ``healthy`` needs a ``/healthz`` 200 (never without a
        ``metrics_url`` to ask). Raises :class:`XpushareError` without ``process_name``."""
        sched = self.cluster.scheduler
        if not sched.process_name:
            raise XpushareError(f"cluster {self.cluster.name}: no scheduler.process_name in the inventory")
        base = sched.metrics_url.rstrip("/") if sched.metrics_url else None
        argv = scheduler_proc.argv(sched.process_name, base and base + "/healthz",
                                   base + "/metrics" if base and metrics else None)
        node = self._scheduler_host_name()
        res = self._scheduler_host().run(argv, timeout=60)
        out = scheduler_proc.parse(res.stdout)
        if out.error:
            return [SchedulerFacts(node, error=out.error)]
        first = out.processes[0].pid if out.processes else None
        return [SchedulerFacts(node, out.processes, None if first is None else str(first), 0,
                               bool(out.processes) and out.healthy is True, out.metrics_text,
                               "" if first is None else f"pid-{first}")]

    def restart_scheduler(self) -> SchedulerRestart:
        """``kill -TERM`` every process of the first GPU host's scheduler. Whether it comes back is up to what
        runs it (``invoke deploy``'s supervisor restarts it within about a second; a hand-started one stays
        down). Raises :class:`XpushareError` when no scheduler process runs."""
        before = self.scheduler_facts()
        facts = before[0]
        if not facts.processes:
            raise XpushareError(f"{facts.node}: no scheduler process to restart ({facts.error or 'not running'})")
        pids = [str(p.pid) for p in facts.processes]
        at = time.time()
        res = self._scheduler_host().run(["kill", "-TERM", *pids], timeout=30)
        if not res.ok:
            raise XpushareError(f"{facts.node}: kill -TERM {' '.join(pids)}: {res.stderr.strip()}")
        return SchedulerRestart(f"kill -TERM scheduler pid {' '.join(pids)} on {facts.node}", at,
                                {f.node: f.instance for f in before})

    def case_pods(self) -> list[PodRecord]:
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

    def forget_pod_specs(self) -> None:
        """Forget the pods placed so far (their files stay on the hosts until cleanup; placement starts over)."""
        self.placed = {}

    def restart_log_streams(self, dest: Path, tag: str, *, since: datetime | None = None) -> list[Path]:
        """Copy the scheduler log's bytes since the last rotation (or the case start) to
        ``dest/scheduler-<tag>.log``; the file itself goes on (``since`` is not needed: nothing is lost)."""
        log = self.cluster.scheduler.log_file
        if not log:
            return []
        dest.mkdir(parents=True, exist_ok=True)
        start = self.rotated_offset if self.rotated_offset is not None else (self.log_offset or 0)
        size = self._scheduler_log_size() or 0
        if size < start:  # the log was truncated or replaced: take it from its beginning
            start = 0
        res = self._scheduler_host().run(["sh", "-c", 'tail -c "+$1" "$2" | head -c "$3"', "sh", str(start + 1), log,
                                          str(size - start)], timeout=120)
        path = dest / f"scheduler-{tag}.log"
        path.write_text(res.stdout, encoding="utf-8")
        self.rotated_offset = size
        return [path]

    def cleanup(self, case_dir: Path) -> None:
        for p in self.placed.values():
            try:
                self.hosts[p.host].stop(p.spawn_name, timeout=30)
            except TransportError:
                continue
        for host in self.hosts.values():
            host.run(["sh", "-c", _CLEANUP, "sh", host.spawn_dir, self.case_prefix], timeout=60)

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()


def _gpu_key(env: dict[str, str]) -> str | None:
    """The GPU key the client library reports for this environment (sut-interfaces.md §4.2: the first
    comma/semicolon token of ``NVIDIA_VISIBLE_DEVICES``, else of ``CUDA_VISIBLE_DEVICES``); None when
    neither is set (the library would report ``default``, but the backend placed no GPU)."""
    for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if env.get(name):
            return re.split(r"[,;]", env[name])[0].strip()
    return None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
