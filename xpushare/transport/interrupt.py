"""Ctrl-C, SIGTERM and SIGHUP that cannot be swallowed.

invoke's command runner catches ``KeyboardInterrupt`` while a command runs (it forwards the interrupt to
the child and keeps waiting), so a SIGINT that lands there would be lost. The engine installs this
handler: the request is remembered, and waits call :func:`check` to raise it at a safe point.

SIGTERM (what CI systems, ``timeout``, systemd and Kubernetes send) and SIGHUP (a closed terminal) are handled
the same way: the case ends INTERRUPTED, evidence is harvested, pods and processes are cleaned up, the reports
are written, and the task exits 128 + the signal's number (:func:`exit_status`: 130, 143, 129).

Why in ``transport/``: the interrupt is lost in the transport (invoke's runner, under every ``Host.run``), and
every layer that waits on commands checks it: backends, cases, the engine, soak. This is the lowest layer
they all import (it needs only :mod:`xpushare.model`); in ``engine/`` it made backends and cases reach up.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from xpushare.model.exit_status import ExitStatus

#: The signals handled as Ctrl-C.
HANDLED: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# The first handled signal of the outermost block; empty: none. The one record of a request (worker threads
# read it through check(): a list's truth value is safe to read across threads).
_received: list[int] = []
# Set by settle(): the run's exit status is written; signals from then on are noted here and change nothing.
_late: list[int] = []
_settled: list[bool] = []


def _handler(signum: int, frame: FrameType | None) -> None:
    if _settled:
        _late.append(signum)
        return
    if not _received:
        _received.append(signum)
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """Install the handler of :data:`HANDLED` for the block (main thread only; a no-op elsewhere). Nested
    blocks keep the outer block's signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) not in (_handler, _recording):  # the outermost block starts from no request
        _received.clear()
        _late.clear()
        _settled.clear()
    previous = {s: signal.signal(s, _handler) for s in HANDLED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _recording(signum: int, frame: FrameType | None) -> None:
    if _settled:
        _late.append(signum)
    elif not _received:
        _received.append(signum)


def settle() -> None:
    """The run's exit status is final (written in run.json): from now until the outermost :func:`installed`
    block ends, a handled signal raises nothing and is not a request (:func:`late` lists it), so that the process
    exits with the status run.json records, whatever instant a signal lands at (the reports, the lease's release,
    the closing lines). Signals before the call stay requests (:func:`requested`)."""
    if not _settled:
        _settled.append(True)


def unsettle() -> None:
    """A new run begins in this process: handled signals are requests again (undoes :func:`settle`)."""
    _settled.clear()


def late() -> list[int]:
    """The handled signals that arrived after :func:`settle` (ignored), in order."""
    return list(_late)


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block a handled signal is recorded (:func:`requested`, :func:`received`) but raises nothing, so
    the block finishes (the run's reports after its last case); the caller checks :func:`requested` after it.
    Main thread only (a no-op elsewhere); the handlers in place before are restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _recording) for s in HANDLED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def requested() -> bool:
    """True once a handled signal arrived inside :func:`installed`."""
    return bool(_received)


def received() -> int | None:
    """The number of the first handled signal, or None (none, or a plain ``KeyboardInterrupt``)."""
    return _received[0] if _received else None


def describe() -> str:
    """What interrupted: ``Ctrl-C``, ``SIGTERM`` or ``SIGHUP``."""
    signum = received()
    return "Ctrl-C" if signum in (None, signal.SIGINT) else signal.Signals(signum).name


def exit_status() -> ExitStatus:
    """The exit status of an interrupted task: 128 + the signal's number (SIGINT 130, SIGTERM 143, SIGHUP
    129); 130 when no signal was recorded (``KeyboardInterrupt`` raised otherwise)."""
    return ExitStatus(128 + (received() or int(signal.SIGINT)))


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed (for wait loops); never after :func:`settle`."""
    if _received and not _settled:
        raise KeyboardInterrupt


def sleep(seconds: float) -> None:
    """Sleep ``seconds`` (negative: not at all), raising ``KeyboardInterrupt`` within 0.2 s of a request (the
    sleep of every wait loop: a plain ``time.sleep`` would hold a Ctrl-C until it ends)."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.2, left))
