"""The SUT on the GPU hosts of a host-mode cluster: build it from source there, install it, run its scheduler.

``invoke deploy --cluster bm1 --sut-src DIR`` copies the source tree to each GPU host, checks for the build
tools (one line naming what is missing), runs the upstream Makefile's ``libxpushare.so xpushare-scheduler
xpusharectl`` targets, installs the library at the inventory's ``sut_lib`` and the scheduler at
``scheduler.binary`` (``xpusharectl`` beside it), and starts the scheduler with its metrics exporter on
(``XPUSHARE_METRICS_ENABLE=1``, listening where ``scheduler.metrics_url`` says), then builds the CUDA
error-injection shim there (:func:`install_fault_shim`, FAIL-005..007's injector). ``invoke sut.status|start|
stop|restart`` act on that scheduler; ``invoke undeploy`` removes what deploy installed.

How the scheduler is kept running (:func:`manager_of`): a systemd unit (``xpushare-scheduler.service``) where
systemd runs and the login is root; elsewhere a supervised background process: a shell loop in its own
session that restarts the scheduler one second after it exits (as the DaemonSet's kubelet would), with pid
files in ``scheduler.state_dir`` and the output appended to ``scheduler.log_file``.

Every remote command is an argv (quoted once by the transport); scripts get their values as positional
arguments, never pasted into the script text. Source: docs/sut/scheduler.md §environment (scheduler environment),
docs/sut/metrics.md §http
(``/healthz``); the SUT's Makefile.
"""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from urllib.parse import urlsplit

from xpushare.data import workloads_dir
from xpushare.evidence.scrape_capture import endpoint_url, status_on
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.atomic_file import atomic_write_bytes, atomic_write_text
from xpushare.model.errors import TransportError, UsageError
from xpushare.model.gpu_faults import DEFAULT_STATE_DIR, deployed_shim
from xpushare.transport.base import Host

UNIT = "xpushare-scheduler"
OUTPUTS = ("libxpushare.so", "xpushare-scheduler", "xpusharectl")
#: What an inventory could say for each setting deploy needs (named in the error when one is missing).
SUGGESTED = {
    "sut_lib": "/usr/local/lib/xpushare/libxpushare.so",
    "scheduler.binary": "/usr/local/bin/xpushare-scheduler",
    "scheduler.log_file": "/var/log/xpushare-scheduler.log",
    "scheduler.metrics_url": "http://127.0.0.1:9402",
    "scheduler.state_dir": "/var/lib/xpushare",
}
#: Settings deploy defaults when the inventory leaves them out: paths only deploy, undeploy and ``sut.*`` use (the
#: library, the log and the metrics URL are evidence a run reads from the inventory: those stay required).
DEFAULTS = {
    "scheduler.binary": "/usr/local/bin/xpushare-scheduler",
    "scheduler.state_dir": DEFAULT_STATE_DIR,
}
BUILD_TIMEOUT_S = 600.0
START_TIMEOUT_S = 30.0


class DeployError(TransportError):
    """Deploying or running the SUT on one host failed (the message names the host and the step)."""


