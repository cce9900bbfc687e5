"""The lab's node agents and controllers: they make the objects of :mod:`tests.lab.kubeapi` live.

* :class:`Kubelet` (one per lab node) runs each container of the pods bound to its node as a local
  process group (``setsid``), cwd = the repository root, with the env of the pod spec (``value`` and
  ``valueFrom.fieldRef``) plus ``HOSTNAME=<pod>``, ``KUBERNETES_SERVICE_HOST``/``_PORT`` and, for a
  container that requests the SUT's extended resource (``xpushare.com/gpu``), the device plugin's part:
  vGPU devices from the least-loaded simulated GPU first (like GetPreferredAllocation),
  ``NVIDIA_VISIBLE_DEVICES=<sorted GPU UUIDs>``, the simulated driver (``LD_LIBRARY_PATH``,
  ``SIMGPU_CONFIG``) and the real client library (``LD_PRELOAD=<SUT build>/libxpushare.so``).
  Every container runs in the node's mount namespace (:mod:`tests.lab.nodens`: the real scheduler's
  socket path is fixed) with its own service-account directory (token, CA, namespace) bind-mounted.
  Output (stdout and stderr, merged) goes to a CRI-style log file per container run; status follows
  the process: Pending → Running → Succeeded/Failed, restarts for ``Always``/``OnFailure`` with a
  short CrashLoopBackOff; deletion sends SIGTERM (and SIGCONT) to the group, SIGKILL after the grace
  period, then removes the object.
* :class:`Controllers` binds pending pods to schedulable nodes with room for the extended resource,
  runs DaemonSets (one pod per node; a template change rolls the pods one node at a time) and keeps
  their status (``observedGeneration``, ``updatedNumberScheduled``, ``numberAvailable`` …).
* :func:`graceful_delete` is the API server's pod-deletion hook.

Pure test infrastructure: nothing here judges a cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.lab.kubeapi import (
    ApiError,
    Obj,
    Store,
    default_pod,
    now_rfc3339,
    pod_log_path,
    rfc3339nano,
    template_hash,
)
from tests.lab.nodens import NodeNamespace, die_with_parent
from tests.lab.pki import write_serviceaccount
from xpushare.inventory.sut import SutNames

# ------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class LabNode:
    """One lab node: its name, addresses and simulated GPUs (their memory and speed: the node's SIMGPU_CONFIG)."""

    name: str
    index: int  # 1-based; pod IPs are 127.0.<index>.<n>
    address: str  # the node's InternalIP (and its SSH address in the lab)
    scheduler_address: str  # pod IP of the SUT scheduler pod on this node (metrics on :9402)
    gpus: tuple[str, ...]  # simulated GPU UUIDs, e.g. GPU-lab-lab-node1-0
    vgpus_per_gpu: int = 10


@dataclass(frozen=True)
class LabSettings:
    """What every lab component needs to know (from ``lab.json``)."""

    names: SutNames
    workdir: Path
    repo_root: Path
    token: str  # XPUSHARE_LAB_TOKEN in every pod's env: how `stop()` finds exactly our processes
    api_host: str
    api_port: int
    python: str  # interpreter of the venv: its bin dir goes on the pods' PATH
    sut_dir: Path  # the real SUT build (libxpushare.so, xpushare-scheduler, xpusharectl) every node runs
    simgpu_dir: Path | None  # the simulated GPU's libcuda.so.1 / libnvidia-ml.so.1 (None on real GPUs)
    tls_port: int  # the API server's HTTPS front (KUBERNETES_SERVICE_PORT of pods)
    sa_token: str  # the service-account token pods get (a secret: never logged)
    ca_cert: Path  # the API server's certificate, the pods' ca.crt
    real_gpus: bool = False  # the machine's NVIDIA GPUs and driver instead of the simulated ones

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    def node_dir(self, node: str) -> Path:
        return self.workdir / "nodes" / node

    def simgpu_config(self, node: str) -> Path:
        """The node's simulated GPUs (``SIMGPU_CONFIG``; their shared state sits beside it)."""
        return self.node_dir(node) / "simgpu" / "devices"

    def kmsg(self, node: str) -> Path:
        """The node's kernel log (``SIMGPU_KMSG``: ``NVRM: Xid`` lines in ``dmesg --time-format=iso`` form)."""
        return self.node_dir(node) / "kmsg"

    def scheduler_pid_file(self, node: str) -> Path:
        return self.node_dir(node) / "run" / "scheduler.pid"

    @property
    def faults_file(self) -> Path:
        return self.workdir / "faults.json"

    def sut_of(self, faults: dict[str, Any]) -> Path:
        """The SUT build a node with ``faults`` (:meth:`faults`) runs: its ``sut`` (a mutant's build) or the
        lab's build."""
        return Path(faults.get("sut") or self.sut_dir)

    @staticmethod
    def scheduler_env_of(faults: dict[str, Any]) -> dict[str, str] | None:
        """The extra scheduler environment of a node with ``faults`` (its ``scheduler_env``; None: none)."""
        return faults.get("scheduler_env") or None

    def faults_stamp(self) -> tuple[int, int, int] | None:
        """(inode, mtime, size) of ``faults.json`` now (None when absent): it changes when the file is replaced,
        so the reconcile loop can notice a fault switch with one ``stat``."""
        try:
            st = self.faults_file.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def faults(self, node: str) -> dict[str, Any]:
        """The node's switches in force now (``faults.json``; {} when unreadable). The file is parsed again only
        when it was replaced (``LabCluster`` writes it by rename: a new inode): the reconcile loop asks many
        times a step."""
        try:
            st = self.faults_file.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = _FAULTS_CACHE.get(self.faults_file)
            if cached is None or cached[0] != key:
                cached = (key, json.loads(self.faults_file.read_text()))
                _FAULTS_CACHE[self.faults_file] = cached
            return dict(cached[1].get(node) or {})
        except (OSError, ValueError):
            return {}


#: ``faults.json`` of each lab, parsed: (inode, mtime, size) of the file read and its contents.
_FAULTS_CACHE: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


# ---------------------------------------------------------------------------------- processes

def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to a process group, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def atoi(text: str | None) -> int:
    """C ``atoi``: leading whitespace, optional sign, digits; anything else → 0."""
    import re

    m = re.match(r"\s*([+-]?\d+)", text or "")
    return int(m.group(1)) if m else 0


@dataclass
class ContainerRun:
    """One run of one container (a process group)."""

    name: str
    attempt: int
    started: float
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    exit_code: int | None = None
    finished: float | None = None
    reason: str | None = None
    message: str | None = None
    term_sent: float | None = None
    sut_dir: Path | None = None  # the SUT build a scheduler container was started from
    scheduler_env: dict[str, str] | None = None  # the ``scheduler_env`` switch it was started with
    ready: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    @property
    def running(self) -> bool:
        return self.exit_code is None


@dataclass
class PodRun:
    """The kubelet's record of one pod bound to its node."""

    uid: str
    namespace: str
    name: str
    ip: str
    start_time: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # container -> device ids (<uuid>__<k>)
    runs: dict[str, ContainerRun] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    last_state: dict[str, Obj] = field(default_factory=dict)
    next_start: dict[str, float] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)
    grace_deadline: float | None = None
    admission_error: str | None = None
    transitions: dict[str, str] = field(default_factory=dict)


