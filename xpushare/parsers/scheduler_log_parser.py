"""The streaming state machine behind :mod:`xpushare.parsers.scheduler_log`: :class:`SchedulerLogParser`,
its line handlers (one per first word of a message, docs/sut/log.md, §regex) and the caps on what it keeps.

Most callers want :func:`xpushare.parsers.scheduler_log.parse_text` and its kin; the caps
(:data:`MAX_EVENTS`, :data:`MAX_FATAL`, :data:`MAX_HEADS`) live here, where the parser reads them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from xpushare.parsers.pod_log import parse_timestamp
from xpushare.parsers.scheduler_log_records import (
    ConnectionFailure,
    LimitChange,
    LimitSend,
    LockSpan,
    LogLine,
    Registration,
    SchedulerLogSummary,
)

__all__ = ["MAX_EVENTS", "MAX_FATAL", "MAX_HEADS", "SchedulerLogParser"]

MAX_EVENTS = 100_000
"""Cap of each event list (registrations, limit changes, limit sends); beyond it only counts grow."""

MAX_FATAL = 50
"""Cap of the stored FATAL lines (the count keeps growing)."""

_LEVELS = ("INFO", "WARN", "DEBUG", "FATAL")
_GENERATIONS = {"XPUSHARE": "xpushare", "NVSHARE": "nvshare"}

# docs/sut/log.md §regex patterns, applied to the message part (after "[GEN][LEVEL]: ").
_REGISTER_RE = re.compile(
    r"Registered client (?P<cid>[0-9a-f]{16})(?: on GPU (?P<gpu>\S+))? with Pod name = (?P<pod>[^,]*), "
    r"Pod namespace = (?P<ns>\S*)"
)
_MEM_CHANGE_RE = re.compile(
    r"Memory limit changed for pod (?P<ns>[^/]+)/(?P<pod>\S+): (?P<old>\d+) -> (?P<new>\d+) bytes"
)
_CORE_CHANGE_RE = re.compile(
    r"Compute limit changed for pod (?P<ns>[^/]+)/(?P<pod>\S+): (?P<old>\d+)% -> (?P<new>\d+)%"
)
_INITIAL_RE = re.compile(
    r"Applying initial (?P<kind>compute|memory) limit for (?P<ns>[^/]+)/(?P<pod>\S+): (?P<val>\d+)(?:%| bytes)"
)
_SEND_LIMIT_RE = re.compile(r"Sending UPDATE_LIMIT to client (?P<cid>[0-9a-f]{16}): (?P<val>\d+) bytes")
_SEND_CORE_RE = re.compile(r"Sending UPDATE_CORE_LIMIT to client (?P<cid>[0-9a-f]{16}): (?P<val>\d+)%")
_MODE_RE = re.compile(r"Scheduling mode: (?P<mode>AUTO|SERIAL|CONCURRENT)\b")
# scheduler.c register_client (DEBUG): the peer pid (SO_PEERCRED) or the pid the client reported.
_PEERCRED_RE = re.compile(
    r"SO_PEERCRED(?:: client fd=-?\d+ pid=(?P<pid>-?\d+) \(client reported pid=-?\d+\)"
    r"|(?: failed, using client-reported pid=(?P<reported>-?\d+)))"
)



_PREFIX_LEVELS = {f"[{g}][{lvl}]": (lvl, gen) for g, gen in _GENERATIONS.items() for lvl in _LEVELS}
_DIGITS = frozenset("0123456789")

MAX_HEADS = 4096
"""Cap of the parser's line-head cache (distinct ``[GEN][LEVEL]: <first word>`` strings)."""


