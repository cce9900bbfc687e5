"""Parsers of the node sampler's CSV files (``workloads/node_sampler.py``): ``gpu.csv`` and ``procs.csv``.

Formats (written by the sampler, one row per GPU / per compute process and sample):

* ``gpu.csv``: ``timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes``;
* ``procs.csv``: ``timestamp,gpu_index,pid,used_bytes``;
* ``pids.csv``: ``timestamp,pid,hostname,pod_uid`` (once per pid: its ``HOSTNAME`` and cgroup pod UID).

``timestamp`` is Unix time in seconds; ``pid`` is the host pid NVML reports (the node's pid namespace);
memory is bytes; an empty cell is an unavailable value. Rows that do not parse are skipped.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

__all__ = ["GpuRow", "PidRow", "ProcRow", "gpu_rows", "index_to_uuid", "pid_rows", "proc_rows"]


@dataclass(frozen=True)
class GpuRow:
    """One GPU of one sample: Unix time (s), NVML index, UUID, used bytes (None: not read)."""

    t: float
    gpu_index: int
    uuid: str
    used_bytes: float | None


@dataclass(frozen=True)
class ProcRow:
    """One compute process of one sample: Unix time (s), NVML index of its GPU, host pid, used bytes."""

    t: float
    gpu_index: int
    pid: int
    used_bytes: float | None


@dataclass(frozen=True)
class PidRow:
    """One process the sampler named: Unix time (s) first seen, host pid, HOSTNAME, cgroup pod UID (``""``:
    unreadable)."""

    t: float
    pid: int
    hostname: str
    pod_uid: str


def _number(text: str | None) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


def gpu_rows(text: str) -> list[GpuRow]:
    """The rows of a ``gpu.csv`` (header required)."""
    out: list[GpuRow] = []
    for r in csv.DictReader(io.StringIO(text)):
        try:
            out.append(GpuRow(float(r["timestamp"]), int(r["gpu_index"]), (r.get("uuid") or "").strip(),
                              _number(r.get("mem_used_bytes"))))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def proc_rows(text: str) -> list[ProcRow]:
    """The rows of a ``procs.csv`` (header required)."""
    out: list[ProcRow] = []
    for r in csv.DictReader(io.StringIO(text)):
        try:
            out.append(ProcRow(float(r["timestamp"]), int(r["gpu_index"]), int(r["pid"]),
                               _number(r.get("used_bytes"))))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def pid_rows(text: str) -> list[PidRow]:
    """The rows of a ``pids.csv`` (header required)."""
    out: list[PidRow] = []
    for r in csv.DictReader(io.StringIO(text)):
        try:
            out.append(PidRow(float(r["timestamp"]), int(r["pid"]), (r.get("hostname") or "").strip(),
                              (r.get("pod_uid") or "").strip()))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def index_to_uuid(rows: list[GpuRow]) -> dict[int, str]:
    """NVML index -> UUID of the GPUs a ``gpu.csv`` saw (rows without a UUID are left out)."""
    return {r.gpu_index: r.uuid for r in rows if r.uuid}
