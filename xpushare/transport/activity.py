"""What the thread running a case waits for right now, for the progress lines of a run.

The code that waits (a backend's pod wait, the lifecycle's phases) says what it waits for with :func:`note` or
:func:`pods`; the run's progress (:mod:`xpushare.engine.progress`) reads it with :func:`current` from another
thread and prints it (``waiting for 3 pod(s) to finish: 1 Running, 2 Succeeded``). Each case's thread has its own
state, so several clusters of one run (one thread each) never mix theirs. Each change is also one line of the
logical actions' log (:data:`xpushare.transport.command_log.ACTIONS`: ``-v`` and ``debug.log``). Nothing raises: a
note outside a tracked thread changes no state.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from xpushare.transport import command_log

__all__ = ["Activity", "action", "current", "note", "pods", "tracked"]


@dataclass
class Activity:
    """One thread's activity: ``phase`` (begin, act, harvest, cleanup, judge) and ``waiting`` (one line: what it
    waits for, ``""`` when it waits for nothing in particular); ``label`` (a case id) starts its log lines."""

    phase: str = ""
    waiting: str = ""
    label: str = ""


_local = threading.local()
_lock = threading.Lock()


@contextmanager
def tracked(label: str = "") -> Iterator[Activity]:
    """Make a fresh :class:`Activity` (its log lines start with ``label``) this thread's own while the block runs;
    yields it for the reader."""
    state = Activity(label=label)
    previous = getattr(_local, "state", None)
    _local.state = state
    try:
        yield state
    finally:
        _local.state = previous


def note(*, phase: str | None = None, waiting: str | None = None) -> None:
    """Update this thread's activity: a new ``phase`` clears ``waiting`` unless that is given too."""
    state: Activity | None = getattr(_local, "state", None)
    if state is None:
        return
    with _lock:
        before = (state.phase, state.waiting)
        if phase is not None:
            state.phase, state.waiting = phase, ""
        if waiting is not None:
            state.waiting = waiting
        after = (state.phase, state.waiting)
    if after != before:  # a poll that saw nothing new logs nothing
        command_log.ACTIONS.info("%s", ": ".join(part for part in (state.label, *after) if part))


def action(text: str) -> None:
    """Log one logical action (``FUNC-003: start 2 pod(s): w2-1, w2-2``: this thread's label first), shown with
    ``-v`` and kept in ``debug.log``."""
    state: Activity | None = getattr(_local, "state", None)
    command_log.ACTIONS.info("%s", f"{state.label}: {text}" if state is not None and state.label else text)


def pods(phases: Iterable[str], *, count: int, until: str) -> None:
    """Note a wait for ``count`` pods to get ``until`` (running | terminal) from the phases last seen, e.g.
    ``waiting for 3 pod(s) to finish: 1 Running, 2 Succeeded``."""
    seen = Counter(phases)
    goal = "finish" if until == "terminal" else "start running"
    tally = ", ".join(f"{n} {phase}" for phase, n in sorted(seen.items())) or "none seen yet"
    note(waiting=f"waiting for {count} pod(s) to {goal}: {tally}")


def current(state: Activity) -> Activity:
    """A copy of ``state`` taken under the lock (the reader's consistent view)."""
    with _lock:
        return Activity(state.phase, state.waiting, state.label)