@dataclass(frozen=True)
class HostSutLayout:
    """Where the SUT lives on each GPU host of a cluster, from the inventory.

    ``library``, ``scheduler``: absolute install paths; ``log_file``: the scheduler's output (appended);
    ``metrics_addr``: ``host:port`` the exporter binds (``XPUSHARE_METRICS_ADDR``); ``health_url``: its
    ``/healthz``; ``state_dir``: source copy, build and pid files; ``env``: extra scheduler environment.
    """

    library: str
    scheduler: str
    log_file: str
    metrics_addr: str
    health_url: str
    state_dir: str
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def ctl(self) -> str:
        """``xpusharectl``, installed beside the scheduler."""
        return str(Path(self.scheduler).with_name("xpusharectl"))

    def scheduler_env(self) -> dict[str, str]:
        """The scheduler's environment: metrics on at :attr:`metrics_addr`, then the inventory's ``env``."""
        return {"XPUSHARE_METRICS_ENABLE": "1", "XPUSHARE_METRICS_ADDR": self.metrics_addr,
                "NVIDIA_VISIBLE_DEVICES": "all", **self.env}

    @classmethod
    def of(cls, cluster: ClusterSpec) -> HostSutLayout:
        """The layout of a host-mode cluster.

        ``scheduler.binary`` and ``scheduler.state_dir`` default to :data:`DEFAULTS`.

        Raises:
            UsageError: the cluster is not in host mode, or a setting deploy needs is missing, not an absolute
                path, or too close to ``/`` for undeploy to remove (one line naming every such key).
        """
        if not cluster.is_host:
            raise UsageError(f"cluster {cluster.name}: the SUT of a k8s cluster is its DaemonSets (invoke deploy "
                             "without host mode installs the manifests)")
        s = cluster.scheduler
        given = {"sut_lib": cluster.sut_lib, "scheduler.binary": s.binary or DEFAULTS["scheduler.binary"],
                 "scheduler.log_file": s.log_file, "scheduler.metrics_url": s.metrics_url,
                 "scheduler.state_dir": s.state_dir or DEFAULTS["scheduler.state_dir"]}
        missing = [k for k, v in given.items() if not v]
        if missing:
            raise UsageError(f"cluster {cluster.name}: deploy needs " + ", ".join(
                f"{k} (e.g. {SUGGESTED[k]})" for k in missing) + " in the inventory")
        paths = {k: str(v) for k, v in given.items() if k != "scheduler.metrics_url"}
        relative = [k for k, v in paths.items() if not v.startswith("/")]
        if relative:
            raise UsageError(f"cluster {cluster.name}: {', '.join(relative)} must be absolute paths")
        # undeploy removes these paths: refuse / and top-level directories such as /var or /opt
        shallow = [k for k, v in paths.items() if len(PurePosixPath(v).parts) < 3]
        if shallow:
            raise UsageError(f"cluster {cluster.name}: {', '.join(shallow)} too close to / (undeploy removes it); "
                             "use a path of its own, e.g. /var/lib/xpushare")
        url = urlsplit(str(s.metrics_url))
        if url.scheme != "http" or not url.hostname or not url.port:
            raise UsageError(f"cluster {cluster.name}: scheduler.metrics_url must be http://HOST:PORT, "
                             f"not {s.metrics_url!r}")
        return cls(str(cluster.sut_lib), paths["scheduler.binary"], str(s.log_file), f"{url.hostname}:{url.port}",
                   endpoint_url(url.hostname, url.port, "/healthz"), paths["scheduler.state_dir"], dict(s.env))


# ------------------------------------------------------------------------------------------------ build

_TOOLS_SCRIPT = r"""
missing=""
for t in gcc make tar; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
if command -v gcc >/dev/null 2>&1; then
  printf '#include <curl/curl.h>\n' | gcc -E -x c - >/dev/null 2>&1 || missing="$missing curl/curl.h"
fi
echo "$missing"
"""

_BUILD_SCRIPT = r"""
set -e
state=$1; tarball=$2; shift 2
rm -rf "$state/src"; mkdir -p "$state/src"
tar -xzf "$tarball" -C "$state/src"; rm -f "$tarball"
cd "$state/src"
make -j"$(nproc 2>/dev/null || echo 2)" "$@" >"$state/build.log" 2>&1 || { tail -n 5 "$state/build.log" >&2; exit 1; }
"""

_INSTALL_SCRIPT = r"""
set -e
src=$1; lib=$2; sched=$3; ctl=$4
install -D -m 0755 "$src/libxpushare.so" "$lib"
install -D -m 0755 "$src/xpushare-scheduler" "$sched"
install -D -m 0755 "$src/xpusharectl" "$ctl"
"""


def missing_build_tools(host: Host) -> list[str]:
    """What the host lacks to build the SUT: of ``gcc``, ``make``, ``tar`` and the libcurl headers
    (``curl/curl.h``); empty when it has everything. Raises :class:`TransportError` (unreachable host)."""
    res = host.run(["sh", "-c", _TOOLS_SCRIPT], timeout=60)
    return res.stdout.split()


