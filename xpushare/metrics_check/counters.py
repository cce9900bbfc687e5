"""The DROP_LOCK line of ``invoke metrics-check`` (seed 002 §4: ``drop_lock_total > 0`` when quota throttling
happens), judged from two sources over the load part's window: the counter ``scheduler_drop_lock_total`` on
``/metrics`` and the scheduler's own log (``Sent DROP_LOCK to client`` and ``Throttling client`` lines,
:mod:`xpushare.parsers.scheduler_log`), by the rule MET-004 uses
(:func:`xpushare.judge.metrics_counters.drop_lock_counted`).

The window opens with the idle page (no client registered: nothing is throttled) and a read of the log, and closes,
while the probes still run, once the log shows a DROP_LOCK or a throttle: then one more page and one more read of
the log. The log's share of the window is the difference of the two reads' counts, so no clock is compared. A
counter that did not rise while the log shows DROP_LOCKs is FAIL; a log without any in ``settle_s`` is SKIP (nothing
to count), as is a scheduler whose log metrics-check cannot read (``--url``, host mode): never PASS on no evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from xpushare.judge.metrics_counters import DROP_LOCK_EXPRESSION, drop_lock_counted
from xpushare.metrics_check.checklist import CheckLine, answer_text, shorten
from xpushare.metrics_check.endpoint import HttpResponse
from xpushare.model.errors import XpushareError
from xpushare.model.verdict import Status
from xpushare.parsers.metrics import parse_exposition
from xpushare.parsers.scheduler_log import parse_text

__all__ = ["DROP_LOCK_ITEM", "DROP_LOCK_SLACK", "DropLockWindow", "skipped_line"]

DROP_LOCK_ITEM = "DROP_LOCK counted under throttling"
DROP_LOCK_SLACK = 2
"""DROP_LOCKs the counter may be ahead of the log (a send counted, then failed before its line), as MET-004's
``met_counter_slack``."""

ReadLog = Callable[[], str]
"""Reads the scheduler's whole log so far (raises :class:`XpushareError` or ``OSError`` when it cannot)."""


def _expected(slack: int) -> str:
    return DROP_LOCK_EXPRESSION.format(slack=slack)


def skipped_line(why: str, slack: int = DROP_LOCK_SLACK) -> CheckLine:
    """The DROP_LOCK line as SKIP, saying why nothing was judged."""
    return CheckLine(DROP_LOCK_ITEM, _expected(slack), shorten(why, 240), Status.SKIP)


def _counter(body: str | None, prefix: str | None) -> float | None:
    values = [s.value for s in parse_exposition(body or "", prefix).values("scheduler_drop_lock_total")]
    return sum(values) if values else None


def _events(log: str) -> tuple[int, int]:
    summary = parse_text(log)
    return summary.drop_lock, summary.throttles


@dataclass
class DropLockWindow:
    """One scheduler's DROP_LOCK window: :meth:`open` with the idle page, :meth:`close` while the probes run.

    ``read_log``: the scheduler's log (None: metrics-check cannot read it, the line is SKIP).
    """

    read_log: ReadLog | None
    prefix: str | None = None
    slack: int = DROP_LOCK_SLACK
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _start: float | None = None
    _log_start: tuple[int, int] | None = None
    _problem: str | None = None

    def open(self, idle_body: str | None) -> None:
        """Start the window: the counter on the idle page, the log's DROP_LOCK and throttle lines so far."""
        self._start = _counter(idle_body, self.prefix)
        if self.read_log is None:
            return
        try:
            self._log_start = _events(self.read_log())
        except (XpushareError, OSError) as exc:
            self._problem = f"the scheduler log could not be read: {exc}"

    def close(self, scrape: Callable[[], HttpResponse], *, settle_s: float, poll_s: float = 1.0) -> CheckLine:
        """Wait (up to ``settle_s``, polling the log every ``poll_s``) until the log shows a DROP_LOCK or a
        throttle since :meth:`open`, then take the closing page and log; the line, PASS / FAIL / SKIP."""
        if self.read_log is None:
            return skipped_line("the scheduler log is not readable by metrics-check here (--url, host mode): "
                                "DROP_LOCK not cross-checked")
        if self._problem is not None or self._log_start is None:
            return skipped_line(self._problem or "the window was not opened")
        if self._start is None:
            return CheckLine(DROP_LOCK_ITEM, _expected(self.slack), "scheduler_drop_lock_total absent from the "
                             "idle page", Status.FAIL)
        deadline = self.clock() + settle_s
        try:
            while True:
                drops, throttles = (a - b for a, b in zip(_events(self.read_log()), self._log_start, strict=True))
                if drops > 0 or throttles > 0:
                    break
                if self.clock() >= deadline:
                    return skipped_line(f"no DROP_LOCK or throttling in the scheduler log in {settle_s:g} s of "
                                        "probe load: nothing to count")
                self.sleep(poll_s)
            self.sleep(poll_s)  # the lines seen were logged right before their counter moved: let it settle
            resp = scrape()
            drops, throttles = (a - b for a, b in zip(_events(self.read_log()), self._log_start, strict=True))
        except (XpushareError, OSError) as exc:
            return skipped_line(f"the scheduler log could not be read: {exc}")
        if resp.status != 200:
            return CheckLine(DROP_LOCK_ITEM, _expected(self.slack), f"closing /metrics: {answer_text(resp)}",
                             Status.FAIL)
        end = _counter(resp.body, self.prefix)
        if end is None:
            return CheckLine(DROP_LOCK_ITEM, _expected(self.slack), "scheduler_drop_lock_total absent from the "
                             "closing page", Status.FAIL)
        delta = end - self._start
        ok, detail = drop_lock_counted(delta, drops, throttles, self.slack)
        observed = (f"/metrics: +{delta:g} ({self._start:g} -> {end:g}); scheduler log: {drops} 'Sent DROP_LOCK', "
                    f"{throttles} 'Throttling' line(s)")
        status = Status.SKIP if ok is None else (Status.PASS if ok else Status.FAIL)
        return CheckLine(DROP_LOCK_ITEM, _expected(self.slack), shorten(observed if ok is not False else
                                                                         f"{observed}: {detail}", 240), status)