#: How often a kubelet looks again at what it cannot be woken by: a starting scheduler's metrics port (its
#: readiness probe), a moment due but not yet acted on. Seconds.
PROBE_PERIOD_S = 0.05

#: Scheduling priority of every pod process (the workloads and the real scheduler, a pod here): above the
#: machine's other work. A GPU node gives its pods cores of their own; on the lab's shared machine the simulated
#: GPU's timeline advances only while a client submits, so a CPU-starved client would measure the machine's
#: load, not the SUT's quota (tests/e2e/test_under_load.py). Needs CAP_SYS_NICE (root); without it pods run at
#: the default priority. ``XPUSHARE_LAB_POD_NICE`` in the lab's environment overrides it (the precision lab of
#: tests/e2e/test_k8s_performance.py puts its pods above the other workers' labs).
POD_NICE = int(os.environ.get("XPUSHARE_LAB_POD_NICE", "-10"))


def _pod_process_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A Popen ``preexec_fn``: :func:`die_with_parent`, and :data:`POD_NICE` where the lab may raise priority."""
    die_with_parent()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, POD_NICE)


def _log_reader(proc: subprocess.Popen[bytes], path: Path, done: Callable[[], None]) -> None:
    """Copy the merged stdout/stderr of ``proc`` into a CRI-style log file, one stamped line per line; call
    ``done`` at the end of the output (the kubelet records an exit only once its output is drained)."""
    assert proc.stdout is not None
    try:
        with open(path, "a", encoding="utf-8") as out:
            for raw in iter(proc.stdout.readline, b""):
                text = raw.decode("utf-8", errors="replace").rstrip("\n")
                out.write(f"{rfc3339nano(time.time())} stdout F {text}\n")
                out.flush()
    finally:
        done()


def _exit_waiter(proc: subprocess.Popen[bytes], done: Callable[[], None]) -> None:
    """Wait for ``proc`` to exit, then call ``done``: the reconcile loop wakes on a container's exit instead of
    polling for it (``Popen.poll`` elsewhere answers None until this wait has reaped the process)."""
    with contextlib.suppress(Exception):
        proc.wait()
    done()


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` references to earlier variables of the container (``$$`` escapes)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


# ------------------------------------------------------------------------------------- kubelet

_IMAGE_ERRORS = {"ErrImagePull", "ImagePullBackOff", "CreateContainerError"}


class Kubelet:
    """Runs the containers of the pods bound to one node. Call :meth:`step` periodically (one thread)."""

    def __init__(self, store: Store, node: LabNode, settings: LabSettings) -> None:
        self.store = store
        self.node = node
        self.settings = settings
        self.names = settings.names
        self.runs: dict[str, PodRun] = {}
        self.gpu_alloc: dict[str, set[str]] = {u: set() for u in node.gpus}
        self._ip_next = 2
        self._faults_seen = -1
        settings.scheduler_pid_file(node.name).parent.mkdir(parents=True, exist_ok=True)
        self.ns = NodeNamespace(node.name, settings.node_dir(node.name) / "run")
        self.ns.start()

    # -- the loop

    def next_wake(self, now: float) -> float | None:
        """When (``time.monotonic``) this kubelet must step again with nothing else changed, None: only on a
        change. Time-driven transitions: a grace period's end, a crash-looping container's restart, a
        scheduler's readiness probe (every :data:`PROBE_PERIOD_S` until its metrics port answers). A container's
        exit wakes the loop by itself (:func:`_exit_waiter`). A moment already past counts as one probe period
        ahead, so a transition the step cannot take yet never spins the loop."""
        times: list[float] = []
        for run in self.runs.values():
            if run.grace_deadline is not None and self._alive(run):
                times.append(run.grace_deadline)
            times.extend(run.next_start.values())
            if run.ip == self.node.scheduler_address:
                times.extend(now for cr in run.runs.values() if cr.proc is not None and cr.running and not cr.ready)
        if not times:
            return None
        return max(min(times), now + PROBE_PERIOD_S) if min(times) <= now else min(times)

    def step(self) -> None:
        self._apply_faults()
        pods, _ = self.store.list("pods", None, fields=lambda o: o["spec"].get("nodeName") == self.node.name)
        if self.settings.faults(self.node.name).get("node_down"):
            self._down(pods)
            return
        seen: set[str] = set()
        for pod in pods:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            with contextlib.suppress(ApiError):  # the object changed under us; the next step sees it
                self._step_pod(pod)
        for uid in list(self.runs):
            if uid not in seen:  # force-deleted: the object is gone, the processes must go too
                self._kill_all(self.runs[uid], hard=True)
                self._release(self.runs.pop(uid))

    def _down(self, pods: list[Obj]) -> None:
        """The ``node_down`` fault (a reboot): every process of the node is SIGKILLed and the workload pods are
        gone from the API; the DaemonSet pods' objects stay as the kubelet last reported them (a real node
        lifecycle controller takes minutes to notice), so their controller does not churn."""
        for uid in list(self.runs):
            self._kill_all(self.runs[uid], hard=True)
            self._reap(self.runs[uid])
            self._release(self.runs.pop(uid))
        for pod in pods:
            meta = pod["metadata"]
            if not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
                self.store.remove("pods", meta["namespace"], meta["name"], meta["uid"])

    def terminate(self) -> None:
        """Begin stopping every process of this kubelet: SIGTERM (and SIGCONT) to each group."""
        for run in self.runs.values():
            self._kill_all(run, hard=False)

    def alive(self) -> bool:
        """True while any container process of this kubelet still runs (reaps the ones that ended)."""
        for run in self.runs.values():
            self._reap(run)
        return any(self._alive(r) for r in self.runs.values())

    def kill(self) -> None:
        """SIGKILL whatever is left, release the devices and drop the node's mount namespace."""
        for run in self.runs.values():
            self._kill_all(run, hard=True)
            self._reap(run)
            self._release(run)
        self.ns.stop()

    def _apply_faults(self) -> None:
        """Act on the node's faults on the real scheduler process, then acknowledge the faults file.

        ``scheduler_down``: the scheduler container is SIGKILLed whenever it runs (its pod crash-loops);
        ``sut``, ``scheduler_env``: a scheduler started from another SUT build or with other settings is
        killed, so it restarts on the new ones.
        """
        faults = self.settings.faults(self.node.name)
        sut = self.settings.sut_of(faults)
        extra_env = self.settings.scheduler_env_of(faults)
        for run in self.runs.values():
            if run.ip != self.node.scheduler_address:
                continue
            for cr in run.runs.values():
                if cr.proc is not None and cr.running and (faults.get("scheduler_down") or cr.sut_dir != sut
                                                             or cr.scheduler_env != extra_env):
                    signal_group(cr.proc.pid, signal.SIGKILL)
        try:
            written = self.settings.faults_file.stat().st_mtime_ns
        except OSError:
            return
        if written != self._faults_seen:
            self._faults_seen = written
            ack = self.settings.node_dir(self.node.name) / "run" / "faults.kubelet.ack"
            ack.write_text(f"{written}\n")

    def shutdown(self, grace_s: float = 3.0) -> None:
        """Stop every process this kubelet started: SIGTERM, then SIGKILL after ``grace_s``."""
        self.terminate()
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        self.kill()

    # -- one pod

    def _step_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        status = pod.get("status") or {}
        run = self.runs.get(uid)
        deleting = bool(meta.get("deletionTimestamp"))
        if run is None:
            if deleting or status.get("phase") in ("Succeeded", "Failed"):
                if deleting:
                    self.store.remove("pods", meta["namespace"], meta["name"], uid)
                return
            run = self._admit(pod)
            self.runs[uid] = run
        if deleting:
            if run.grace_deadline is None:
                run.grace_deadline = time.monotonic() + float(meta.get("deletionGracePeriodSeconds") or 0)
                self._kill_all(run, hard=False)
            elif time.monotonic() >= run.grace_deadline:
                self._kill_all(run, hard=True)
            self._reap(run)
            if not self._alive(run):
                self._release(run)
                self.runs.pop(uid, None)
                self.store.remove("pods", meta["namespace"], meta["name"], uid)
            return
        if run.admission_error is None:
            self._reap(run)
            policy = spec.get("restartPolicy", "Always")
            now = time.monotonic()
            for c in spec.get("containers", []):
                cname = c["name"]
                cur = run.runs.get(cname)
                if cur is None:
                    self._start(pod, run, c)
                    continue
                if cur.running:
                    continue
                restart = policy == "Always" or (policy == "OnFailure" and cur.exit_code != 0)
                if not restart:
                    continue
                if cname not in run.next_start:
                    ran = (cur.finished or now) - cur.started
                    delay = 1.0 if ran > 10 else min(8.0, run.backoff.get(cname, 0.5) * 2)
                    run.backoff[cname] = delay
                    run.next_start[cname] = now + delay
                elif now >= run.next_start[cname]:
                    run.last_state[cname] = self._terminated_state(cur)
                    run.restarts[cname] = run.restarts.get(cname, 0) + 1
                    del run.next_start[cname]
                    self._start(pod, run, c)
        new_status = self._status(pod, run)
        if new_status != status:
            self.store.mutate("pods", meta["namespace"], meta["name"], lambda o: o.__setitem__("status", new_status))
        if new_status["phase"] in ("Succeeded", "Failed"):
            self._release(run)

    def _admit(self, pod: Obj) -> PodRun:
        meta = pod["metadata"]
        owner_kinds = {(o.get("kind"), o.get("name")) for o in meta.get("ownerReferences") or []}
        if ("DaemonSet", self.names.scheduler_daemonset) in owner_kinds:
            ip = self.node.scheduler_address
        else:
            ip = self._next_ip()
        run = PodRun(meta["uid"], meta["namespace"], meta["name"], ip, now_rfc3339())
        for c in pod["spec"].get("containers", []):
            want = atoi(str(((c.get("resources") or {}).get("limits") or {}).get(self.names.resource, "0")))
            if want <= 0:
                continue
            devices = self._allocate(want)
            if devices is None:
                run.admission_error = (f"Allocate failed due to requested number of devices unavailable for "
                                       f"{self.names.resource}. Requested: {want}")
                break
            run.devices[c["name"]] = devices
        return run

    def _next_ip(self) -> str:
        used = {r.ip for r in self.runs.values()}
        for _ in range(253):
            ip = f"127.0.{self.node.index}.{self._ip_next}"
            self._ip_next = 2 if self._ip_next >= 254 else self._ip_next + 1
            if ip not in used:
                return ip
        raise RuntimeError(f"lab node {self.node.name}: pod IPs exhausted")

    def _allocate(self, want: int) -> list[str] | None:
        """``want`` vGPU device ids, each from the GPU with the fewest allocations (ties: lowest index); with
        the ``pack_one_gpu`` fault, from the lowest-index GPU that has room (a device plugin that packs)."""
        packed = bool(self.settings.faults(self.node.name).get("pack_one_gpu"))
        picked: list[str] = []
        for _ in range(want):
            free = [u for u in self.node.gpus if len(self.gpu_alloc[u]) < self.node.vgpus_per_gpu]
            if not free:
                for dev in picked:
                    self.gpu_alloc[dev.split("__")[0]].discard(dev)
                return None
            gpu = min(free, key=lambda u: ((0 if packed else len(self.gpu_alloc[u])), self.node.gpus.index(u)))
            k = min(set(range(1, self.node.vgpus_per_gpu + 1)) - {int(d.split("__")[1]) for d in self.gpu_alloc[gpu]})
            dev = f"{gpu}__{k}"
            self.gpu_alloc[gpu].add(dev)
            picked.append(dev)
        return picked

    def _release(self, run: PodRun) -> None:
        for devs in run.devices.values():
            for dev in devs:
                self.gpu_alloc.get(dev.split("__")[0], set()).discard(dev)
        run.devices = {}
        shutil.rmtree(self.settings.node_dir(self.node.name) / "pods" / run.uid, ignore_errors=True)

    # -- processes

    def _env(self, pod: Obj, run: PodRun, container: Obj) -> dict[str, str]:
        meta, spec = pod["metadata"], pod["spec"]
        s = self.settings
        env = {
            "PATH": os.pathsep.join([str(Path(s.python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": os.environ.get("HOME", "/tmp"),
            "LANG": "C.UTF-8",
            "HOSTNAME": meta["name"],
            "KUBERNETES_SERVICE_HOST": s.api_host,
            "KUBERNETES_SERVICE_PORT": str(s.tls_port),
            "XPUSHARE_LAB_TOKEN": s.token,
            "XPUSHARE_LAB_NODE": self.node.name,
            "XPUSHARE_LAB_CONFIG": str(s.workdir / "lab.json"),
        }
        refs = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": self.node.name,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.podIP": run.ip,
            "status.hostIP": self.node.address,
        }
        for item in container.get("env") or []:
            name = item.get("name")
            if not name:
                continue
            if "value" in item:
                env[name] = _expand(str(item["value"]), env)
                continue
            ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if ref.startswith(("metadata.labels['", "metadata.annotations['")):
                which, key = ref.split("['", 1)
                env[name] = str((meta.get(which.split(".")[1]) or {}).get(key.rstrip("']"), ""))
            else:
                env[name] = refs.get(ref, "")
        return env

    def _start(self, pod: Obj, run: PodRun, container: Obj) -> None:
        meta = pod["metadata"]
        cname = container["name"]
        attempt = run.restarts.get(cname, 0)
        log = pod_log_path(self.settings.logs_dir, meta["namespace"], meta["name"], meta["uid"], cname, attempt)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        cr = ContainerRun(cname, attempt, time.monotonic(), log)
        run.runs[cname] = cr
        env = self._env(pod, run, container)
        # one read of the faults per start: the build the command names is the one recorded on ``cr``
        faults = self.settings.faults(self.node.name)
        command = container.get("command") or self._image_command(str(container.get("image", "")), faults)
        argv = [str(a) for a in (command or []) + (container.get("args") or [])]
        if not command:
            cr.exit_code, cr.finished, cr.reason = 128, time.monotonic(), "StartError"
            cr.message = (f"lab kubelet: container {cname!r} has no command and the lab cannot run image "
                          f"{container.get('image')!r}")
            return
        devices = run.devices.get(cname)
        scheduler_pod = run.ip == self.node.scheduler_address
        argv = self._real_sut_launch(pod, run, cr, env, argv, devices, faults)
        try:
            proc = subprocess.Popen(argv, cwd=self.settings.repo_root, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_pod_process_setup)
        except OSError as exc:
            cr.exit_code, cr.finished, cr.reason = 128, time.monotonic(), "StartError"
            cr.message = f"failed to create containerd task: exec: {exc}"
            return
        cr.proc = proc
        cr.reader = threading.Thread(target=_log_reader, args=(proc, log, self.store.kick), daemon=True,
                                     name=f"log-{meta['name']}")
        cr.reader.start()
        threading.Thread(target=_exit_waiter, args=(proc, self.store.kick), daemon=True,
                         name=f"wait-{meta['name']}").start()
        if scheduler_pod:
            self.settings.scheduler_pid_file(self.node.name).write_text(f"{proc.pid}\n")

    def _real_sut_launch(self, pod: Obj, run: PodRun, cr: ContainerRun, env: dict[str, str], argv: list[str],
                         devices: list[str] | None, faults: dict[str, Any]) -> list[str]:
        """Real SUT: add the GPU container's or scheduler's env (the build and settings of the node's
        ``faults``); ``argv`` wrapped to run in the node's mount namespace with the pod's service-account
        directory."""
        sut = self.settings.sut_of(faults)
        if devices is not None:
            self._gpu_client_env(env, devices, sut)
        if run.ip == self.node.scheduler_address:
            cr.sut_dir = sut
            cr.scheduler_env = self.settings.scheduler_env_of(faults)
            env.update(self._driver_env())
            env.update(cr.scheduler_env or {})
            # the scheduler container sees the node's GPUs (all of them on a simulated node)
            env.setdefault("NVIDIA_VISIBLE_DEVICES", ",".join(self.node.gpus) if self.settings.real_gpus else "all")
            # A pod has its own network namespace, where the exporter's default 0.0.0.0:9402 is the pod IP;
            # lab pods share the host's, so a manifest without an address (the upstream ones) binds the pod IP.
            key = self.names.env("METRICS_ADDR")
            host, _, port = env.get(key, "").rpartition(":")
            if host in ("", "0.0.0.0"):
                env[key] = f"{run.ip}:{port or 9402}"
        sa = write_serviceaccount(self.settings.node_dir(self.node.name) / "pods" / run.uid / "serviceaccount",
                                  self.settings.sa_token, self.settings.ca_cert, pod["metadata"]["namespace"])
        return self.ns.enter(argv, cwd=self.settings.repo_root, serviceaccount=sa)

    def _image_command(self, image: str, faults: dict[str, Any]) -> list[str] | None:
        """Entrypoint for the SUT's own images, so a re-applied real DaemonSet manifest still runs here (the
        scheduler from the build of the node's ``faults``)."""
        g = self.names.generation
        lab = self.settings.repo_root / "tests" / "lab"
        scheduler = [str(self.settings.sut_of(faults) / "xpushare-scheduler")]
        base = image.rsplit("/", 1)[-1].split(":")[0].split("@")[0]
        return {f"{g}-scheduler": scheduler,
                f"{g}-device-plugin": ["python", str(lab / "deviceplugin.py")],
                f"{g}-lib": ["sh", "-c", "echo 'Nvshare lib ready'; exec sleep 2147483647"]}.get(base)

    def _driver_env(self) -> dict[str, str]:
        return driver_env(self.settings, self.node.name)

    def _gpu_client_env(self, env: dict[str, str], devices: list[str], sut: Path) -> None:
        env.update(gpu_container_env(self.settings, self.node.name, devices, sut))

    def _scheduler_ready(self, run: PodRun, cr: ContainerRun) -> bool:
        """The scheduler's readiness probe: its metrics port accepts connections (sticky per run)."""
        if not cr.ready:
            with contextlib.suppress(OSError), socket.create_connection((run.ip, 9402), timeout=0.05):
                cr.ready = True
        return cr.ready

    def _reap(self, run: PodRun) -> None:
        for cr in run.runs.values():
            if cr.proc is None or cr.exit_code is not None:
                continue
            code = cr.proc.poll()
            if code is None:
                continue
            signal_group(cr.proc.pid, signal.SIGKILL)  # the container ended: its leftovers go with it
            if cr.reader is not None:
                cr.reader.join(timeout=0.5)
                if cr.reader.is_alive():
                    continue  # output still draining; look again next step
            cr.exit_code = code if code >= 0 else 128 - code
            cr.finished = time.monotonic()
            cr.reason = "Completed" if cr.exit_code == 0 else "Error"

    def _alive(self, run: PodRun) -> bool:
        return any(cr.proc is not None and cr.exit_code is None for cr in run.runs.values())

    def _kill_all(self, run: PodRun, *, hard: bool) -> None:
        for cr in run.runs.values():
            if cr.proc is None or cr.exit_code is not None:
                continue
            if hard:
                signal_group(cr.proc.pid, signal.SIGKILL)
            elif cr.term_sent is None:
                cr.term_sent = time.monotonic()
                signal_group(cr.proc.pid, signal.SIGTERM)
                signal_group(cr.proc.pid, signal.SIGCONT)

    # -- status

    @staticmethod
    def _wall(mono: float) -> str:
        wall = time.time() - (time.monotonic() - mono)
        return datetime.fromtimestamp(wall, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _terminated_state(self, cr: ContainerRun) -> Obj:
        state: Obj = {"exitCode": cr.exit_code, "reason": cr.reason or "Error", "startedAt": self._wall(cr.started),
                      "finishedAt": self._wall(cr.finished or cr.started), "containerID": f"lab://{cr.pid}"}
        if cr.message:
            state["message"] = cr.message
        return state

    def _status(self, pod: Obj, run: PodRun) -> Obj:
        spec = pod["spec"]
        old = pod.get("status") or {}
        scheduler_pod = run.ip == self.node.scheduler_address
        policy = spec.get("restartPolicy", "Always")
        statuses = []
        finals: list[int] = []
        any_started = False
        all_ready = True
        for c in spec.get("containers", []):
            cname = c["name"]
            cr = run.runs.get(cname)
            st: Obj = {"name": cname, "image": c.get("image", ""), "imageID": f"lab://{c.get('image', '')}",
                       "restartCount": run.restarts.get(cname, 0), "ready": False, "started": False}
            if cname in run.last_state:
                st["lastState"] = {"terminated": run.last_state[cname]}
            else:
                st["lastState"] = {}
            if run.admission_error is not None or cr is None:
                st["state"] = {"waiting": {"reason": "ContainerCreating"}}
                all_ready = False
            elif cr.running:
                any_started = True
                st["state"] = {"running": {"startedAt": self._wall(cr.started)}}
                st["containerID"] = f"lab://{cr.pid}"
                st["started"] = True
                st["ready"] = not scheduler_pod or self._scheduler_ready(run, cr)
                all_ready = all_ready and st["ready"]
            elif cname in run.next_start:
                any_started = True
                all_ready = False
                st["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                           f"back-off {int(run.backoff.get(cname, 1))}s restarting failed "
                                           f"container={cname} pod={run.name}_{run.namespace}({run.uid})"}}
                st["lastState"] = {"terminated": self._terminated_state(cr)}
            else:
                any_started = True
                all_ready = False
                st["state"] = {"terminated": self._terminated_state(cr)}
                st["containerID"] = f"lab://{cr.pid}"
                restartable = policy == "Always" or (policy == "OnFailure" and cr.exit_code != 0)
                if not restartable:
                    finals.append(int(cr.exit_code or 0))
            statuses.append(st)
        n = len(spec.get("containers", []))
        if run.admission_error is not None:
            phase = "Failed"
        elif len(finals) == n:
            phase = "Succeeded" if all(code == 0 for code in finals) else "Failed"
        elif any_started:
            phase = "Running"
        else:
            phase = "Pending"
        ready = all_ready and phase == "Running"
        conds = []
        for ctype, ok in (("PodReadyToStartContainers", True), ("Initialized", True), ("Ready", ready),
                          ("ContainersReady", ready), ("PodScheduled", True)):
            value = "True" if ok else "False"
            prev = next((c for c in old.get("conditions") or [] if c.get("type") == ctype), None)
            ts = prev["lastTransitionTime"] if prev and prev.get("status") == value else now_rfc3339()
            cond: Obj = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": ts}
            if ctype in ("Ready", "ContainersReady") and not ok and phase != "Pending":
                cond["reason"] = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
            conds.append(cond)
        status: Obj = {
            "phase": phase,
            "conditions": conds,
            "hostIP": self.node.address,
            "hostIPs": [{"ip": self.node.address}],
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "startTime": run.start_time,
            "containerStatuses": statuses,
            "qosClass": "BestEffort",
        }
        if run.admission_error is not None:
            status["reason"] = "UnexpectedAdmissionError"
            status["message"] = run.admission_error
        return status


# --------------------------------------------------------------------------------- controllers


def driver_env(settings: LabSettings, node: str) -> dict[str, str]:
    """What the node's GPU driver installation gives a process: the simulated driver, its devices and the node's
    kernel log; on real
    GPUs nothing (the real libcuda and libnvidia-ml are on the system's library path)."""
    if settings.real_gpus or settings.simgpu_dir is None:
        return {}
    return {"LD_LIBRARY_PATH": str(settings.simgpu_dir), "SIMGPU_CONFIG": str(settings.simgpu_config(node)),
            "SIMGPU_KMSG": str(settings.kmsg(node))}


def gpu_container_env(settings: LabSettings, node: str, devices: list[str], sut: Path) -> dict[str, str]:
    """The device plugin's part of a GPU container's environment: its GPUs (``devices``: vGPU ids
    ``<GPU UUID>__<k>``), the driver (:func:`driver_env`) and the real client library (``LD_PRELOAD`` of the build
    ``sut``). On real GPUs also ``CUDA_VISIBLE_DEVICES`` (:func:`tests.lab.realgpu.pod_gpu_env`): no container
    runtime hides the machine's other GPUs from a lab pod."""
    from tests.lab.realgpu import pod_gpu_env

    uuids = sorted({d.split("__")[0] for d in devices})
    env = driver_env(settings, node)
    if settings.real_gpus:
        env.update(pod_gpu_env(uuids))
    else:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuids)
    env["LD_PRELOAD"] = str(sut / "libxpushare.so")
    return env


def graceful_delete(store: Store, pod: Obj, grace: int | None) -> Obj:
    """The API server's pod deletion: graceful for a pod a kubelet runs, at once otherwise.

    ``grace`` None means ``spec.terminationGracePeriodSeconds`` (30). Returns the object as the API
    returns it (with ``deletionTimestamp``).
    """
    meta = pod["metadata"]
    if grace is None:
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    phase = (pod.get("status") or {}).get("phase")
    if grace <= 0 or not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
        gone = store.remove("pods", meta["namespace"], meta["name"], meta["uid"]) or pod
        gone["metadata"].setdefault("deletionTimestamp", now_rfc3339())
        gone["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        return gone
    current = meta.get("deletionGracePeriodSeconds")
    if current is not None and int(current) <= grace:
        return pod
    deadline = datetime.fromtimestamp(time.time() + grace, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def mark(obj: Obj) -> None:
        obj["metadata"]["deletionTimestamp"] = deadline
        obj["metadata"]["deletionGracePeriodSeconds"] = grace

    return store.mutate("pods", meta["namespace"], meta["name"], mark)


def _pod_gpu_request(pod: Obj, resource: str) -> int:
    total = 0
    for c in pod["spec"].get("containers", []):
        total += atoi(str(((c.get("resources") or {}).get("limits") or {}).get(resource, "0")))
    return total


def _tolerates_unschedulable(pod: Obj) -> bool:
    for t in pod["spec"].get("tolerations") or []:
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") == "node.kubernetes.io/unschedulable":
            return True
    return False


def _pod_ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Controllers:
    """The lab's kube-scheduler and DaemonSet controller. Call :meth:`step` periodically."""

    def __init__(self, store: Store, names: SutNames) -> None:
        self.store = store
        self.names = names

    def step(self) -> None:
        self._schedule()
        self._daemonsets()

    # -- kube-scheduler

    def _schedule(self) -> None:
        pending, _ = self.store.list("pods", None, fields=lambda o: not o["spec"].get("nodeName"))
        if not pending:
            return
        nodes, _ = self.store.list("nodes")
        pods, _ = self.store.list("pods")
        res = self.names.resource
        used: dict[str, int] = {}
        count: dict[str, int] = {}
        for p in pods:
            node = p["spec"].get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                used[node] = used.get(node, 0) + _pod_gpu_request(p, res)
                count[node] = count.get(node, 0) + 1
        for pod in pending:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            want = _pod_gpu_request(pod, res)
            selector = pod["spec"].get("nodeSelector") or {}
            reasons: dict[str, int] = {}
            fits = []
            for n in nodes:
                name = n["metadata"]["name"]
                labels = n["metadata"].get("labels") or {}
                cap = atoi(str(((n.get("status") or {}).get("allocatable") or {}).get(res, "0")))
                if (n.get("spec") or {}).get("unschedulable") and not _tolerates_unschedulable(pod):
                    reasons["node(s) were unschedulable"] = reasons.get("node(s) were unschedulable", 0) + 1
                elif any(labels.get(k) != v for k, v in selector.items()):
                    key = "node(s) didn't match Pod's node affinity/selector"
                    reasons[key] = reasons.get(key, 0) + 1
                elif want and used.get(name, 0) + want > cap:
                    reasons[f"Insufficient {res}"] = reasons.get(f"Insufficient {res}", 0) + 1
                else:
                    fits.append(n)
            if fits:
                best = min(fits, key=lambda n: (used.get(n["metadata"]["name"], 0),
                                                count.get(n["metadata"]["name"], 0), n["metadata"]["name"]))
                name = best["metadata"]["name"]
                used[name] = used.get(name, 0) + want
                count[name] = count.get(name, 0) + 1

                def bind(obj: Obj, node: str = name) -> None:
                    obj["spec"]["nodeName"] = node
                    obj.setdefault("status", {})["conditions"] = [
                        {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                         "lastTransitionTime": now_rfc3339()}]

                self._mutate_pod(pod, bind)
            else:
                detail = ", ".join(f"{v} {k}" for k, v in sorted(reasons.items()))
                message = f"0/{len(nodes)} nodes are available: {detail}."

                def unschedulable(obj: Obj, msg: str = message) -> None:
                    conds = obj.setdefault("status", {}).get("conditions") or []
                    if conds and conds[0].get("message") == msg:
                        return
                    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                                    "lastProbeTime": None, "lastTransitionTime": now_rfc3339(),
                                                    "reason": "Unschedulable", "message": msg}]

                self._mutate_pod(pod, unschedulable)

    def _mutate_pod(self, pod: Obj, fn: Any) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self.store.mutate("pods", meta["namespace"], meta["name"], fn)

    # -- DaemonSets

    def _daemonsets(self) -> None:
        dss, _ = self.store.list("daemonsets")
        nodes, _ = self.store.list("nodes")
        pods, _ = self.store.list("pods")
        ds_uids = {d["metadata"]["uid"] for d in dss}
        for p in pods:  # orphans of a deleted DaemonSet go (cascading delete)
            owner = next((o for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"), None)
            if owner and owner.get("uid") not in ds_uids and not p["metadata"].get("deletionTimestamp"):
                graceful_delete(self.store, p, None)
        for ds in dss:
            with contextlib.suppress(ApiError):
                self._daemonset(ds, nodes, pods)

    def _daemonset(self, ds: Obj, nodes: list[Obj], pods: list[Obj]) -> None:
        meta, spec = ds["metadata"], ds["spec"]
        tmpl = spec.get("template") or {}
        h = template_hash(tmpl)
        selector = (tmpl.get("spec") or {}).get("nodeSelector") or {}
        eligible = [n["metadata"]["name"] for n in nodes
                    if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
        mine = [p for p in pods
                if any(o.get("uid") == meta["uid"] for o in p["metadata"].get("ownerReferences") or [])]
        by_node: dict[str, list[Obj]] = {}
        for p in mine:
            by_node.setdefault(p["spec"].get("nodeName", ""), []).append(p)
        for node, ps in by_node.items():
            if node not in eligible:
                for p in ps:
                    if not p["metadata"].get("deletionTimestamp"):
                        graceful_delete(self.store, p, None)
        max_unavailable = atoi(str(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {})
                                   .get("maxUnavailable", 1))) or 1
        unavailable = sum(1 for n in eligible if not any(_pod_ready(p) for p in by_node.get(n, [])))
        for node in eligible:
            ps = by_node.get(node, [])
            live = [p for p in ps if not p["metadata"].get("deletionTimestamp")]
            if not ps:
                self._create_ds_pod(ds, node, h)
                continue
            old = [p for p in live if (p["metadata"].get("labels") or {}).get("controller-revision-hash") != h]
            if old and (unavailable < max_unavailable or not any(_pod_ready(p) for p in live)):
                if any(_pod_ready(p) for p in live):
                    unavailable += 1
                for p in old:
                    graceful_delete(self.store, p, None)
        current = [by_node.get(n, []) for n in eligible]
        live_pods = [p for ps in current for p in ps if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in live_pods if _pod_ready(p))
        updated = sum(1 for p in live_pods if (p["metadata"].get("labels") or {}).get("controller-revision-hash") == h)
        status = {
            "currentNumberScheduled": sum(1 for ps in current if ps),
            "numberMisscheduled": 0,
            "desiredNumberScheduled": len(eligible),
            "numberReady": ready,
            "observedGeneration": int(meta.get("generation", 1)),
            "updatedNumberScheduled": updated,
            "numberAvailable": ready,
        }
        if len(eligible) - ready > 0:
            status["numberUnavailable"] = len(eligible) - ready
        if status != ds.get("status"):
            self.store.mutate("daemonsets", meta["namespace"], meta["name"], lambda o: o.__setitem__("status", status))

    def _create_ds_pod(self, ds: Obj, node: str, h: str) -> None:
        meta = ds["metadata"]
        tmpl = json.loads(json.dumps(ds["spec"].get("template") or {}))
        tmeta = tmpl.get("metadata") or {}
        pspec = tmpl.get("spec") or {}
        pspec["nodeName"] = node
        tolerations = pspec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                    "node.kubernetes.io/unschedulable"):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoSchedule" if key.endswith(
                "unschedulable") else "NoExecute"})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": {**(tmeta.get("labels") or {}), "controller-revision-hash": h,
                           "pod-template-generation": str(meta.get("generation", 1))},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": pspec,
        }
        self.store.create("pods", meta["namespace"], default_pod(pod))


def control_plane_log(text: str) -> None:
    """One line on the control plane's stderr (its log file)."""
    sys.stderr.write(f"{rfc3339nano(time.time())} {text}\n")
    sys.stderr.flush()