def source_tarball(src: Path, dest_dir: Path) -> Path:
    """A gzip tarball of the SUT source tree ``src`` (objects, libraries and ``.git`` left out) in ``dest_dir``.

    Raises:
        UsageError: ``src`` is not an xpushare source tree (no Makefile or scheduler.c).
    """
    if not (src / "Makefile").is_file() or not (src / "scheduler.c").is_file():
        raise UsageError(f"not an xpushare source tree (no Makefile/scheduler.c): {src}")
    out = dest_dir / "xpushare-src.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = Path(info.name).name
        return None if name == ".git" or name.endswith((".o", ".so")) else info

    def write(fh: BinaryIO) -> None:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name, filter=keep)

    return atomic_write_bytes(out, write)


def build_and_install(host: Host, layout: HostSutLayout, tarball: Path) -> None:
    """Copy the source tarball to ``host``, build the SUT in ``state_dir/src`` and install it.

    Raises:
        DeployError: a build tool or header is missing (one line naming them), ``make`` failed (its last
            lines), or the install failed.
    """
    missing = missing_build_tools(host)
    if missing:
        raise DeployError(host.name, "cannot build the SUT: missing " + ", ".join(missing)
                          + " (e.g. apt-get install gcc make libcurl4-openssl-dev)")
    remote = f"{layout.state_dir}/xpushare-src.tar.gz"
    host.run(["mkdir", "-p", layout.state_dir], timeout=30, check=True)
    host.put(tarball, remote)
    res = host.run(["sh", "-c", _BUILD_SCRIPT, "sh", layout.state_dir, remote, *OUTPUTS], timeout=BUILD_TIMEOUT_S)
    if not res.ok:
        raise DeployError(host.name, f"make failed: {' | '.join(res.stderr.strip().splitlines()[-5:])}")
    res = host.run(["sh", "-c", _INSTALL_SCRIPT, "sh", f"{layout.state_dir}/src", layout.library,
                    layout.scheduler, layout.ctl], timeout=60)
    if not res.ok:
        raise DeployError(host.name, f"install failed: {res.stderr.strip()[-300:]}")


# ------------------------------------------------------------------------------------------------ fault shim

#: The shim's sources (workloads/faultshim/README.md); build.py compiles faultshim.c beside it.
FAULTSHIM_FILES = ("build.py", "faultshim.c")


def install_fault_shim(host: Host, layout: HostSutLayout, python: str) -> str:
    """Build the CUDA error-injection shim on ``host`` with its ``build.py`` (gcc, against the driver the host's
    loader finds) and install it at :func:`~xpushare.model.gpu_faults.deployed_shim` of the layout's state
    directory, where FAIL-005..007 look for it; return that path. ``python``: the cluster's interpreter.

    Raises:
        DeployError: the copy or the build failed (build.py's ``error:`` line, e.g. no ``libcuda.so.1``).
    """
    shim = deployed_shim(layout.state_dir)
    src = f"{layout.state_dir}/faultshim-src"
    host.run(["mkdir", "-p", src], timeout=30, check=True)
    for name in FAULTSHIM_FILES:
        host.put(workloads_dir() / "faultshim" / name, f"{src}/{name}")
    res = host.run([python, f"{src}/build.py", "--out", str(PurePosixPath(shim).parent)], timeout=BUILD_TIMEOUT_S)
    if not res.ok:
        why = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1].removeprefix("error: ")
        raise DeployError(host.name, f"fault shim not built: {why}")
    return shim


# ------------------------------------------------------------------------------------------------ run

_MANAGER_SCRIPT = r"""
if [ "$(id -u)" = 0 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  echo systemd
else
  echo process
fi
"""

