"""Transport: the :class:`Host` interface (run, put, get, spawn, stop), :class:`CommandResult` and :func:`env_argv`.

Implementations: :mod:`~xpushare.transport.local` (this machine, invoke) and :mod:`~xpushare.transport.ssh`
(Fabric ``Connection``); :func:`xpushare.transport.hosts.connect` picks one for an inventory host.

Every command is given as an argv list and quoted once with :func:`shlex.join`; no caller builds shell
strings from user-controlled values. Failures are typed (:mod:`xpushare.model.errors`):

* :class:`~xpushare.model.errors.HostUnreachable` -- could not connect/authenticate (after retries);
* :class:`~xpushare.model.errors.HostKeyMismatch` -- the host key is unknown (``strict``) or changed;
* :class:`~xpushare.model.errors.CommandTimeout` -- the command outlived its timeout (also when the network
  stalls: the client-side timer closes the channel);
* :class:`~xpushare.model.errors.ConnectionLost` -- the connection broke mid-command; the next call reconnects;
* :class:`~xpushare.model.errors.CommandFailed` -- non-zero exit with ``check=True``.
"""

from __future__ import annotations

import io
import os
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from invoke.exceptions import CommandTimedOut
from invoke.runners import Local

from xpushare.model.errors import (
    CommandFailed,
    CommandTimeout,
    ConnectionLost,
    RemoteNotFound,
    TransportError,
)
from xpushare.transport import command_log
from xpushare.transport.deadline import OutputHeldOpen


class TextSink(Protocol):
    """Where live command output goes (:meth:`Host.run`'s ``out_stream``/``err_stream``): any text stream."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


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
_NO_SUCH_SPAWN = 97
_STOP_SCRIPT = (
    'd=$1; n=$2; f="$d/$n.pid"; [ -f "$f" ] || { echo "no such spawn" >&2; exit 97; }; p=$(cat "$f"); '
    'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; i=0; '
    'alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) && case "$s" in Z*) return 1;; esac; }; '
    'while alive "$p" && [ $i -lt 50 ]; do sleep 0.05; i=$((i+1)); done; '
    'kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; rm -f "$f"; echo "$d/$n.log"'
)


def runner_options(timeout: float | None, stdin: str | None, out_stream: TextSink | None = None,
                   err_stream: TextSink | None = None) -> dict[str, Any]:
    """Keyword arguments of an invoke/Fabric ``run`` for :meth:`Host.run`: output captured, not echoed (unless
    ``out_stream``/``err_stream`` is given: then it is also written there as it arrives); a non-zero exit
    returned, not raised; ``timeout`` in seconds; ``stdin`` as the command's input (None: no input)."""
    # invoke's ``hide`` names the streams kept off their out/err_stream: those we were given none for.
    hidden = [name for name, given in (("out", out_stream), ("err", err_stream)) if given is None]
    hide: bool | str = True if len(hidden) == 2 else (hidden[0] if hidden else False)
    options: dict[str, Any] = {"hide": hide, "warn": True, "timeout": timeout,
                               "in_stream": io.StringIO(stdin) if stdin is not None else False, "encoding": "utf-8"}
    if out_stream is not None:
        options["out_stream"] = out_stream
    if err_stream is not None:
        options["err_stream"] = err_stream
    return options


def finished(host: str, argv: Sequence[str], res: Any, start: float, *, check: bool) -> CommandResult:
    """The :class:`CommandResult` of an invoke/Fabric ``Result`` ``res`` (``start``: ``time.monotonic()`` before
    the command). Raises :class:`CommandFailed` when ``check`` is set and the command exited non-zero."""
    result = CommandResult(host, tuple(argv), res.stdout, res.stderr, res.exited, time.monotonic() - start)
    if check and not result.ok:
        raise CommandFailed(host, list(argv), result.exit_code, result.stderr)
    return result


