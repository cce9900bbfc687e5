"""The soak's evidence as the STAB/LEAK/FAIL judgments read it: the series files under
``<case_dir>/soak/`` (written by the soak loop, format and readers in :mod:`xpushare.evidence.soak_series`),
the JSON snapshots, the scheduler log (plain, or rotated ``.gz`` parts), and per-process series.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare.evidence import soak_series
from xpushare.evidence.store import Evidence

SOAK = "soak"


@dataclass
class SoakData:
    """The soak's evidence, parsed: rows of the CSV series (strings), JSON lines, and the JSON snapshots."""

    samples: list[dict[str, str]] = field(default_factory=list)
    metrics: list[dict[str, str]] = field(default_factory=list)
    schedulers: list[dict[str, str]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    present: bool = False

    def gaps(self, ops: Sequence[str] = ("sample",)) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == "gap" and e.get("op") in ops]


def _csv_rows(ev: Evidence, name: str) -> list[dict[str, str]]:
    rel = f"{SOAK}/{name}"
    if rel in ev.files:
        return [r for r in csv.DictReader(io.StringIO(ev.files[rel])) if None not in r.values()]
    if ev.case_dir is not None:
        return list(soak_series.iter_csv(ev.case_dir / SOAK / name))
    return []


def _jsonl(ev: Evidence, name: str) -> list[dict[str, Any]]:
    rel = f"{SOAK}/{name}"
    if rel in ev.files:
        out = []
        for line in ev.files[rel].splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out
    if ev.case_dir is not None:
        return list(soak_series.iter_jsonl(ev.case_dir / SOAK / name))
    return []


def _json(ev: Evidence, name: str) -> dict[str, Any]:
    text = ev.text(f"{SOAK}/{name}")
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def load_soak(ev: Evidence) -> SoakData:
    """Everything under ``soak/`` (rotated parts included). ``present`` is False when there is no soak."""
    data = SoakData(
        samples=_csv_rows(ev, "samples.csv"),
        metrics=_csv_rows(ev, "metrics.csv"),
        schedulers=_csv_rows(ev, "schedulers.csv"),
        rounds=_jsonl(ev, "rounds.jsonl"),
        events=_jsonl(ev, "events.jsonl"),
        baseline=_json(ev, "baseline.json"),
        final=_json(ev, "final.json"),
        checkpoint=_json(ev, "checkpoint.json"),
    )
    data.present = bool(data.checkpoint or data.samples or data.rounds)
    return data


def scheduler_log_lines(ev: Evidence) -> Iterator[str]:
    """Every scheduler log line of the case in time order: rotated parts (``soak/logs/scheduler-*.log.gz``),
    earlier segments' logs (``soak/segments/*/scheduler.log*``), then the last ``scheduler.log``."""
    if ev.case_dir is not None:
        base = ev.case_dir / SOAK
        paths = sorted((base / "logs").glob("scheduler-*.log*")) if (base / "logs").is_dir() else []
        if (base / "segments").is_dir():
            for seg in sorted((base / "segments").iterdir(), key=lambda p: _natural(p.name)):
                paths += sorted(seg.glob("scheduler.log*"))
        for path in paths:
            yield from soak_series.iter_lines(path) if not path.name.endswith(".gz") else _gz_lines(path)
    text = ev.text("scheduler.log")
    if text:
        yield from text.splitlines()


def _gz_lines(path: Path) -> Iterator[str]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            yield line.rstrip("\n")


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def has_scheduler_log(ev: Evidence) -> bool:
    if ev.text("scheduler.log") is not None:
        return True
    return ev.case_dir is not None and (ev.case_dir / SOAK / "logs").is_dir()


def number_or_none(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def process_series(
    rows: Iterable[Mapping[str, str]], value: str, *, min_samples: int, prefer_phase: str | None = "idle"
) -> dict[tuple[str, str], tuple[list[float], list[float], str]]:
    """``(node, pid) -> (times, values, phases used)`` of a ``samples.csv`` column, in time order.

    ``prefer_phase`` rows are used when a process has at least ``min_samples`` of them, else all rows.
    """
    every: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for r in rows:
        t, v = number_or_none(r.get("ts")), number_or_none(r.get(value))
        if t is None or v is None:
            continue
        every.setdefault((r.get("node", ""), r.get("pid", "")), []).append((t, v, r.get("phase", "")))
    out = {}
    for key, pts in every.items():
        pts.sort()
        used = "all"
        if prefer_phase:
            chosen = [p for p in pts if p[2] == prefer_phase]
            if len(chosen) >= min_samples:
                pts, used = chosen, prefer_phase
        out[key] = ([p[0] for p in pts], [p[1] for p in pts], used)
    return out
