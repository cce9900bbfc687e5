"""The scheduler's counters against what its own log says happened (seed 002 §4: DROP_LOCK counted under quota
throttling).

A counter's presence says nothing about whether it counts. Two scrapes of the same scheduler bracket an interval
(``metrics_mid.txt`` then ``metrics_end.txt``); the case's ``scheduler.log`` covers at least that interval (it
starts at the case start and ends at the harvest), and the scheduler logs ``Sent DROP_LOCK to client <id>`` for
every DROP_LOCK it sends (scheduler.c ``send_message``) and ``Throttling client <id>`` for each quota throttle.
So the counter's increase over the interval can be no larger than the log's DROP_LOCK lines (plus a small slack
for sends that failed after being counted), and must be above 0 when the log shows DROP_LOCKs or throttling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare.collect.metrics import parse_exposition
from xpushare.collect.scheduler_log import parse_text
from xpushare.evidence.store import Evidence
from xpushare.model.verdict import Check, Status, Verdict, combine

__all__ = ["COUNTER_END_FILE", "drop_lock_check", "with_counter_checks"]

COUNTER_END_FILE = "metrics_end.txt"
"""The scrape that ends the counter interval (the one that starts it is ``metrics_mid.txt``)."""


def _counter(text: str | None, prefix: str | None, family: str) -> float | None:
    if text is None:
        return None
    values = [s.value for s in parse_exposition(text, prefix).values(family)]
    return sum(values) if values else None


def drop_lock_check(ev: Evidence, th: Mapping[str, Any], prefix: str | None) -> Check:
    """``drop_lock_counted``: ``0 < Δ scheduler_drop_lock_total <= DROP_LOCK log lines + slack``.

    ``Δ``: the counter in ``metrics_end.txt`` minus ``metrics_mid.txt`` (one scheduler, the probe's);
    log lines: ``Sent DROP_LOCK to client`` in ``scheduler.log`` (the case's, a superset of the interval);
    slack: ``met_counter_slack`` (default 2). ``ok`` None when a scrape or the log is missing, or the log shows no
    DROP_LOCK and no throttling (nothing to count: the cross-check cannot be made).
    """
    slack = int(th.get("met_counter_slack", 2))
    family = "scheduler_drop_lock_total"
    start = _counter(ev.text("metrics_mid.txt"), prefix, family)
    end = _counter(ev.text(COUNTER_END_FILE), prefix, family)
    log_text = ev.text("scheduler.log")
    expression = f"0 < delta({family}) <= 'Sent DROP_LOCK' log lines + {slack}"
    if start is None or end is None or log_text is None:
        missing = [n for n, v in (("metrics_mid.txt", start), (COUNTER_END_FILE, end), ("scheduler.log", log_text))
                   if v is None]
        return Check("drop_lock_counted", expression, {"missing": missing}, None,
                     f"counter cross-check not possible: {', '.join(missing)} missing or without {family}")
    summary = parse_text(log_text)
    delta = end - start
    values = {"counter_start": start, "counter_end": end, "delta": delta, "log_drop_lock_lines": summary.drop_lock,
              "log_throttles": summary.throttles, "slack": slack, "sources": ["/metrics", "scheduler.log"]}
    if summary.drop_lock == 0 and summary.throttles == 0:
        return Check("drop_lock_counted", expression, values, None,
                     "counter cross-check not possible: no DROP_LOCK or throttling in scheduler.log")
    ok = 0 < delta <= summary.drop_lock + slack
    detail = "" if ok else (f"{family} rose by {delta:g} while scheduler.log shows {summary.drop_lock} DROP_LOCK "
                            f"line(s) and {summary.throttles} throttle(s)")
    return Check("drop_lock_counted", expression, values, ok, detail)


def with_counter_checks(verdict: Verdict, checks: list[Check]) -> Verdict:
    """``verdict`` with ``checks`` added and its status folded again (:func:`combine`); a SKIP stays SKIP, and a
    PASS summary is kept when the added checks hold. Returns the same object, updated."""
    if verdict.status is Status.SKIP:
        return verdict
    verdict.checks += checks
    status, summary = combine(verdict.checks, pass_summary=verdict.summary)
    verdict.status, verdict.summary = status, summary
    return verdict
