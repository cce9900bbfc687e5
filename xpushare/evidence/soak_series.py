"""Append-only series files of a soak, with rotation, and their readers.

Every file lives under ``<case_dir>/soak/`` and is only ever appended to; each row is flushed when
written, so a crash or a Ctrl-C loses nothing already sampled, and a resumed soak appends to the
same files (one time series). A file that grows past ``max_bytes`` is rotated: the current part is
gzip-compressed to ``<name>.<k>.gz`` (k = 1, 2 ...) and a fresh part is started (CSV parts repeat
the header). Readers stream every part in order, so judgments never hold more than they need.

Files (columns are documented with each writer below):

* ``samples.csv``    scheduler process per node and tick: RSS (bytes), FD count, threads;
* ``metrics.csv``    scrape per node and tick: series counts, client_info series, GPU memory used;
* ``schedulers.csv`` scheduler pods per tick: uid and restart count (restart detection);
* ``rounds.jsonl``   one line per workload round (pods, phases, runtimes);
* ``events.jsonl``   gaps, anomalies, annotations, segments, notes.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from xpushare.model.atomic_file import open_append, writing

__all__ = [
    "METRICS_FIELDS",
    "SAMPLE_FIELDS",
    "SCHEDULER_FIELDS",
    "Appender",
    "CsvAppender",
    "JsonlAppender",
    "gzip_file",
    "iter_csv",
    "iter_jsonl",
    "iter_lines",
    "parts",
]

SAMPLE_FIELDS = ("ts", "elapsed_s", "node", "pid", "rss_bytes", "fd_count", "threads", "phase")
"""``samples.csv``: unix time (s), active soak seconds, node, scheduler pid, VmRSS (bytes), open FDs
(empty when unreadable), threads, ``load`` (sampled while a round ran) or ``idle`` (after a round's pods
were deleted, or before the first round)."""

METRICS_FIELDS = (
    "ts", "elapsed_s", "node", "ok", "series_total", "client_series", "client_info_total",
    "client_info_ours", "gpu_used_bytes", "phase",
)
"""``metrics.csv``: unix time, active seconds, node, 1 when /metrics answered 200 and parsed (else 0 and
empty values), all series, series of ``*_client_*`` families, ``client_info`` series (all / of this
case's pods), sum of ``gpu_memory_used_bytes`` of the node's GPUs (bytes), phase."""

SCHEDULER_FIELDS = ("ts", "elapsed_s", "node", "pod", "uid", "restarts", "ready")
"""``schedulers.csv``: unix time, active seconds, node, scheduler pod name, pod uid, container restart
count, 1 when ready."""

_PART_RE = re.compile(r"\.(\d+)\.gz$")


def parts(path: Path) -> list[Path]:
    """The parts of a rotated file in write order: ``<name>.1.gz``, ``<name>.2.gz`` ..., then ``<name>``."""
    path = Path(path)
    rotated: list[tuple[int, Path]] = []
    if path.parent.is_dir():
        for p in path.parent.glob(f"{path.name}.*.gz"):
            m = _PART_RE.search(p.name)
            if m and p.name == f"{path.name}.{m.group(1)}.gz":
                rotated.append((int(m.group(1)), p))
    out = [p for _, p in sorted(rotated)]
    if path.exists():
        out.append(path)
    return out


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def iter_lines(path: Path) -> Iterator[str]:
    """Every line (without the newline) of every part of ``path``, streaming."""
    for part in parts(path):
        with _open_text(part) as fh:
            for line in fh:
                yield line.rstrip("\n")


def iter_csv(path: Path) -> Iterator[dict[str, str]]:
    """Rows of a (rotated) CSV file as dicts; each part starts with its header. Truncated last rows
    (a crash mid-write) are skipped."""
    for part in parts(path):
        with _open_text(part) as fh:
            reader = csv.DictReader(fh)
            for row in reader:
                if None in row.values() or None in row:
                    continue
                yield row


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Objects of a (rotated) JSON-lines file; a line that is not a JSON object (torn write) is skipped."""
    for line in iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def gzip_file(path: Path, target: Path | None = None, *, remove: bool = True) -> Path:
    """Compress ``path`` to ``target`` (default ``<path>.gz``), streaming; remove the original."""
    target = target or path.with_name(path.name + ".gz")
    with path.open("rb") as src, writing(target, binary=True) as w, \
            gzip.GzipFile(fileobj=w.fh, mode="wb", compresslevel=6) as dst:  # type: ignore[arg-type]
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            dst.write(chunk)
    if remove:
        path.unlink()
    return target


class Appender:
    """An append-only text file, flushed after every write and rotated past ``max_bytes``.

    ``fsync()`` forces the data to disk (called at checkpoints, not per row). Not thread-safe.
    """

    def __init__(self, path: Path, *, max_bytes: int = 64 << 20) -> None:
        self.path = Path(path)
        self.max_bytes = int(max_bytes)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = None
        self._size = self.path.stat().st_size if self.path.exists() else 0

    def _open(self) -> IO[str]:
        if self._fh is None:
            self._fh = open_append(self.path)
            self._size = self.path.stat().st_size
            if self._size == 0:
                self._on_new_part(self._fh)
        return self._fh

    def _on_new_part(self, fh: IO[str]) -> None:
        """Hook for a fresh part (CSV: the header)."""

    def write_text(self, text: str) -> None:
        fh = self._open()
        fh.write(text)
        fh.flush()
        self._size += len(text.encode("utf-8"))
        if self._size >= self.max_bytes:
            self.rotate()

    def rotate(self) -> Path | None:
        """Compress the current part to the next ``<name>.<k>.gz`` and start a new part."""
        self.close()
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        existing = [int(m.group(1)) for p in parts(self.path) if (m := _PART_RE.search(p.name))]
        target = self.path.with_name(f"{self.path.name}.{max(existing, default=0) + 1}.gz")
        gzip_file(self.path, target)
        self._size = 0
        return target

    def fsync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class CsvAppender(Appender):
    """Rows of fixed ``fields``; the header starts every part. Values: ``None`` -> empty, floats -> ``%.6g``
    for non-integers (times keep millisecond precision)."""

    def __init__(self, path: Path, fields: Sequence[str], *, max_bytes: int = 64 << 20) -> None:
        self.fields = tuple(fields)
        super().__init__(path, max_bytes=max_bytes)

    def _on_new_part(self, fh: IO[str]) -> None:
        fh.write(",".join(self.fields) + "\n")
        self._size = len(",".join(self.fields)) + 1

    def write(self, row: Mapping[str, Any]) -> None:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([_cell(row.get(f)) for f in self.fields])
        self.write_text(buf.getvalue())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.3f}" if abs(value) >= 1e5 else f"{value:.6g}"
    return str(value)


class JsonlAppender(Appender):
    """One compact JSON object per line."""

    def write(self, obj: Mapping[str, Any]) -> None:
        self.write_text(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
