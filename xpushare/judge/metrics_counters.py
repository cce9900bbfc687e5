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

from xpushare.evidence.store import Evidence
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers.metrics import parse_exposition
from xpushare.parsers.scheduler_log import parse_text

__all__ = ["COUNTER_END_FILE", "DROP_LOCK_EXPRESSION", "MESSAGE_TYPES", "disconnect_check", "drop_lock_check",
           "drop_lock_counted", "messages_check", "with_counter_checks"]

DROP_LOCK_EXPRESSION = "0 < delta(scheduler_drop_lock_total) <= 'Sent DROP_LOCK' log lines + {slack}"
"""The rule of :func:`drop_lock_counted` (``{slack}`` filled in)."""

#: Messages a throttled client sends all the time (scheduler.c ``process_msg`` counts each one it receives in
#: ``scheduler_messages_total{type}`` and logs ``Received <TYPE> from <client>``).
MESSAGE_TYPES = ("REQ_LOCK", "LOCK_RELEASED")

COUNTER_END_FILE = "metrics_end.txt"
"""The scrape that ends the counter interval (the one that starts it is ``metrics_mid.txt``)."""


def _counter(text: str | None, prefix: str | None, family: str, **labels: str) -> float | None:
    if text is None:
        return None
    values = [s.value for s in parse_exposition(text, prefix).values(family, **labels)]
    return sum(values) if values else None


def _deltas(ev: Evidence, prefix: str | None, family: str, **labels: str) -> tuple[float | None, list[str]]:
    """The counter's rise from ``metrics_mid.txt`` to :data:`COUNTER_END_FILE` (None, and what is missing)."""
    start = _counter(ev.text("metrics_mid.txt"), prefix, family, **labels)
    end = _counter(ev.text(COUNTER_END_FILE), prefix, family, **labels)
    missing = [n for n, v in (("metrics_mid.txt", start), (COUNTER_END_FILE, end)) if v is None]
    return (None if start is None or end is None else end - start), missing


def drop_lock_counted(delta: float, drop_lock_lines: int, throttles: int, slack: int) -> tuple[bool | None, str]:
    """The DROP_LOCK rule over one interval, from two sources: ``delta`` (the rise of
    ``scheduler_drop_lock_total`` between two scrapes of /metrics) against ``drop_lock_lines`` and ``throttles``
    (the ``Sent DROP_LOCK to client`` and ``Throttling client`` lines the scheduler logged over the same interval).

    Returns ``(ok, detail)``: ``ok`` None when the log shows neither (nothing to count: no judgment), True when
    ``0 < delta <= drop_lock_lines + slack``, else False with ``detail`` naming both sources' numbers.
    """
    if drop_lock_lines == 0 and throttles == 0:
        return None, "no DROP_LOCK or throttling in the scheduler log: nothing to count"
    ok = 0 < delta <= drop_lock_lines + slack
    return ok, "" if ok else (f"scheduler_drop_lock_total (/metrics) rose by {delta:g} while the scheduler log shows "
                              f"{drop_lock_lines} DROP_LOCK line(s) and {throttles} throttle(s)")


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
    expression = DROP_LOCK_EXPRESSION.format(slack=slack)
    if start is None or end is None or log_text is None:
        missing = [n for n, v in (("metrics_mid.txt", start), (COUNTER_END_FILE, end), ("scheduler.log", log_text))
                   if v is None]
        return Check("drop_lock_counted", expression, {"missing": missing}, None,
                     f"counter cross-check not possible: {', '.join(missing)} missing or without {family}")
    summary = parse_text(log_text)
    delta = end - start
    values = {"counter_start": start, "counter_end": end, "delta": delta, "log_drop_lock_lines": summary.drop_lock,
              "log_throttles": summary.throttles, "slack": slack, "sources": ["/metrics", "scheduler.log"]}
    ok, detail = drop_lock_counted(delta, summary.drop_lock, summary.throttles, slack)
    if ok is None:
        detail = "counter cross-check not possible: no DROP_LOCK or throttling in scheduler.log"
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


def messages_check(ev: Evidence, th: Mapping[str, Any], prefix: str | None) -> Check:
    """``messages_counted``: per type of :data:`MESSAGE_TYPES` the log shows, ``0 < Δ scheduler_messages_total{type}
    <= 'Received <TYPE>' log lines + slack`` (the same interval and slack as :func:`drop_lock_check`). ``ok`` None
    when a scrape or the log is missing, or the log shows none of these messages."""
    slack = int(th.get("met_counter_slack", 2))
    expression = f"0 < delta(scheduler_messages_total{{type}}) <= 'Received <type>' log lines + {slack}"
    log_text = ev.text("scheduler.log")
    if log_text is None:
        return Check("messages_counted", expression, {"missing": ["scheduler.log"]}, None,
                     "counter cross-check not possible: scheduler.log missing")
    received = parse_text(log_text).received
    by_type: dict[str, Any] = {}
    wrong: list[str] = []
    for typ in MESSAGE_TYPES:
        logged = received.get(typ, 0)
        if logged == 0:
            continue
        delta, missing = _deltas(ev, prefix, "scheduler_messages_total", type=typ)
        if delta is None:
            return Check("messages_counted", expression, {"missing": missing}, None,
                         f"counter cross-check not possible: {', '.join(missing)} without messages_total{{type={typ}}}")
        by_type[typ] = {"delta": delta, "log_lines": logged}
        if not 0 < delta <= logged + slack:
            wrong.append(f"{typ} rose by {delta:g} against {logged} 'Received {typ}' line(s)")
    if not by_type:
        return Check("messages_counted", expression, {}, None,
                     f"counter cross-check not possible: no {' or '.join(MESSAGE_TYPES)} received in scheduler.log")
    return Check("messages_counted", expression, {"by_type": by_type, "slack": slack,
                                                  "sources": ["/metrics", "scheduler.log"]},
                 not wrong, "; ".join(wrong))


def disconnect_check(ev: Evidence, th: Mapping[str, Any], prefix: str | None) -> Check:
    """``disconnects_counted``: ``Δ scheduler_client_disconnect_total <= 'Removing client' log lines + slack`` over
    the same interval (a counter that counts disconnects that never happened). ``ok`` None when a scrape or the log
    is missing."""
    slack = int(th.get("met_counter_slack", 2))
    expression = f"delta(scheduler_client_disconnect_total) <= 'Removing client' log lines + {slack}"
    delta, missing = _deltas(ev, prefix, "scheduler_client_disconnect_total")
    log_text = ev.text("scheduler.log")
    if delta is None or log_text is None:
        missing += [] if log_text is not None else ["scheduler.log"]
        return Check("disconnects_counted", expression, {"missing": missing}, None,
                     f"counter cross-check not possible: {', '.join(missing)} missing")
    removed = len(parse_text(log_text).disconnected_clients)
    values = {"delta": delta, "log_removals": removed, "slack": slack}
    ok = 0 <= delta <= removed + slack
    return Check("disconnects_counted", expression, values, ok,
                 "" if ok else f"client_disconnect_total rose by {delta:g} against {removed} 'Removing client' line(s)")
