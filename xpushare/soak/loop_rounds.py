"""One workload round of the soak loop: its state while it runs (:class:`Round`), the quota values its pods
start with, and its ``rounds.jsonl`` record once it ended (:func:`round_record`). Pure data and functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xpushare.model.workload import WorkloadRecord, WorkloadSpec

__all__ = ["Round", "RoundOutcome", "round_record", "start_values"]


@dataclass
class Round:
    """A running round: number ``no`` (1-based), start (unix and monotonic s), its pods (``specs``, ``names``),
    the quota value each pod has now (``values``), when each was first seen past Pending (unix s) and the
    last record of each."""

    no: int
    started: float
    started_mono: float
    specs: list[WorkloadSpec]
    names: list[str]
    values: dict[str, str] = field(default_factory=dict)
    first_running: dict[str, float] = field(default_factory=dict)
    last: dict[str, WorkloadRecord] = field(default_factory=dict)


def start_values(specs: Sequence[WorkloadSpec], quota_key: str | None) -> dict[str, str]:
    """``pod name -> its starting quota value`` for the changed quota (``core``: percent, ``memory``: bytes);
    pods without that limit are left out, and every pod without ``quota_key``."""
    values: dict[str, str] = {}
    for p in specs:
        if quota_key == "core" and p.core_limit is not None:
            values[p.name] = str(p.core_limit)
        elif quota_key == "memory" and p.memory_limit is not None:
            values[p.name] = str(p.memory_limit)
    return values


@dataclass(frozen=True)
class RoundOutcome:
    """An ended round: its ``rounds.jsonl`` ``record``, pods per phase, and the names of the pods that failed
    or never reached a terminal phase."""

    record: dict[str, Any]
    phases: dict[str, int]
    failed: list[str]
    stuck: list[str]


def round_record(rnd: Round, status: str, ended: float, elapsed_s: float) -> RoundOutcome:
    """The outcome of ``rnd``, ended at ``ended`` (unix s) with ``status`` (``completed``, ``timeout``, ``cut``,
    ``interrupted``, ``aborted``) after ``elapsed_s`` active soak seconds."""
    phases: dict[str, int] = {}
    runtimes: dict[str, float] = {}
    pods: dict[str, dict[str, Any]] = {}
    for name in rnd.names:
        r = rnd.last.get(name)
        phase = r.phase if r else "Missing"
        phases[phase] = phases.get(phase, 0) + 1
        info: dict[str, Any] = {"phase": phase}
        if r is not None:
            info.update(node=r.node, exit_code=r.exit_code, started=r.started, finished=r.finished)
            if r.started is not None and r.finished is not None:
                runtimes[name] = round(r.finished - r.started, 3)
        if name in rnd.first_running:
            info["pending_s"] = round(rnd.first_running[name] - rnd.started, 3)
        pods[name] = info
    failed = [n for n in rnd.names if pods[n]["phase"] == "Failed"]
    stuck = [n for n in rnd.names if pods[n]["phase"] not in ("Succeeded", "Failed")]
    pending = [v["pending_s"] for v in pods.values() if "pending_s" in v]
    record = {
        "round": rnd.no, "status": status, "started": round(rnd.started, 3), "ended": round(ended, 3),
        "duration_s": round(ended - rnd.started, 3), "elapsed_s": round(elapsed_s, 3),
        "pods": len(rnd.names), "phases": phases, "failed": failed, "not_terminal": stuck,
        "pending_max_s": max(pending) if pending else None, "runtimes_s": runtimes, "detail": pods,
    }
    return RoundOutcome(record, phases, failed, stuck)
