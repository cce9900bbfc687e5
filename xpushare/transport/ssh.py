"""A :class:`~xpushare.transport.base.Host` over SSH: one reused Fabric connection, typed failures, host-key policies.

Host-key policy (inventory ``host_key_policy``): ``strict`` accepts only keys already in known_hosts;
``accept-new`` (default) remembers unknown hosts and refuses changed keys, like OpenSSH's
``StrictHostKeyChecking=accept-new``; ``ignore`` accepts anything and warns once. Fabric's own default
(paramiko ``AutoAddPolicy``, no known_hosts) is replaced on every connection.
"""

from __future__ import annotations

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
from xpushare.model.errors import (
    CommandTimeout,
    ConnectionLost,
    HostKeyMismatch,
    HostUnreachable,
    RemoteNotFound,
    TransportError,
)
from xpushare.transport.base import (
    CommandResult,
    Host,
    TextSink,
    finished,
    logged_run,
    read_in_memory_stdin,
    runner_options,
)
from xpushare.transport.ssh_files import load_known_hosts, usable_identity

# paramiko logs a failed handshake as a traceback at ERROR from its transport thread; with no handler
# configured, Python's last-resort handler would print ~60 lines per attempt on the terminal. The error
# itself reaches the caller as HostUnreachable; paramiko's log shows only when logging is configured
# (``invoke --debug``).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class _BulkRemote(Remote):
    """Fabric's remote runner reading 64 KiB at a time (the default 1000-byte reads cost ~1 s per MB)."""

    read_chunk_size = 65536
    read_our_stdin = read_in_memory_stdin


class _InterruptibleRemote(_BulkRemote):
    """A remote runner that ends the session on Ctrl-C/SIGTERM/SIGHUP: without a terminal there is no way to signal
    the command, and Fabric's answer (re-raise, then wait for the output threads) waits for the command's end. The
    closed session ends a command run under :data:`ENDS_WITH_SESSION`."""

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        self.channel.close()
        raise interrupt



_known_hosts_lock = threading.Lock()
_ignore_warned = False


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


#: A command (its argv after the script) that ends with its SSH session: a watcher reads the session's input, which
#: sshd closes when the session goes, and then sends the command SIGTERM; the command reads /dev/null. Exit status
#: and output are the command's.
ENDS_WITH_SESSION = (
    'exec 3<&0 0</dev/null; "$@" 3<&- & p=$!; { cat <&3 >/dev/null 2>&1; kill -TERM "$p" 2>/dev/null; } & w=$!; '
    'exec 3<&-; wait "$p"; rc=$?; kill "$w" 2>/dev/null; exit "$rc"'
)

#: What a lost connection raises while a command runs (also from invoke's I/O threads: :func:`_run_on`).
_LOST: tuple[type[BaseException], ...] = (OSError, EOFError, paramiko.SSHException)


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

    @property
    def spawn_dir(self) -> str:
        return self._spawn_dir

    def _new_connection(self) -> Connection:
        opts = self.ssh
        overrides = {"runners": {"remote": _InterruptibleRemote if self._interruptible else _BulkRemote}}
        if opts.ssh_config:
            config = Config(runtime_ssh_path=os.path.expanduser(opts.ssh_config), overrides=overrides)
        else:
            config = Config(overrides=overrides)
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
            try:
                load_known_hosts(client.get_host_keys(), known)
            except OSError as exc:
                raise TransportError(self.name, f"cannot read known_hosts {known}: {exc.strerror}") from None
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
                    raise HostUnreachable(self.name, f"authentication failed: {exc}") from None
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
            raise HostUnreachable(self.name, f"cannot connect to {self.target} after {attempts} attempt(s): {detail}")

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
        if self._interruptible and stdin is None:
            argv = ["sh", "-c", ENDS_WITH_SESSION, "sh", *argv]
        options = runner_options(timeout, stdin, out_stream, err_stream)
        # On a timeout the channel was closed under a possibly stalled transport: start afresh, as on a lost one.
        res, start = logged_run(self.name, argv, env, timeout, lambda line: _run_on(conn, line, options),
                                lost=_LOST, on_fault=self._drop)
        if res.exited == -1 or not conn.is_connected:
            # The channel closed without an exit status: the session or the connection died, or our timeout closed
            # it (invoke reports that as a plain result when its timer thread has not ended yet: a race under load).
            self._drop()
            if timeout is not None and time.monotonic() - start >= timeout:
                raise CommandTimeout(self.name, f"{argv[0]!r} timed out after {timeout} s")
            raise ConnectionLost(self.name, f"connection lost during {argv[0]!r} (no exit status)")
        return finished(self.name, argv, res, start, check=check)

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        conn = self.connection()
        parent = os.path.dirname(remote)
        if parent:
            self.run(["mkdir", "-p", parent], timeout=30, check=True)
        try:
            conn.put(str(local), remote)
        except (OSError, paramiko.SSHException) as exc:
            raise TransportError(self.name, f"put {local} -> {remote}: {exc}") from None

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy ``remote`` to ``local`` through a temporary file beside it, renamed once the whole file arrived: a
        failed copy never truncates or replaces a file already at ``local``."""
        conn = self.connection()
        target = Path(local)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.part-{os.getpid()}-{threading.get_ident()}")
        try:
            conn.get(remote, str(part))
            os.replace(part, target)
        except FileNotFoundError as exc:
            raise RemoteNotFound(self.name, f"get {remote} -> {local}: {exc}") from None
        except (EOFError, paramiko.SSHException) as exc:
            self._drop()
            detail = str(exc) or type(exc).__name__
            raise ConnectionLost(self.name, f"connection lost during get {remote}: {detail}") from None
        except OSError as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc}") from None
        finally:
            part.unlink(missing_ok=True)

    def close(self) -> None:
        self._drop()



