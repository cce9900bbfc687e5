"""A host-mode lab on the real SUT: GPU hosts reached over real SSH, each running the real scheduler.

Outside Kubernetes the SUT runs as plain processes: one ``xpushare-scheduler`` per GPU host, and workloads
started with ``LD_PRELOAD=libxpushare.so``. The real client library then reports pod and namespace ``none``
for every client, so the tool must tell clients apart by ``host_pid`` and ``client_id``
(:mod:`xpushare.evidence.client_match`). This lab is such a cluster on one machine:

* **Hosts.** Each host is an sshd of :mod:`tests.lab.sshd` (own loopback address) started inside a mount
  namespace of its own (:class:`tests.lab.nodens.NodeNamespace`, a tmpfs over ``/run``): the scheduler's
  socket ``/var/run/xpushare/scheduler.sock`` is hard-coded, so every host needs its own ``/run``. Every
  SSH session of the host, and so every workload the host backend starts, runs in that namespace, in the
  machine's one PID namespace: the pid the backend records (``<name>.hostpid``) is the pid the scheduler
  sees through ``SO_PEERCRED``. In the namespace a copy of ``/etc/passwd`` gives the user the host's own
  home directory (the sshd lab's ``hosts/<name>/home``), where sessions start and the host backend keeps
  its spawn directory and workloads, as on separate machines.
* **Simulated GPUs** (:mod:`tests.lab.simgpu`): the host's sessions get ``PATH`` (the ``nvidia-smi``
  look-alike first), ``LD_LIBRARY_PATH`` (the stub ``libcuda.so.1``/``libnvidia-ml.so.1``) and
  ``SIMGPU_CONFIG`` (the host's devices), as a driver installation would give them, and ``SIMGPU_KMSG``
  (the host's kernel log, ``hosts/<name>/kmsg``, which the ``dmesg`` look-alike prints; docs/faults.md).
  Default GPUs: 16 GiB, 1e12 FLOP/s and 1e9 B/s, so W5's ``--n 1024`` add (12 MiB moved) lasts 12.6 ms of
  simulated GPU time and a probe launches about 80 kernels a second (a faster simulated GPU only costs CPU time here).
* **The real scheduler** built by :mod:`tests.lab.sut` runs in the host's namespace with
  ``XPUSHARE_METRICS_ENABLE=1``, ``XPUSHARE_METRICS_ADDR=<host address>:<free port>`` and
  ``XPUSHARE_DEBUG=1`` (the ``SO_PEERCRED`` pid lines of the log exist in debug mode only), its output in
  ``hosts/<name>/scheduler.log``. It is started through ``hosts/<name>/sut/xpushare-scheduler``, a
  symlink to the host's current build, so its command line names this lab and host alone (the inventory's
  ``scheduler.process_name``). :meth:`HostLab.set_sut` switches a host to another build (a mutant from
  :func:`tests.lab.mutants.build_mutant`) and restarts its scheduler.
* **The client library** is ``/run/xpushare-lab/libxpushare.so`` on every host (inside its namespace,
  a symlink to the host's current build), the inventory's ``sut_lib``.

:meth:`HostLab.inventory` is a ``mode: host`` cluster (``hostlab``) of these hosts; its ``scheduler``
settings (``metrics_url``, ``log_file``, ``process_name``) are those of the first host, which is where
the tool looks for the scheduler in host mode. :meth:`HostLab.processes` lists what runs on a host (its
namespace); :meth:`HostLab.stop` kills whatever is left there. Measured on a 2-core machine: two hosts
start in about 0.5 s (builds cached), a scheduler restart (:meth:`HostLab.set_sut`) takes about 0.15 s.

Needs root (mount namespaces), OpenSSH, gcc/make and the libcurl headers (the SUT build).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests.lab import nodens
from tests.lab.nodens import NodeNamespace
from tests.lab.simgpu import SimDevice, build_simgpu, make_uuid, start_kmsg, write_config
from tests.lab.sshd import SshLab, free_port, lab_unavailable_reason
from tests.lab.sut import build_sut

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "hostlab"
#: Where the client library is on every host (inside the host's namespace; see the module docstring).
LIBRARY_DIR = "/run/xpushare-lab"
LIBRARY = f"{LIBRARY_DIR}/libxpushare.so"
GiB = 1 << 30
#: Seconds a scheduler has to answer ``/healthz`` after its start.
SCHEDULER_START_S = 20.0
_STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unavailable_reason() -> str | None:
    """Why the host-mode lab cannot run here (a sentence), or None."""
    return lab_unavailable_reason() or nodens.unavailable_reason()


@dataclass
class HostNode:
    """One lab host: its sshd name and address, namespace, devices, metrics port and scheduler."""

    name: str
    address: str
    directory: Path
    ns: NodeNamespace
    config: Path
    gpu_uuids: tuple[str, ...]
    metrics_port: int
    scheduler: subprocess.Popen[bytes] | None = None

    @property
    def kmsg(self) -> Path:
        """The host's kernel log (``SIMGPU_KMSG``: the ``dmesg`` look-alike prints it, the fault injector and
        tests append ``NVRM: Xid`` lines to it; docs/faults.md)."""
        return self.directory / "kmsg"

    @property
    def sut_link(self) -> Path:
        """Symlink to the host's current SUT build directory."""
        return self.directory / "sut"

    @property
    def scheduler_path(self) -> Path:
        """The scheduler as this host starts it (through :attr:`sut_link`)."""
        return self.sut_link / "xpushare-scheduler"

    @property
    def log_file(self) -> Path:
        return self.directory / "scheduler.log"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.metrics_port}"


