"""``events.jsonl``: the event stream of a suite run, one JSON object a line, written as things happen.

Each line is ``{"ts": "2025-01-31T12:00:00.123456+00:00", "event": NAME, ...fields}``: ``ts`` is ISO 8601 UTC,
``event`` one of :data:`EVENTS`, the rest the event's fields (JSON values). Every line is flushed when written, so
``tail -f events.jsonl`` (or a dashboard) follows a run live; the file only grows (a resumed run appends).

The run driver opens the stream (:func:`recording`); code below it reports through :func:`emit`, which writes to
the stream of the run in progress and does nothing outside a run. :func:`read` gives the events back.

Every event of a cluster's cases carries ``cluster`` (the driver runs each cluster's cases inside
:func:`cluster`), and every event of a case carries ``case_id`` (:func:`case`). Both scopes belong to the thread
that opens them: several clusters of one run (``--cluster c1,c2``) run in threads of their own and share one
stream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from xpushare.model.atomic_file import open_append
from xpushare.model.workload import WorkloadRecord

__all__ = ["EVENTS", "FILE_NAME", "EventWriter", "case", "cluster", "emit", "pod_phases", "read", "recording"]

FILE_NAME = "events.jsonl"

EVENTS = (
    "run_started",  # run_id, cluster, mode, cases (ids in order), resume; one per cluster of the run
    "run_ended",  # run_id, exit_status, interrupted, counts {status: n}
    "case_started",  # case_id, suite, attempt
    "case_ended",  # case_id, suite, status, summary, duration_s
    "pod_phase",  # case_id, pod, phase, node, exit_code, waited_for (terminal | running)
    "harvest_started",  # case_id
    "harvest_ended",  # case_id, files (count), step (harvest | cleanup)
    "error",  # case_id (or null), step, message
    "host_unreachable",  # host, role, why, detail: a host that did not answer (the run goes on without it)
    "host_back",  # host, missing_s: a host that answers again after host_unreachable (a soak's sampling)
)
"""Every event name, with its fields; every event but ``run_ended`` also has ``cluster``."""


class EventWriter:
    """Appends events to one ``events.jsonl``; thread-safe, each line flushed as written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = open_append(path)
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        """Write ``{"ts", "event", **fields}`` as one line (values not JSON become their ``str``).

        Raises ``ValueError`` for an event name not in :data:`EVENTS`."""
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}")
        record = {"ts": datetime.now(timezone.utc).isoformat(), "event": event, **fields}
        line = json.dumps(record, default=str, sort_keys=False)
        with self._lock:
            if not self._fh.closed:
                self._fh.write(line + "\n")
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


_active: EventWriter | None = None
_scope = threading.local()  # this thread's case_id and cluster (see case() and cluster())


@contextmanager
def recording(run_dir: Path) -> Iterator[EventWriter]:
    """Make ``run_dir/events.jsonl`` the stream :func:`emit` writes to while the block runs."""
    global _active
    writer = EventWriter(run_dir / FILE_NAME)
    previous, _active = _active, writer
    try:
        yield writer
    finally:
        _active = previous
        writer.close()


@contextmanager
def _scoped(key: str, value: str) -> Iterator[None]:
    previous = getattr(_scope, key, None)
    setattr(_scope, key, value)
    try:
        yield
    finally:
        setattr(_scope, key, previous)


def case(case_id: str) -> AbstractContextManager[None]:
    """Events this thread emits while the block runs carry ``case_id`` unless they give their own."""
    return _scoped("case_id", case_id)


def cluster(name: str) -> AbstractContextManager[None]:
    """Events this thread emits while the block runs carry ``cluster`` (the cluster's name) unless they give
    their own."""
    return _scoped("cluster", name)


def emit(event: str, **fields: Any) -> None:
    """Write an event to the stream of the run in progress (none outside :func:`recording`: nothing written);
    inside :func:`case` / :func:`cluster`, ``case_id`` / ``cluster`` is added when not given."""
    writer = _active
    if writer is not None:
        scoped = {key: getattr(_scope, key, None) for key in ("cluster", "case_id")}
        writer.emit(event, **{**{k: v for k, v in scoped.items() if v is not None}, **fields})


def pod_phases(records: Sequence[WorkloadRecord], waited_for: str) -> None:
    """One ``pod_phase`` event per record a backend's wait returned (``waited_for``: terminal or running)."""
    for record in records:
        emit("pod_phase", pod=record.name, phase=record.phase, node=record.node, exit_code=record.exit_code,
             waited_for=waited_for)


def read(path: Path) -> list[dict[str, Any]]:
    """The events of ``path`` (a run directory or its ``events.jsonl``) in order; ``[]`` when there is none.

    A last line cut short (the run is still writing, or was killed mid-line) is left out; any other line that is
    not a JSON object raises ``ValueError`` naming its line number."""
    file = path / FILE_NAME if path.is_dir() else path
    if not file.exists():
        return []
    lines = file.read_text(encoding="utf-8").split("\n")
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # no newline yet: the writer is mid-line
                break
            raise ValueError(f"{file}:{number}: not a JSON line") from None
        if not isinstance(record, dict):
            raise ValueError(f"{file}:{number}: not a JSON object")
        out.append(record)
    return out
