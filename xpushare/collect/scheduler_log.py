"""Streaming parser of the scheduler log (``kubectl logs [--timestamps] -l name=xpushare-scheduler``).

The log can be huge (debug mode writes a whole pod JSON per client every 5 s, sut-interfaces.md §4.8),
so the parser is a state machine fed one line at a time, in constant memory apart from per-client
state and capped event lists: a 1 GB file is parsed line by line (:func:`parse_file`).

Interfaces (sut-interfaces.md): §0 (``[XPUSHARE]`` and ``[NVSHARE]`` prefixes; registration with or
without `` on GPU <uuid>``), §4.1-§4.6 (line catalogue), §12 (regexes). Optional line prefixes that
are stripped first: kubectl ``--prefix`` (``[pod/<name>/<container>] ``) and kubectl ``--timestamps``
(RFC3339, see :func:`xpushare.collect.pod_log.strip_timestamp`).

What is counted and how (all per §4):

* levels: the ``[<GEN>][<LEVEL>]: `` prefix; lines without it count under ``"OTHER"``;
* sends: only the generic ``Sent <TYPE> to client <id>`` line (§4.6), matched on the whole message,
  so ``Sent DROP_LOCK to client <id> for fallback to serial mode`` (an extra line logged after the
  generic one during overload preemption, §4.4) is counted separately as ``fallback_drops`` and
  never twice;
* receipts: ``Received <TYPE>[ from <id>...]``;
* disconnects: ``Removing client <id16>|<UNREGISTERED>`` exactly (not ``... from wait queue``);
* client identity: a registration carries the id, the GPU key, pod and namespace (``none``/``none``
  outside Kubernetes, sut-on-cpu.md "Identity of a client") and, in debug mode only, the host pid of
  the DEBUG line ``SO_PEERCRED: client fd=<fd> pid=<pid> (client reported pid=<pid>)`` (or
  ``SO_PEERCRED failed, using client-reported pid=<pid>``) that ``register_client`` logs before the
  ``Registered client`` line (scheduler.c; one client is registered at a time, so the last such line
  before a registration is its own). Removal lines carry the id only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from os import PathLike
from typing import Any

from tabulate import tabulate

from xpushare.collect.pod_log import parse_timestamp

__all__ = [
    "DISTRIBUTION_TITLE",
    "LimitChange",
    "LimitSend",
    "LogLine",
    "Registration",
    "SchedulerLogParser",
    "SchedulerLogSummary",
    "command",
    "logged_allocations",
    "parse_file",
    "parse_lines",
    "parse_text",
]

DISTRIBUTION_TITLE = "Scheduler Log Analysis (GPU Distribution):"
"""Heading of the legacy distribution table (sut-interfaces.md §10.3 step 7)."""

MAX_EVENTS = 100_000
"""Cap of each event list (registrations, limit changes, limit sends); beyond it only counts grow."""

MAX_FATAL = 50
"""Cap of the stored FATAL lines (the count keeps growing)."""

_LEVELS = ("INFO", "WARN", "DEBUG", "FATAL")
_GENERATIONS = {"XPUSHARE": "xpushare", "NVSHARE": "nvshare"}

# §12 patterns, applied to the message part (after "[GEN][LEVEL]: ").
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


@dataclass(frozen=True)
class Registration:
    """One ``Registered client <id16>[ on GPU <uuid>] with Pod name = <pod>, Pod namespace = <ns>``.

    ``gpu`` is ``None`` for the nvshare generation (no `` on GPU`` part, §0); it is the GPU key the
    client sent (a ``GPU-...`` UUID, ``default``, or an index such as ``0``, §4.2). Outside
    Kubernetes ``pod``/``namespace`` are ``none``. ``ts``: kubectl timestamp or ``None``;
    ``lineno``: 1-based line number in the stream. ``host_pid``: the pid of the preceding DEBUG
    ``SO_PEERCRED`` line of this registration (the SO_PEERCRED pid, or the client-reported pid when
    that failed); ``None`` without debug logging. Source: sut-interfaces.md §4.2, §4.4, §12; scheduler.c.
    """

    cid: str
    gpu: str | None
    pod: str
    namespace: str
    ts: datetime | None
    lineno: int
    host_pid: int | None = None


@dataclass(frozen=True)
class LimitChange:
    """A limit change or initial limit for a pod (sut-interfaces.md §4.2 step 3/5, §4.3, §12).

    ``kind``: ``"memory"`` (values in bytes) or ``"compute"`` (values in percent). ``initial``: True
    for ``Applying initial ... limit`` (then ``old`` is ``None``), False for ``... limit changed for
    pod``. ``old`` can be garbage on the first change (§4.3 caveat, §11 item 9).
    """

    kind: str
    namespace: str
    pod: str
    old: int | None
    new: int
    initial: bool
    ts: datetime | None
    lineno: int


@dataclass(frozen=True)
class LimitSend:
    """``Sending UPDATE_LIMIT to client <id16>: <bytes> bytes ...`` (``kind="memory"``, bytes) or
    ``Sending UPDATE_CORE_LIMIT to client <id16>: <N>%`` (``kind="compute"``, percent). Source:
    sut-interfaces.md §4.2 step 5, §4.3, §12.
    """

    kind: str
    cid: str
    value: int
    ts: datetime | None
    lineno: int


@dataclass(frozen=True)
class LogLine:
    """One stored log line: message text (prefixes stripped), kubectl timestamp, 1-based line number."""

    text: str
    ts: datetime | None
    lineno: int


RATE_KEYS = (
    "lock_ok",
    "drop_lock",
    "throttle",
    "req_lock",
    "lock_released",
    "wait_for_mem",
    "mem_available",
    "registration",
    "disconnect",
)
"""Keys of :meth:`SchedulerLogSummary.rates`."""


@dataclass(frozen=True)
class SchedulerLogSummary:
    """Result of parsing one scheduler log. Frozen; the dict fields are to be treated as read-only.

    Fields (counts are integers; sizes of lists are capped, see ``MAX_EVENTS``/``MAX_FATAL``):

    * ``lines``: lines fed; ``levels``: lines per level ``INFO``/``WARN``/``DEBUG``/``FATAL`` (and
      ``OTHER`` for lines without a ``[GEN][LEVEL]: `` prefix); ``generation``: ``"xpushare"`` or
      ``"nvshare"`` (first prefix seen) or ``None``;
    * ``starts``: ``<gen>-scheduler started in ... mode`` lines (> 1 means a restart inside the
      log); ``debug_mode``: from the last such line; ``scheduling_mode``: ``AUTO``/``SERIAL``/
      ``CONCURRENT`` from the last ``Scheduling mode: ...`` line (§4.1), ``scheduling_mode_line``
      its full text; ``metrics_enabled``: from ``Metrics exporter enabled``/``disabled``;
    * ``registrations`` (in order), ``registrations_total``; ``pod_gpu``: ``(namespace, pod) ->
      gpu`` (last registration wins); ``gpu_client_counts``: ``gpu -> number of distinct client
      ids registered on it`` (``None`` key for the nvshare generation);
    * ``limit_changes``, ``limit_sends`` (in order);
    * ``sent``: ``TYPE -> count`` of generic ``Sent <TYPE> to client`` lines; ``received``:
      ``TYPE -> count`` of ``Received <TYPE>`` lines; ``sent_by_client``: ``cid -> {TYPE: count}``;
    * ``fallback_drops`` (overload preemption DROP_LOCKs, §4.4), ``throttles`` and
      ``throttles_by_client``, ``admissions`` (``Scheduled client``), ``releases`` (``released from
      running_list``), ``promotions`` (``promoted from wait queue``), ``wait_queue_moves`` (``moved
      to wait queue``), ``disconnects`` (``Removing client <id>``, including ``<UNREGISTERED>``),
      ``unregistered_disconnects``, ``disconnected_clients`` (ids), ``overload_warnings``
      (``Memory overload detected``), ``send_failures``/``receive_failures``;
    * ``fatal_lines`` (first ``MAX_FATAL``), ``fatal_count`` (= ``levels["FATAL"]``);
    * ``first_ts``/``last_ts``: first and last kubectl timestamps (``None`` without ``--timestamps``).

    Source: sut-interfaces.md §4, §12; seed 000 §9.1 (LOCK/DROP frequency).
    """

    lines: int
    levels: dict[str, int]
    generation: str | None
    starts: int
    debug_mode: bool | None
    scheduling_mode: str | None
    scheduling_mode_line: str | None
    metrics_enabled: bool | None
    registrations: tuple[Registration, ...]
    registrations_total: int
    pod_gpu: dict[tuple[str, str], str | None]
    gpu_client_counts: dict[str | None, int]
    limit_changes: tuple[LimitChange, ...]
    limit_sends: tuple[LimitSend, ...]
    sent: dict[str, int]
    received: dict[str, int]
    sent_by_client: dict[str, dict[str, int]]
    fallback_drops: int
    throttles: int
    throttles_by_client: dict[str, int]
    admissions: int
    releases: int
    promotions: int
    wait_queue_moves: int
    disconnects: int
    unregistered_disconnects: int
    disconnected_clients: frozenset[str]
    overload_warnings: int
    send_failures: int
    receive_failures: int
    fatal_lines: tuple[LogLine, ...]
    fatal_count: int
    first_ts: datetime | None
    last_ts: datetime | None

    @property
    def lock_ok(self) -> int:
        """Number of ``Sent LOCK_OK to client`` lines (admissions to the GPU lock, §4.4)."""
        return self.sent.get("LOCK_OK", 0)

    @property
    def drop_lock(self) -> int:
        """Number of generic ``Sent DROP_LOCK to client`` lines (quota, TQ rotation, overload; §4.4).

        Comparable to ``xpushare_scheduler_drop_lock_total`` (§6.3).
        """
        return self.sent.get("DROP_LOCK", 0)

    @property
    def duration_s(self) -> float | None:
        """Seconds between the first and last kubectl timestamps, or ``None`` without timestamps."""
        if self.first_ts is None or self.last_ts is None:
            return None
        return (self.last_ts - self.first_ts).total_seconds()

    @property
    def active_clients(self) -> tuple[str, ...]:
        """Registered client ids (in registration order) with no later ``Removing client <id>``.

        Only exact when ``registrations`` was not capped.
        """
        seen: dict[str, None] = {}
        for r in self.registrations:
            if r.cid not in self.disconnected_clients:
                seen[r.cid] = None
        return tuple(seen)

    def clients_on_gpu(self, gpu: str | None) -> tuple[str, ...]:
        """Distinct client ids that registered on GPU key ``gpu`` (in order)."""
        return tuple(dict.fromkeys(r.cid for r in self.registrations if r.gpu == gpu))

    def rates(self, duration_s: float | None = None) -> dict[str, float]:
        """Events per second over ``duration_s`` seconds (seed 000 §9.1 "LOCK/DROP frequency").

        Keys: :data:`RATE_KEYS` (``lock_ok``, ``drop_lock``, ``throttle``, ``req_lock``,
        ``lock_released``, ``wait_for_mem``, ``mem_available``, ``registration``, ``disconnect``).
        Without ``duration_s`` the timestamp span :attr:`duration_s` is used. Raises ``ValueError``
        when no positive duration is available (none given and no ``--timestamps`` span).
        """
        d = self.duration_s if duration_s is None else duration_s
        if d is None or not d > 0:
            raise ValueError(f"rates() needs a positive duration in seconds, got {d!r}")
        counts = {
            "lock_ok": self.lock_ok,
            "drop_lock": self.drop_lock,
            "throttle": self.throttles,
            "req_lock": self.received.get("REQ_LOCK", 0),
            "lock_released": self.received.get("LOCK_RELEASED", 0),
            "wait_for_mem": self.sent.get("WAIT_FOR_MEM", 0),
            "mem_available": self.sent.get("MEM_AVAILABLE", 0),
            "registration": self.registrations_total,
            "disconnect": self.disconnects,
        }
        return {k: counts[k] / d for k in RATE_KEYS}

    def distribution_table(self, *, title: bool = True, workloads: Mapping[str, str] | None = None) -> str:
        """The legacy ``Scheduler Log Analysis (GPU Distribution)`` table, rendered with ``tabulate``.

        One row per distinct client id in registration order: ``Pod Name | Client ID | GPU UUID``
        (``-`` when the log has no GPU, nvshare generation). With ``title`` the heading line
        :data:`DISTRIBUTION_TITLE` comes first. ``workloads``: ``client id -> text`` naming our
        workload of a client (:func:`xpushare.evidence.client_match.workload_labels`); given, a ``Workload``
        column follows (``-`` for other clients): outside Kubernetes every ``Pod Name`` is ``none``.
        Source: sut-interfaces.md §10.3 step 7; seed 004.
        """
        rows: dict[str, list[str]] = {}
        for r in self.registrations:
            if r.cid not in rows:
                rows[r.cid] = [r.pod, r.cid, r.gpu if r.gpu is not None else "-"]
                if workloads is not None:
                    rows[r.cid].append(workloads.get(r.cid, "-"))
        table = tabulate(
            list(rows.values()),
            headers=["Pod Name", "Client ID", "GPU UUID", *(["Workload"] if workloads is not None else [])],
            tablefmt="presto",
            disable_numparse=True,  # ids and GPU keys such as "0" are text, not numbers
            stralign="left",
        )
        return f"{DISTRIBUTION_TITLE}\n{table}" if title else table

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (datetimes as ISO strings, tuple keys joined as ``ns/pod``)."""

        def ts(v: datetime | None) -> str | None:
            return v.isoformat() if v is not None else None

        return {
            "lines": self.lines,
            "levels": dict(self.levels),
            "generation": self.generation,
            "starts": self.starts,
            "debug_mode": self.debug_mode,
            "scheduling_mode": self.scheduling_mode,
            "metrics_enabled": self.metrics_enabled,
            "registrations": [
                {"cid": r.cid, "gpu": r.gpu, "pod": r.pod, "namespace": r.namespace, "host_pid": r.host_pid,
                 "ts": ts(r.ts)}
                for r in self.registrations
            ],
            "registrations_total": self.registrations_total,
            "pod_gpu": {f"{ns}/{pod}": gpu for (ns, pod), gpu in self.pod_gpu.items()},
            "gpu_client_counts": {str(k): v for k, v in self.gpu_client_counts.items()},
            "limit_changes": [
                {
                    "kind": c.kind,
                    "namespace": c.namespace,
                    "pod": c.pod,
                    "old": c.old,
                    "new": c.new,
                    "initial": c.initial,
                    "ts": ts(c.ts),
                }
                for c in self.limit_changes
            ],
            "limit_sends": [{"kind": s.kind, "cid": s.cid, "value": s.value, "ts": ts(s.ts)} for s in self.limit_sends],
            "sent": dict(self.sent),
            "received": dict(self.received),
            "lock_ok": self.lock_ok,
            "drop_lock": self.drop_lock,
            "fallback_drops": self.fallback_drops,
            "throttles": self.throttles,
            "admissions": self.admissions,
            "releases": self.releases,
            "promotions": self.promotions,
            "wait_queue_moves": self.wait_queue_moves,
            "disconnects": self.disconnects,
            "unregistered_disconnects": self.unregistered_disconnects,
            "overload_warnings": self.overload_warnings,
            "send_failures": self.send_failures,
            "receive_failures": self.receive_failures,
            "fatal_count": self.fatal_count,
            "fatal_lines": [line.text for line in self.fatal_lines],
            "first_ts": ts(self.first_ts),
            "last_ts": ts(self.last_ts),
        }


