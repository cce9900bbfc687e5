"""The tool's command lines as the tests run them: ``python -m invoke ...`` and ``python -m tests.premise_free ...``
in a child forked from a process that imported the tool once, instead of a fresh interpreter per run.

A fresh interpreter spends about 1 CPU-s importing the tool and its libraries before the run starts (Fabric,
paramiko, Invoke, Jinja, prometheus_client and the package itself: tests/bench/ci_time.md), and the suite runs the
tool a few hundred times on a 2-core CI machine. The child of a preloaded process (multiprocessing's ``forkserver``:
one server per pytest worker, started at the first run, the tool imported in it before any test's state exists)
starts in milliseconds and keeps what a subprocess gives a test: its own pid, signals and environment, output on
its own file descriptors (the workloads it starts included), an exit status, and a timeout that kills it.

What a child gets, as ``subprocess.run(argv, cwd=..., env=..., capture_output=True, text=True)`` would give it: the
working directory, the whole environment of the call (the caller's ``os.environ`` at the time of the call when
``env`` is None), ``sys.argv`` as ``python -m`` sets it, stdin from ``/dev/null``, stdout and stderr captured
separately (decoded with universal newlines), the exit status (negative: killed by that signal), and the
interpreter's exit handlers run at its end (``atexit``: logging's flush and close). A command line of any other
form runs in a subprocess.

The CPU that the children use is not in the pytest worker's ``RUSAGE_CHILDREN`` (they are the server's children):
each child reports its own, and :func:`cpu_seconds` sums them for the suite's per-module CPU figures.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["cpu_seconds", "run_tool"]

#: ``python -m <module>`` entry points that run in a forked child: the module and the ``sys.argv[0]`` it gets.
ENTRY_POINTS = ("invoke", "tests.premise_free")

#: What the server imports once: the tool's command collection and what a run loads on its way (the Kubernetes
#: and host backends, SSH transport, reports, the metrics parser), and the two entry points.
PRELOAD = ["invoke.main", "tests.premise_free", "xpushare.cli.collection", "xpushare.engine.suite_run",
           "xpushare.backends.k8s", "xpushare.backends.host", "xpushare.transport.ssh", "xpushare.report.html",
           "xpushare.parsers.metrics", "tests.toolrun"]

_CONTEXT: Any = None
_CPU_S = 0.0


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def cpu_seconds() -> float:
    """User + system CPU seconds of every forked run of this process so far (the children and their children)."""
    return _CPU_S


def _module_argv(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` of ``[sys.executable, "-m", module, *args]`` for a module of :data:`ENTRY_POINTS`."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in ENTRY_POINTS:
        return argv[2], list(argv[3:])
    return None


def _main_path(module: str) -> str:
    """``sys.argv[0]`` that ``python -m module`` sets: the path of its ``__main__`` source."""
    import importlib.util

    spec = importlib.util.find_spec(f"{module}.__main__" if module == "invoke" else module)
    assert spec is not None and spec.origin is not None
    return spec.origin


def _child(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str,
           usage: str) -> None:  # pragma: no cover - runs in the forked child
    """The forked child: set up as ``python -m module args`` would be, run, report its CPU, exit."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [_main_path(module), *args]
    code: str | int | None = 0
    try:
        if module == "tests.premise_free":
            from tests.premise_free import waive

            waive()
        from invoke.main import program

        program.run(sys.argv)
    except SystemExit as ended:
        code = ended.code
    finally:
        atexit._run_exitfuncs()
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
        Path(usage).write_text(json.dumps(spent), encoding="utf-8")
    sys.exit(code)


def _text(data: bytes) -> str:
    """Decoded as ``subprocess.run(..., text=True)`` decodes: the locale's encoding, universal newlines."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def run_tool(argv: Sequence[str], *, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
             timeout: float | None = None, capture_output: bool = True, text: bool = True,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check)``,
    forked from the preloaded server where ``argv`` is ``[sys.executable, "-m", <an entry point>, ...]``.

    Raises ``subprocess.TimeoutExpired`` after killing the child when it outlives ``timeout`` seconds, and
    ``subprocess.CalledProcessError`` on a non-zero exit under ``check``, as ``subprocess.run`` does."""
    assert capture_output and text, "run_tool captures the output as text"
    parsed = _module_argv(argv)
    if parsed is None:
        return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=check)
    module, args = parsed
    global _CPU_S
    with tempfile.TemporaryDirectory(prefix="toolrun-") as scratch:
        out, err, usage = (os.path.join(scratch, name) for name in ("out", "err", "usage"))
        child = _context().Process(
            target=_child, args=(module, args, str(cwd if cwd is not None else os.getcwd()),
                                 dict(os.environ if env is None else env), out, err, usage))
        child.start()
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join()
        stdout = _text(Path(out).read_bytes()) if os.path.exists(out) else ""
        stderr = _text(Path(err).read_bytes()) if os.path.exists(err) else ""
        if os.path.exists(usage):
            _CPU_S += float(json.loads(Path(usage).read_text(encoding="utf-8")))
    if timed_out:
        raise subprocess.TimeoutExpired(list(argv), timeout or 0.0, output=stdout, stderr=stderr)
    proc = subprocess.CompletedProcess(list(argv), int(child.exitcode), stdout, stderr)
    if check:
        proc.check_returncode()
    return proc
