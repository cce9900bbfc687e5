"""This machine as a :class:`~xpushare.transport.base.Host`, through invoke's local runner (no SSH)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
from xpushare.transport.deadline import DeadlineRunner


class _BulkLocal(DeadlineRunner, Local):
    """invoke's local runner with the same in-memory stdin and 64 KiB reads, its timeout a deadline
    (:class:`~xpushare.transport.deadline.DeadlineRunner`)."""

    read_chunk_size = 65536
    read_our_stdin = read_in_memory_stdin

    def command_exit(self) -> int | None:
        process = self.process  # None under a pty, which the transport never asks for
        return None if process is None else process.poll()


class _InterruptibleLocal(_BulkLocal):
    """A runner whose command runs in a process group of its own, ended as a whole when Ctrl-C, SIGTERM or SIGHUP
    reaches us, or at its timeout: invoke's own answer to Ctrl-C (``\x03`` on the command's stdin) reaches no
    command without a terminal, and its timeout kills the shell alone, so a child that holds the output pipe
    (``sleep 170 &``) lived on. The group gets the signal (SIGTERM for SIGTERM, SIGHUP and a timeout, SIGINT for
    Ctrl-C), then SIGKILL if anything of it is still there after :data:`KILL_AFTER_S`. A process that left the
    group (``setsid``) is out of reach; its output is no longer read past the deadline
    (:data:`~xpushare.transport.deadline.GRACE_S`)."""

    def start(self, command: str, shell: str, env: dict[str, Any]) -> None:
        # invoke's Local.start for a command without a pty (ours never have one), in a new session: its own group
        self.process = subprocess.Popen(command, shell=True, executable=shell, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, stdin=subprocess.PIPE, start_new_session=True)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)  # the group outlives its leader while a member holds the pipe

    def _end_group(self, signum: int) -> None:
        self._signal_group(signum)
        timer = threading.Timer(KILL_AFTER_S, self._signal_group, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def kill(self) -> None:
        """At the timeout: SIGTERM to the group, SIGKILL :data:`KILL_AFTER_S` later."""
        self._end_group(signal.SIGTERM)

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        self._end_group(signal.SIGINT if interrupt_requests.received() in (None, signal.SIGINT) else signal.SIGTERM)


#: Seconds between the signal a command of an interruptible host gets and its SIGKILL.
KILL_AFTER_S = 2.0



#: Overrides where this machine's workload processes keep their files (a test process sets its own, as it does
#: its lease directory: concurrent test processes each hold a ``local`` lease, so they must not share the files
#: the lease protects; docs/leases.md).
SPAWN_DIR_ENV = "XPUSHARE_SPAWN_DIR"


def default_spawn_dir() -> str:
    """``$XPUSHARE_SPAWN_DIR``, else ``<temporary directory>/xpushare-spawn-<uid>``: one directory per user and
    machine, which the machine-wide ``local`` lease keeps to one run at a time (docs/leases.md)."""
    return os.environ.get(SPAWN_DIR_ENV) or str(Path(tempfile.gettempdir()) / f"xpushare-spawn-{os.getuid()}")


class LocalHost(Host):
    """This machine, through invoke's local runner (no SSH)."""

    def __init__(self, name: str = "localhost", spawn_dir: str | None = None, *, interruptible: bool = False) -> None:
        """``interruptible``: Ctrl-C, SIGTERM or SIGHUP (:mod:`~xpushare.transport.interrupt`) ends the command
        that runs (``invoke run``); otherwise the command runs to its end and the caller sees the request at its
        next wait (a run's cleanup commands must finish)."""
        self.name = name
        self._spawn_dir = spawn_dir or default_spawn_dir()
        runner = _InterruptibleLocal if interruptible else _BulkLocal
        # lazy: the transport's runner takes nothing from the user's Invoke files (a ``run.echo`` or ``run.pty`` there
        # would change every command; a malformed one is the program's to report, once: cli/config_files.py)
        self._context = Context(config=InvokeConfig(overrides={"runners": {"local": runner}}, lazy=True))

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