_PREFIX_LEVELS = {f"[{g}][{lvl}]": (lvl, gen) for g, gen in _GENERATIONS.items() for lvl in _LEVELS}
_DIGITS = frozenset("0123456789")

MAX_HEADS = 4096
"""Cap of the parser's line-head cache (distinct ``[GEN][LEVEL]: <first word>`` strings)."""


class SchedulerLogParser:
    """Incremental parser: :meth:`feed_lines` (or :meth:`feed`) in order, then :meth:`summary`.

    Canonical line grammar (both naming generations, sut-interfaces.md §0, §4):
    ``[pod/<name>/<container>] `` (optional, kubectl ``--prefix``), then ``<RFC3339> `` (optional,
    kubectl ``--timestamps``: a token starting ``dddd-dd-ddT``), then ``[<GEN>][<LEVEL>]: <message>``.
    Trailing ``\\r``/``\\n`` are ignored. Lines without a known ``[GEN][LEVEL]: `` prefix count as
    ``OTHER`` and carry no events; FATAL lines are stored, not interpreted; events are recognised in
    INFO/WARN/DEBUG messages by their first word, then by the §12 patterns.

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
        self.fatal_lines: list[LogLine] = []
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
        if msg.startswith("Failed to send message to client"):
            self.send_failures += 1
        elif msg.startswith("Failed to receive message from client"):
            self.receive_failures += 1

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
            fatal_lines=tuple(self.fatal_lines),
            fatal_count=levels.get("FATAL", 0),
            first_ts=_ts(self.first_ts_text),
            last_ts=_ts(self.last_ts_text),
        )


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


_LOCK_OK_RE = re.compile(r"Sent LOCK_OK to client (?P<cid>[0-9a-f]{16})\b")
_RELEASED_RE = re.compile(r"Client (?P<cid>[0-9a-f]{16}) released from running_list\b")


@dataclass(frozen=True)
class LockSpan:
    """One client's time under the GPU lock: ``first_grant`` (first ``Sent LOCK_OK``), ``last_release`` (last
    ``released from running_list``; None when it never released in the log), ``grants`` (LOCK_OKs).

    Times are kubectl ``--timestamps`` times (Unix s). Source: sut-interfaces.md §4.4 (lock traffic exists only
    for clients with a limit, §3.2).
    """

    cid: str
    first_grant: float
    last_release: float | None
    grants: int


def lock_spans(text: str) -> dict[str, LockSpan]:
    """``client_id -> LockSpan`` from a scheduler log with timestamps (lines without one are ignored).

    Clients that never got LOCK_OK are absent (an unlimited client never asks for the lock, §3.2). Never
    raises.
    """
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    grants: dict[str, int] = {}
    for line in text.splitlines():
        ok, released = _LOCK_OK_RE.search(line), _RELEASED_RE.search(line)
        m = ok or released
        if m is None or (t := _LOG_TS_RE.search(line[: m.start()])) is None:
            continue
        when = parse_timestamp(t.group("ts"))
        if when is None:
            continue
        cid = m.group("cid")
        if ok is not None:
            first.setdefault(cid, when.timestamp())
            grants[cid] = grants.get(cid, 0) + 1
        else:
            last[cid] = when.timestamp()
    return {cid: LockSpan(cid, t0, last.get(cid), grants[cid]) for cid, t0 in first.items()}


def parse_lines(lines: Iterable[str]) -> SchedulerLogSummary:
    """Parse an iterable of lines (e.g. an open text file) in one pass, constant memory.

    Lines may keep their ``\\n``. Never raises on content. Source: sut-interfaces.md §4, §12.
    """
    return SchedulerLogParser().feed_lines(lines).summary()


def parse_text(text: str) -> SchedulerLogSummary:
    """Parse a whole log held in memory (split on ``\\n``). See :func:`parse_lines`."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return parse_lines(lines)


