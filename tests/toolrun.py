"""The tool's command lines as the tests run them: ``python -m invoke ...`` and ``python -m tests.premise_free ...``
in a child forked from a process that imported the tool once, instead of a fresh interpreter per run.

A fresh interpreter spends about 1 CPU-s importing the tool and its libraries before the run starts (Fabric,
paramiko, Invoke, Jinja, prometheus_client and the package itself: tests/bench/ci_time.md), and the suite runs the
tool a few hundred times on a 2-core CI machine. A child forked from a preloaded server starts in milliseconds and
keeps what a subprocess gives a test: its own pid, signals and environment, output on its own file descriptors
(the workloads it starts included), an exit status, and a timeout that kills it.

The server (``python -m tests.toolrun``, one per pytest worker, started at its first run) imports the tool before
any test's state exists, then forks one child per request read from its stdin (a JSON line) and answers the
child's pid. Its children are reaped by the kernel (``SIGCHLD`` ignored), which on Linux still adds their CPU to the
server's ``RUSAGE_CHILDREN``; the worker waits for the server at its end (:func:`stop_server`, from
tests/conftest.py), so the suite's CPU total counts the runs as it counted subprocesses.

What a child gets, as ``subprocess.run(argv, cwd=..., env=..., capture_output=True, text=True)`` would give it: the
working directory, the whole environment of the call (the caller's ``os.environ`` at the time of the call when
``env`` is None), ``sys.argv`` as ``python -m`` sets it, a fresh interpreter's signal dispositions, stdin from
``/dev/null``, stdout and stderr captured separately (decoded with universal newlines), the exit status (negative:
killed by that signal), and an interpreter's end (exit handlers such as logging's, buffers flushed). A command
line of any other form runs in a subprocess.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import locale
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["cpu_seconds", "run_tool", "stop_server"]

#: ``python -m <module>`` entry points that run in a forked child.
ENTRY_POINTS = ("invoke", "tests.premise_free")

#: What the server imports once: the tool's command collection and what a run loads on its way (the Kubernetes
#: and host backends, SSH transport, reports, the metrics parser), and the two entry points.
PRELOAD = ("invoke.main", "tests.premise_free", "xpushare.cli.collection", "xpushare.engine.suite_run",
           "xpushare.backends.k8s", "xpushare.backends.host", "xpushare.transport.ssh", "xpushare.report.html",
           "xpushare.parsers.metrics")

_LOCK = threading.Lock()
_SERVER: subprocess.Popen[str] | None = None
_CPU_S = 0.0


def cpu_seconds() -> float:
    """User + system CPU seconds of every forked run of this process so far (the children and their children)."""
    return _CPU_S


def stop_server() -> None:
    """End this process's server, if it started one, and wait for it (its children's CPU then reaches this
    process's ``RUSAGE_CHILDREN``)."""
    global _SERVER
    with _LOCK:
        if _SERVER is not None:
            assert _SERVER.stdin is not None
            _SERVER.stdin.close()
            _SERVER.wait(timeout=30)
            _SERVER = None


def _server() -> subprocess.Popen[str]:
    global _SERVER
    if _SERVER is None or _SERVER.poll() is not None:
        _SERVER = subprocess.Popen([sys.executable, "-m", "tests.toolrun"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    return _SERVER


def _module_argv(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` of ``[sys.executable, "-m", module, *args]`` for a module of :data:`ENTRY_POINTS`."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in ENTRY_POINTS:
        return argv[2], list(argv[3:])
    return None


def _text(data: bytes) -> str:
    """Decoded as ``subprocess.run(..., text=True)`` decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def _wait(pid: int, timeout: float | None) -> bool:
    """Whether process ``pid`` (not this process's child) ended within ``timeout`` seconds."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def run_tool(argv: Sequence[str], *, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
             timeout: float | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check)``,
    forked from the preloaded server where ``argv`` is ``[sys.executable, "-m", <an entry point>, ...]``.

    Raises ``subprocess.TimeoutExpired`` after killing the child when it outlives ``timeout`` seconds, and
    ``subprocess.CalledProcessError`` on a non-zero exit under ``check``, as ``subprocess.run`` does."""
    parsed = _module_argv(argv)
    if parsed is None:
        return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=check)
    module, args = parsed
    global _CPU_S
    with tempfile.TemporaryDirectory(prefix="toolrun-") as scratch:
        paths = {name: os.path.join(scratch, name) for name in ("out", "err", "end")}
        request = {"module": module, "args": args, "cwd": str(cwd if cwd is not None else os.getcwd()),
                   "env": dict(os.environ if env is None else env), **paths}
        with _LOCK:
            server = _server()
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
        ended = _wait(pid, timeout)
        if not ended:
            os.kill(pid, signal.SIGKILL)
            _wait(pid, None)
        stdout, stderr = (_text(Path(paths[k]).read_bytes()) if os.path.exists(paths[k]) else ""
                          for k in ("out", "err"))
        end = json.loads(Path(paths["end"]).read_text(encoding="utf-8")) if os.path.exists(paths["end"]) else None
    if not ended:
        raise subprocess.TimeoutExpired(list(argv), timeout or 0.0, output=stdout, stderr=stderr)
    if end is None:  # killed before it could write its end: by a signal, as subprocess.run would report it
        code = -signal.SIGKILL
    else:
        code = int(end["code"])
        _CPU_S += float(end["cpu_s"])
    proc = subprocess.CompletedProcess(list(argv), code, stdout, stderr)
    if check:
        proc.check_returncode()
    return proc


def _exit_code(code: object) -> int:
    """The exit status that ``sys.exit(code)`` gives an interpreter."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any]) -> int:  # pragma: no cover - runs in the forked child
    """Set up as ``python -m <module> <args>`` would be, run, write the exit status and CPU so far; the status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, key in ((1, "out"), (2, "err")):
        target = os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    module = request["module"]
    spec = importlib.util.find_spec(f"{module}.__main__" if module == "invoke" else module)
    sys.argv = [spec.origin if spec is not None and spec.origin else module, *request["args"]]
    from invoke.main import program

    from tests import premise_free

    code = 0
    try:
        if module == "tests.premise_free":
            premise_free.main(sys.argv)
        else:
            program.run(sys.argv)
    except SystemExit as exited:
        code = _exit_code(exited.code)
    except BaseException:  # what an interpreter does with an uncaught exception: its traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    Path(request["end"]).write_text(json.dumps({"code": code, "cpu_s": spent}), encoding="utf-8")
    return code


def serve() -> None:  # pragma: no cover - the server process
    """Import :data:`PRELOAD`, then fork one child per request line on stdin, answering its pid on stdout."""
    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child ends as an interpreter ends: exit handlers (logging's), buffers flushed
            sys.exit(_child(request))
        print(pid, flush=True)


if __name__ == "__main__":
    serve()
