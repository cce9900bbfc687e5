"""The ``xpushare`` command run in this process (no interpreter start-up per call): for tests that run many
short command lines (usage errors) and need no process of their own. Runs that need one (a lab run, a timeout,
signals, an environment of their own) are forked by tests/toolrun.py."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from xpushare.cli.program import program

__all__ = ["Ran", "run_xpushare"]


@dataclass(frozen=True)
class Ran:
    """What one command line gave: its exit status, stdout and stderr."""

    code: int
    out: str
    err: str


@contextlib.contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    here = os.getcwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


def run_xpushare(argv: Sequence[str], *, cwd: Path | None = None) -> Ran:
    """Run ``xpushare ARGV`` in this process, from ``cwd`` (default: where the test is); the exit status is
    ``SystemExit``'s code (0 when the program returns)."""
    out, err = io.StringIO(), io.StringIO()
    with _cwd(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            program.run(["xpushare", *argv])
            code = 0
        except SystemExit as ended:
            code = int(ended.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())
