"""What ``invoke metrics-check`` keeps: a run directory of its own under ``.tmplog``, never an existing one.

Layout::

    <root>/.tmplog/<run-id>/metrics-check/
        metrics-check.txt          the notes and tables as printed with --output table
        metrics-check.json         the record --output json prints (the same whatever --output was)
        <scheduler>/healthz.txt    each GET of the idle part in the capture format (body, then HTTP_CODE=,
        <scheduler>/metrics.txt    CONTENT_TYPE= lines; a GET without a response: '# no response: why' and
        <scheduler>/notexist.txt   HTTP_CODE=000), evidence/scrape_capture.py
        <scheduler>/load_scrapes.jsonl   every /metrics page of the load part, one JSON record a line (t: Unix s,
                                         latency_s, status, error, body), as metrics_series.jsonl

``<scheduler>`` is the name the table gives it (node, GPU host, or ``host_port`` for ``--url``), made safe as a
file name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from xpushare.evidence.scrape_capture import ScrapeRecord, capture_text
from xpushare.metrics_check.endpoint import EndpointEvidence, HttpResponse
from xpushare.model import atomic_file
from xpushare.model.errors import UsageError
from xpushare.report import run_store

__all__ = ["DIR_NAME", "JSON_FILE", "TEXT_FILE", "RunDirectory", "check_run_id", "claim_run_dir", "safe_name"]

DIR_NAME = "metrics-check"
TEXT_FILE = "metrics-check.txt"
JSON_FILE = "metrics-check.json"
#: How many fresh ids (``<now>``, ``<now>-2`` ...) a default run id tries when another run took the same second.
_MAX_SUFFIX = 100


def safe_name(name: str) -> str:
    """``name`` as one path component: characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``
    (``127.0.0.1:9402`` -> ``127.0.0.1_9402``); never empty, ``.`` or ``..``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100].strip(".")
    return cleaned or "scheduler"


class RunDirectory:
    """The directory one metrics-check writes (created by :func:`claim_run_dir`)."""

    def __init__(self, run_id: str, path: Path) -> None:
        self.run_id = run_id
        self.path = path

    def scheduler_dir(self, name: str) -> Path:
        """``<path>/<safe name>/``, created."""
        d = self.path / safe_name(name)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def save_endpoint(self, name: str, evidence: EndpointEvidence) -> None:
        """The three GETs of the idle part of scheduler ``name``, one capture file each."""
        d = self.scheduler_dir(name)
        for file, resp in (("healthz.txt", evidence.healthz), ("metrics.txt", evidence.metrics),
                           ("notexist.txt", evidence.notfound)):
            run_store.atomic_write_text(d / file, capture_text(_record(resp), resp.content_type))

    def save_scrapes(self, name: str, scrapes: Sequence[ScrapeRecord]) -> None:
        """The load part's pages of scheduler ``name`` (nothing when there were none)."""
        if scrapes:
            text = "".join(r.to_json_line() + "\n" for r in scrapes)
            run_store.atomic_write_text(self.scheduler_dir(name) / "load_scrapes.jsonl", text)

    def save_result(self, text: str, record: dict[str, Any]) -> None:
        """The printed notes and tables, and the JSON record."""
        run_store.atomic_write_text(self.path / TEXT_FILE, text if text.endswith("\n") else text + "\n")
        run_store.atomic_write_text(self.path / JSON_FILE, json.dumps(record, indent=2, default=str) + "\n")


def _record(resp: HttpResponse) -> ScrapeRecord:
    return ScrapeRecord(0.0, resp.elapsed_s, resp.status, resp.error, resp.body)


def _validated(run_id: str) -> str:
    if run_id == run_store.LAST:
        raise UsageError(f"--run-id {run_store.LAST} names the latest stored run; give a new id")
    try:
        return run_store.validate_run_id(run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_run_id(root: Path, run_id: str | None) -> None:
    """Refuse, before anything is contacted, a ``--run-id`` that cannot name a directory or whose run directory
    ``<root>/.tmplog/<run-id>`` exists already, and a ``--root`` that is not a directory.

    Raises:
        UsageError: one line naming the flag.
    """
    if root.exists() and not root.is_dir():
        raise UsageError(f"--root {root}: not a directory")
    if run_id is not None and (root / ".tmplog" / _validated(run_id)).exists():
        raise UsageError(f"run {run_id!r} is already stored under {root / '.tmplog'}: give a new --run-id "
                         "(a stored run is never rewritten)")


def claim_run_dir(root: Path, run_id: str | None, *, now: datetime | None = None) -> RunDirectory:
    """Create ``<root>/.tmplog/<run-id>/metrics-check/`` for a new run and return it.

    ``run_id`` None: ``YYYYmmdd-HHMMSS`` of ``now`` (local time), with ``-2``, ``-3`` ... appended when a run of
    that second exists already. The ``<run-id>`` directory is created with ``exist_ok=False``, so a run never
    writes into another run's directory, also when two start at once.

    Raises:
        UsageError: a bad ``run_id``, a given ``run_id`` whose directory exists, or a ``root`` where the directory
            cannot be made (a file, no permission).
    """
    base = Path(root) / ".tmplog"
    if run_id is not None:
        candidates = [_validated(run_id)]
    else:
        first = run_store.new_run_id(now or datetime.now())
        candidates = [first] + [f"{first}-{n}" for n in range(2, _MAX_SUFFIX)]
    for rid in candidates:
        try:
            base.mkdir(parents=True, exist_ok=True)
            (base / rid).mkdir(exist_ok=False)
        except FileExistsError:
            if run_id is not None:
                raise UsageError(f"run {run_id!r} is already stored under {base}: give a new --run-id "
                                 "(a stored run is never rewritten)") from None
            continue
        except OSError as exc:
            raise UsageError(f"--root {root}: cannot create {base / rid} ({exc.strerror or exc})") from None
        path = base / rid / DIR_NAME
        path.mkdir()
        atomic_file.claim_tree(base / rid)
        return RunDirectory(rid, path)
    raise UsageError(f"no free run id under {base} for this second; give --run-id")
