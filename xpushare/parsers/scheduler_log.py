"""Streaming parser of the scheduler log (``kubectl logs [--timestamps] -l name=xpushare-scheduler``).

The log can be huge (debug mode writes a whole pod JSON per client every 5 s, docs/sut/log.md §annotation-debug),
so the parser is a state machine fed one line at a time, in constant memory apart from per-client
state and capped event lists: a 1 GB file is parsed line by line
(:func:`~xpushare.evidence.scheduler_log_file.parse_file`).

Interfaces: docs/sut/README.md §naming (``[XPUSHARE]`` and ``[NVSHARE]`` prefixes; registration with or
without `` on GPU <uuid>``), docs/sut/log.md (line catalogue), §regex (regexes). Optional line prefixes that
are stripped first: kubectl ``--prefix`` (``[pod/<name>/<container>] ``) and kubectl ``--timestamps``
(RFC3339, see :func:`xpushare.parsers.pod_log.strip_timestamp`).

What is counted and how (all per docs/sut/log.md):

* levels: the ``[<GEN>][<LEVEL>]: `` prefix; lines without it count under ``"OTHER"``;
* sends: only the generic ``Sent <TYPE> to client <id>`` line (docs/sut/log.md §send), matched on the whole message,
  so ``Sent DROP_LOCK to client <id> for fallback to serial mode`` (an extra line logged after the
  generic one during overload preemption, docs/sut/log.md §lock-traffic) is counted separately as ``fallback_drops`` and
  never twice;
* receipts: ``Received <TYPE>[ from <id>...]``;
* disconnects: ``Removing client <id16>|<UNREGISTERED>`` exactly (not ``... from wait queue``);
* client identity: a registration carries the id, the GPU key, pod and namespace (``none``/``none``
  outside Kubernetes, docs/sut/client.md §identity) and, in debug mode only, the host pid of
  the DEBUG line ``SO_PEERCRED: client fd=<fd> pid=<pid> (client reported pid=<pid>)`` (or
  ``SO_PEERCRED failed, using client-reported pid=<pid>``) that ``register_client`` logs before the
  ``Registered client`` line (scheduler.c; one client is registered at a time, so the last such line
  before a registration is its own). Removal lines carry the id only.

This module is the public face: :func:`parse_lines`/:func:`parse_text` and the line scan that needs no state
machine (:func:`logged_allocations`); reading a log file from disk is
:func:`xpushare.evidence.scheduler_log_file.parse_file`'s (no I/O here, docs/architecture.md). The
records and :class:`~xpushare.parsers.scheduler_log_records.SchedulerLogSummary` live in
:mod:`~xpushare.parsers.scheduler_log_records`, :class:`~xpushare.parsers.scheduler_log_parser.SchedulerLogParser`
(its handlers and caps) in :mod:`~xpushare.parsers.scheduler_log_parser`; callers import them from there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from xpushare.parsers.pod_log import parse_timestamp
from xpushare.parsers.scheduler_log_parser import SchedulerLogParser
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary

__all__ = [
    "ClientEvent",
    "client_events",
    "logged_allocations",
    "mem_updates",
    "parse_lines",
    "parse_text",
]


_MEM_UPDATE_RE = re.compile(r"\[(?:XPUSHARE|NVSHARE)\]\[DEBUG\]: Received MEM_UPDATE from (?P<cid>[0-9a-fA-F]+): "
                            r"(?P<mb>\d+) MB\s*$")
_LOG_TS_RE = re.compile(r"(?:^|\s)(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")


def logged_allocations(text: str, until: float | None = None) -> dict[str, int]:
    """``client_id -> MiB`` of the last ``Received MEM_UPDATE from <id>: <n> MB`` line of each client.

    The scheduler logs each client's MEM_UPDATE (its managed allocation, integer MiB) in debug mode only
    (scheduler.c, ``log_debug``); :class:`SchedulerLogParser` only counts them (``received``), without
    values: this reads the values, for MET-003. ``until`` (Unix s): lines whose kubectl ``--timestamps`` time is later
    are ignored (lines without a timestamp always count). Never raises.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEM_UPDATE_RE.search(line)
        if m is None:
            continue
        if until is not None and (t := _LOG_TS_RE.search(line[: m.start()])) is not None:
            when = parse_timestamp(t.group("ts"))
            if when is not None and when.timestamp() > until:
                continue
        out[m.group("cid").lower()] = int(m.group("mb"))
    return out


