"""One mount namespace per lab node, so each node's real SUT scheduler has its own fixed socket path.

The real scheduler listens on ``/var/run/xpushare/scheduler.sock`` (hard-coded) and the real client
library reads ``/var/run/secrets/kubernetes.io/serviceaccount/namespace``; several nodes on one machine
therefore need a view of ``/run`` each. A node's namespace is held by a sleeping process started with
``unshare --mount`` that mounts a private tmpfs over ``/run`` (``/var/run`` is a symlink to it) with the
directories the SUT expects. Everything a node runs (its scheduler pod, its workload pods, and, for the
host-mode lab, its sshd) joins that namespace with ``nsenter``; a pod additionally gets a private copy in
which its own service-account directory is bind-mounted, as a container runtime would do.

Needs root (or an unprivileged user namespace) and util-linux's ``unshare``/``nsenter``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

#: The service-account directory the SUT reads (under /run, through the /var/run symlink).
SERVICEACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"
_HOLD = (
    'mount -t tmpfs -o mode=0755 lab-node-run /run && '
    f'mkdir -p /run/xpushare {SERVICEACCOUNT_DIR} /run/sshd && '
    # Written aside and renamed: the starter polls for the file, and a redirect creates it empty before the write.
    'echo "$$" > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 2147483647'
)
_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


class NamespaceError(RuntimeError):
    """The node namespace could not be created (one line: what is missing or what failed)."""


def unavailable_reason() -> str | None:
    """Why node namespaces cannot be made here, or None when they can."""
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--mount", "--", "mount", "-t", "tmpfs", "lab-probe", "/run"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"cannot mount in a new mount namespace (root needed): {probe.stderr.strip()[:120]}"
    return None


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A Popen ``preexec_fn``: the child gets SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class NodeNamespace:
    """The mount namespace of one lab node, held by a sleeping process.

    Args:
        name: the node's name (for messages).
        state_dir: a directory of the node's own (the holder writes its pid file there).
        die_with_parent: the holder gets SIGKILL when the starting process dies.
    """

    def __init__(self, name: str, state_dir: Path, *, die_with_parent: bool = True) -> None:
        self.name = name
        self.pid_file = state_dir / "mountns.pid"
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The holder's pid (the namespace is ``/proc/<pid>/ns/mnt``).

        Raises:
            NamespaceError: the namespace was not started or its holder died.
        """
        pid = self.written_pid()
        if pid is None:
            raise NamespaceError(f"node {self.name}: mount namespace not started")
        if not os.path.exists(f"/proc/{pid}"):
            raise NamespaceError(f"node {self.name}: mount namespace holder {pid} is gone")
        return pid

    def written_pid(self) -> int | None:
        """The pid in the holder's pid file, or None while the file is absent, empty or partly written."""
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def start(self, env: dict[str, str] | None = None, timeout_s: float = 10.0) -> None:
        """Create the namespace and wait until its tmpfs is mounted.

        Raises:
            NamespaceError: ``unshare``/``mount`` failed or did not finish in ``timeout_s`` seconds.
        """
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)
        self._proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _HOLD, str(self.pid_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
            start_new_session=True, preexec_fn=die_with_parent if self.die_with_parent else None,
        )
        deadline = time.monotonic() + timeout_s
        while self.written_pid() is None:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else b"").decode(errors="replace").strip()
                raise NamespaceError(f"node {self.name}: mount namespace failed: {err[:200]}")
            if time.monotonic() > deadline:
                self.stop()
                raise NamespaceError(f"node {self.name}: mount namespace not ready after {timeout_s:.0f}s")
            time.sleep(0.01)

    def enter(self, argv: list[str], *, cwd: Path | None = None, serviceaccount: Path | None = None) -> list[str]:
        """``argv`` wrapped to run inside the node's namespace (in ``cwd``: entering resets the directory).

        With ``serviceaccount`` (a directory holding ``token``, ``ca.crt``, ``namespace``), the command runs
        in a private copy of the namespace where that directory is bind-mounted on
        :data:`SERVICEACCOUNT_DIR`, as the kubelet mounts a pod's projected service-account volume.
        """
        wrapped = ["nsenter", "--target", str(self.pid), "--mount", f"--wd={cwd or os.getcwd()}", "--"]
        if serviceaccount is not None:
            wrapped += ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                        f'mount --bind "$0" {SERVICEACCOUNT_DIR} && exec "$@"', str(serviceaccount)]
        return wrapped + argv

    def stop(self) -> None:
        """Kill the holder; the namespace goes with the last process in it. Idempotent."""
        with contextlib.suppress(NamespaceError, OSError):
            os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            self._proc = None
        self.pid_file.unlink(missing_ok=True)
