"""Tests of xpushare.parsers.procstat (/proc/<pid>/status + FD_COUNT)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.parsers import procstat

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"


def test_real_sample() -> None:
    p = procstat.parse((SAMPLES / "scheduler_proc_status.txt").read_text())
    assert p.found
    assert (p.pid, p.ppid, p.name, p.state) == (466, 402, "xpushare-schedu", "S")
    assert p.vm_rss_bytes == 29348 * 1024
    assert p.vm_hwm_bytes == 29348 * 1024
    assert p.vm_size_bytes == 435072 * 1024
    assert p.threads == 6
    assert p.fd_count is None  # the sample is the bare status file
    assert ("Cpus_allowed_list", "0-15") in p.fields


def test_with_fd_count() -> None:
    p = procstat.parse((FIXTURES / "procstat_with_fd.txt").read_text())
    assert p.fd_count == 23 and p.vm_rss_bytes == 28672 * 1024 and p.vm_hwm_bytes == 29348 * 1024


def test_fd_directory_not_readable_is_unknown_not_zero() -> None:
    p = procstat.parse((FIXTURES / "procstat_no_fd_access.txt").read_text())
    assert p.fd_count is None
    assert p.name == "nvshare-schedul" and p.state == "R" and p.threads == 3


def test_empty_or_missing_process() -> None:
    p = procstat.parse("cat: /proc/999999/status: No such file or directory\n")
    assert not p.found and p.vm_rss_bytes is None and p.fd_count is None


def test_command_quotes_and_validates() -> None:
    argv = procstat.command(466)
    assert argv[:2] == ["sh", "-c"] and len(argv) == 3
    assert "/proc/466/status" in argv[2] and "/proc/466/fd" in argv[2]
    assert procstat.command("466") == argv
    for bad in ("466; rm -rf /", "", "0", "-1", "$(id)", "12 3", 0, -5):
        with pytest.raises(ValueError):
            procstat.command(bad)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_command_runs_locally_on_own_process() -> None:
    out = subprocess.run(procstat.command(os.getpid()), capture_output=True, text=True, check=True).stdout
    p = procstat.parse(out)
    assert p.pid == os.getpid()
    assert p.fd_count is not None and p.fd_count >= 3  # stdin, stdout, stderr at least
    assert p.vm_rss_bytes is not None and p.vm_rss_bytes > 0
    # The argv survives one round of shell quoting (what the transport does with shlex.join).
    assert shlex.split(shlex.join(procstat.command(os.getpid()))) == procstat.command(os.getpid())


@given(st.text())
def test_fuzz_never_raises(text: str) -> None:
    procstat.parse(text)


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=10**6))
def test_fuzz_kb_and_fd_round_trip(kb: int, fds: int) -> None:
    p = procstat.parse(f"Pid:\t1\nVmRSS:\t{kb:>8} kB\nFD_COUNT={fds}\n")
    assert p.vm_rss_bytes == kb * 1024 and p.fd_count == fds
