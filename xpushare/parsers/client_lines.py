"""The client library's lines in a workload's output: its client id, its core- and memory-limit updates and the
managed allocation it reports to the scheduler.

Input as :mod:`xpushare.parsers.pod_log` takes it (``kubectl logs [--timestamps]`` or a host-mode process's
output); pure functions that never raise. Source: docs/sut/client.md §client-lines, docs/sut/log.md §regex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from xpushare.parsers.pod_log import timestamped_lines

__all__ = [
    "CoreLimitUpdate",
    "MemoryLimitUpdate",
    "MemoryReport",
    "client_id",
    "client_ids",
    "core_limit_updates",
    "memory_limit_updates",
    "memory_reports",
]

_CLIENT_ID_RE = re.compile(r"Client ID = (?P<cid>[0-9a-f]{16})\b")


def client_ids(text: str) -> list[str]:
    """Every ``Client ID = <id16>`` in order (one per CUDA process start; restarts add more).

    Source: docs/sut/client.md §client-lines ("joins the pod to the scheduler's log"), docs/sut/log.md §regex.
    """
    out: list[str] = []
    for _ts, line in timestamped_lines(text):
        if "Client ID = " in line:
            out.extend(m.group("cid") for m in _CLIENT_ID_RE.finditer(line))
    return out


def client_id(text: str) -> str | None:
    """The LAST ``Client ID = <id16>`` of the log (the most recent process), or ``None``.

    16 lowercase hex digits, the id the scheduler logs in ``Registered client <id16>`` (docs/sut/log.md §registration).
    Source: docs/sut/client.md §memory-quota, docs/sut/log.md §regex.
    """
    ids = client_ids(text)
    return ids[-1] if ids else None


@dataclass(frozen=True)
class CoreLimitUpdate:
    """One core-limit line of the client library (percent of GPU time, 1-100).

    ``kind``: ``"initial"`` (INFO ``Core limit = <N>%`` at start), ``"received"`` (DEBUG
    ``Received UPDATE_CORE_LIMIT: new core limit = <N>%``), ``"applied"`` (INFO ``Core limit updated
    dynamically to <N>%``) or ``"ignored"`` (WARN ``Ignoring invalid core limit update: <n>``).
    With debug on, one dynamic change yields both a ``received`` and an ``applied`` entry: count
    ``applied`` to count changes. Source: docs/sut/client.md §memory-quota, docs/sut/bash-harness.md §pod-log-patterns.
    """

    kind: str
    percent: int
    ts: datetime | None
    line: str


_CORE_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("applied", re.compile(r"Core limit updated dynamically to (?P<v>-?\d+)%")),
    ("received", re.compile(r"Received UPDATE_CORE_LIMIT: new core limit = (?P<v>-?\d+)%")),
    ("ignored", re.compile(r"Ignoring invalid core limit update: (?P<v>-?\d+)")),
    ("initial", re.compile(r"Core limit = (?P<v>-?\d+)%")),
)


def core_limit_updates(text: str) -> list[CoreLimitUpdate]:
    """All core-limit lines of the workload log in order; see :class:`CoreLimitUpdate`. Never raises."""
    out: list[CoreLimitUpdate] = []
    for ts, line in timestamped_lines(text):
        if "ore limit" not in line and "UPDATE_CORE_LIMIT" not in line:
            continue
        for kind, rx in _CORE_RES:
            m = rx.search(line)
            if m:
                out.append(CoreLimitUpdate(kind, int(m.group("v")), ts, line))
                break
    return out


@dataclass(frozen=True)
class MemoryLimitUpdate:
    """One memory-limit line of the client library (bytes).

    ``kind``: ``"initial"`` (INFO ``GPU memory limit set to <bytes> bytes (<f2> GiB)``, from the
    ``XPUSHARE_GPU_MEMORY_LIMIT`` env), ``"received"`` (DEBUG ``Received UPDATE_LIMIT: new limit =
    <bytes> bytes``) or ``"applied"`` (INFO ``Memory limit updated: <old> -> <new> bytes (<f2>
    GiB)``). ``old_bytes`` is only known for ``applied``. Source: docs/sut/client.md §memory-quota,
    docs/sut/bash-harness.md §pod-log-patterns.
    """

    kind: str
    new_bytes: int
    old_bytes: int | None
    ts: datetime | None
    line: str


_MEM_APPLIED_RE = re.compile(r"Memory limit updated: (?P<old>\d+) -> (?P<new>\d+) bytes")
_MEM_RECEIVED_RE = re.compile(r"Received UPDATE_LIMIT: new limit = (?P<new>\d+) bytes")
_MEM_INITIAL_RE = re.compile(r"GPU memory limit set to (?P<new>\d+) bytes")


def memory_limit_updates(text: str) -> list[MemoryLimitUpdate]:
    """All memory-limit lines in order; see :class:`MemoryLimitUpdate`. Never raises."""
    out: list[MemoryLimitUpdate] = []
    for ts, line in timestamped_lines(text):
        if "imit" not in line:
            continue
        m = _MEM_APPLIED_RE.search(line)
        if m:
            out.append(MemoryLimitUpdate("applied", int(m.group("new")), int(m.group("old")), ts, line))
            continue
        m = _MEM_RECEIVED_RE.search(line)
        if m:
            out.append(MemoryLimitUpdate("received", int(m.group("new")), None, ts, line))
            continue
        m = _MEM_INITIAL_RE.search(line)
        if m:
            out.append(MemoryLimitUpdate("initial", int(m.group("new")), None, ts, line))
    return out


@dataclass(frozen=True)
class MemoryReport:
    """One DEBUG ``Reported memory usage: <N> MB`` line of the client library: the managed allocation (whole MiB,
    ``allocated / (1024*1024)``) it has just sent to the scheduler in a MEM_UPDATE, after a cuMemAlloc/cuMemFree
    (client.c ``report_memory_usage_to_scheduler``). ``ts``: kubectl timestamp of the line, if any.
    Source: docs/sut/client.md §client-lines ("Debug only")."""

    mib: int
    ts: datetime | None


_REPORTED_RE = re.compile(r"Reported memory usage: (?P<mb>\d+) MB\s*$")


def memory_reports(text: str) -> list[MemoryReport]:
    """All ``Reported memory usage`` lines in order (debug mode only; none without it). Never raises."""
    out: list[MemoryReport] = []
    for ts, line in timestamped_lines(text):
        if "Reported memory usage" in line and (m := _REPORTED_RE.search(line)) is not None:
            out.append(MemoryReport(int(m.group("mb")), ts))
    return out
