"""Tests marked ``cpu_exclusive`` run last, alone, under pytest-xdist (a pytest plugin, loaded by tests/conftest.py).

The lab's "GPU" is the machine's CPU: a runtime ratio of duty-cycled processes (PERF precision, a workload's
simulated speed, verdicts beside a known load) is a measurement only while nothing else takes the cores. Such a
test waits until every other selected test of the session has finished, on every worker, then runs holding an
exclusive lock (two exclusive tests never overlap).

Why last and not "when its turn comes": an exclusive test that asked for the cores in the middle of the run
stopped every worker from starting a test until the longest running one ended (a 15-minute matrix fixture), so
three workers of four idled for minutes, once per exclusive test. At the end the only wait is the run's tail.

How: collection puts the modules with exclusive tests after all the others, and the exclusive tests last in their
module (at most one module may mix them with other tests, so that no other test is ever queued behind an
exclusive one on a worker); each worker appends the node id of every test it finished to a ledger shared by the
session's workers; an exclusive test starts when the ledger holds every other selected test, or once no other
worker has run a test for :data:`IDLE_S` seconds, counted at the earliest from when it began to wait (the rest will
never come: ``-x`` or ``--maxfail`` stopped the run, or a worker died; at a session's start the other workers may
not have begun their first test yet). Without xdist (one process, tests in order) nothing waits.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MARK = "cpu_exclusive"
#: How long an exclusive test waits for the others: a test that hangs must not hang the run (the exclusive test
#: then runs beside it, and its figures may be off).
WAIT_LIMIT_S = 3600.0

#: How long every other worker must have been idle (no test running, none finished) before an exclusive test stops
#: waiting for tests that are not coming; ``XPUSHARE_CPU_SHARE_IDLE_S`` sets it (the plugin's own tests).
IDLE_S = float(os.environ.get("XPUSHARE_CPU_SHARE_IDLE_S", "60"))

#: Node ids of this session's selected tests that are not exclusive (each xdist worker collects them all).
_OTHERS: set[str] = set()


def exclusive(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARK) is not None


def order(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place (stably): modules with exclusive tests after the others, the one module that mixes
    them with other tests first among those, exclusive tests last in their module.

    Raises :class:`pytest.UsageError` when more than one module mixes exclusive and other tests."""
    with_exclusive = {item.path for item in items if exclusive(item)}
    mixed = {item.path for item in items if item.path in with_exclusive and not exclusive(item)}
    if len(mixed) > 1:
        raise pytest.UsageError(f"{sorted(str(p) for p in mixed)} mix {MARK} tests with others: only one module "
                                "may (its other tests must run before any exclusive test); move the rest apart")
    items.sort(key=lambda item: (item.path in with_exclusive, item.path not in mixed, exclusive(item)))


def _session_file(suffix: str) -> Path | None:
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return None if uid is None else Path(tempfile.gettempdir()) / f"xpushare-cpu-{uid}{suffix}"


@pytest.hookimpl(trylast=True)  # after -k/-m deselection and the other ordering hooks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    _OTHERS.clear()
    _OTHERS.update(item.nodeid for item in session.items if not exclusive(item))


def _running_file() -> Path | None:
    """This worker's marker of a test in progress (``<session>.running.<worker>``), None without xdist."""
    base = _session_file(".running")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return None if base is None or worker is None else base.with_name(f"{base.name}.{worker}")


def pytest_runtest_logstart(nodeid: str) -> None:
    running = _running_file()
    if running is not None:
        running.write_text(nodeid, encoding="utf-8")


def pytest_runtest_logfinish(nodeid: str) -> None:
    ledger, running = _session_file(".done"), _running_file()
    if ledger is not None:
        fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (nodeid + "\n").encode())  # one write per line, appended whole (O_APPEND)
        finally:
            os.close(fd)
    if running is not None:
        running.unlink(missing_ok=True)


def _others_finished(ledger: Path) -> bool:
    try:
        done = set(ledger.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        done = set()
    return done >= _OTHERS


def others_idle(ledger: Path, mine: Path, since: float) -> bool:
    """No other worker runs a test, and none finished one for :data:`IDLE_S` seconds, counted at the earliest from
    ``since`` (when this test began to wait: at a session's start the other workers may not have begun their first
    test yet, and no test has finished)."""
    if any(p != mine for p in mine.parent.glob(mine.name.rpartition(".")[0] + ".*")):  # every worker's marker
        return False
    try:
        last = max(ledger.stat().st_mtime, since)
    except FileNotFoundError:
        last = since
    return time.time() - last > IDLE_S


@pytest.fixture(autouse=True)
def _cpu_share(request: pytest.FixtureRequest) -> Iterator[None]:
    """An exclusive test waits for every other test of the session, then holds the session's lock exclusively;
    every other test holds it shared (so an exclusive test that stopped waiting at :data:`WAIT_LIMIT_S` still
    never starts inside another test)."""
    lock, ledger, mine = _session_file(".lock"), _session_file(".done"), _running_file()
    if lock is None or ledger is None or mine is None:
        yield
        return
    with open(lock, "a") as fh:
        if exclusive(request.node):
            deadline, since = time.monotonic() + WAIT_LIMIT_S, time.time()
            while (not _others_finished(ledger) and not others_idle(ledger, mine, since)
                   and time.monotonic() < deadline):
                time.sleep(1.0)
            fcntl.flock(fh, fcntl.LOCK_EX)
        else:
            fcntl.flock(fh, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
