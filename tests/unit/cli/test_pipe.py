"""A reader that goes away (``invoke cases | head``) ends a task or a listing quietly with status 141, not with
``error: Broken pipe`` and the usage status 2, nor a traceback (cli/guard.pipe_closed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def run_into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with its stdout a pipe whose read end is already closed: its first write fails (EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT, timeout=120, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "invoke", "cases"],  # a task's output (guarded)
    [sys.executable, "-m", "invoke", "--list"],  # Invoke's own listing (adopt)
    [sys.executable, "-m", "xpushare", "--list"],  # the installed command's listing
    [sys.executable, "-m", "xpushare", "hosts", "--output", "json"],
], ids=["invoke-cases", "invoke-list", "xpushare-list", "xpushare-hosts"])
def test_a_closed_output_pipe_is_status_141_and_silent(argv: list[str]) -> None:
    done = run_into_closed_pipe(argv)
    assert done.returncode == 141, done.stderr.decode()
    assert done.stderr == b""
