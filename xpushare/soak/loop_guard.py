"""The soak loop's remote operations, guarded: exponential backoff with jitter per operation, and the
periods without a successful operation recorded as gaps (``events.jsonl`` kinds ``error`` and ``gap``).

Connection problems (SSH, kubectl timeouts, an unreachable API server) are retried for ever; other kubectl
errors ``max_consecutive_errors`` times, then re-raised; a changed host key is re-raised at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xpushare.model.errors import HostKeyMismatch, TransportError
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.loop_settings import SoakSettings
from xpushare.transport import interrupt
from xpushare.transport.kube_errors import KubeError, KubeTimeout, KubeUnavailable

__all__ = ["OpGuard", "OpState"]


@dataclass
class OpState:
    """One operation's retry state: consecutive ``failures``, no attempt before ``backoff_until``
    (monotonic s), the open gap's start (unix time, None: no gap) and its first and last error."""

    failures: int = 0
    backoff_until: float = 0.0
    gap_start: float | None = None
    first_error: str = ""
    last_error: str = ""


def _connection_error(exc: BaseException) -> bool:
    return isinstance(exc, (TransportError, KubeUnavailable, KubeTimeout))


class OpGuard:
    """Per-operation backoff and gaps of one soak segment.

    Args:
        settings: backoff limits and ``max_consecutive_errors``.
        checkpoint: its ``gaps`` counts every closed gap.
        clock / monotonic / sleep: the loop's (unix time, monotonic time, a sleep that Ctrl-C interrupts).
        event: writes one ``events.jsonl`` record (``event(kind, **data)``).
        say: prints one progress line.
    """

    def __init__(
        self,
        settings: SoakSettings,
        checkpoint: Checkpoint,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
        event: Callable[..., None],
        say: Callable[[str], None],
    ) -> None:
        self.s = settings
        self.ck = checkpoint
        self.clock = clock
        self.mono = monotonic
        self.sleep = sleep
        self.event = event
        self.say = say
        self.states: dict[str, OpState] = {}

    def state(self, op: str) -> OpState:
        """The retry state of ``op`` (created on first use)."""
        return self.states.setdefault(op, OpState())

    def attempt(self, op: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run a remote operation; on a connection problem record a gap and back off (per operation).
        ``(False, None)`` while backing off or after a failure, else ``(True, fn())``."""
        st = self.state(op)
        if self.mono() < st.backoff_until:
            return False, None
        try:
            value = fn()
        except (TransportError, KubeError) as exc:
            self.failed(op, st, exc)
            return False, None
        self.succeeded(op, st)
        return True, value

    def retry(self, op: str, fn: Callable[[], Any], *, until: float | None = None) -> tuple[bool, Any]:
        """Retry a remote operation (with the backoff of :meth:`attempt`) until it works or ``until`` (monotonic)."""
        while True:
            interrupt.check()
            ok, value = self.attempt(op, fn)
            if ok:
                return True, value
            if until is not None and self.mono() >= until:
                return False, None
            wait = max(0.05, self.states[op].backoff_until - self.mono())
            if until is not None:
                wait = min(wait, max(0.05, until - self.mono()))
            self.sleep(wait)

    def failed(self, op: str, st: OpState, exc: BaseException) -> None:
        """Count a failure of ``op``: open a gap (first failure), re-raise what is not retried, back off."""
        text = f"{type(exc).__name__}: {exc}"
        st.failures += 1
        st.last_error = text
        if st.gap_start is None:
            st.gap_start = self.clock()
            st.first_error = text
            self.event("error", op=op, error=text[:500])
        if isinstance(exc, HostKeyMismatch):
            raise exc  # never retried: a changed host key is a security problem, not a network blip
        if not _connection_error(exc) and st.failures >= self.s.max_consecutive_errors:
            raise exc
        delay = min(self.s.backoff_max_s, self.s.backoff_initial_s * 2 ** (st.failures - 1))
        delay *= 1.0 + random.uniform(0.0, 0.2)
        st.backoff_until = self.mono() + delay
        self.say(f"{op}: {text[:200]} (attempt {st.failures}; retry in {delay:.1f}s)")

    def succeeded(self, op: str, st: OpState) -> None:
        """A success of ``op``: close its gap, reset its backoff."""
        if st.gap_start is not None:
            self.close_gap(op, st, self.clock(), "recovered")
        st.failures = 0
        st.backoff_until = 0.0

    def close_gap(self, op: str, st: OpState, end: float, how: str) -> None:
        """Record the open gap of ``op`` as ended at ``end`` (unix time), ``how`` it ended."""
        assert st.gap_start is not None
        self.ck.gaps += 1
        self.event("gap", op=op, start=round(st.gap_start, 3), end=round(end, 3),
                   duration_s=round(end - st.gap_start, 3), failures=st.failures, error=st.first_error[:500],
                   how=how)
        self.say(f"{op}: gap of {end - st.gap_start:.1f}s closed ({how}; {st.failures} failed attempt(s))")
        st.gap_start = None

    def close_open_gaps(self, end: float, reason: str) -> None:
        """Close every open gap at the segment's end (``how``: ``open at <reason>``)."""
        for op, st in self.states.items():
            if st.gap_start is not None:
                self.close_gap(op, st, end, f"open at {reason}")

    def in_gap(self) -> list[str]:
        """The operations with an open gap, sorted."""
        return sorted(op for op, st in self.states.items() if st.gap_start is not None)
