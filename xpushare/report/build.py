"""(Re)writing a run's report files from its stored ``result.json`` files (``invoke report --run-id X``
works offline): ``case-summary.tsv``, ``run-summary.tsv`` (:mod:`~xpushare.report.summaries`), ``junit.xml``
(:mod:`~xpushare.report.junit`), ``run-report.md`` (:mod:`~xpushare.report.markdown`) and ``report.html``
(:mod:`~xpushare.report.html`), all from the case records :func:`~xpushare.report.run_store.load_results` reads
(:class:`~xpushare.model.case_record.CaseRecord`, source: model/case_record.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from xpushare.model import atomic_file
from xpushare.report import run_store
from xpushare.report.html import render_html
from xpushare.report.junit import junit_tree
from xpushare.report.markdown import render_markdown
from xpushare.report.summaries import (
    CASE_SUMMARY_HEADER,
    RUN_SUMMARY_HEADER,
    case_summary_rows,
    format_tsv,
    never_run,
    run_overview,
    run_summary_rows,
)


@dataclass(frozen=True)
class ReportPaths:
    """The files written by :func:`build` (absolute paths inside the run directory)."""

    case_summary: Path
    run_summary: Path
    junit: Path
    markdown: Path
    html: Path


# --------------------------------------------------------------------------------------------- build


def build(run_dir: Path, *, required: set[str] | None = None, now: datetime | None = None) -> ReportPaths:
    """(Re)write the report files of ``run_dir`` from its ``result.json`` files and ``run.json``.

    ``required``: case ids the release recommendation needs (default: records flagged ``required``, which is
    every case unless the engine marked it optional). ``now`` is the "generated at" time (default: now, UTC).
    The run id comes from run.json, else from the directory name ``.tmplog/<run-id>/xpushare``.
    Each file is written atomically.
    """
    run_dir = Path(run_dir)
    if run_dir.is_dir():
        atomic_file.claim_tree(run_dir)  # no link planted in the run is written through
    results = run_store.load_results(run_dir)
    meta = run_store.read_run_meta(run_dir) or {}
    run_id = str(meta.get("run_id") or run_dir.parent.name)
    paths = ReportPaths(
        case_summary=run_dir / "case-summary.tsv",
        run_summary=run_dir / "run-summary.tsv",
        junit=run_dir / "junit.xml",
        markdown=run_dir / "run-report.md",
        html=run_dir / "report.html",
    )
    run_store.atomic_write_text(paths.case_summary, format_tsv(CASE_SUMMARY_HEADER, case_summary_rows(results)))
    run_store.atomic_write_text(paths.run_summary, format_tsv(RUN_SUMMARY_HEADER, run_summary_rows(results)))
    # junit counts every selected case: those the run never reached too (required ones as errors)
    xml = ET.tostring(junit_tree([*results, *never_run(meta, results)], run_id), encoding="unicode")
    run_store.atomic_write_text(paths.junit, '<?xml version="1.0" encoding="UTF-8"?>\n' + xml + "\n")
    view = run_overview(results, meta, required, now)  # one overview: both files say the same of the run
    run_store.atomic_write_text(paths.markdown, render_markdown(run_dir, results, view, run_id=run_id))
    page = render_html(run_dir, results, view, run_id=run_id)
    run_store.atomic_write_text(paths.html, page)
    return paths


