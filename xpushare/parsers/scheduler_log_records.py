"""The records and the summary of a parsed scheduler log (:mod:`xpushare.parsers.scheduler_log`).

:class:`Registration`, :class:`LimitChange`, :class:`LimitSend` and :class:`LogLine` are the events the
parser (:mod:`xpushare.parsers.scheduler_log_parser`) keeps; :class:`SchedulerLogSummary` is its frozen
result, with the derived rates, the legacy distribution table and a JSON-ready dict. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tabulate import tabulate

__all__ = [
    "DISTRIBUTION_TITLE",
    "RATE_KEYS",
    "ConnectionFailure",
    "LimitChange",
    "LimitSend",
    "LockSpan",
    "LogLine",
    "Registration",
    "SchedulerLogSummary",
]

DISTRIBUTION_TITLE = "Scheduler Log Analysis (GPU Distribution):"
"""Heading of the legacy distribution table (docs/sut/legacy-scripts.md §drivers step 7)."""

@dataclass(frozen=True)
class Registration:
    """One ``Registered client <id16>[ on GPU <uuid>] with Pod name = <pod>, Pod namespace = <ns>``.

    ``gpu`` is ``None`` for the nvshare generation (no `` on GPU`` part, docs/sut/README.md §naming); it is the GPU
    key the
    client sent (a ``GPU-...`` UUID, ``default``, or an index such as ``0``, docs/sut/log.md §registration). Outside
    Kubernetes ``pod``/``namespace`` are ``none``. ``ts``: kubectl timestamp or ``None``;
    ``lineno``: 1-based line number in the stream. ``host_pid``: the pid of the preceding DEBUG
    ``SO_PEERCRED`` line of this registration (the SO_PEERCRED pid, or the client-reported pid when
    that failed); ``None`` without debug logging. Source: docs/sut/log.md §registration, §lock-traffic, §regex;
    scheduler.c.
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
    """A limit change or initial limit for a pod (docs/sut/log.md §registration step 3/5, §dynamic-limits, §regex).

    ``kind``: ``"memory"`` (values in bytes) or ``"compute"`` (values in percent). ``initial``: True
    for ``Applying initial ... limit`` (then ``old`` is ``None``), False for ``... limit changed for
    pod``. ``old`` can be garbage on the first change (docs/sut/log.md §dynamic-limits, docs/sut/README.md
    §pitfalls item 9).
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
    docs/sut/log.md §registration step 5, §dynamic-limits, §regex.
    """

    kind: str
    cid: str
    value: int
    ts: datetime | None
    lineno: int


@dataclass(frozen=True)
class ConnectionFailure:
    """``Failed to send message to client <id16>`` (``kind="send"``) or ``Failed to receive message from client
    <id16>`` (``kind="receive"``): the scheduler met EAGAIN/ECONNRESET/EPIPE on the client's socket and drops the
    client (``Removing client``). ``ts``: kubectl timestamp or ``None``; ``lineno``: 1-based line number.
    Source: docs/sut/log.md §disconnects; scheduler.c ``send_message``/``receive_message``.
    """

    kind: str
    cid: str
    ts: datetime | None
    lineno: int


@dataclass(frozen=True)
class LogLine:
    """One stored log line: message text (prefixes stripped), kubectl timestamp, 1-based line number."""

    text: str
    ts: datetime | None
    lineno: int


@dataclass(frozen=True)
class LockSpan:
    """One client's time under the GPU lock: ``first_grant`` (first ``Sent LOCK_OK``), ``last_release`` (last
    ``released from running_list``; None when it never released in the log), ``grants`` (LOCK_OKs).

    Times are kubectl ``--timestamps`` times (Unix s); lines without one are not counted. Source:
    docs/sut/log.md §lock-traffic (lock traffic exists only for clients with a limit, docs/sut/client.md §lock-control).
    """

    cid: str
    first_grant: float
    last_release: float | None
    grants: int


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
      ``CONCURRENT`` from the last ``Scheduling mode: ...`` line (docs/sut/log.md §startup), ``scheduling_mode_line``
      its full text; ``metrics_enabled``: from ``Metrics exporter enabled``/``disabled``;
    * ``registrations`` (in order), ``registrations_total``; ``pod_gpu``: ``(namespace, pod) ->
      gpu`` (last registration wins); ``gpu_client_counts``: ``gpu -> number of distinct client
      ids registered on it`` (``None`` key for the nvshare generation);
    * ``limit_changes``, ``limit_sends`` (in order);
    * ``sent``: ``TYPE -> count`` of generic ``Sent <TYPE> to client`` lines; ``received``:
      ``TYPE -> count`` of ``Received <TYPE>`` lines; ``sent_by_client``: ``cid -> {TYPE: count}``;
    * ``fallback_drops`` (overload preemption DROP_LOCKs, docs/sut/log.md §lock-traffic), ``throttles`` and
      ``throttles_by_client``, ``admissions`` (``Scheduled client``), ``releases`` (``released from
      running_list``), ``promotions`` (``promoted from wait queue``), ``wait_queue_moves`` (``moved
      to wait queue``), ``disconnects`` (``Removing client <id>``, including ``<UNREGISTERED>``),
      ``unregistered_disconnects``, ``disconnected_clients`` (ids), ``overload_warnings``
      (``Memory overload detected``), ``send_failures``/``receive_failures`` and ``connection_failures`` (the
      first ``MAX_EVENTS`` of them, in order);
    * ``fatal_lines`` (first ``MAX_FATAL``), ``fatal_count`` (= ``levels["FATAL"]``);
    * ``first_ts``/``last_ts``: first and last kubectl timestamps (``None`` without ``--timestamps``);
    * ``lock_spans``: ``client_id -> LockSpan`` from the timestamped ``Sent LOCK_OK`` / ``released from
      running_list`` lines (clients never granted the lock are absent).

    Source: docs/sut/log.md, §regex; seed 000 §9.1 (LOCK/DROP frequency).
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
    connection_failures: tuple[ConnectionFailure, ...]
    fatal_lines: tuple[LogLine, ...]
    fatal_count: int
    first_ts: datetime | None
    last_ts: datetime | None
    lock_spans: dict[str, LockSpan]

    @property
    def lock_ok(self) -> int:
        """Number of ``Sent LOCK_OK to client`` lines (admissions to the GPU lock, docs/sut/log.md §lock-traffic)."""
        return self.sent.get("LOCK_OK", 0)

    @property
    def drop_lock(self) -> int:
        """Number of generic ``Sent DROP_LOCK to client`` lines (quota, TQ rotation, overload;
        docs/sut/log.md §lock-traffic).

        Comparable to ``xpushare_scheduler_drop_lock_total`` (docs/sut/metrics.md §events).
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
        Source: docs/sut/legacy-scripts.md §drivers step 7; seed 004.
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
            "connection_failures": [{"kind": f.kind, "cid": f.cid, "ts": ts(f.ts)} for f in self.connection_failures],
            "fatal_count": self.fatal_count,
            "fatal_lines": [line.text for line in self.fatal_lines],
            "first_ts": ts(self.first_ts),
            "last_ts": ts(self.last_ts),
        }
