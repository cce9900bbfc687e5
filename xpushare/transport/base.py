"""Transport: one :class:`Host` interface over SSH (Fabric ``Connection``) and over this machine (invoke).

Every command is given as an argv list and quoted once with :func:`shlex.join`; no caller builds shell
strings from user-controlled values. Failures are typed (:mod:`xpushare.errors`):

* :class:`~xpushare.errors.HostUnreachable` -- could not connect/authenticate (after retries);
* :class:`~xpushare.errors.HostKeyMismatch` -- the host key is unknown (``strict``) or changed;
* :class:`~xpushare.errors.CommandTimeout` -- the command outlived its timeout (also when the network
  stalls: the client-side timer closes the channel);
* :class:`~xpushare.errors.ConnectionLost` -- the connection broke mid-command; the next call reconnects;
* :class:`~xpushare.errors.CommandFailed` -- non-zero exit with ``check=True``.

Host-key policy (inventory ``host_key_policy``): ``strict`` accepts only keys already in known_hosts;
``accept-new`` (default) remembers unknown hosts and refuses changed keys, like OpenSSH's
``StrictHostKeyChecking=accept-new``; ``ignore`` accepts anything and warns once. Fabric's own default
(paramiko ``AutoAddPolicy``, no known_hosts) is replaced on every connection.
"""

from __future__ import annotations

import io
import os
import random
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection
from fabric.runners import Remote
from invoke import Config as InvokeConfig
from invoke import Context
from invoke.exceptions import CommandTimedOut
from invoke.runners import Local

from xpushare.errors import (
    CommandFailed,
    CommandTimeout,
    ConnectionLost,
    HostKeyMismatch,
    HostUnreachable,
    TransportError,
)
from xpushare.inventory import HostSpec, SshOptions


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command: text output (decoded UTF-8 with replacement), exit code, seconds taken."""

    host: str
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    exit_code: int
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class SpawnHandle:
    """A background command started by :meth:`Host.spawn`: its process-group id and output file on the host."""

    name: str
    pid: int
    log_path: str


_SPAWN_SCRIPT = (
    'd=$1; n=$2; shift 2; mkdir -p "$d" && cd "$d" || exit 97; '
    'if [ -f "$n.pid" ] && kill -0 "$(cat "$n.pid")" 2>/dev/null; then echo "already running" >&2; exit 98; fi; '
    'setsid nohup "$@" > "$n.log" 2>&1 < /dev/null & echo $! > "$n.pid"; echo $!; pwd'
)
_STOP_SCRIPT = (
    'd=$1; n=$2; f="$d/$n.pid"; [ -f "$f" ] || { echo "no such spawn" >&2; exit 97; }; p=$(cat "$f"); '
    'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; i=0; '
    'alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) && case "$s" in Z*) return 1;; esac; }; '
    'while alive "$p" && [ $i -lt 50 ]; do sleep 0.05; i=$((i+1)); done; '
    'kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; rm -f "$f"; echo "$d/$n.log"'
)


def env_argv(argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    """``argv`` prefixed with ``env K=V ...`` so variables travel inside the quoted command line.

    (sshd drops ``setenv`` requests unless ``AcceptEnv`` allows them; ``env`` works everywhere.)
    """
    if not env:
        return list(argv)
    for key in env:
        if not key or "=" in key or not key.replace("_", "a").isalnum():
            raise ValueError(f"bad environment variable name {key!r}")
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv]


class Host(ABC):
    """A host commands run on. Thread-safe for concurrent ``run`` calls on different hosts."""

    name: str

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` (quoted with :func:`shlex.join`); ``timeout`` in seconds (None: no limit).

        Returns the :class:`CommandResult` whatever the exit code, unless ``check`` is set (then a
        non-zero exit raises :class:`CommandFailed`). Raises :class:`HostUnreachable`,
        :class:`CommandTimeout`, :class:`ConnectionLost`.
        """

    @abstractmethod
    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        """Copy a local file to ``remote`` on the host, creating its directory. Raises :class:`TransportError`."""

    @abstractmethod
    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy ``remote`` from the host to a local file. Raises :class:`TransportError`."""

    @property
    @abstractmethod
    def spawn_dir(self) -> str:
        """Directory on the host that holds pid and log files of spawned commands."""

    def spawn(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> SpawnHandle:
        """Start ``argv`` in the background (own session, ``nohup``), its output in ``<name>.log``.

        The pid file ``<name>.pid`` lets :meth:`stop` end it even from another connection. Raises
        :class:`TransportError` when the name is already running or the start failed.
        """
        _check_spawn_name(name)
        cmd = ["sh", "-c", _SPAWN_SCRIPT, "sh", self.spawn_dir, name, *env_argv(argv, env)]
        res = self.run(cmd, timeout=30)
        if not res.ok:
            raise TransportError(self.name, f"spawn {name!r} failed: {res.stderr.strip() or res.exit_code}")
        lines = res.stdout.split()
        pid, cwd = int(lines[0]), lines[1]
        return SpawnHandle(name=name, pid=pid, log_path=f"{cwd}/{name}.log")

    def stop(self, name: str, *, timeout: float = 30) -> str:
        """Stop a spawned command's process group (TERM, then KILL after 5 s); return its log path.

        Raises :class:`TransportError` when nothing was spawned under ``name``.
        """
        _check_spawn_name(name)
        res = self.run(["sh", "-c", _STOP_SCRIPT, "sh", self.spawn_dir, name], timeout=timeout)
        if not res.ok:
            raise TransportError(self.name, f"stop {name!r} failed: {res.stderr.strip() or res.exit_code}")
        return res.stdout.strip()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection (no-op for this machine)."""