class SchedulerLogParser:
    """Incremental parser: :meth:`feed_lines` (or :meth:`feed`) in order, then :meth:`summary`.

    Canonical line grammar (both naming generations, docs/sut/README.md §naming, docs/sut/log.md):
    ``[pod/<name>/<container>] `` (optional, kubectl ``--prefix``), then ``<RFC3339> `` (optional,
    kubectl ``--timestamps``: a token starting ``dddd-dd-ddT``), then ``[<GEN>][<LEVEL>]: <message>``.
    Trailing ``\\r``/``\\n`` are ignored. Lines without a known ``[GEN][LEVEL]: `` prefix count as
    ``OTHER`` and carry no events; FATAL lines are stored, not interpreted; events are recognised in
    INFO/WARN/DEBUG messages by their first word, then by the docs/sut/log.md §regex patterns.

    Memory is constant in the number of lines: counters, per-client/per-GPU maps, capped event
    lists and a capped cache of line heads. Never raises on any ``str`` input.
    """

    def __init__(self) -> None:
        self.lines = 0
        self.generation: str | None = None
        self.starts = 0
        self.debug_mode: bool | None = None
        self.scheduling_mode: str | None = None
        self.scheduling_mode_line: str | None = None
        self.metrics_enabled: bool | None = None
        self.registrations: list[Registration] = []
        self.registrations_total = 0
        self.pod_gpu: dict[tuple[str, str], str | None] = {}
        self.gpu_clients: dict[str | None, set[str]] = {}
        self.limit_changes: list[LimitChange] = []
        self.limit_sends: list[LimitSend] = []
        self.sent: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.sent_by_client: dict[str, dict[str, int]] = {}
        self.fallback_drops = 0
        self.throttles = 0
        self.throttles_by_client: dict[str, int] = {}
        self.admissions = 0
        self.releases = 0
        self.promotions = 0
        self.wait_queue_moves = 0
        self.disconnects = 0
        self.unregistered_disconnects = 0
        self.disconnected_clients: set[str] = set()
        self.overload_warnings = 0
        self.send_failures = 0
        self.receive_failures = 0
        self.connection_failures: list[ConnectionFailure] = []
        self.fatal_lines: list[LogLine] = []
        # client id -> kubectl timestamp text of its first LOCK_OK / last release, LOCK_OKs with a timestamp
        self.lock_first_grant: dict[str, str] = {}
        self.lock_last_release: dict[str, str] = {}
        self.lock_grants: dict[str, int] = {}
        self.first_ts_text: str | None = None
        self.last_ts_text: str | None = None
        # head ("[GEN][LEVEL]: <first word>") -> [count, level, handler]
        self._heads: dict[str, list[Any]] = {}
        self._overflow: dict[tuple[str, Any], list[Any]] = {}
        self._other = 0
        # host pid of the SO_PEERCRED line of the registration under way (consumed by the next one)
        self._pending_pid: int | None = None

    def feed(self, line: str) -> None:
        """Consume one log line (trailing ``\\r``/``\\n`` ignored). Never raises."""
        self.feed_lines((line,))

    def feed_lines(self, lines: Iterable[str]) -> SchedulerLogParser:
        """Consume every line of ``lines`` in order; returns ``self``. Never raises on content.

        This loop is the hot path (a debug-mode log can be gigabytes): it keeps state in locals and
        classifies each line with one dictionary lookup of its head.
        """
        heads = self._heads
        classify = self._classify
        digits = _DIGITS
        n = self.lines
        other = self._other
        first = self.first_ts_text
        last = self.last_ts_text
        received = self.received
        on_received = SchedulerLogParser._on_received
        try:
            for line in lines:  # the trailing "\r\n" is left on: stripped only where a message is used
                n += 1
                pos = 0
                if line.startswith("[pod/"):
                    end = line.find("] ")
                    if end > 0:
                        pos = end + 2
                ts = None
                if (
                    line[pos + 10 : pos + 11] == "T"
                    and line[pos : pos + 1] in digits
                    and line[pos + 4 : pos + 5] == "-"
                ):
                    sp = line.find(" ", pos)
                    if sp > 0:
                        ts = line[pos:sp]
                        pos = sp + 1
                        if first is None:
                            first = ts
                        last = ts
                if not line.startswith("[", pos):
                    other += 1
                    continue
                j = line.find("]: ", pos)
                if j < 0:
                    other += 1
                    continue
                k = line.find(" ", j + 3)
                head = line[pos:k] if k > 0 else line[pos : j + 3]
                e = heads.get(head)
                if e is None:
                    e = classify(head, j + 1 - pos)
                e[0] += 1
                h = e[2]
                if h is None:
                    continue
                if h is on_received:  # the most frequent event line: inlined _on_received
                    k2 = line.find(" ", k + 1)
                    typ = (line[k + 1 : k2] if k2 > 0 else line[k + 1 :].rstrip("\r\n")).rstrip(":")
                    if typ.isupper():
                        received[typ] = received.get(typ, 0) + 1
                else:
                    h(self, line[j + 3 :].rstrip("\r\n"), ts, n)
        finally:
            self.lines = n
            self._other = other
            self.first_ts_text = first
            self.last_ts_text = last
        return self

    def _classify(self, head: str, prefix_len: int) -> list[Any]:
        """Cache entry ``[count, level, handler]`` for a line head seen for the first time."""
        known = _PREFIX_LEVELS.get(head[:prefix_len])
        if known is None:
            level, handler = "OTHER", None
        else:
            level, gen = known
            if self.generation is None:
                self.generation = gen
            handler = _on_fatal if level == "FATAL" else _HANDLERS.get(head[prefix_len + 2 :])
        if len(self._heads) < MAX_HEADS:
            entry: list[Any] = [0, level, handler]
            self._heads[head] = entry
            return entry
        # Cache full (pathological logs): share one entry per (level, handler) so counts survive.
        return self._overflow.setdefault((level, handler), [0, level, handler])

    def level_counts(self) -> dict[str, int]:
        """Lines per level so far (``INFO``/``WARN``/``DEBUG``/``FATAL``/``OTHER``; only non-zero)."""
        out: dict[str, int] = {}
        for count, level, _h in (*self._heads.values(), *self._overflow.values()):
            if count:
                out[level] = out.get(level, 0) + count
        if self._other:
            out["OTHER"] = out.get("OTHER", 0) + self._other
        return out

    # -- handlers: (parser, message without prefixes, raw kubectl timestamp or None, line number) --

    def _on_registered(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _REGISTER_RE.match(msg)
        if m is None:
            return
        cid, gpu, pod, ns = m.group("cid"), m.group("gpu"), m.group("pod"), m.group("ns")
        self.registrations_total += 1
        pid, self._pending_pid = self._pending_pid, None
        if len(self.registrations) < MAX_EVENTS:
            self.registrations.append(Registration(cid, gpu, pod, ns, _ts(ts_text), lineno, pid))
        self.pod_gpu[(ns, pod)] = gpu
        clients = self.gpu_clients.get(gpu)
        if clients is None:
            clients = self.gpu_clients[gpu] = set()
        clients.add(cid)

    def _on_sent(self, msg: str, ts_text: str | None, lineno: int) -> None:
        parts = msg.split(" ")
        if len(parts) < 5 or parts[2] != "to" or parts[3] != "client" or not parts[1] or not parts[4]:
            return
        typ, cid = parts[1], parts[4]
        if len(parts) == 5:
            sent = self.sent
            sent[typ] = sent.get(typ, 0) + 1
            per = self.sent_by_client.get(cid)
            if per is None:
                per = self.sent_by_client[cid] = {}
            per[typ] = per.get(typ, 0) + 1
            if typ == "LOCK_OK" and ts_text is not None:
                self.lock_first_grant.setdefault(cid, ts_text)
                self.lock_grants[cid] = self.lock_grants.get(cid, 0) + 1
        elif typ == "DROP_LOCK" and parts[5:] == _FALLBACK_WORDS:
            self.fallback_drops += 1

    def _on_received(self, msg: str, ts_text: str | None, lineno: int) -> None:
        parts = msg.split(" ", 2)
        if len(parts) < 2:
            return
        typ = parts[1].rstrip(":")
        if typ.isupper():
            received = self.received
            received[typ] = received.get(typ, 0) + 1

    def _on_memory(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if msg.startswith("Memory limit changed for pod "):
            m = _MEM_CHANGE_RE.match(msg)
            if m is not None:
                self._add_change("memory", m, int(m.group("old")), int(m.group("new")), False, ts_text, lineno)
        elif msg.startswith("Memory overload detected"):
            self.overload_warnings += 1

    def _on_compute(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _CORE_CHANGE_RE.match(msg)
        if m is not None:
            self._add_change("compute", m, int(m.group("old")), int(m.group("new")), False, ts_text, lineno)

    def _on_applying(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _INITIAL_RE.match(msg)
        if m is not None:
            self._add_change(m.group("kind"), m, None, int(m.group("val")), True, ts_text, lineno)

    def _add_change(
        self,
        kind: str,
        m: re.Match[str],
        old: int | None,
        new: int,
        initial: bool,
        ts_text: str | None,
        lineno: int,
    ) -> None:
        if len(self.limit_changes) < MAX_EVENTS:
            self.limit_changes.append(
                LimitChange(kind, m.group("ns"), m.group("pod"), old, new, initial, _ts(ts_text), lineno)
            )

    def _on_sending(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _SEND_LIMIT_RE.match(msg)
        kind = "memory"
        if m is None:
            m = _SEND_CORE_RE.match(msg)
            kind = "compute"
        if m is not None and len(self.limit_sends) < MAX_EVENTS:
            self.limit_sends.append(LimitSend(kind, m.group("cid"), int(m.group("val")), _ts(ts_text), lineno))

    def _on_throttling(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _THROTTLE_RE.match(msg)
        if m is None:
            return
        self.throttles += 1
        cid = m.group("cid")
        self.throttles_by_client[cid] = self.throttles_by_client.get(cid, 0) + 1

    def _on_scheduling(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _MODE_RE.match(msg)
        if m is not None:
            self.scheduling_mode = m.group("mode")
            self.scheduling_mode_line = msg

    def _on_scheduled(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if msg.startswith("Scheduled client "):
            self.admissions += 1

    def _on_peercred(self, msg: str, ts_text: str | None, lineno: int) -> None:
        m = _PEERCRED_RE.match(msg)
        if m is not None:
            self._pending_pid = int(m.group("pid") or m.group("reported"))

    def _on_removing(self, msg: str, ts_text: str | None, lineno: int) -> None:
        parts = msg.split(" ")
        if len(parts) == 3 and parts[1] == "client" and parts[2]:
            self._pending_pid = None  # a registration that failed after SO_PEERCRED (delete_client)
            self.disconnects += 1
            if parts[2] == "<UNREGISTERED>":
                self.unregistered_disconnects += 1
            else:
                self.disconnected_clients.add(parts[2])

    def _on_client(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if " released from running_list" in msg:
            self.releases += 1
            if ts_text is not None:
                self.lock_last_release[msg.split(" ", 2)[1]] = ts_text
        elif msg.endswith(" promoted from wait queue"):
            self.promotions += 1
        elif " moved to wait queue" in msg:
            self.wait_queue_moves += 1

    def _on_scheduler_name(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if " started in " in msg:
            self.starts += 1
            self.debug_mode = msg.endswith("debug mode")

    def _on_metrics(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if msg.startswith("Metrics exporter enabled"):
            self.metrics_enabled = True
        elif msg.startswith("Metrics exporter disabled"):
            self.metrics_enabled = False

    def _on_failed(self, msg: str, ts_text: str | None, lineno: int) -> None:
        if msg.startswith("Failed to send message to client "):
            self.send_failures += 1
            kind = "send"
        elif msg.startswith("Failed to receive message from client "):
            self.receive_failures += 1
            kind = "receive"
        else:
            return
        if len(self.connection_failures) < MAX_EVENTS:
            self.connection_failures.append(ConnectionFailure(kind, msg.rsplit(" ", 1)[1], _ts(ts_text), lineno))

    # -------------------------------------------------------------------------------------------

    def summary(self) -> SchedulerLogSummary:
        """Freeze the current state into a :class:`SchedulerLogSummary` (the parser stays usable)."""
        levels = self.level_counts()
        return SchedulerLogSummary(
            lines=self.lines,
            levels=levels,
            generation=self.generation,
            starts=self.starts,
            debug_mode=self.debug_mode,
            scheduling_mode=self.scheduling_mode,
            scheduling_mode_line=self.scheduling_mode_line,
            metrics_enabled=self.metrics_enabled,
            registrations=tuple(self.registrations),
            registrations_total=self.registrations_total,
            pod_gpu=dict(self.pod_gpu),
            gpu_client_counts={gpu: len(c) for gpu, c in self.gpu_clients.items()},
            limit_changes=tuple(self.limit_changes),
            limit_sends=tuple(self.limit_sends),
            sent=dict(self.sent),
            received=dict(self.received),
            sent_by_client={cid: dict(v) for cid, v in self.sent_by_client.items()},
            fallback_drops=self.fallback_drops,
            throttles=self.throttles,
            throttles_by_client=dict(self.throttles_by_client),
            admissions=self.admissions,
            releases=self.releases,
            promotions=self.promotions,
            wait_queue_moves=self.wait_queue_moves,
            disconnects=self.disconnects,
            unregistered_disconnects=self.unregistered_disconnects,
            disconnected_clients=frozenset(self.disconnected_clients),
            overload_warnings=self.overload_warnings,
            send_failures=self.send_failures,
            receive_failures=self.receive_failures,
            connection_failures=tuple(self.connection_failures),
            fatal_lines=tuple(self.fatal_lines),
            fatal_count=levels.get("FATAL", 0),
            first_ts=_ts(self.first_ts_text),
            last_ts=_ts(self.last_ts_text),
            lock_spans=self._lock_spans(),
        )

    def _lock_spans(self) -> dict[str, LockSpan]:
        out: dict[str, LockSpan] = {}
        for cid, first in self.lock_first_grant.items():
            t0 = _ts(first)
            if t0 is None:
                continue
            end = _ts(self.lock_last_release.get(cid))
            out[cid] = LockSpan(cid, t0.timestamp(), end.timestamp() if end else None, self.lock_grants[cid])
        return out


_FALLBACK_WORDS = ["for", "fallback", "to", "serial", "mode"]
_THROTTLE_RE = re.compile(r"Throttling client (?P<cid>[0-9a-f]{16})\b")


def _on_fatal(parser: SchedulerLogParser, msg: str, ts_text: str | None, lineno: int) -> None:
    if len(parser.fatal_lines) < MAX_FATAL:
        parser.fatal_lines.append(LogLine(msg, _ts(ts_text), lineno))


def _ts(text: str | None) -> datetime | None:
    return parse_timestamp(text) if text is not None else None


_HANDLERS: dict[str, Callable[[SchedulerLogParser, str, str | None, int], None]] = {
    "Registered": SchedulerLogParser._on_registered,
    "Sent": SchedulerLogParser._on_sent,
    "Received": SchedulerLogParser._on_received,
    "Memory": SchedulerLogParser._on_memory,
    "Compute": SchedulerLogParser._on_compute,
    "Applying": SchedulerLogParser._on_applying,
    "Sending": SchedulerLogParser._on_sending,
    "Throttling": SchedulerLogParser._on_throttling,
    "Scheduling": SchedulerLogParser._on_scheduling,
    "Scheduled": SchedulerLogParser._on_scheduled,
    "Removing": SchedulerLogParser._on_removing,
    "Client": SchedulerLogParser._on_client,
    "xpushare-scheduler": SchedulerLogParser._on_scheduler_name,
    "nvshare-scheduler": SchedulerLogParser._on_scheduler_name,
    "Metrics": SchedulerLogParser._on_metrics,
    "Failed": SchedulerLogParser._on_failed,
    "SO_PEERCRED:": SchedulerLogParser._on_peercred,
    "SO_PEERCRED": SchedulerLogParser._on_peercred,
}

