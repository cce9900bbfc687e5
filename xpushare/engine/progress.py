"""A run's progress as a person follows it, on a terminal and in a log file alike.

Every line starts with ``[xpushare]`` (and the cluster's name when several clusters run). Before the cases: the
run's expected total (:func:`expected_line`). While a case runs: its elapsed and expected time, its phase and what
it waits for (``FUNC-003 Spread across GPUs: 1m30s of ~2m00s expected; act: waiting for 3 pod(s) to finish:
1 Running, 2 Succeeded``), from the case thread's :mod:`~xpushare.transport.activity`. On a terminal that is a
spinner updated every second; otherwise (a pipe, a file, CI) one such line every :data:`TICK_S` seconds, so a log
never goes silent for longer. After each case its verdict line; at the end the ``done:`` line (the driver's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console

from xpushare.transport import activity

__all__ = ["TICK_S", "Progress", "case_line", "duration", "expected_line"]

TICK_S = 30.0
"""Seconds between two progress lines of a running case when the output is not a terminal."""
LIVE_TICK_S = 1.0
"""Seconds between two updates of the spinner's text on a terminal."""


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h04m``: a duration as a person reads it (whole seconds, rounded)."""
    whole = round(max(seconds, 0.0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def case_line(case_id: str, title: str, elapsed_s: float, expected_s: float | None, state: activity.Activity) -> str:
    """One progress line of a running case: elapsed of expected time, phase, what it waits for."""
    if expected_s is None:
        timing = f"{duration(elapsed_s)} elapsed (no estimate)"
    elif elapsed_s <= expected_s:
        timing = f"{duration(elapsed_s)} of ~{duration(expected_s)} expected"
    else:
        timing = f"{duration(elapsed_s)} elapsed, over the ~{duration(expected_s)} expected"
    doing = ": ".join(part for part in (state.phase, state.waiting) if part)
    return f"{case_id} {title}: {timing}" + (f"; {doing}" if doing else "")


def expected_line(plan: Sequence[Mapping[str, Any]]) -> str:
    """The run's expected total before it starts, from the dry run's plan of each case (``plan``: RUN | SKIP,
    ``expected_duration_s``: seconds or None, :func:`xpushare.engine.plan.expected_case_duration`), e.g.
    ``expected ~2m10s (3 case(s) from earlier runs, their sizes or their static estimates; 9 will SKIP)`` or
    ``expected: unknown (no estimate for 3 case(s): ...; 9 will SKIP)`` (only a case outside the matrix has none)."""
    running = [c for c in plan if c.get("plan") != "SKIP"]
    skipping = len(plan) - len(running)
    known = [float(c["expected_duration_s"]) for c in running if c.get("expected_duration_s") is not None]
    unknown = len(running) - len(known)
    parts = []
    if known:
        parts.append(f"{len(known)} case(s) from earlier runs, their sizes or their static estimates")
    if unknown:
        parts.append(f"no estimate for {unknown} case(s): no earlier run of them on this cluster, no estimate of "
                     "their own")
    if skipping:
        parts.append(f"{skipping} will SKIP")
    head = f"expected ~{duration(sum(known))}" if known or not unknown else "expected: unknown"
    return f"{head} ({'; '.join(parts)})" if parts else head


class Progress:
    """Live progress: a rich spinner on a terminal, plain lines otherwise (CI, pipes, files). ``label`` (a cluster
    name) prefixes every line and turns the spinner off: several clusters print lines concurrently.
    ``tick_s``: seconds between two lines of a running case in plain output."""

    _lock = threading.Lock()  # one whole line at a time from the clusters' threads

    def __init__(self, out: TextIO, label: str | None = None, *, tick_s: float = TICK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = Console(file=out)
        self.live = self.console.is_terminal and label is None
        self.prefix = f"{label}: " if label else ""
        self.tick_s = tick_s
        self.clock = clock
        self._status: Any = None

    def _line(self, text: str) -> None:
        with self._lock:
            print(f"[xpushare] {self.prefix}{text}", file=self.console.file, flush=True)

    def start(self, text: str) -> None:
        """Show ``text`` as what runs now: the spinner's text on a terminal, else one line."""
        if self.live:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._line(text)

    def _update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)
        else:
            self._line(text)

    def done(self, line: str) -> None:
        """Stop the spinner, if any, and print ``line``."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        self._line(line)

    @contextmanager
    def case(self, case_id: str, title: str, expected_s: float | None, *, position: str = "",
             skip: bool = False) -> Iterator[None]:
        """While the block runs (in the case's thread), show the case's progress: a first line (``position``,
        e.g. ``3/12``, and the expected time, or ``will SKIP`` when ``skip``), then :func:`case_line` every second
        on a terminal or every ``tick_s`` otherwise. The caller prints the verdict line with :meth:`done` after
        the block."""
        with activity.tracked(case_id) as state:
            started = self.clock()
            ahead = ("will SKIP" if skip else f"expected ~{duration(expected_s)}" if expected_s is not None
                     else "no estimate")
            self.start(f"{case_id} {title} ({position + ', ' if position else ''}{ahead}) ...")
            stop = threading.Event()
            period = LIVE_TICK_S if self.live else self.tick_s

            def tick() -> None:
                while not stop.wait(period):
                    self._update(case_line(case_id, title, self.clock() - started, expected_s,
                                           activity.current(state)))

            ticker = threading.Thread(target=tick, name=f"progress-{case_id}", daemon=True)
            ticker.start()
            try:
                yield
            finally:
                stop.set()
                ticker.join()