def logged_run(
    host: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    timeout: float | None,
    execute: Callable[[str], Any],
    *,
    lost: tuple[type[BaseException], ...] = (),
    on_fault: Callable[[], None] | None = None,
    shown: str | None = None,
) -> tuple[Any, float]:
    """Run ``argv`` (``env`` prefixed, :func:`env_argv`) as one quoted line through ``execute`` (an invoke/Fabric
    ``run``), its start, end or failure in :mod:`~xpushare.transport.command_log`; return the ``Result`` and the
    ``time.monotonic()`` before it (for :func:`finished`).

    invoke's ``CommandTimedOut`` raises :class:`CommandTimeout` (with the output read before the deadline, and the
    command's own exit status when only a process it left behind held its output: ``OutputHeldOpen``), an
    exception of ``lost`` :class:`ConnectionLost`; ``on_fault`` is called first (e.g. to drop a connection).
    ``shown``: the command's name in those errors (default ``argv[0]``; a wrapper's caller names the command it
    wraps)."""
    words = env_argv(argv, env)
    name = shown if shown is not None else argv[0]
    line = shlex.join(words)
    start = time.monotonic()
    command_log.started(host, words)
    try:
        res = execute(line)
    except CommandTimedOut as exc:
        took = time.monotonic() - start
        command_log.failed(host, words, exc, took)
        if on_fault is not None:
            on_fault()
        partial = exc.result  # what the command wrote before its deadline: kept, not lost with the timeout
        ended = exc.exit_code if isinstance(exc, OutputHeldOpen) else None
        why = (f"{name!r} timed out after {timeout or 0:g} s" if ended is None else
               f"{name!r} ended (exit {ended}), but a process it left in the background held its output open past "
               f"the {timeout or 0:g} s timeout (ended at the deadline)")
        raise CommandTimeout(host, why, stdout=partial.stdout or "", stderr=partial.stderr or "", duration_s=took,
                             exit_code=ended) from None
    except lost as exc:
        command_log.failed(host, words, exc, time.monotonic() - start)
        if on_fault is not None:
            on_fault()
        raise ConnectionLost(host, f"connection lost during {name!r}: {exc}") from None
    assert res is not None
    command_log.ended(host, words, res.exited, time.monotonic() - start)
    return res, start


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


@dataclass(frozen=True)
class Copied:
    """A file ``put`` or ``get`` copied: ``path`` where it landed (remote for put, local for get), ``replaced``
    True when a file was already there and was replaced."""

    path: str
    replaced: bool


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
        out_stream: TextSink | None = None,
        err_stream: TextSink | None = None,
    ) -> CommandResult:
        """Run ``argv`` (quoted with :func:`shlex.join`); ``timeout`` in seconds (None: no limit).

        ``out_stream``/``err_stream``: also write the command's stdout/stderr there as it arrives (the result
        still holds all of it), e.g. a :class:`~xpushare.transport.stream.PrefixedLines` of ``invoke run --stream``.

        Returns the :class:`CommandResult` whatever the exit code, unless ``check`` is set (then a
        non-zero exit raises :class:`CommandFailed`). Raises :class:`HostUnreachable`,
        :class:`CommandTimeout`, :class:`ConnectionLost`.
        """

    @abstractmethod
    def put(self, local: str | os.PathLike[str], remote: str) -> Copied:
        """Copy a local file to ``remote`` on the host, as ``scp`` does (README "put and get"): its directory is
        created; a file at ``remote`` is replaced (``Copied.replaced``); an existing directory at ``remote``
        receives the file under its own name; a symbolic link at the target is refused, never written through.
        Written to a temporary name beside the target and renamed once whole. Raises :class:`TransportError`."""

    @abstractmethod
    def get(self, remote: str, local: str | os.PathLike[str]) -> Copied:
        """Copy ``remote`` from the host to the local file ``local`` through the one local write path
        (:mod:`xpushare.model.atomic_file`): a file there is replaced (``Copied.replaced``), a link or a directory
        there is refused, a failed copy leaves nothing behind. Raises :class:`TransportError`
        (:class:`RemoteNotFound` for a missing remote file)."""

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

        Raises :class:`RemoteNotFound` when nothing was spawned under ``name``, :class:`TransportError` when
        the stop failed.
        """
        _check_spawn_name(name)
        res = self.run(["sh", "-c", _STOP_SCRIPT, "sh", self.spawn_dir, name], timeout=timeout)
        if res.exit_code == _NO_SUCH_SPAWN:
            raise RemoteNotFound(self.name, f"stop {name!r}: no such spawn")
        if not res.ok:
            raise TransportError(self.name, f"stop {name!r} failed: {res.stderr.strip() or res.exit_code}")
        return res.stdout.strip()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection (no-op for this machine)."""


def _check_spawn_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ValueError(f"bad spawn name {name!r}: use letters, digits, '-', '_', '.'")


def read_in_memory_stdin(runner: Any, input_: Any) -> str | None:
    """The ``read_our_stdin`` of the bulk runners (:mod:`~xpushare.transport.local`, :mod:`~xpushare.transport.ssh`)."""
    # invoke reads stdin one byte per 10 ms poll (a 700-byte manifest took ~7 s); our stdin is always
    # an in-memory string, so hand it over in large pieces.
    if isinstance(input_, io.StringIO):
        return input_.read(65536)
    return Local.read_our_stdin(runner, input_)


