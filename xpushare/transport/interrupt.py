"""Ctrl-C, SIGTERM and SIGHUP that cannot be swallowed.

invoke's command runner catches ``KeyboardInterrupt`` while a command runs (it forwards the interrupt to
the child and keeps waiting), so a SIGINT that lands there would be lost. The engine installs this
handler: the request is remembered, and waits call :func:`check` to raise it at a safe point.

SIGTERM (what CI systems, ``timeout``, systemd and Kubernetes send) and SIGHUP (a closed terminal) are handled
the same way: the case ends INTERRUPTED, evidence is harvested, pods and processes are cleaned up, the reports
are written, and the task exits 128 + the signal's number (:func:`exit_status`: 130, 143, 129).

A signal can come at any instant, and more than once (``timeout`` signals its child and then the process group;
a terminal's Ctrl-C reaches the whole foreground group). A task body (:func:`installed`) gets one
``KeyboardInterrupt`` for the first delivery and none for the later ones. A run (:func:`deferred`) gets none at
all: its cases run in worker threads that see the request at their waits, its main thread only records it, and
once run.json's end is written (:func:`settle`) a later delivery changes nothing, so the exit status is always
run.json's (docs/reliability.md "Signals at any instant").

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
# The handled signals delivered after settle(): noted, ignored (late()).
_late: list[int] = []


class _Mode:
    """What the handler does with a delivery (main thread only: Python runs signal handlers there).

    ``raise_next``: raise ``KeyboardInterrupt`` at this delivery (then no more: a second delivery, from ``timeout``
    and the process group or a second Ctrl-C, is recorded only, so the wind-down the first one started is never
    cut short). ``settled``: the task's outcome is final (run.json's end is written): deliveries are ignored."""

    raise_next = False
    settled = False


def _handler(signum: int, frame: FrameType | None) -> None:
    if _Mode.settled:
        _late.append(signum)
        return
    if not _received:
        _received.append(signum)
    if _Mode.raise_next:
        _Mode.raise_next = False  # before raising: one raise per raising block
        raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _handling(*, raising: bool) -> Iterator[None]:
    """The handler of :data:`HANDLED` for the block, raising or not (see :class:`_Mode`); the outermost block
    starts from no request; the handlers and mode in place before are restored."""
    if not _main_thread():
        yield
        return
    outermost = signal.getsignal(signal.SIGINT) is not _handler
    previous_mode = _Mode.raise_next
    if outermost:
        _received.clear()
        _late.clear()
        _Mode.settled = False
    _Mode.raise_next = raising
    previous = {s: signal.signal(s, _handler) for s in HANDLED} if outermost else {}
    try:
        yield
    finally:
        _Mode.raise_next = previous_mode if not outermost else False
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def installed() -> Iterator[None]:
    """Install the handler of :data:`HANDLED` for the block (main thread only; a no-op elsewhere): the first
    delivery records the signal and raises ``KeyboardInterrupt``; a later one is recorded only. Nested blocks keep
    the outer block's signal."""
    with _handling(raising=True):
        yield


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block a handled signal is recorded (:func:`requested`, :func:`received`) but raises nothing
    asynchronously: the code sees it where it asks (:func:`check`, :func:`sleep`, :func:`requested`), so a run's
    harvest, cleanup, records, events and reports are never cut in the middle, whenever the signal comes and however
    often. Main thread only (a no-op elsewhere); the handlers and mode in place before are restored."""
    with _handling(raising=False):
        yield


@contextmanager
def raising() -> Iterator[None]:
    """Within a :func:`deferred` block, a block where the first delivery raises ``KeyboardInterrupt`` at once (a
    wait that does not call :func:`check`, such as a setup pipeline's commands); a request recorded before the
    block raises on entry. The caller catches ``KeyboardInterrupt`` outside the block. Main thread only."""
    if not _main_thread():
        yield
        return
    previous = _Mode.raise_next
    _Mode.raise_next = True
    try:
        check()
        yield
    finally:
        _Mode.raise_next = previous


def settle() -> bool:
    """Make the task's outcome final: from now on, until the outermost block ends, a delivery is ignored (it
    changes neither what the run wrote nor the exit status). Returns :func:`requested` as of that instant, so the
    caller can record a request that came before it (main thread)."""
    _Mode.settled = True
    return requested()


def unsettle() -> None:
    """A new run begins in this process: deliveries are requests again (undoes :func:`settle`)."""
    _Mode.settled = False


def late() -> list[int]:
    """The handled signals delivered after :func:`settle` (ignored), in order."""
    return list(_late)


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
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed (for wait loops); never once the outcome is settled."""
    if _received and not _Mode.settled:
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
