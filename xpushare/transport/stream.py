"""Live output of many hosts on one terminal, pdsh-style: every complete line prefixed ``host: ``.

A :class:`PrefixedLines` is the ``out_stream``/``err_stream`` handed to invoke's runner
(:meth:`xpushare.transport.base.Host.run`), whose reader threads call :meth:`~PrefixedLines.write` with each
decoded chunk; whole lines go out under one lock shared by all hosts, so lines of two hosts never mix.
"""

from __future__ import annotations

import threading
from typing import TextIO


class PrefixedLines:
    """A write-only text stream that writes each complete line to ``out`` as ``<prefix>: <line>``.

    A partial last line waits for its newline or for :meth:`close`. ``lock`` serialises writers of one ``out``.
    Text written after :meth:`close` is dropped: a reader thread left behind at a command's deadline
    (:mod:`~xpushare.transport.deadline`) must not print after the task's summary.
    """

    def __init__(self, out: TextIO, prefix: str, lock: threading.Lock) -> None:
        self._out = out
        self._prefix = prefix
        self._lock = lock
        self._pending = ""
        self._closed = False

    def write(self, text: str) -> int:
        """Buffer ``text``; write every line it completes. Returns ``len(text)``."""
        if self._closed:
            return len(text)
        *lines, self._pending = (self._pending + text).split("\n")
        if lines:
            self._emit(lines)
        return len(text)

    def flush(self) -> None:
        """Nothing to do: complete lines are written at once, a partial one waits for :meth:`close`."""

    def close(self) -> None:
        """Write a pending partial line (a command's last line without a newline); later writes are dropped."""
        self._closed = True
        if self._pending:
            pending, self._pending = self._pending, ""
            self._emit([pending])

    def _emit(self, lines: list[str]) -> None:
        text = "".join(f"{self._prefix}: {line.rstrip(chr(13))}\n" for line in lines)
        with self._lock:
            self._out.write(text)
            self._out.flush()