def parse_file(path: str | PathLike[str]) -> SchedulerLogSummary:
    """Stream a log file from disk line by line (UTF-8, undecodable bytes replaced).

    The only function of this module that does I/O. Raises ``OSError`` if the file cannot be read.
    """
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        return parse_lines(f)


def command(
    namespace: str = "xpushare-system",
    selector: str = "name=xpushare-scheduler",
    *,
    since_time: str | None = None,
    pod: str | None = None,
    follow: bool = False,
    timestamps: bool = True,
    kubectl: str = "kubectl",
) -> list[str]:
    """argv of ``kubectl logs`` for the scheduler, run on the master (sut-interfaces.md §4, §4.8).

    Use ``since_time`` (RFC3339, the case start) instead of ``--tail`` (§4.8); with a selector,
    ``--tail=-1`` is added because kubectl otherwise returns only the last 10 lines per pod
    (bash-harness.md §7 table) and ``--prefix`` (``[pod/<name>/<container>] ``, stripped by the
    parser). Pass ``pod`` (the scheduler on the workload's node, §11 item 6; ``kubectl logs`` has no
    field selector, so resolve it first) to read one pod. For the nvshare generation pass
    ``namespace="nvshare-system", selector="name=nvshare-scheduler"`` (§0). Never raises.
    """
    argv = [kubectl, "-n", namespace, "logs"]
    if pod is not None:
        argv.append(pod)
    else:
        argv += ["-l", selector, "--tail=-1", "--prefix"]
    if timestamps:
        argv.append("--timestamps")
    if since_time is not None:
        argv.append(f"--since-time={since_time}")
    if follow:
        argv.append("-f")
    return argv
