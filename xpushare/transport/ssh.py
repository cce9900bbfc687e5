"""A :class:`~xpushare.transport.base.Host` over SSH: one reused Fabric connection, typed failures, host-key policies.

Host-key policy (inventory ``host_key_policy``): ``strict`` accepts only keys already in known_hosts;
``accept-new`` (default) remembers unknown hosts and refuses changed keys, like OpenSSH's
``StrictHostKeyChecking=accept-new``; ``ignore`` accepts anything and warns once. Fabric's own default
(paramiko ``AutoAddPolicy``, no known_hosts) is replaced on every connection.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import paramiko
from fabric import Config, Connection
from fabric.runners import Remote
from invoke.exceptions import ThreadException

from xpushare.inventory.schema import SshOptions
from xpushare.model import atomic_file
from xpushare.model.errors import (
    CommandTimeout,
    ConnectionLost,
    HostKeyMismatch,
    HostUnreachable,
    RemoteNotFound,
    TransportError,
)
from xpushare.transport import exec_copy
from xpushare.transport.base import (
    CommandResult,
    Copied,
    Host,
    TextSink,
    finished,
    logged_run,
    read_in_memory_stdin,
    runner_options,
)
from xpushare.transport.deadline import DeadlineRunner
from xpushare.transport.ssh_files import load_known_hosts, usable_identity

# paramiko logs a failed handshake as a traceback at ERROR from its transport thread; with no handler
# configured, Python's last-resort handler would print ~60 lines per attempt on the terminal. The error
# itself reaches the caller as HostUnreachable; paramiko's log shows only when logging is configured
# (``invoke --debug``).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class _BulkRemote(DeadlineRunner, Remote):
    """Fabric's remote runner reading 64 KiB at a time (the default 1000-byte reads cost ~1 s per MB), its timeout a
    deadline (:class:`~xpushare.transport.deadline.DeadlineRunner`): at the timeout the channel is closed, which ends
    the reads at once even when a child of the command still holds its output open on the host."""

    read_chunk_size = 65536
    read_our_stdin = read_in_memory_stdin

    def command_exit(self) -> int | None:
        # sshd sends the exit status when the command ends, before the output a background child holds is closed
        channel = self.channel
        return channel.recv_exit_status() if channel is not None and channel.exit_status_ready() else None


class _InterruptibleRemote(_BulkRemote):
    """A remote runner that ends the session on Ctrl-C/SIGTERM/SIGHUP: without a terminal there is no way to signal
    the command, and Fabric's answer (re-raise, then wait for the output threads) waits for the command's end. The
    closed session ends a command run under :data:`ENDS_WITH_SESSION`."""

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        self.channel.close()
        raise interrupt



_known_hosts_lock = threading.Lock()
_ignore_warned = False
_parsed_lock = threading.Lock()
_parsed: dict[str, tuple[tuple[int, int], paramiko.HostKeys]] = {}


def known_host_keys(path: Path) -> paramiko.HostKeys:
    """The parsed known_hosts file ``path``, parsed once while its size and modification time stay the same.

    Each connection used to parse the whole file (paramiko's ``load_host_keys``): with one line per host of a
    fan-out that is N parses of N lines, 100 ms a connection at 1,000 hosts. Raises ``OSError`` or
    ``paramiko.SSHException`` for a file that cannot be read."""
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _parsed_lock:
        hit = _parsed.get(str(path))
        if hit is not None and hit[0] == stamp:
            return hit[1]
    keys = paramiko.HostKeys()
    load_known_hosts(keys, path)  # line by line: a malformed line of another host is skipped, as OpenSSH does
    with _parsed_lock:
        _parsed[str(path)] = (stamp, keys)
    return keys


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Remember an unknown host's key in the known_hosts file (changed keys never reach a policy)."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _known_hosts_lock:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self.known_hosts.open("a", encoding="ascii") as fh:
                fh.write(line)


class _StrictPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise paramiko.SSHException(f"host key for {hostname} is not in known_hosts (host_key_policy: strict)")


class _IgnorePolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        global _ignore_warned
        if not _ignore_warned:
            _ignore_warned = True
            print(
                "warning: host_key_policy 'ignore': host keys are not checked (man-in-the-middle possible)",
                file=sys.stderr,
            )


#: A command (its argv after the script) that ends with its SSH session: it runs in a session of its own
#: (``setsid``, where the host has it), and a watcher reads the session's input, which sshd closes when the session
#: goes (Ctrl-C, a deadline) or when this script ends, and then ends the command's whole process group (SIGTERM,
#: SIGKILL 2 s later); the command reads /dev/null. When the command ends while a process it left in the background
#: (``sleep 170 &``) still holds its output (``pgrep`` and ``/proc`` tell), the script stays until that process
#: lets go of it or the session goes, so that the watcher can end it; a process of the group whose output goes
#: elsewhere (a daemon: ``nohup ... >/dev/null &``) is left running. Exit status and output are the command's.
ENDS_WITH_SESSION = (
    'exec 3<&0 0</dev/null; s=; if command -v setsid >/dev/null 2>&1; then s=1; setsid "$@" 3<&- & '
    'else "$@" 3<&- & fi; p=$!; '
    '{ cat <&3 >/dev/null 2>&1; kill -TERM -"$p" "$p"; sleep 2; kill -KILL -"$p"; } >/dev/null 2>&1 & w=$!; '
    'exec 3<&-; wait "$p"; rc=$?; '
    'held() { for q in $(pgrep -g "$p" 2>/dev/null); do for f in /proc/"$q"/fd/*; do l=$(readlink "$f" 2>/dev/null); '
    'if [ -n "$l" ] && { [ "$l" = "$o" ] || [ "$l" = "$e" ]; }; then return 0; fi; done; done; return 1; }; '
    'if [ -n "$s" ]; then o=$(readlink /proc/$$/fd/1); e=$(readlink /proc/$$/fd/2); '
    'while kill -0 "$w" 2>/dev/null && kill -0 -"$p" 2>/dev/null && held; do sleep 0.5; done; fi; '
    'kill "$w" 2>/dev/null; exit "$rc"'
)

#: What a lost connection raises while a command runs (also from invoke's I/O threads: :func:`_run_on`).
_LOST: tuple[type[BaseException], ...] = (OSError, EOFError, paramiko.SSHException)

# put's last step on the host ($1 the whole temporary copy, $2 the destination, $3 the source's name): an existing
# directory receives the file under its name (as scp does); a link at the target is refused, never written
# through; prints "replaced <path>" or "created <path>" (Host.put's semantics).
_PLACE = r"""t=$2
if [ -d "$t" ] && [ ! -L "$t" ]; then t=${t%/}/$3; fi
if [ -L "$t" ]; then echo "$t: a symbolic link: refusing to write through it" >&2; exit 1; fi
if [ -d "$t" ]; then echo "$t: a directory: refusing to replace it with a file" >&2; exit 1; fi
w=created; if [ -e "$t" ]; then w=replaced; fi
mv -f -- "$1" "$t" && echo "$w $t"
"""


def _run_on(conn: Connection, line: str, options: Mapping[str, object]) -> object:
    """``conn.run(line, **options)``; a connection lost under one of invoke's I/O threads (its stdin writer meets
    ``OSError: Socket is closed``) is re-raised as that thread's error, which :func:`logged_run` turns into
    :class:`ConnectionLost` like a loss seen by the main thread."""
    try:
        return conn.run(line, **options)
    except ThreadException as exc:
        for wrapped in exc.exceptions:
            if isinstance(wrapped.value, _LOST):
                raise wrapped.value from None
        raise


def why_unreachable(exc: BaseException) -> str:
    """What a failed connection attempt says about the host, as :attr:`HostUnreachable.why` names it: ``dns``,
    ``refused``, ``timeout``, ``no route``, ``ssh`` (something answered, but no SSH server), else ``unreachable``."""
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):  # one error per address tried
        kinds = {why_unreachable(e) for e in exc.errors.values()}
        return kinds.pop() if len(kinds) == 1 else "unreachable"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route"
    if isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED:
        return "refused"
    if isinstance(exc, (EOFError, paramiko.SSHException)):
        return "ssh"
    return "unreachable"


def _is_unreachable(exc: BaseException) -> bool:
    return isinstance(
        exc,
        (
            socket.error,
            socket.timeout,
            EOFError,
            paramiko.ssh_exception.NoValidConnectionsError,
            paramiko.SSHException,
        ),
    )


class SshHost(Host):
    """A host reached over SSH with one reused Fabric connection (opened lazily, re-opened after a drop)."""

    def __init__(
        self,
        name: str,
        target: str,
        ssh: SshOptions,
        *,
        spawn_dir: str = ".xpushare/spawn",
        sleep: Callable[[float], None] = time.sleep,
        interruptible: bool = False,
    ) -> None:
        """``interruptible``: a command without input runs under :data:`ENDS_WITH_SESSION`, so that it ends when its
        session does (Ctrl-C, SIGTERM or SIGHUP here, a timeout, a lost connection); otherwise it keeps running
        on the host without its session, like any command without a terminal under sshd."""
        self._interruptible = interruptible
        self.name = name
        self.target = target
        self.ssh = ssh
        self._spawn_dir = spawn_dir
        self._sleep = sleep
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self.sftp = True
        """False once the host refused an SFTP channel: ``put``/``get`` copy through ``cat`` from then on."""

    @property
    def spawn_dir(self) -> str:
        return self._spawn_dir

    def _new_connection(self) -> Connection:
        opts = self.ssh
        overrides = {"runners": {"remote": _InterruptibleRemote if self._interruptible else _BulkRemote}}
        # lazy: no Invoke/Fabric files (``~/.fabric.yaml``) under the inventory's settings, as for LocalHost; the SSH
        # client config (the inventory's ``ssh_config``, else ``~/.ssh/config``) is still read
        if opts.ssh_config:
            config = Config(runtime_ssh_path=os.path.expanduser(opts.ssh_config), overrides=overrides, lazy=True)
        else:
            config = Config(overrides=overrides, lazy=True)
        config.load_ssh_config()
        connect_kwargs: dict[str, object] = {
            "banner_timeout": opts.connect_timeout,
            "auth_timeout": opts.connect_timeout,
        }
        if opts.identity:
            connect_kwargs["key_filename"] = [usable_identity(self.name, opts.identity)]
        conn = Connection(
            self.target,
            user=opts.user,
            port=opts.port,
            config=config,
            connect_timeout=int(max(1, opts.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        client = conn.client
        policy = opts.host_key_policy
        known = Path(os.path.expanduser(opts.known_hosts))
        if policy != "ignore" and known.exists():
            # only this host's keys, under the name paramiko looks up ("[host]:port" off port 22)
            label = conn.host if int(conn.port) == 22 else f"[{conn.host}]:{conn.port}"
            try:
                found = known_host_keys(known).lookup(label)
            except (OSError, paramiko.SSHException) as exc:
                raise TransportError(self.name, f"cannot read known_hosts {known}: {exc}") from None
            for key_type, host_key in (found or {}).items():
                client.get_host_keys().add(label, key_type, host_key)
        if policy == "strict":
            client.set_missing_host_key_policy(_StrictPolicy())
        elif policy == "ignore":
            client.set_missing_host_key_policy(_IgnorePolicy())
        else:
            client.set_missing_host_key_policy(_AcceptNewPolicy(known))
        return conn

    def connection(self) -> Connection:
        """The open connection, connecting (with retries, backoff and jitter) when needed.

        Raises :class:`HostKeyMismatch` at once (never retried), :class:`HostUnreachable` after the
        configured ``connect_retries``.
        """
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            if self._conn is not None:
                self._conn.close()
            attempts = max(1, self.ssh.connect_retries)
            last: BaseException | None = None
            for attempt in range(attempts):
                conn = self._new_connection()
                try:
                    conn.open()
                except paramiko.BadHostKeyException as exc:
                    conn.close()
                    raise HostKeyMismatch(
                        self.name,
                        f"host key changed for {exc.hostname} (expected {exc.expected_key.get_base64()[:16]}..., "
                        f"got {exc.key.get_base64()[:16]}...); refusing to connect",
                    ) from None
                except paramiko.AuthenticationException as exc:
                    conn.close()
                    raise HostUnreachable(self.name, f"authentication failed: {exc}", "auth") from None
                except Exception as exc:
                    conn.close()
                    if "not in known_hosts" in str(exc):
                        raise HostKeyMismatch(self.name, str(exc)) from None
                    if not _is_unreachable(exc):
                        raise
                    last = exc
                    if attempt + 1 < attempts:
                        self._sleep(min(8.0, 0.5 * 2**attempt) + random.uniform(0, 0.5))
                    continue
                transport = conn.transport
                if transport is not None and self.ssh.keepalive_s:
                    transport.set_keepalive(int(max(1, self.ssh.keepalive_s)))
                self._conn = conn
                return conn
            detail = str(last) or type(last).__name__
            raise HostUnreachable(self.name, f"cannot connect to {self.target} after {attempts} attempt(s): {detail}",
                                  why_unreachable(last) if last is not None else "unreachable")

    def _drop(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
        stdin: str | None = None,
        out_stream: TextSink | None = None,
        err_stream: TextSink | None = None,
    ) -> CommandResult:
        conn = self.connection()
        shown = argv[0] if argv else "?"
        if self._interruptible and stdin is None:
            argv = ["sh", "-c", ENDS_WITH_SESSION, "sh", *argv]
        options = runner_options(timeout, stdin, out_stream, err_stream)
        # On a timeout the channel was closed under a possibly stalled transport: start afresh, as on a lost one.
        res, start = logged_run(self.name, argv, env, timeout, lambda line: _run_on(conn, line, options),
                                lost=_LOST, on_fault=self._drop, shown=shown)
        if res.exited == -1 or not conn.is_connected:
            # The channel closed without an exit status: the session or the connection died, or our timeout closed
            # it (invoke reports that as a plain result when its timer thread has not ended yet: a race under load).
            self._drop()
            if timeout is not None and time.monotonic() - start >= timeout:
                raise CommandTimeout(self.name, f"{shown!r} timed out after {timeout:g} s", stdout=res.stdout,
                                     stderr=res.stderr, duration_s=time.monotonic() - start)
            raise ConnectionLost(self.name, f"connection lost during {shown!r} (no exit status)")
        return finished(self.name, argv, res, start, check=check)

    def _no_sftp(self, conn: Connection, exc: BaseException) -> paramiko.Transport | None:
        """The live transport when ``exc`` was the server refusing SFTP (the channel closed, the connection up):
        copies then go through ``cat`` (:mod:`~xpushare.transport.exec_copy`); None when the connection died."""
        transport = conn.client.get_transport()
        if isinstance(exc, paramiko.SSHException) and transport is not None and transport.is_active():
            self.sftp = False
            return transport
        return None

    def put(self, local: str | os.PathLike[str], remote: str) -> Copied:
        """Copy ``local`` to ``remote`` through a temporary name beside it, renamed (``mv -f``) once the whole file
        arrived: a failed copy never leaves a partial file at ``remote``, and hosts that share a file system (an NFS
        home) can receive the same file at once without one host's copy truncating another's. The semantics of
        :meth:`Host.put`: an existing directory at ``remote`` receives the file under its own name, a link at the
        target is refused, a replaced file is said (``Copied.replaced``)."""
        conn = self.connection()
        parent, name = os.path.split(remote)
        if parent:
            self.run(["mkdir", "-p", parent], timeout=30, check=True)
        tag = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.name)
        part = os.path.join(parent, f".{name}.part-{tag}-{os.getpid()}-{threading.get_ident()}")
        try:
            self._copy_to(conn, local, part, remote)
            res = self.run(["sh", "-c", _PLACE, "sh", part, remote, Path(local).name], timeout=30)
        except BaseException:
            with contextlib.suppress(TransportError):
                self.run(["rm", "-f", part], timeout=30)
            raise
        if not res.ok:
            with contextlib.suppress(TransportError):
                self.run(["rm", "-f", part], timeout=30)
            why = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.exit_code}"
            raise TransportError(self.name, f"put {local} -> {remote}: {why}")
        word, _, path = res.stdout.strip().partition(" ")
        return Copied(path or remote, word == "replaced")

    def _copy_to(self, conn: Connection, local: str | os.PathLike[str], part: str, remote: str) -> None:
        try:
            if self.sftp:
                conn.put(str(local), part)
                return
        except (OSError, paramiko.SSHException) as exc:
            if self._no_sftp(conn, exc) is None:
                raise TransportError(self.name, f"put {local} -> {remote}: {exc}") from None
        try:
            exec_copy.exec_put(conn.client.get_transport(), local, part)
        except (OSError, paramiko.SSHException) as exc:
            raise TransportError(self.name, f"put {local} -> {remote} (no SFTP on the host: copied with cat): "
                                            f"{exc}") from None

    def get(self, remote: str, local: str | os.PathLike[str]) -> Copied:
        """Copy ``remote`` to ``local`` through the one local write path (:mod:`xpushare.model.atomic_file`): a
        temporary file beside it, renamed once the whole file arrived, so a failed copy never truncates or
        replaces a file already at ``local``; a link at ``local`` (or in a folder of a tree the tool owns) is
        refused, never written through."""
        conn = self.connection()
        if not self.sftp:
            return self._get_by_cat(conn, remote, local)
        try:
            with atomic_file.writing(local, binary=True) as w:
                conn.get(remote, w.fh)
            return Copied(str(local), w.replaced)
        except atomic_file.UnsafePath as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc.describe(local)}") from None
        except FileNotFoundError as exc:
            raise RemoteNotFound(self.name, f"get {remote} -> {local}: {exc}") from None
        except (EOFError, paramiko.SSHException) as exc:
            if self._no_sftp(conn, exc) is not None:
                return self._get_by_cat(conn, remote, local)
            self._drop()
            detail = str(exc) or type(exc).__name__
            raise ConnectionLost(self.name, f"connection lost during get {remote}: {detail}") from None
        except OSError as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc}") from None

    def _get_by_cat(self, conn: Connection, remote: str, local: str | os.PathLike[str]) -> Copied:
        try:
            with atomic_file.writing(local, binary=True) as w:
                exec_copy.exec_get_into(conn.client.get_transport(), remote, w.fh)  # type: ignore[arg-type]
            return Copied(str(local), w.replaced)
        except atomic_file.UnsafePath as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc.describe(local)}") from None
        except exec_copy.ExecCopyError as exc:
            if "No such file" in exc.stderr:
                raise RemoteNotFound(self.name, f"get {remote} -> {local}: {exc.stderr.strip()}") from None
            raise TransportError(self.name, f"get {remote} (no SFTP on the host: copied with cat): {exc}") from None
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._drop()
            raise ConnectionLost(self.name, f"connection lost during get {remote} (no SFTP on the host: copied "
                                            f"with cat): {exc or type(exc).__name__}") from None

    def close(self) -> None:
        self._drop()