# $1 state dir, $2 log file, then the scheduler's argv (``env K=V ... binary``). The loop restarts the scheduler
# one second after it exits unless ``stop`` exists; its own pid and the scheduler's are in the state dir.
_SUPERVISE_SCRIPT = r"""
state=$1; log=$2; shift 2
mkdir -p "$state" "$(dirname "$log")"
if [ -f "$state/supervisor.pid" ] && kill -0 "$(cat "$state/supervisor.pid")" 2>/dev/null; then
  echo "already running (supervisor pid $(cat "$state/supervisor.pid"))"; exit 0
fi
rm -f "$state/stop"
nohup setsid sh -c '
  state=$1; log=$2; shift 2
  echo $$ > "$state/supervisor.pid"
  while :; do
    "$@" >>"$log" 2>&1 &
    echo $! > "$state/scheduler.pid"
    wait $!
    [ -f "$state/stop" ] && break
    sleep 1
  done
  rm -f "$state/supervisor.pid" "$state/scheduler.pid"
' sh "$state" "$log" "$@" </dev/null >/dev/null 2>&1 &
echo started
"""

_STOP_PROCESS_SCRIPT = r"""
state=$1
touch "$state/stop" 2>/dev/null || exit 0
for f in supervisor.pid scheduler.pid; do
  [ -f "$state/$f" ] && kill -TERM "$(cat "$state/$f")" 2>/dev/null
done
i=0
while [ -f "$state/scheduler.pid" ] && kill -0 "$(cat "$state/scheduler.pid")" 2>/dev/null && [ $i -lt 50 ]; do
  sleep 0.1; i=$((i + 1))
done
[ -f "$state/scheduler.pid" ] && kill -KILL "$(cat "$state/scheduler.pid")" 2>/dev/null
rm -f "$state/supervisor.pid" "$state/scheduler.pid"
echo stopped
"""

_PID_SCRIPT = r"""
state=$1
if [ -f "$state/scheduler.pid" ] && kill -0 "$(cat "$state/scheduler.pid")" 2>/dev/null; then
  cat "$state/scheduler.pid"
fi
"""


