"""This machine as a :class:`~xpushare.transport.base.Host`, through invoke's local runner (no SSH)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from invoke import Config as InvokeConfig
from invoke import Context
from invoke.runners import Local

from xpushare.model.errors import (
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


class _BulkLocal(Local):
    """invoke's local runner with the same in-memory stdin and 64 KiB reads."""

    read_chunk_size = 65536
    read_our_stdin = read_in_memory_stdin



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
        out_stream: TextSink | None = None,
        err_stream: TextSink | None = None,
    ) -> CommandResult:
        options = runner_options(timeout, stdin, out_stream, err_stream)
        res, start = logged_run(self.name, argv, env, timeout, lambda line: self._context.run(line, **options))
        return finished(self.name, argv, res, start, check=check)

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
        except FileNotFoundError as exc:
            raise RemoteNotFound(self.name, f"get {remote} -> {local}: {exc.strerror}") from None
        except OSError as exc:
            raise TransportError(self.name, f"get {remote} -> {local}: {exc.strerror}") from None



