"""Several clusters in one run: ``--cluster c1,c2`` names, what the clusters of a run share, and running one job
per cluster concurrently.

Each cluster's cases run in their own thread (the clusters share the run directory, where each writes under
``<run>/<cluster>/``, the run's ``events.jsonl`` and ``debug.log``, and a :class:`Budget`). Signals reach only
the main thread: its handler (:mod:`xpushare.transport.interrupt`) records the request, and every cluster's
thread sees it at its next wait (``interrupt.check``), ends its case INTERRUPTED, harvests and cleans up, so an
interrupt and the later ``--resume`` work per cluster.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from xpushare.model.errors import UsageError

__all__ = ["Budget", "Outcome", "cluster_names", "disk_full", "run_concurrently"]

#: How often the main thread looks whether the clusters' threads ended (seconds). It sleeps rather than
#: ``join``s: a ``join`` that a signal's ``KeyboardInterrupt`` cuts short can mark a running thread as ended
#: (CPython's thread-state lock), and the run would then report before that cluster's case was recorded.
WAIT_POLL_S = 0.2


def cluster_names(text: str) -> tuple[str, ...]:
    """``"c1"`` or ``"c1,c2"`` (spaces around names allowed) -> the names in order.

    Raises:
        UsageError: an empty name (``c1,``) or one named twice (``c1,c1``).
    """
    names = tuple(part.strip() for part in str(text).split(","))
    if any(not n for n in names):
        raise UsageError(f"--cluster takes a name or a comma list of names (c1,c2), not {text!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--cluster names {', '.join(twice)} more than once")
    return names


def disk_full(exc: BaseException) -> bool:
    """True for the ``OSError`` of a full file system (``ENOSPC``, ``EDQUOT``)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


@dataclass
class Budget:
    """What every cluster of one run shares while its cases run.

    ``maxfail``: the run starts no further case, on any cluster, once ``failures`` (FAIL/ERROR cases counted
    across all clusters) reaches it (None: no limit); a case already running on another cluster finishes.
    ``halted``: why every cluster stops before its next case (a full run directory), None while the run goes on.
    Thread-safe.
    """

    maxfail: int | None = None
    failures: int = 0
    halted: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def exhausted(self) -> bool:
        """True once ``--maxfail`` is reached."""
        return self.maxfail is not None and self.failures >= self.maxfail

    def count(self, status: str) -> None:
        """Count a case that ended with ``status`` (only FAIL, ERROR and INTERMITTENT count)."""
        if status in ("FAIL", "ERROR", "INTERMITTENT"):
            with self._lock:
                self.failures += 1

    def halt(self, reason: str) -> None:
        """Stop every cluster before its next case (the first reason is kept)."""
        with self._lock:
            self.halted = self.halted or reason


@dataclass
class Outcome:
    """What the clusters' jobs gave: ``interrupted`` (a job said so, or a signal arrived while waiting) and the
    exception of each job that raised one, by cluster name, in the order of the jobs."""

    interrupted: bool = False
    errors: dict[str, BaseException] = field(default_factory=dict)


def run_concurrently(jobs: Mapping[str, Callable[[], bool]]) -> Outcome:
    """Run each cluster's job (returns True when it was interrupted) in its own thread, one job too, and wait for
    all of them: the main thread, where Python runs signal handlers, runs no case code (a run records a signal,
    :func:`xpushare.transport.interrupt.deferred`, and the jobs see it at their waits and wind down: harvest,
    cleanup, records). A ``KeyboardInterrupt`` in the main thread while waiting marks the outcome interrupted and
    keeps waiting. A job's exception is kept, not raised: the other clusters
    finish and the run's report is written before the caller raises it.
    """
    outcome = Outcome()
    done: dict[str, bool] = {}  # written by each thread as its last act: its size says how many ended

    def work(name: str, job: Callable[[], bool]) -> None:
        stopped = False
        try:
            stopped = job()
        except KeyboardInterrupt:
            stopped = True
        except BaseException as exc:  # kept for the caller, who raises it after the report
            outcome.errors[name] = exc
        finally:
            done[name] = stopped

    threads = [threading.Thread(target=work, args=(name, job), name=f"cluster-{name}", daemon=True)
               for name, job in jobs.items()]
    for t in threads:
        t.start()
    while True:  # the signal may land anywhere in the loop, the test included
        try:
            while len(done) < len(threads):
                time.sleep(WAIT_POLL_S)
            break
        except KeyboardInterrupt:
            outcome.interrupted = True
    outcome.interrupted = outcome.interrupted or any(done.values())
    outcome.errors = {name: outcome.errors[name] for name in jobs if name in outcome.errors}
    return outcome