def unit_text(layout: HostSutLayout) -> str:
    """The systemd unit that runs the scheduler (``Restart=always``, output appended to the log file)."""
    env = "".join(f'Environment="{k}={v}"\n' for k, v in layout.scheduler_env().items())
    return ("[Unit]\nDescription=xpushare GPU-sharing scheduler (deployed by xpushare)\nAfter=network.target\n\n"
            f"[Service]\n{env}ExecStart={layout.scheduler}\nRestart=always\nRestartSec=1\n"
            f"StandardOutput=append:{layout.log_file}\nStandardError=append:{layout.log_file}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def manager_of(host: Host) -> str:
    """``systemd`` (root login on a host whose PID 1 is systemd) or ``process`` (a supervised background
    process)."""
    return host.run(["sh", "-c", _MANAGER_SCRIPT], timeout=30).stdout.strip() or "process"


def start(host: Host, layout: HostSutLayout) -> str:
    """Start the scheduler (systemd unit, else supervised process); return how it is run.

    Raises:
        DeployError: the start command failed or ``/healthz`` did not answer 200 within
            :data:`START_TIMEOUT_S` (the log's last lines quoted).
    """
    manager = manager_of(host)
    if manager == "systemd":
        with tempfile.TemporaryDirectory() as tmp:
            unit = Path(tmp) / f"{UNIT}.service"
            atomic_write_text(unit, unit_text(layout))
            host.put(unit, f"/etc/systemd/system/{UNIT}.service")
        res = host.run(["sh", "-c", 'systemctl daemon-reload && systemctl enable --now "$1"', "sh", UNIT], timeout=60)
    else:
        argv = ["env", *(f"{k}={v}" for k, v in layout.scheduler_env().items()), layout.scheduler]
        res = host.run(["sh", "-c", _SUPERVISE_SCRIPT, "sh", layout.state_dir, layout.log_file, *argv], timeout=30)
    if not res.ok:
        raise DeployError(host.name, f"starting the scheduler ({manager}) failed: {res.stderr.strip()[-300:]}")
    wait_healthy(host, layout, manager=manager)
    return manager


def stop(host: Host, layout: HostSutLayout) -> str:
    """Stop the scheduler however it runs; nothing to do when it does not. Returns the host's manager
    (:func:`manager_of`). Raises :class:`TransportError`."""
    manager = manager_of(host)
    if manager == "systemd":
        host.run(["sh", "-c", 'systemctl stop "$1" 2>/dev/null || true', "sh", UNIT], timeout=60)
    # also on a systemd host: a supervised process left by an earlier deploy under another login holds the socket
    host.run(["sh", "-c", _STOP_PROCESS_SCRIPT, "sh", layout.state_dir], timeout=60)
    return manager


@dataclass(frozen=True)
class SchedulerStatus:
    """One host's scheduler: ``pid`` (None: not running), ``healthz`` (HTTP status of ``/healthz``, 0 when it
    did not answer), ``manager`` (``systemd`` | ``process``)."""

    host: str
    pid: int | None
    healthz: int
    manager: str

    @property
    def healthy(self) -> bool:
        return self.pid is not None and self.healthz == 200


def status(host: Host, layout: HostSutLayout, manager: str | None = None) -> SchedulerStatus:
    """The scheduler's pid and ``/healthz`` answer on ``host`` (curl on the host); ``manager``: the host's
    :func:`manager_of` when already known (saves a remote command). Raises :class:`TransportError`."""
    manager = manager or manager_of(host)
    if manager == "systemd":
        out = host.run(["systemctl", "show", "-p", "MainPID", "--value", UNIT], timeout=30).stdout.strip()
    else:
        out = host.run(["sh", "-c", _PID_SCRIPT, "sh", layout.state_dir], timeout=30).stdout.strip()
    pid = int(out) if out.isdigit() and int(out) > 0 else None
    return SchedulerStatus(host.name, pid, status_on(host, layout.health_url, timeout_s=5), manager)


def wait_healthy(host: Host, layout: HostSutLayout, timeout_s: float = START_TIMEOUT_S, *,
                 manager: str | None = None) -> SchedulerStatus:
    """Poll :func:`status` every 0.5 s until ``/healthz`` answers 200 (the manager asked once, unless given).
    Raises :class:`DeployError` after ``timeout_s``."""
    manager = manager or manager_of(host)
    deadline = time.monotonic() + timeout_s
    while True:
        st = status(host, layout, manager)
        if st.healthy:
            return st
        if time.monotonic() > deadline:
            tail = host.run(["tail", "-n", "3", layout.log_file], timeout=30).stdout.strip().replace("\n", " | ")
            raise DeployError(host.name, f"scheduler not healthy after {timeout_s:.0f} s (pid {st.pid}, /healthz "
                                         f"{st.healthz or 'no answer'}): {tail[-300:]}")
        time.sleep(0.5)


def undeploy(host: Host, layout: HostSutLayout) -> list[str]:
    """Stop the scheduler and remove what deploy put on ``host`` (library, scheduler, ``xpusharectl``, the
    state directory, the systemd unit); the scheduler's log file stays, as evidence. Returns the paths removed.

    Raises :class:`TransportError`.
    """
    manager = stop(host, layout)
    paths = [layout.library, layout.scheduler, layout.ctl, layout.state_dir]
    if manager == "systemd":
        host.run(["sh", "-c", 'systemctl disable "$1" 2>/dev/null || true', "sh", UNIT], timeout=60)
        paths.append(f"/etc/systemd/system/{UNIT}.service")
    host.run(["rm", "-rf", "--", *paths], timeout=60, check=True)
    return paths


def gpu_hosts(cluster: ClusterSpec, names: Sequence[str] | None = None) -> list[str]:
    """The cluster's GPU hosts (those of ``names`` when given). Raises :class:`UsageError` when none is left."""
    hosts = [h.name for h in cluster.by_role("gpu") if names is None or h.name in names]
    if not hosts:
        raise UsageError(f"cluster {cluster.name}: no GPU host selected")
    return hosts
