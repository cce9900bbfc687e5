"""Real OpenSSH ``sshd`` daemons on loopback addresses, one per lab host, for tests and benchmarks.

Each lab host is one ``sshd -D -e -f <config> -E <log>`` process that listens on its own address of
127.0.0.0/8 (all of it is loopback on Linux) and an ephemeral port, runs as the current user, and
accepts exactly one key: the lab's client key (public key authentication only). Everything the lab
writes lives under its ``workdir``::

    workdir/
      id_ed25519, id_ed25519.pub    client key of the lab (private key mode 0600)
      authorized_keys               the client public key (AuthorizedKeysFile of every host)
      known_hosts, ssh_config       written by write_known_hosts() / write_ssh_config()
      hosts/<name>/                 per host: ssh_host_ed25519_key{,.pub}, sshd_config, sshd.pid, sshd.log,
                                    home/ (HOME of its login shells: no rc files of the developer run)

The lab only ever signals processes it started itself (listener pids, identified by pid *and* start
time so a reused pid is never hit) and, for :meth:`SshLab.kill_sessions` and :meth:`SshLab.stop`,
the descendants of those listeners. Linux only (uses ``/proc``).

Contributor CLI (daemons stay up after the command exits)::

    python -m tests.lab.sshd up --hosts 32 --base 127.0.1.1 --workdir .lab/ssh
    python -m tests.lab.sshd down --workdir .lab/ssh
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import dataclasses
import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

#: Seconds a freshly started sshd has to accept TCP connections and answer with an SSH-2.0 banner.
START_TIMEOUT_S = 10.0
#: Seconds between SIGTERM and SIGKILL when stopping lab processes.
STOP_GRACE_S = 5.0
#: How often a host start is retried when the free port found was taken before sshd bound it.
BIND_ATTEMPTS = 5
#: Lines of the sshd log quoted in error messages.
LOG_TAIL_LINES = 20
#: File name of the lab client key inside the workdir.
CLIENT_KEY_NAME = "id_ed25519"
#: Name of the state file the CLI writes into the workdir.
LAB_JSON = "lab.json"

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PRIVSEP_DIR = Path("/run/sshd")  # Debian/Ubuntu sshd refuses to start as root without it
_PR_SET_PDEATHSIG = 1
_BIND_RACE_MARKERS = ("Address already in use", "Cannot bind any address")


class LabError(RuntimeError):
    """The lab could not start, stop or find a host; the message says which host and why."""


class _PortTaken(LabError):
    """sshd could not bind its port (someone took it between our probe and sshd's bind)."""


# --------------------------------------------------------------------------------------------------
# Locating the OpenSSH binaries
# --------------------------------------------------------------------------------------------------


def _find_binary(name: str, fallback: str) -> Path | None:
    """Return the absolute path of executable ``name`` (``PATH`` first, then ``fallback``), or None."""
    candidates = [c for c in (shutil.which(name), fallback) if c]
    for candidate in candidates:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return path.absolute()  # sshd must be run by absolute path (it re-executes itself)
    return None


def find_sshd() -> Path | None:
    """Return the path of OpenSSH ``sshd`` (``shutil.which("sshd")``, then ``/usr/sbin/sshd``), or None."""
    return _find_binary("sshd", "/usr/sbin/sshd")


def find_ssh_keygen() -> Path | None:
    """Return the path of ``ssh-keygen`` (``PATH``, then ``/usr/bin/ssh-keygen``), or None."""
    return _find_binary("ssh-keygen", "/usr/bin/ssh-keygen")


def lab_unavailable_reason() -> str | None:
    """Return why the SSH lab cannot run on this machine (a sentence), or None when it can."""
    if not sys.platform.startswith("linux"):
        return "the SSH lab needs Linux (/proc and the 127.0.0.0/8 loopback network)"
    if find_sshd() is None:
        return "OpenSSH sshd not found (PATH, /usr/sbin/sshd); install openssh-server"
    if find_ssh_keygen() is None:
        return "ssh-keygen not found (PATH, /usr/bin/ssh-keygen); install openssh-client"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("sshd")
        except KeyError:
            return "running as root but the sshd privilege separation user 'sshd' does not exist"
    return None


# --------------------------------------------------------------------------------------------------
# Addresses and ports
# --------------------------------------------------------------------------------------------------


def check_loopback(address: str) -> str:
    """Return ``address`` normalised; raise ValueError unless it is a host address in 127.0.0.0/8."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise ValueError(f"not an IP address: {address!r}") from exc
    if (
        not isinstance(ip, ipaddress.IPv4Address)
        or ip not in _LOOPBACK
        or ip in (_LOOPBACK.network_address, _LOOPBACK.broadcast_address)
    ):
        raise ValueError(f"lab addresses must be host addresses in 127.0.0.0/8, got {address!r}")
    return str(ip)


def free_port(address: str) -> int:
    """Return a TCP port that is free on ``address`` right now (bind port 0, read it, close).

    Racy by nature: another process may take the port before it is used; callers retry.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((check_loopback(address), 0))
        return int(sock.getsockname()[1])


def read_banner(address: str, port: int, timeout_s: float = 1.0) -> str:
    """Connect to ``address:port`` and return the server's first line (e.g. ``SSH-2.0-OpenSSH_9.2``).

    Sends a client banner before closing so sshd sees a polite, if brief, client.
    Raises OSError (e.g. ConnectionRefusedError, TimeoutError) when nothing answers in ``timeout_s``.
    """
    with socket.create_connection((address, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        data = b""
        while b"\n" not in data and len(data) < 1024:
            chunk = sock.recv(1024)
            if not chunk:
                break
            data += chunk
        with contextlib.suppress(OSError):
            sock.sendall(b"SSH-2.0-xpushare_lab_probe\r\n")
    return data.split(b"\n", 1)[0].decode("ascii", "replace").strip()


# --------------------------------------------------------------------------------------------------
# Processes (by pid + start time, via /proc)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ProcRef:
    """A process identified by pid and start time (clock ticks since boot), immune to pid reuse."""

    pid: int
    starttime: int


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """Return (state, ppid, starttime) of ``pid`` from /proc, or None if there is no such process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the command name may contain spaces and ')'
    try:
        return fields[0].decode(), int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _proc_ref(pid: int) -> _ProcRef | None:
    """Return a reference to the live process ``pid``, or None."""
    stat = _proc_stat(pid)
    return None if stat is None else _ProcRef(pid, stat[2])


def _is_running(ref: _ProcRef) -> bool:
    """True if the process still exists, is the same process (start time) and is not a zombie."""
    stat = _proc_stat(ref.pid)
    return stat is not None and stat[2] == ref.starttime and stat[0] not in ("Z", "X", "x")


def _descendants(pid: int) -> list[_ProcRef]:
    """Return all live descendants (children, grandchildren, ...) of ``pid``, parents first."""
    children: dict[int, list[_ProcRef]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat is None or stat[0] in ("Z", "X", "x"):
            continue
        children.setdefault(stat[1], []).append(_ProcRef(int(entry.name), stat[2]))
    found: list[_ProcRef] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child.pid)
    return found


def _signal(ref: _ProcRef, sig: int) -> bool:
    """Send ``sig`` to ``ref`` if it is still that process; return whether a signal was sent."""
    if not _is_running(ref):
        return False
    try:
        os.kill(ref.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(
    refs: Sequence[_ProcRef], timeout_s: float, popens: Iterable[subprocess.Popen[bytes]] = ()
) -> list[_ProcRef]:
    """Wait up to ``timeout_s`` seconds for ``refs`` to end (reaping ``popens``); return survivors."""
    popens = list(popens)
    deadline = time.monotonic() + timeout_s
    while True:
        for popen in popens:
            popen.poll()
        alive = [ref for ref in refs if _is_running(ref)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def _terminate(
    refs: Sequence[_ProcRef],
    popens: Iterable[subprocess.Popen[bytes]] = (),
    grace_s: float = STOP_GRACE_S,
) -> list[int]:
    """SIGTERM ``refs``, wait ``grace_s`` seconds, SIGKILL survivors; return the pids signalled.

    Raises LabError if a process survives SIGKILL for 5 s (e.g. stuck in uninterruptible sleep).
    """
    popens = list(popens)
    signalled = [ref.pid for ref in refs if _signal(ref, signal.SIGTERM)]
    survivors = _wait_gone(refs, grace_s, popens)
    for ref in survivors:
        _signal(ref, signal.SIGKILL)
    survivors = _wait_gone(survivors, 5.0, popens)
    for popen in popens:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)
    if survivors:
        raise LabError(f"lab processes survived SIGKILL: {[ref.pid for ref in survivors]}")
    return signalled


def _die_with_parent_hook() -> Callable[[], None] | None:
    """Return a Popen ``preexec_fn`` making the child get SIGTERM when we die (Linux prctl), or None.

    Only used from the main thread: PR_SET_PDEATHSIG fires when the *thread* that forked exits.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


# --------------------------------------------------------------------------------------------------
# Keys and sshd configuration
# --------------------------------------------------------------------------------------------------


def _keygen(keygen: Path, path: Path, comment: str) -> str:
    """Create an ed25519 key pair at ``path`` (+ ``.pub``, replacing any); return the public key.

    The returned public key is ``"ssh-ed25519 AAAA..."`` (type and base64, no comment).
    Raises LabError if ssh-keygen fails.
    """
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    result = subprocess.run(
        [str(keygen), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LabError(f"ssh-keygen failed for {path} (status {result.returncode}): {result.stderr.strip()}")
    path.chmod(0o600)
    return _read_pub(path)


def _read_pub(private_key: Path) -> str:
    """Return ``"<type> <base64>"`` from the ``.pub`` file next to ``private_key``."""
    parts = private_key.with_name(private_key.name + ".pub").read_text().split()
    if len(parts) < 2:
        raise LabError(f"malformed public key file {private_key}.pub")
    return f"{parts[0]} {parts[1]}"


def _cfg_value(value: object) -> str:
    """Quote a value for ssh/sshd config files when it contains whitespace."""
    text = str(value)
    return f'"{text}"' if any(ch.isspace() for ch in text) else text


def _account_locked(user: str) -> bool:
    """True if ``user``'s /etc/shadow password starts with '!' (sshd then refuses it without PAM)."""
    try:
        lines = Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(":")
        if fields[0] == user and len(fields) > 1:
            return fields[1].startswith("!") or fields[1] == "*LK*"
    return False


def _decide_use_pam(user: str) -> bool:
    """Whether the lab's sshd uses PAM: no, except for root with a locked password (needs PAM).

    Without PAM, sshd refuses accounts whose password is locked ('!' in /etc/shadow) even for key
    logins. Override with XPUSHARE_LAB_USEPAM=yes|no.
    """
    forced = os.environ.get("XPUSHARE_LAB_USEPAM", "").strip().lower()
    if forced in ("yes", "no"):
        return forced == "yes"
    if os.geteuid() != 0 or not Path("/etc/pam.d/sshd").exists():
        return False
    return _account_locked(user)


def _log_tail(log: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of ``log`` written after byte ``offset`` (or a placeholder)."""
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


# --------------------------------------------------------------------------------------------------
# The lab
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabHost:
    """One lab host: an sshd listening on ``address:port``.

    ``identity`` is the lab's client private key; ``host_key_pub`` is ``"ssh-ed25519 AAAA..."``;
    ``pid`` is the listener's pid (stale after stop_host/rotate_host_key: ask the lab again).
    """

    name: str
    address: str
    port: int
    user: str
    identity: Path
    host_key_pub: str
    pid: int
    config: Path = dataclasses.field(default=Path(), repr=False, compare=False)
    log: Path = dataclasses.field(default=Path(), repr=False, compare=False)

    def known_hosts_line(self) -> str:
        """Return the known_hosts line ``[address]:port ssh-ed25519 AAAA...`` for this host."""
        return f"[{self.address}]:{self.port} {self.host_key_pub}"


_LIVE_LABS: set[SshLab] = set()
_LIVE_LOCK = threading.Lock()


def _stop_live_labs() -> None:
    """atexit safety net: stop every non-detached lab that was not stopped explicitly."""
    with _LIVE_LOCK:
        labs = list(_LIVE_LABS)
    for lab in labs:
        with contextlib.suppress(Exception):
            lab.stop()


atexit.register(_stop_live_labs)


class SshLab:
    """A set of real sshd daemons on loopback addresses, all accepting the lab's client key.

    Use as a context manager (or call :meth:`stop`). Unless ``detached``, daemons are also stopped at
    interpreter exit (atexit) and, when started from the main thread, get SIGTERM if this process
    dies (PR_SET_PDEATHSIG). ``detached=True`` (the CLI) leaves them running for a later ``down``.

    Raises LabError if sshd/ssh-keygen are missing or the platform is not Linux.
    """

    def __init__(self, workdir: Path, *, detached: bool = False) -> None:
        reason = lab_unavailable_reason()
        if reason is not None:
            raise LabError(reason)
        sshd, keygen = find_sshd(), find_ssh_keygen()
        assert sshd is not None and keygen is not None  # checked by lab_unavailable_reason()
        self._sshd = sshd
        self._keygen = keygen
        self.workdir = Path(workdir).absolute()
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.detached = detached
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.identity = self.workdir / CLIENT_KEY_NAME
        self.authorized_keys = self.workdir / "authorized_keys"
        self.known_hosts_path = self.workdir / "known_hosts"
        self.ssh_config_path = self.workdir / "ssh_config"
        self._use_pam = _decide_use_pam(self.user)
        self._penalties_option = True  # "PerSourcePenalties no" (OpenSSH >= 9.8), dropped if unknown
        self._config_checked = False
        self._hosts: dict[str, LabHost] = {}
        self._refs: dict[str, _ProcRef] = {}
        self._popens: dict[str, subprocess.Popen[bytes]] = {}
        self._reserved: list[socket.socket] = []
        # Per-host launch hooks (add_host's ``wrap`` and ``session_env``), kept for restarts.
        self._wraps: dict[str, Callable[[list[str]], list[str]]] = {}
        self._session_env: dict[str, dict[str, str]] = {}
        if os.geteuid() == 0 and not _PRIVSEP_DIR.is_dir():
            try:
                _PRIVSEP_DIR.mkdir(mode=0o755, parents=True)
            except OSError as exc:
                raise LabError(f"sshd needs its privilege separation directory {_PRIVSEP_DIR}: {exc}") from exc
        client_pub = _keygen(self._keygen, self.identity, "xpushare-lab-client")
        self.authorized_keys.write_text(client_pub + " xpushare-lab-client\n")
        self.authorized_keys.chmod(0o600)
        if not detached:
            with _LIVE_LOCK:
                _LIVE_LABS.add(self)

    # -- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> SshLab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- hosts -------------------------------------------------------------------------------------

    @property
    def hosts(self) -> dict[str, LabHost]:
        """Lab hosts by name, in the order they were added (a copy; includes stopped hosts)."""
        return dict(self._hosts)

    def host(self, name: str) -> LabHost:
        """Return the current record of host ``name``; raise LabError if there is none."""
        try:
            return self._hosts[name]
        except KeyError:
            raise LabError(f"no lab host named {name!r} (have: {', '.join(self._hosts) or 'none'})") from None

    def is_running(self, name: str) -> bool:
        """True if the sshd listener of host ``name`` is running."""
        ref = self._refs.get(self.host(name).name)
        return ref is not None and _is_running(ref)

    def add_host(self, name: str, address: str, *, wrap: Callable[[list[str]], list[str]] | None = None,
                 session_env: dict[str, str] | None = None) -> LabHost:
        """Start an sshd for a new host ``name`` on ``address`` (127.0.0.0/8) and an ephemeral port.

        ``wrap``: turns the sshd argv into the argv actually started (e.g. ``NodeNamespace.enter``, so the
        host's sessions run in a mount namespace of their own); it must exec sshd in the same process.
        ``session_env``: variables every session of the host gets (sshd ``SetEnv``, after ``HOME``), e.g.
        the ``PATH`` and driver variables of a GPU host. Both stay in force across restarts.

        Returns once the daemon answers with an SSH-2.0 banner. Raises ValueError for a bad name or
        address, LabError if the name is taken or sshd does not come up within START_TIMEOUT_S
        seconds (the message quotes the sshd log).
        """
        if not _NAME_RE.match(name):
            raise ValueError(f"lab host names are letters, digits, '.', '_' and '-': {name!r}")
        if name in self._hosts:
            raise LabError(f"lab host {name!r} already exists")
        address = check_loopback(address)
        for key, value in (session_env or {}).items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or any(c in value for c in "\n\"\\"):
                raise ValueError(f"bad session environment entry {key}={value!r}")
        if wrap is not None:
            self._wraps[name] = wrap
        if session_env:
            self._session_env[name] = dict(session_env)
        hostdir = self.workdir / "hosts" / name
        hostdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (hostdir / "home").mkdir(mode=0o700, exist_ok=True)  # the HOME of its login shells (see _config_text)
        host_key = hostdir / "ssh_host_ed25519_key"
        pub = _keygen(self._keygen, host_key, f"xpushare-lab-host-{name}")
        host = LabHost(
            name=name,
            address=address,
            port=0,
            user=self.user,
            identity=self.identity,
            host_key_pub=pub,
            pid=0,
            config=hostdir / "sshd_config",
            log=hostdir / "sshd.log",
        )
        return self._start(host, fixed_port=False)

    def start_host(self, name: str) -> LabHost:
        """Start the stopped host ``name`` again on its address and port (same host key).

        Raises LabError if it is running already or its port has been taken meanwhile.
        """
        if self.is_running(name):
            raise LabError(f"lab host {name!r} is already running (pid {self.host(name).pid})")
        return self._start(self.host(name), fixed_port=True)

    def stop_host(self, name: str) -> None:
        """Stop host ``name``: its listener and the sessions it spawned (SIGTERM, SIGKILL after 5 s).

        The host stays in :attr:`hosts` (same address and port, now refusing connections) and can be
        started again with :meth:`start_host`. Stopping a stopped host does nothing.
        """
        self.host(name)
        ref = self._refs.pop(name, None)
        popen = self._popens.pop(name, None)
        if ref is None:
            return
        _terminate([*_descendants(ref.pid), ref], [popen] if popen else [])

    def rotate_host_key(self, name: str) -> LabHost:
        """Give host ``name`` a new host key and restart its sshd on the same address and port.

        Clients holding the old known_hosts line must now fail host key verification. Returns the
        updated host record. Raises LabError if the restart fails.
        """
        host = self.host(name)
        self.stop_host(name)
        key = self.workdir / "hosts" / name / "ssh_host_ed25519_key"
        pub = _keygen(self._keygen, key, f"xpushare-lab-host-{name}")
        return self._start(dataclasses.replace(host, host_key_pub=pub), fixed_port=True)

    def session_pids(self, name: str) -> list[int]:
        """Return the pids of all processes descended from host ``name``'s listener (its sessions)."""
        ref = self._refs.get(self.host(name).name)
        return [] if ref is None or not _is_running(ref) else [d.pid for d in _descendants(ref.pid)]

    def kill_sessions(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        """Kill every session of host ``name`` (descendants of its listener), leaving the listener up.

        Simulates a connection dying mid-command. ``sig`` defaults to SIGKILL. Waits up to
        STOP_GRACE_S seconds for them to end and returns the pids signalled. Raises LabError if the
        host is not running.
        """
        ref = self._refs.get(self.host(name).name)
        if ref is None or not _is_running(ref):
            raise LabError(f"lab host {name!r} is not running")
        sessions = _descendants(ref.pid)
        signalled = [d.pid for d in sessions if _signal(d, sig)]
        popen = self._popens.get(name)
        _wait_gone(sessions, STOP_GRACE_S, [popen] if popen else [])
        return signalled

    def closed_port(self, address: str) -> int:
        """Return a port on ``address`` (127.0.0.0/8) where nothing listens: connections are refused.

        The port stays reserved (bound, never listening) until :meth:`stop`, so nobody else takes it.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((check_loopback(address), 0))
        except OSError:
            sock.close()
            raise
        self._reserved.append(sock)
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        """Stop every host (listeners and their sessions) and release reserved ports. Idempotent."""
        errors: list[str] = []
        for name in list(self._refs):
            try:
                self.stop_host(name)
            except LabError as exc:
                errors.append(f"{name}: {exc}")
        for sock in self._reserved:
            sock.close()
        self._reserved.clear()
        with _LIVE_LOCK:
            _LIVE_LABS.discard(self)
        if errors:
            raise LabError("could not stop all lab hosts: " + "; ".join(errors))

    # -- client files ------------------------------------------------------------------------------

    def write_known_hosts(self, path: Path | None = None) -> Path:
        """Write one known_hosts line per host to ``path`` (default ``workdir/known_hosts``)."""
        path = Path(path) if path is not None else self.known_hosts_path
        path.write_text("".join(h.known_hosts_line() + "\n" for h in self._hosts.values()))
        return path

    def write_ssh_config(self, path: Path | None = None, known_hosts: Path | None = None) -> Path:
        """Write an OpenSSH client config with a ``Host <name>`` block per host; return its path.

        ``path`` defaults to ``workdir/ssh_config``; ``known_hosts`` (the UserKnownHostsFile it names)
        defaults to ``workdir/known_hosts``. Host keys are checked strictly; only the lab key is used.
        """
        path = Path(path) if path is not None else self.ssh_config_path
        known = Path(known_hosts).absolute() if known_hosts is not None else self.known_hosts_path
        blocks = ["# Generated by tests/lab/sshd.py: SSH client config for the lab hosts.\n"]
        for h in self._hosts.values():
            blocks.append(
                f"Host {h.name}\n"
                f"    HostName {h.address}\n"
                f"    Port {h.port}\n"
                f"    User {h.user}\n"
                f"    IdentityFile {_cfg_value(h.identity)}\n"
                f"    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {_cfg_value(known)}\n"
                f"    GlobalKnownHostsFile /dev/null\n"
                f"    StrictHostKeyChecking yes\n"
                f"    BatchMode yes\n"
                f"    LogLevel ERROR\n"
            )
        path.write_text("\n".join(blocks))
        return path

    def ssh_argv(self, name: str, *command: str) -> list[str]:
        """Return ``["ssh", "-F", <ssh_config>, name, *command]`` (write_ssh_config() first)."""
        self.host(name)
        return ["ssh", "-F", str(self.ssh_config_path), name, *command]

    def to_json(self) -> dict[str, object]:
        """Return the lab state as JSON-ready data (what the CLI stores in ``lab.json``)."""
        hosts = []
        for h in self._hosts.values():
            ref = self._refs.get(h.name)
            hosts.append(
                {
                    "name": h.name,
                    "address": h.address,
                    "port": h.port,
                    "user": h.user,
                    "identity": str(h.identity),
                    "pid": h.pid,
                    "starttime": ref.starttime if ref else None,
                    "config": str(h.config),
                    "log": str(h.log),
                }
            )
        return {
            "workdir": str(self.workdir),
            "ssh_config": str(self.ssh_config_path),
            "known_hosts": str(self.known_hosts_path),
            "hosts": hosts,
        }

    # -- internals ---------------------------------------------------------------------------------

    def _config_text(self, host: LabHost, port: int) -> str:
        hostdir = host.config.parent
        loglevel = os.environ.get("XPUSHARE_LAB_SSHD_LOGLEVEL", "ERROR")
        lines = [
            f"# Generated by tests/lab/sshd.py for lab host {host.name}.",
            f"ListenAddress {host.address}:{port}",
            "AddressFamily inet",
            f"HostKey {_cfg_value(hostdir / 'ssh_host_ed25519_key')}",
            f"PidFile {_cfg_value(hostdir / 'sshd.pid')}",
            f"AuthorizedKeysFile {_cfg_value(self.authorized_keys)}",
            "PubkeyAuthentication yes",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "PermitRootLogin prohibit-password",
            f"UsePAM {'yes' if self._use_pam else 'no'}",
            "StrictModes no",
            "MaxSessions 64",
            "MaxStartups 200:30:300",
            "LoginGraceTime 30",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
            # Shells started by sshd read ~/.bashrc (Debian's bash does so for every `ssh host cmd`). The
            # developer's rc files are not the lab host's: where they run `pyenv init`, each remote command
            # took 0.3 s more and concurrent sessions queued on pyenv's rehash lock (60 s when a killed session
            # left it behind). A HOME of the lab host's own (empty) makes every command a clean exec, as on a
            # server; the lab's programs are named by absolute path.
            f"SetEnv HOME={_cfg_value(hostdir / 'home')} PYENV_REHASH_TIMEOUT=1"
            + "".join(f" {k}={_cfg_value(v)}" for k, v in self._session_env.get(host.name, {}).items()),
            f"LogLevel {loglevel}",
        ]
        if self._penalties_option:
            lines.append("PerSourcePenalties no")
        return "\n".join(lines) + "\n"

    def _write_config(self, host: LabHost, port: int) -> None:
        """Write the host's sshd_config; the first time, validate it with ``sshd -t``."""
        host.config.write_text(self._config_text(host, port))
        if self._config_checked:
            return
        result = subprocess.run(
            [str(self._sshd), "-t", "-f", str(host.config)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        output = (result.stdout + result.stderr).strip()
        if result.returncode != 0 and self._penalties_option and "PerSourcePenalties" in output:
            self._penalties_option = False  # OpenSSH older than 9.8
            self._write_config(host, port)
            return
        if result.returncode != 0:
            raise LabError(f"sshd rejects the generated config {host.config}: {output}")
        self._config_checked = True

    def _start(self, host: LabHost, *, fixed_port: bool) -> LabHost:
        """Start ``host``'s sshd (on ``host.port`` if ``fixed_port``, else a free port); record it."""
        last: _PortTaken | None = None
        for _attempt in range(1 if fixed_port else BIND_ATTEMPTS):
            port = host.port if fixed_port else free_port(host.address)
            self._write_config(host, port)
            offset = host.log.stat().st_size if host.log.exists() else 0
            popen = self._spawn(host)
            try:
                self._wait_ready(host, port, popen, offset)
            except _PortTaken as exc:
                last = exc
                continue
            except BaseException:
                _terminate([r for r in [_proc_ref(popen.pid)] if r], [popen], grace_s=1.0)
                raise
            ref = _proc_ref(popen.pid)
            assert ref is not None  # _wait_ready saw it running
            started = dataclasses.replace(host, port=port, pid=popen.pid)
            self._hosts[host.name] = started
            self._refs[host.name] = ref
            if not self.detached:
                self._popens[host.name] = popen
            return started
        raise LabError(
            f"sshd for lab host {host.name} could not bind a port on {host.address}"
            f" ({'port ' + str(host.port) if fixed_port else str(BIND_ATTEMPTS) + ' attempts'}): {last}"
        )

    def _spawn(self, host: LabHost) -> subprocess.Popen[bytes]:
        """Launch ``sshd -D -e -f <config> -E <log>`` for ``host`` in its own session."""
        argv = [str(self._sshd), "-D", "-e", "-f", str(host.config), "-E", str(host.log)]
        wrap = self._wraps.get(host.name)
        if wrap is not None:
            argv = wrap(argv)
        with host.log.open("ab") as log:  # catches anything sshd prints before it opens -E
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
                start_new_session=True,
                preexec_fn=None if self.detached else _die_with_parent_hook(),
            )

    def _wait_ready(self, host: LabHost, port: int, popen: subprocess.Popen[bytes], offset: int) -> None:
        """Wait until sshd answers with an SSH-2.0 banner; raise _PortTaken or LabError otherwise."""
        where = f"lab host {host.name} ({host.address}:{port})"
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no connection attempted"
        while True:
            status = popen.poll()
            if status is not None:
                tail = _log_tail(host.log, offset)
                if any(marker in tail for marker in _BIND_RACE_MARKERS):
                    raise _PortTaken(f"{where}: {tail}")
                raise LabError(
                    f"sshd for {where} exited with status {status} before accepting connections; {host.log}:\n{tail}"
                )
            try:
                banner = read_banner(host.address, port, timeout_s=1.0)
            except OSError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if banner.startswith("SSH-2.0-") and popen.poll() is None:
                    return
                last = f"unexpected banner {banner!r}"
            if time.monotonic() >= deadline:
                raise LabError(
                    f"sshd for {where} did not answer with an SSH-2.0 banner within {START_TIMEOUT_S:.0f} s"
                    f" (last: {last}); {host.log}:\n{_log_tail(host.log, offset)}"
                )
            time.sleep(0.02)


# --------------------------------------------------------------------------------------------------
# Contributor CLI: up / down
# --------------------------------------------------------------------------------------------------


def lab_up(workdir: Path, hosts: int, base: str, prefix: str = "lab-host",
           session_env: Callable[[str], dict[str, str] | None] | None = None) -> SshLab:
    """Start ``hosts`` detached lab hosts on consecutive addresses from ``base``; write client files.

    Hosts are named ``<prefix>01``...; ``session_env(name)`` gives a host's session variables
    (:meth:`SshLab.add_host`). Writes ``ssh_config``, ``known_hosts``, ``hosts.txt`` (``address
    port`` per line) and ``lab.json`` into ``workdir``. Raises ValueError for bad arguments, LabError
    if a lab recorded in ``workdir`` is still up or a host fails (hosts already started are stopped).
    """
    if not 1 <= hosts <= 4096:
        raise ValueError(f"--hosts must be between 1 and 4096, got {hosts}")
    first = ipaddress.IPv4Address(check_loopback(base))
    addresses = [check_loopback(str(first + i)) for i in range(hosts)]
    workdir = Path(workdir).absolute()
    if (workdir / LAB_JSON).exists():
        running = [ref.pid for ref in _recorded_listeners(workdir)]
        if running:
            raise LabError(f"a lab is already up in {workdir} (pids {running}); run 'down' first")
    width = max(2, len(str(hosts)))
    lab = SshLab(workdir, detached=True)
    try:
        for i, address in enumerate(addresses, start=1):
            name = f"{prefix}{i:0{width}d}"
            lab.add_host(name, address, session_env=session_env(name) if session_env else None)
    except BaseException:
        lab.stop()
        raise
    lab.write_known_hosts()
    lab.write_ssh_config()
    (workdir / "hosts.txt").write_text("".join(f"{h.address} {h.port}\n" for h in lab.hosts.values()))
    (workdir / LAB_JSON).write_text(json.dumps(lab.to_json(), indent=2) + "\n")
    return lab


def _recorded_listeners(workdir: Path) -> list[_ProcRef]:
    """Return the listeners recorded in ``workdir/lab.json`` that still run as ours."""
    data = json.loads((workdir / LAB_JSON).read_text())
    found = []
    for h in data.get("hosts", []):
        if h.get("starttime") is None:
            continue
        ref = _ProcRef(int(h["pid"]), int(h["starttime"]))
        if not _is_running(ref):
            continue
        try:  # belt and braces: it must still be the sshd started with that config
            cmdline = Path(f"/proc/{ref.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(h["config"]).encode() in cmdline:  # sshd rewrites its argv as one title string
            found.append(ref)
    return found


def lab_down(workdir: Path) -> list[int]:
    """Stop the lab recorded in ``workdir/lab.json`` (listeners and their sessions); return pids.

    Only processes recorded there (pid + start time + config path match) and their descendants are
    signalled. Removes ``lab.json`` afterwards. Without ``lab.json`` there is nothing to stop and it
    returns ``[]`` (so ``down`` is idempotent). Raises LabError if a process survives SIGKILL.
    """
    workdir = Path(workdir).absolute()
    if not (workdir / LAB_JSON).exists():
        return []
    refs: list[_ProcRef] = []
    for ref in _recorded_listeners(workdir):
        refs.extend([*_descendants(ref.pid), ref])
    signalled = _terminate(refs)
    (workdir / LAB_JSON).unlink()
    return signalled


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tests.lab.sshd {up,down}``; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.lab.sshd", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N sshd hosts and leave them running")
    up.add_argument("--hosts", type=int, default=32, help="number of hosts (default 32)")
    up.add_argument("--base", default="127.0.1.1", help="first address, in 127.0.0.0/8 (default 127.0.1.1)")
    up.add_argument("--workdir", type=Path, default=Path(".lab/ssh"), help="lab directory (default .lab/ssh)")
    up.add_argument("--prefix", default="lab-host", help="host name prefix (default lab-host)")
    down = sub.add_parser("down", help="stop the hosts recorded in WORKDIR/lab.json")
    down.add_argument("--workdir", type=Path, default=Path(".lab/ssh"), help="lab directory (default .lab/ssh)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            lab = lab_up(args.workdir, args.hosts, args.base, args.prefix)
            names = list(lab.hosts)
            print(f"started {len(names)} sshd hosts ({names[0]} .. {names[-1]}) in {lab.workdir}")
            print(f"  ssh -F {lab.ssh_config_path} {names[0]} hostname")
            print(f"  stop with: python -m tests.lab.sshd down --workdir {args.workdir}")
        else:
            if not (args.workdir / LAB_JSON).exists():
                print(f"no {LAB_JSON} in {args.workdir}: nothing to stop")
                return 0
            pids = lab_down(args.workdir)
            print(f"stopped {len(pids)} lab processes")
    except (LabError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
