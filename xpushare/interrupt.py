"""Ctrl-C that cannot be swallowed.

invoke's command runner catches ``KeyboardInterrupt`` while a command runs (it forwards the interrupt to
the child and keeps waiting), so a SIGINT that lands there would be lost. The engine installs this
handler: the request is remembered, and waits call :func:`check` to raise it at a safe point.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_requested = threading.Event()


def _handler(signum: int, frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """Install the SIGINT handler for the block (main thread only; a no-op elsewhere)."""
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def requested() -> bool:
    """True once Ctrl-C was pressed inside :func:`installed`."""
    return _requested.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed (for wait loops)."""
    if _requested.is_set():
        raise KeyboardInterrupt