def mem_updates(text: str) -> list[tuple[str, float | None, int]]:
    """Every ``Received MEM_UPDATE from <id>: <n> MB`` line in log order: ``(client id, Unix time of its kubectl
    ``--timestamps`` prefix or None, MiB)`` (debug mode only; the client's managed allocation as it reported it).
    Never raises."""
    out: list[tuple[str, float | None, int]] = []
    for line in text.splitlines():
        m = _MEM_UPDATE_RE.search(line)
        if m is None:
            continue
        t = _LOG_TS_RE.search(line[: m.start()])
        when = parse_timestamp(t.group("ts")) if t is not None else None
        out.append((m.group("cid").lower(), when.timestamp() if when is not None else None, int(m.group("mb"))))
    return out


@dataclass(frozen=True)
class ClientEvent:
    """A change of a client's place in the scheduler (docs/sut/log.md §registration, §disconnects, §send): ``kind`` is
    ``registered`` (``Registered client <id16>``: it joins the client list), ``removed`` (``Removing client <id16>``:
    it leaves the list, and the running list if it was there), ``granted`` (``Sent LOCK_OK to client <id16>``: it
    joins its GPU's running list) or ``released`` (``Received LOCK_RELEASED from <id16>``: it leaves the running
    list). ``t``: the line's kubectl ``--timestamps`` time (Unix s), None without one; ``gpu``: the GPU key of a
    registration (`` on GPU <key>``; None otherwise and for the nvshare generation)."""

    cid: str
    kind: str
    t: float | None
    gpu: str | None = None

    @property
    def registered(self) -> bool:
        return self.kind == "registered"


_CLIENT_EVENT_RE = re.compile(
    r"\[(?:XPUSHARE|NVSHARE)\]\[INFO\]: (?:"
    r"Registered client (?P<reg>[0-9a-fA-F]{16})(?: on GPU (?P<gpu>\S+))?"
    r"|Removing client (?P<rem>[0-9a-fA-F]{16})\s*$"
    r"|Sent LOCK_OK to client (?P<ok>[0-9a-fA-F]{16})\s*$"
    r"|Received LOCK_RELEASED from (?P<rel>[0-9a-fA-F]{16})\s*$)")
_KINDS = (("reg", "registered"), ("rem", "removed"), ("ok", "granted"), ("rel", "released"))


def client_events(text: str) -> list[ClientEvent]:
    """Every registration, removal, lock grant and lock release of a client, in log order: how many clients the
    scheduler had, and how many held a lock, at any time of the log (for judging the exporter's client series and
    running-list gauge over time). Never raises."""
    out: list[ClientEvent] = []
    for line in text.splitlines():
        m = _CLIENT_EVENT_RE.search(line)
        if m is None:
            continue
        group, kind = next((g, k) for g, k in _KINDS if m.group(g))
        t = _LOG_TS_RE.search(line[: m.start()])
        when = parse_timestamp(t.group("ts")) if t is not None else None
        out.append(ClientEvent(m.group(group).lower(), kind, when.timestamp() if when is not None else None,
                               m.group("gpu") if kind == "registered" else None))
    return out


def parse_lines(lines: Iterable[str]) -> SchedulerLogSummary:
    """Parse an iterable of lines (e.g. an open text file) in one pass, constant memory.

    Lines may keep their ``\\n``. Never raises on content. Source: docs/sut/log.md, §regex.
    """
    return SchedulerLogParser().feed_lines(lines).summary()


def parse_text(text: str) -> SchedulerLogSummary:
    """Parse a whole log held in memory (split on ``\\n``). See :func:`parse_lines`."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return parse_lines(lines)