class HostLab:
    """GPU hosts over SSH, each in its own mount namespace with the real scheduler on simulated GPUs.

    Args:
        workdir: the lab's directory (created).
        nodes: host names; addresses are consecutive from ``base_address``.
        gpus: simulated GPUs per host.
        gpu_memory_bytes, gpu_flops, gpu_bandwidth: each simulated GPU's memory and speeds.
        sut_src: the SUT tree to build (None: :func:`tests.lab.sut.default_source`).
        scheduler_env: extra scheduler environment (``XPUSHARE_COMPUTE_WINDOW_MS`` ...).
        start_schedulers: False leaves the hosts without a scheduler, for ``invoke deploy`` to install one
            (:meth:`deploy_inventory`).

    Use as a context manager, or :meth:`start` and :meth:`stop`. Only processes of this lab are signalled:
    its sshd listeners (:class:`SshLab`), its schedulers, and whatever runs in its hosts' namespaces.
    """

    def __init__(self, workdir: Path, *, nodes: tuple[str, ...] = ("hl-node1", "hl-node2"), gpus: int = 1,
                 base_address: str = "127.0.70.1", gpu_memory_bytes: int = 16 * GiB, gpu_flops: float = 1e12,
                 gpu_bandwidth: float = 1e9, sut_src: str | os.PathLike[str] | None = None,
                 scheduler_env: dict[str, str] | None = None, start_schedulers: bool = True) -> None:
        self.workdir = Path(workdir).absolute()
        self.node_names = nodes
        self.gpus = gpus
        self.base_address = base_address
        self.gpu_memory_bytes = gpu_memory_bytes
        self.gpu_flops = gpu_flops
        self.gpu_bandwidth = gpu_bandwidth
        self.sut = build_sut(sut_src)
        self.simgpu = build_simgpu()
        self.scheduler_env = dict(scheduler_env or {})
        self.start_schedulers = start_schedulers
        self.ssh: SshLab | None = None
        self.nodes: dict[str, HostNode] = {}

    def __enter__(self) -> HostLab:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- life cycle ----------------------------------------------------------------------------------

    def start(self) -> HostLab:
        """Start every host (namespace, sshd, scheduler); stops what started when one fails."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ssh = SshLab(self.workdir / "ssh")
        first = [int(x) for x in self.base_address.split(".")]
        try:
            for i, name in enumerate(self.node_names):
                address = ".".join(str(x) for x in (*first[:3], first[3] + i))
                self._start_node(name, address)
            self.ssh.write_known_hosts()
            self.ssh.write_ssh_config()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, name: str, address: str) -> None:
        assert self.ssh is not None
        directory = self.workdir / "hosts" / name
        directory.mkdir(parents=True, exist_ok=True)
        uuids = tuple(make_uuid(i, seed=f"hostlab-{name}") for i in range(self.gpus))
        config = write_config(directory / "gpus" / "devices", [
            SimDevice(u, "NVIDIA A100-SXM4-80GB", self.gpu_memory_bytes, self.gpu_flops, self.gpu_bandwidth)
            for u in uuids])
        ns = NodeNamespace(name, directory)
        ns.start()
        node = HostNode(name, address, directory, ns, config, uuids, free_port(address))
        start_kmsg(node.kmsg, name)
        self.nodes[name] = node
        self._point_sut(node, self.sut.directory)
        self._run_in_ns(node, ["sh", "-c", f'mkdir -p {LIBRARY_DIR} && ln -sfn "$0" {LIBRARY}',
                               str(node.sut_link / "libxpushare.so")])
        self._own_home(node, self.ssh.workdir / "hosts" / name / "home")
        self.ssh.add_host(name, address, wrap=lambda argv: ns.enter(argv, cwd=directory),
                          session_env=self.session_env(node))
        if self.start_schedulers:
            self.start_scheduler(name)

    def stop(self) -> None:
        """Stop the schedulers, the sshd hosts and every process left in the hosts' namespaces. Idempotent."""
        for node in self.nodes.values():
            self._stop_scheduler(node)
        if self.ssh is not None:
            with contextlib.suppress(Exception):
                self.ssh.stop()
        for node in self.nodes.values():
            self._kill_namespace(node)
            node.ns.stop()

    # -- the SUT on a host ---------------------------------------------------------------------------

    def session_env(self, node: HostNode) -> dict[str, str]:
        """What a host's sessions get from its "driver installation": the simulated GPUs."""
        return {"PATH": f"{self.simgpu.directory}:{_STD_PATH}", "LD_LIBRARY_PATH": str(self.simgpu.directory),
                "SIMGPU_CONFIG": str(node.config), "SIMGPU_KMSG": str(node.kmsg)}

    def start_scheduler(self, name: str) -> int:
        """Start host ``name``'s scheduler from its current build; wait for ``/healthz``; return its pid.

        Raises:
            RuntimeError: it exited or did not answer within :data:`SCHEDULER_START_S` (the log's tail quoted).
        """
        node = self.nodes[name]
        env = {**self.session_env(node), "HOME": str(node.directory), "NVIDIA_VISIBLE_DEVICES": "all",
               "XPUSHARE_METRICS_ENABLE": "1", "XPUSHARE_METRICS_ADDR": f"{node.address}:{node.metrics_port}",
               "XPUSHARE_DEBUG": "1", **self.scheduler_env}
        with node.log_file.open("ab") as log:
            node.scheduler = subprocess.Popen(
                node.ns.enter([str(node.scheduler_path)], cwd=node.directory), env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=nodens.die_with_parent)
        deadline = time.monotonic() + SCHEDULER_START_S
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if node.scheduler.poll() is not None:
                raise RuntimeError(f"{name}: scheduler exited ({node.scheduler.returncode}): {self._tail(node)}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    opener.open(f"{node.metrics_url}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return node.scheduler.pid
            if time.monotonic() > deadline:
                self._stop_scheduler(node)
                raise RuntimeError(f"{name}: scheduler not serving /healthz after {SCHEDULER_START_S:.0f} s: "
                                   f"{self._tail(node)}")
            time.sleep(0.1)

    def set_sut(self, name: str, build_dir: str | os.PathLike[str] | None) -> None:
        """Run host ``name`` on another build (a directory with ``xpushare-scheduler`` and ``libxpushare.so``;
        None: the lab's own build): its scheduler restarts on it, new workloads preload its library."""
        node = self.nodes[name]
        self._stop_scheduler(node)
        self._point_sut(node, Path(build_dir) if build_dir is not None else self.sut.directory)
        self.start_scheduler(name)

    def scheduler_pid(self, name: str) -> int | None:
        proc = self.nodes[name].scheduler
        return proc.pid if proc is not None and proc.poll() is None else None

    def _point_sut(self, node: HostNode, build_dir: Path) -> None:
        tmp = node.directory / ".sut.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(build_dir)
        tmp.replace(node.sut_link)

    def _stop_scheduler(self, node: HostNode) -> None:
        proc, node.scheduler = node.scheduler, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _run_in_ns(self, node: HostNode, argv: list[str]) -> None:
        subprocess.run(node.ns.enter(argv, cwd=node.directory), check=True, capture_output=True, timeout=30)

    def _own_home(self, node: HostNode, home: Path) -> None:
        """Give the user a home directory of the host's own, as separate machines have.

        sshd starts every session in the account's home directory from the password database, whatever
        ``HOME`` says; the host backend keeps its spawn directory and workloads relative to it. A copy of
        ``/etc/passwd`` naming ``home`` is bind-mounted over the original in the host's namespace only.
        """
        home.mkdir(parents=True, exist_ok=True)
        user = pwd.getpwuid(os.geteuid()).pw_name
        rows = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == user and len(fields) == 7:
                fields[5] = str(home)
            rows.append(":".join(fields))
        passwd = node.directory / "passwd"
        passwd.write_text("\n".join(rows) + "\n")
        self._run_in_ns(node, ["mount", "--bind", str(passwd), "/etc/passwd"])

    def processes(self, name: str) -> dict[int, str]:
        """``pid -> command line`` of what runs in host ``name``'s namespace (its sshd, scheduler, workloads),
        without the namespace's holder."""
        node = self.nodes[name]
        try:
            holder = node.ns.pid
            mine = os.readlink(f"/proc/{holder}/ns/mnt")
        except (nodens.NamespaceError, OSError):
            return {}
        found = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == holder:
                continue
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/mnt") == mine:
                    found[int(entry.name)] = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(
                        b"\0", b" ").decode(errors="replace").strip()
        return found

    def _kill_namespace(self, node: HostNode) -> None:
        """SIGKILL what still runs in the host's namespace (workloads a failed test left), not its holder."""
        for pid in self.processes(node.name):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    @staticmethod
    def _tail(node: HostNode, lines: int = 8) -> str:
        try:
            text = node.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(log empty)"

    # -- the inventory -------------------------------------------------------------------------------

    def inventory(self, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Inventory data: cluster ``hostlab``, ``mode: host``, these hosts; the scheduler of the first host."""
        assert self.ssh is not None
        first = self.nodes[self.node_names[0]]
        hosts = {}
        for name in self.node_names:
            h = self.ssh.host(name)
            hosts[name] = {"address": h.address, "port": h.port, "roles": ["gpu"]}
        lab = self.ssh.host(self.node_names[0])
        return {"clusters": {CLUSTER: {
            "mode": "host",
            "sut": "xpushare",
            "backend": "cuda",
            "gpu": {"model": "lab", "memory_gib": self.gpu_memory_bytes / GiB, "count": self.gpus},
            "python": sys.executable,
            "sut_lib": LIBRARY,
            "scheduler": {"metrics_url": first.metrics_url, "log_file": str(first.log_file),
                          "process_name": str(first.scheduler_path)},
            "ssh": {"user": lab.user, "identity": str(lab.identity), "known_hosts": str(self.ssh.known_hosts_path),
                    "host_key_policy": "strict", "connect_timeout": 10},
            "hosts": hosts,
            # the run lease in this lab's own directory: the default, in /tmp, is shared by every host lab of
            # the machine, and two labs of one cluster name would refuse each other's runs
            # the simulated GPU injects FAIL-005..007's faults itself (SIMGPU_FAULT)
            "params": {"workload_args": {"w5_quota_probe": ["--n", "1024"]}, "pod_timeout_s": 120,
                       "lease_path": str(self.workdir / "run.lease"), "fault_injector": "simulated-gpu",
                       **(params or {})},
        }}}

    def deploy_inventory(self, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """:meth:`inventory` for ``invoke deploy`` (a lab of one host): the SUT installed under the host's
        directory, the scheduler run by deploy's supervisor with its metrics on the host's address."""
        assert len(self.nodes) == 1, "deploy's paths are per cluster: use a lab of one host"
        data = self.inventory(params=params)
        node = next(iter(self.nodes.values()))
        root = node.directory / "deployed"
        cluster = data["clusters"][CLUSTER]
        cluster["sut_lib"] = str(root / "lib" / "libxpushare.so")
        cluster["scheduler"] = {"binary": str(root / "bin" / "xpushare-scheduler"),
                                "log_file": str(root / "scheduler.log"), "state_dir": str(root / "state"),
                                "metrics_url": node.metrics_url,
                                "env": {"XPUSHARE_DEBUG": "1", **self.scheduler_env}}
        return data

    def write_inventory(self, path: Path, **kw: Any) -> Path:
        path.write_text(yaml.safe_dump(self.inventory(**kw), sort_keys=False), encoding="utf-8")
        return path
