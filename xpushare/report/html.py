"""The run's ``report.html``: one self-contained page (inline CSS and JavaScript, plots embedded as ``data:``
PNG URIs, no network needed to open it) from the stored results alone.

It shows the run (id, clusters, times, counts per status, release recommendation), the per-suite counts and
every case with its checks, thresholds, metrics, error, plots and relative links to every file of its case
directory; buttons and a list filter the cases by status and by suite. The page is rendered from the Jinja2
template ``templates/report.html.j2`` of :mod:`xpushare.data` with autoescaping on: every stored text
(summaries, log excerpts, names) is HTML-escaped, and links are percent-encoded paths relative to the run
directory, where the file is written.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from xpushare.data import templates_dir
from xpushare.model.case_record import CaseRecord
from xpushare.report import isolation_table, run_store
from xpushare.report.markdown import fmt_duration
from xpushare.report.summaries import (
    STATUS_ORDER,
    RunOverview,
    fmt_rate,
    pass_rate,
    record_status,
)

TEMPLATE = "report.html.j2"
#: A PNG larger than this is linked, not embedded, so one huge plot cannot bloat the page (bytes).
MAX_EMBEDDED_PNG = 8 * 2**20
#: At most this many files of one case directory are linked; the rest are counted (soaks keep many parts).
MAX_FILES_PER_CASE = 500
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,  # every value is escaped unless the template marks it safe (it never does)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def href(rel_path: str) -> str:
    """A relative link to ``rel_path`` (posix, relative to the run directory), percent-encoded, slashes kept."""
    return urllib.parse.quote(rel_path)


def png_data_uri(path: Path) -> str | None:
    """``data:image/png;base64,...`` of a PNG file; None when it is not a PNG, unreadable or too large."""
    try:
        if path.stat().st_size > MAX_EMBEDDED_PNG:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(_PNG_MAGIC):
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _checks(record: CaseRecord) -> list[dict[str, str]]:
    out = []
    for check in record.checks or []:
        if not isinstance(check, Mapping):
            continue
        ok = check.get("ok")
        values = check.get("values") or {}
        shown = ", ".join(f"{k} = {run_store.format_value(v, str(k))}" for k, v in values.items()) \
            if isinstance(values, Mapping) else run_store.format_value(values)
        out.append({
            "state": "ok" if ok is True else "fail" if ok is False else "na",
            "mark": "ok" if ok is True else "FAIL" if ok is False else "n.a.",
            "name": str(check.get("name", "?")),
            "expression": str(check.get("expression", "")),
            "inputs": shown,  # not "values": a template reads c.values as the dict method
            "detail": str(check.get("detail") or ""),
        })
    return out


def _pairs(values: Any) -> list[tuple[str, str]]:
    if not isinstance(values, Mapping):
        return []
    return [(str(k), run_store.format_value(v, str(k))) for k, v in values.items()]


def _case_files(run_dir: Path, record: CaseRecord) -> dict[str, Any]:
    """Links to the files of the case directory (latest attempt), its plots, evidence named but absent."""
    base_rel = record.case_log_dir
    base = run_dir / base_rel
    evidence = {str(e) for e in record.evidence or []}
    found: list[Path] = []
    if base_rel and base.is_dir():
        found = sorted(p for p in base.rglob("*")
                       if p.is_file() and p.relative_to(base).parts[0] != run_store.ATTEMPTS_DIR)
    files = []
    for p in found[:MAX_FILES_PER_CASE]:
        rel = p.relative_to(base).as_posix()
        files.append({"name": rel, "href": href(f"{base_rel}/{rel}"), "evidence": rel in evidence,
                      "size": p.stat().st_size})
    plots = []
    for p in found:
        if p.suffix.lower() == ".png":
            rel = p.relative_to(base).as_posix()
            plots.append({"name": rel, "href": href(f"{base_rel}/{rel}"), "uri": png_data_uri(p)})
    present = {p.relative_to(base).as_posix() for p in found}
    attempts = base / run_store.ATTEMPTS_DIR
    return {
        "files": files,
        "more_files": max(0, len(found) - MAX_FILES_PER_CASE),
        "plots": plots,
        "missing": sorted(e for e in evidence if e not in present and not (base / e).exists()),
        "attempts_href": href(f"{base_rel}/{run_store.ATTEMPTS_DIR}/") if attempts.is_dir() else None,
    }


def _case(run_dir: Path, record: CaseRecord, index: int) -> dict[str, Any]:
    return {
        "anchor": f"case-{index}",
        "cluster": record.cluster,
        "suite": record.suite,
        "case_id": record.case_id,
        "title": str(record.title or ""),
        "status": record_status(record).value,
        "duration": fmt_duration(record),
        "summary": str(record.summary or ""),
        "error": str(record.error or ""),
        "attempt": record.attempt,
        "mode": str(record.mode or ""),
        "checks": _checks(record),
        "thresholds": _pairs(record.thresholds),
        "metrics": _pairs(record.metrics),
        **_case_files(run_dir, record),
    }


def render_html(run_dir: Path, results: Sequence[CaseRecord], view: RunOverview, *, run_id: str) -> str:
    """Text of ``report.html`` for the run in ``run_dir`` (``results``: its case records, model/case_record.py, from
    :func:`~xpushare.report.run_store.load_results`; ``view`` their :func:`~xpushare.report.summaries.run_overview`).
    Raises ``jinja2.TemplateError`` only if the shipped template is broken."""
    meta, c, decision = view.meta, view.counts, view.decision
    context = {
        "run_id": run_id,
        "generated": view.now.isoformat(timespec="seconds"),
        "clusters": view.clusters,
        "suites": sorted({r.suite for r in results}, key=run_store.suite_rank),
        "meta": {**{k: str(meta[k]) for k in ("started", "ended", "tool_version", "exit_status", "selection")
                    if meta.get(k) is not None},
                 **({"re-judged": run_store.rejudgment_label(meta["rejudgments"]) + " (exit status "
                     f"{meta['rejudgments'][-1].get('exit_status')}; the run's own verdicts kept)"}
                    if meta.get("rejudgments") else {})},
        "interrupted": bool(meta.get("interrupted")),
        "statuses": [s.value for s in STATUS_ORDER],
        "counts": c,
        "total": len(results),
        "pass_rate": fmt_rate(pass_rate(c)),
        "ready": decision.ready,
        "release_label": decision.label,
        "release_profiles": list(decision.profiles),
        "reasons": list(decision.reasons),
        "scope": view.scope,
        "groups": view.suites,
        "cases": [_case(run_dir, r, i) for i, r in enumerate(results, 1)],  # #case-1 is the first case
        "markdown_href": href("run-report.md"),
        "isolation_header": isolation_table.HEADER,
        "isolation_rows": isolation_table.isolation_rows(results),
    }
    return _environment().get_template(TEMPLATE).render(**context)