def _check_spawn_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ValueError(f"bad spawn name {name!r}: use letters, digits, '-', '_', '.'")


class LocalHost(Host):
    """This machine, through invoke's local runner (no SSH)."""

    def __init__(self, name: str = "localhost", spawn_dir: str | None = None) -> None:
        self.name = name
        self._spawn_dir = spawn_dir or str(Path(tempfile.gettempdir()) / f"xpushare-spawn-{os.getuid()}")
        self._context = Context(config=InvokeConfig(overrides={"runners": {"local": _BulkLocal}}))

    @property
    def spawn_dir(self) -> str:
        return self._spawn_dir

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        line = shlex.join(env_argv(argv, env))
        start = time.monotonic()
        try:
            res = self._context.run(
                line,
                hide=True,
                warn=True,
                timeout=timeout,
                in_stream=io.StringIO(stdin) if stdin is not None else False,
                encoding="utf-8",
            )
        except CommandTimedOut:
            raise CommandTimeout(self.name, f"{argv[0]!r} timed out after {timeout} s") from None
        assert res is not None
        result = CommandResult(
            self.name, tuple(argv), res.stdout, res.stderr, res.exited, time.monotonic() - start
        )
        if check and not result.ok:
            raise CommandFailed(self.name, list(argv), result.exit_code, result.stderr)
        return result

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        try:
            Path(remote).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, remote)
        except OSError as exc:
            raise TransportError(self.name, f"put {local} -> {remote}: {exc.strerror}") from None

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        try:
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(remote, local)
        except OSError as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc.strerror}") from None


def _read_in_memory_stdin(runner: Any, input_: Any) -> str | None:
    # invoke reads stdin one byte per 10 ms poll (a 700-byte manifest took ~7 s); our stdin is always
    # an in-memory string, so hand it over in large pieces.
    if isinstance(input_, io.StringIO):
        return input_.read(65536)
    return Local.read_our_stdin(runner, input_)


class _BulkRemote(Remote):
    """Fabric's remote runner reading 64 KiB at a time (the default 1000-byte reads cost ~1 s per MB)."""

    read_chunk_size = 65536
    read_our_stdin = _read_in_memory_stdin


class _BulkLocal(Local):
    """invoke's local runner with the same in-memory stdin and 64 KiB reads."""

    read_chunk_size = 65536
    read_our_stdin = _read_in_memory_stdin


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
    ) -> None:
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
        overrides = {"runners": {"remote": _BulkRemote}}
        if opts.ssh_config:
            config = Config(runtime_ssh_path=os.path.expanduser(opts.ssh_config), overrides=overrides)
        else:
            config = Config(overrides=overrides)
        connect_kwargs: dict[str, object] = {
            "banner_timeout": opts.connect_timeout,
            "auth_timeout": opts.connect_timeout,
        }
        if opts.identity:
            key = os.path.expanduser(opts.identity)
            if os.path.exists(key):
                connect_kwargs["key_filename"] = [key]
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
                client.load_host_keys(str(known))
            except (OSError, paramiko.SSHException) as exc:
                raise TransportError(self.name, f"cannot read known_hosts {known}: {exc}") from None
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
    ) -> CommandResult:
        conn = self.connection()
        line = shlex.join(env_argv(argv, env))
        start = time.monotonic()
        try:
            res = conn.run(
                line,
                hide=True,
                warn=True,
                timeout=timeout,
                in_stream=io.StringIO(stdin) if stdin is not None else False,
                encoding="utf-8",
            )
        except CommandTimedOut:
            self._drop()  # the channel was closed under a possibly stalled transport: start afresh
            raise CommandTimeout(self.name, f"{argv[0]!r} timed out after {timeout} s") from None
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._drop()
            raise ConnectionLost(self.name, f"connection lost during {argv[0]!r}: {exc}") from None
        assert res is not None
        if res.exited == -1 or not conn.is_connected:
            # The channel closed without an exit status: the session or the connection died.
            self._drop()
            raise ConnectionLost(self.name, f"connection lost during {argv[0]!r} (no exit status)")
        result = CommandResult(
            self.name, tuple(argv), res.stdout, res.stderr, res.exited, time.monotonic() - start
        )
        if check and not result.ok:
            raise CommandFailed(self.name, list(argv), result.exit_code, result.stderr)
        return result

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
        conn = self.connection()
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn.get(remote, str(local))
        except (OSError, paramiko.SSHException) as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc}") from None

    def close(self) -> None:
        self._drop()


def connect(spec: HostSpec) -> Host:
    """The :class:`Host` for an inventory host: :class:`LocalHost` for ``local`` ones, else :class:`SshHost`."""
    if spec.local:
        return LocalHost(spec.name)
    return SshHost(spec.name, spec.target, spec.ssh)
