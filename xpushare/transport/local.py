"""This machine as a :class:`~xpushare.transport.base.Host`, through invoke's local runner (no SSH)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from invoke import Config as InvokeConfig
from invoke import Context
from invoke.runners import Local

from xpushare.model import atomic_file
from xpushare.model.errors import (
    RemoteNotFound,
    TransportError,
)
from xpushare.transport import interrupt as interrupt_requests
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


class _BulkLocal(Local):
    """invoke's local runner with the same in-memory stdin and 64 KiB reads."""

    read_chunk_size = 65536
    read_our_stdin = read_in_memory_stdin


class _InterruptibleLocal(_BulkLocal):
    """A runner whose command ends when Ctrl-C, SIGTERM or SIGHUP reaches us: invoke's own answer (``\x03`` on the
    command's stdin) reaches no command without a terminal, so the command gets the signal itself (SIGTERM for
    SIGTERM and SIGHUP, SIGINT for Ctrl-C), and SIGKILL if it is still there after :data:`KILL_AFTER_S`."""

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        signum = signal.SIGINT if interrupt_requests.received() in (None, signal.SIGINT) else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)
        timer = threading.Timer(KILL_AFTER_S, self.kill)
        timer.daemon = True
        timer.start()


#: Seconds between the signal a command of an interruptible host gets and its SIGKILL.
KILL_AFTER_S = 2.0



class LocalHost(Host):
    """This machine, through invoke's local runner (no SSH)."""

    def __init__(self, name: str = "localhost", spawn_dir: str | None = None, *, interruptible: bool = False) -> None:
        """``interruptible``: Ctrl-C, SIGTERM or SIGHUP (:mod:`~xpushare.transport.interrupt`) ends the command
        that runs (``invoke run``); otherwise the command runs to its end and the caller sees the request at its
        next wait (a run's cleanup commands must finish)."""
        self.name = name
        self._spawn_dir = spawn_dir or str(Path(tempfile.gettempdir()) / f"xpushare-spawn-{os.getuid()}")
        runner = _InterruptibleLocal if interruptible else _BulkLocal
        self._context = Context(config=InvokeConfig(overrides={"runners": {"local": runner}}))

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
        out_stream: TextSink | None = None,
        err_stream: TextSink | None = None,
    ) -> CommandResult:
        options = runner_options(timeout, stdin, out_stream, err_stream)
        res, start = logged_run(self.name, argv, env, timeout, lambda line: self._context.run(line, **options))
        return finished(self.name, argv, res, start, check=check)

    def put(self, local: str | os.PathLike[str], remote: str) -> Copied:
        """Copy through a temporary name beside ``remote``, renamed once whole (as :class:`SshHost` does): this
        machine's file system, so through the one local write path (:mod:`xpushare.model.atomic_file`); an
        existing directory at ``remote`` receives the file under its own name; a link at ``remote`` is refused."""
        target = Path(remote)
        if target.is_dir() and not target.is_symlink():
            target = target / Path(local).name
        try:
            replaced = atomic_file.copy_file(local, target)
        except OSError as exc:
            raise TransportError(self.name, f"put {local} -> {target}: {_why(exc, target)}") from None
        return Copied(str(target), replaced)

    def get(self, remote: str, local: str | os.PathLike[str]) -> Copied:
        try:
            replaced = atomic_file.copy_file(remote, local)
        except FileNotFoundError as exc:
            raise RemoteNotFound(self.name, f"get {remote} -> {local}: {exc.strerror}") from None
        except OSError as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {_why(exc, local)}") from None
        return Copied(str(local), replaced)


def _why(exc: OSError, shown: str | os.PathLike[str]) -> str:
    """``strerror``, with the refused path when it is not ``shown`` (a link found in a folder above it)."""
    if isinstance(exc, atomic_file.UnsafePath):
        return exc.describe(shown)
    return exc.strerror or str(exc)



