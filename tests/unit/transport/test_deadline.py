"""A command's timeout is a deadline (xpushare/transport/deadline.py): ``invoke run --timeout S`` returns within S
plus GRACE_S even when the command leaves a child holding its output pipe, keeps the output written before the
deadline, says TIMEOUT (never ok), and prints no thread traceback; when the command itself ended before its deadline
and only a process it left in the background held the pipe, it says so, with the command's exit status.

Before: ``invoke run --cluster local --timeout 5 -- bash -c 'sleep 170 & echo started'`` returned after 170 s and
lost ``started``; over SSH a channel closed by the timer came back as exit 0 ``ok`` with Fabric's ``EOFError``
traceback on stderr (tests/e2e/test_adhoc_signals.py holds the SSH side on the lab's sshd)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from xpushare.adhoc import run_adhoc
from xpushare.inventory.schema import HostSpec
from xpushare.model.errors import CommandTimeout
from xpushare.model.exit_status import ExitStatus
from xpushare.transport.deadline import GRACE_S, DeadlineRunner
from xpushare.transport.local import LocalHost
from xpushare.transport.stream import PrefixedLines


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique ``sleep`` argument naming this test's background child; whatever outlives the test is killed by
    pid."""
    seconds = f"40.{uuid.uuid4().int % 10**6:06d}"
    yield seconds
    for pid in _alive(seconds):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(seconds: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"^sleep {seconds}$"], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _gone_within(seconds: str, limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while _alive(seconds):
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def test_a_child_holding_the_pipe_does_not_outlive_the_timeout(marker: str) -> None:
    host = LocalHost(interruptible=True)  # the runner of invoke run
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as caught:
        host.run(["bash", "-c", f"sleep {marker} & echo started; echo warn >&2"], timeout=1)
    took = time.monotonic() - start
    assert took < 1 + GRACE_S, took
    assert caught.value.stdout == "started\n" and caught.value.stderr == "warn\n"  # kept, not lost
    assert caught.value.duration_s is not None and caught.value.duration_s >= 1
    # bash itself ended at once: the report says so, with its exit status, and why the call still timed out
    assert caught.value.exit_code == 0
    assert ("'bash' ended (exit 0), but a process it left in the background held its output open past the 1 s "
            "timeout (ended at the deadline)") in str(caught.value)
    assert _gone_within(marker, 5), "the command's process group outlived its timeout"


def test_a_command_still_running_at_its_deadline_has_no_exit_status(marker: str) -> None:
    with pytest.raises(CommandTimeout) as caught:
        LocalHost(interruptible=True).run(["sh", "-c", f"echo started; exec sleep {marker}"], timeout=1)
    assert caught.value.exit_code is None and "'sh' timed out after 1 s" in str(caught.value)
    assert caught.value.stdout == "started\n"


def test_a_child_that_left_the_group_is_no_longer_read_after_the_deadline(marker: str) -> None:
    """A child in a session of its own is out of the group's reach: the call still returns by the deadline plus
    the grace (its reader is left behind), with what it read."""
    host = LocalHost()  # also the engine's runner: its timeout is a deadline too
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as caught:
        host.run(["bash", "-c", f"setsid sleep {marker} & echo started"], timeout=1)
    assert time.monotonic() - start < 1 + GRACE_S + 0.5
    assert caught.value.stdout == "started\n"


def test_a_command_within_its_timeout_is_untouched() -> None:
    res = LocalHost(interruptible=True).run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (res.stdout, res.stderr, res.exit_code) == ("out\n", "err\n", 3)


def test_invoke_run_says_timeout_keeps_the_output_and_exits_1(marker: str) -> None:
    local = HostSpec("localhost", ("gpu",), local=True)
    argv = ["bash", "-c", f"sleep {marker} & echo started"]
    out = io.StringIO()
    assert run_adhoc([local], argv, forks=1, timeout=1, out=out, fmt="json") == ExitStatus.FAILED
    [record] = json.loads(out.getvalue())
    assert record["status"] == "TIMEOUT" and record["exit"] == 0 and record["stdout"] == "started\n"
    assert record["duration_s"] >= 1 and "held its output open past the 1 s timeout" in record["error"]
    table = io.StringIO()
    assert run_adhoc([local], argv, forks=1, timeout=1, out=table) == ExitStatus.FAILED
    text = table.getvalue()
    assert ("localhost: 'bash' ended (exit 0), but a process it left in the background held its output open past "
            "the 1 s timeout (ended at the deadline); its output until then:\n  started\n") in text
    assert " ok " not in text and "TIMEOUT" in text
    [row] = [line.split() for line in text.splitlines() if line.startswith("localhost ")]
    assert row[:3] == ["localhost", "TIMEOUT", "0"], row  # the command's own exit status, in its column


def test_streamed_lines_stay_off_the_records_of_json_and_yaml() -> None:
    """``invoke run --stream -o json -- echo hello`` printed ``localhost: hello`` before the records."""
    local = HostSpec("localhost", ("gpu",), local=True)
    for fmt in ("json", "yaml"):
        out, err = io.StringIO(), io.StringIO()
        assert run_adhoc([local], ["echo", "hello"], forks=1, timeout=30, out=out, fmt=fmt, stream=True,
                         err=err) == ExitStatus.OK
        assert "localhost: hello" not in out.getvalue() and err.getvalue() == "localhost: hello\n"
        if fmt == "json":
            assert json.loads(out.getvalue())[0]["stdout"] == "hello\n"


def test_streamed_text_after_close_is_dropped() -> None:
    """A reader thread left behind at the deadline must not print after the summary."""
    out = io.StringIO()
    lines = PrefixedLines(out, "h", threading.Lock())
    lines.write("a\npart")
    lines.close()
    lines.write("late\n")
    assert out.getvalue() == "h: a\nh: part\n"


class _KillFails(DeadlineRunner):
    """A runner whose kill meets a transport already closed, as Fabric's channel close did."""

    def __init__(self) -> None:  # no invoke Context: only the deadline's own methods are exercised
        self._timer = None

    def kill(self) -> None:
        raise EOFError()


def test_the_deadline_is_marked_before_the_kill_and_a_failed_kill_is_no_traceback() -> None:
    seen: list[threading.ExceptHookArgs] = []
    previous, threading.excepthook = threading.excepthook, seen.append
    try:
        runner = _KillFails()
        runner.start_timer(0.05)
        time.sleep(0.5)
    finally:
        threading.excepthook = previous
    assert runner.timed_out and not seen
