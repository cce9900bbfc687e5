"""The run's ``run-report.md``: overview, per-suite counts, cases, problems, key metrics, coverage, release
recommendation and plots, from the stored results alone."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.model.verdict import Status
from xpushare.report import isolation_table, run_store
from xpushare.report.summaries import (
    FAILURE_STATUSES,
    RunOverview,
    case_where,
    cell_text,
    failure_text,
    fmt_rate,
    interrupted_by,
    pass_rate,
    record_duration,
    record_status,
)

# --------------------------------------------------------------------------------------------- markdown


_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")


def md_escape(value: Any) -> str:
    """Text safe inside a markdown table cell: ``\\``, ``|``, ``[`` and ``]`` escaped (so no text of a record can
    make a link, ``[x](javascript:...)`` included), ``<`` as ``&lt;`` (no HTML tag can start), ``&`` as ``&amp;``
    only where it would read as an entity (``&lt;``); ``>`` stays as written, so that ``>=`` reads as itself in the
    file too; newlines as ``<br>``, other control characters escaped
    (:func:`~xpushare.report.run_store.show_controls`)."""
    text = "" if value is None else str(value)
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")
    text = _ENTITY.sub("&amp;", text).replace("<", "&lt;")
    return run_store.show_controls(re.sub(r"\r\n|\r|\n", "<br>", text))


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return lines


def _md_link(text: str, rel_path: str) -> str:
    """``[text](path)`` with the path percent-encoded (slashes kept); the text is cell-escaped."""
    return f"[{md_escape(text)}]({urllib.parse.quote(rel_path)})"


def fmt_duration(record: CaseRecord) -> str:
    """A case's ``duration_s`` as ``12.3 s``, ``4m 05s`` or ``1h 02m 03s``; ``n/a`` without one."""
    if record.duration_s is None:
        return "n/a"
    seconds = record_duration(record)
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _case_rows(run_dir: Path, results: Sequence[CaseRecord]) -> list[str]:
    lines = ["| Cluster | Suite | Case | Title | Status | Duration | Summary | Analysis |", "|" + "---|" * 8]
    for r in results:
        base = r.case_log_dir
        has_analysis = (run_dir / base / run_store.ANALYSIS_FILE).is_file()
        target = f"{base}/{run_store.ANALYSIS_FILE}" if has_analysis else f"{base}/"
        cells = [
            md_escape(v)
            for v in (
                r.cluster,
                r.suite,
                r.case_id,
                r.title,
                record_status(r).value,
                fmt_duration(r),
                cell_text(r.summary),
            )
        ]
        cells.append(_md_link(target.rsplit("/", 2)[-1] or "case dir", target))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _plots(run_dir: Path, results: Sequence[CaseRecord]) -> list[str]:
    lines: list[str] = []
    for r in results:
        base = run_dir / r.case_log_dir
        pngs = sorted(p for p in base.rglob("*.png") if run_store.ATTEMPTS_DIR not in p.relative_to(base).parts[:1])
        for png in pngs:
            rel = png.relative_to(run_dir).as_posix()
            image = f"![{md_escape(png.stem)}]({urllib.parse.quote(rel)})"
            lines += [f"### {md_escape(case_where(r))}: {md_escape(png.name)}", "", image, ""]
    return lines


def _unreachable_lines(meta: Mapping[str, Any]) -> list[str]:
    """The overview's lines for run.json's ``unreachable`` hosts (docs/reliability.md §partial clusters)."""
    hosts = [u for u in meta.get("unreachable") or [] if isinstance(u, Mapping)]
    if not hosts:
        return []
    out = [f"- **{len(hosts)} host(s) UNREACHABLE**: the run went on with the hosts that answered; the cases that "
           "needed one of these are ERROR naming it (exit status 3)"]
    out += [f"  - {md_escape(u.get('cluster'))}: {md_escape(u.get('host'))} ({md_escape(u.get('role'))}): "
            f"UNREACHABLE ({md_escape(u.get('why'))}): {md_escape(u.get('detail'))}" for u in hosts]
    return out


def render_markdown(run_dir: Path, results: Sequence[CaseRecord], view: RunOverview, *, run_id: str) -> str:
    """Text of ``run-report.md`` from the case records ``results`` (model/case_record.py, as
    :func:`~xpushare.report.run_store.load_results` reads them; ``view``: their
    :func:`~xpushare.report.summaries.run_overview`); links are relative to ``run_dir`` (where the file is
    written)."""
    meta, now, c, required, clusters, decision = (view.meta, view.now, view.counts, view.required, view.clusters,
                                                  view.decision)
    ran = sum(c.values()) - c["SKIP"]

    out = [f"# xpushare test report: run {md_escape(run_id)}", "", "## Overview", ""]
    out += [
        f"- run id: `{run_id}`",
        f"- generated at: {now.isoformat(timespec='seconds')}",
        f"- clusters: {', '.join(md_escape(x) for x in clusters) or 'none'}",
    ]
    for key in ("started", "ended", "tool_version", "exit_status"):
        if meta.get(key) is not None:
            out.append(f"- {key.replace('_', ' ')}: {md_escape(meta[key])}")
    if meta.get("interrupted"):
        by = interrupted_by(meta)
        out.append(f"- **the run was interrupted{f' ({md_escape(by)})' if by else ''}**; `--resume` runs the "
                   "unfinished cases")
    out += _unreachable_lines(meta)
    rejudged = run_store.rejudgment_label(meta.get("rejudgments") or [])
    if rejudged:
        out.append(f"- **{md_escape(rejudged)}**: the verdicts below are that re-judgment's (exit status "
                   f"{md_escape((meta.get('rejudgments') or [{}])[-1].get('exit_status'))}); the run's own verdicts "
                   f"are kept in each re-judged case's `{run_store.ORIGINAL_RESULT_FILE}`")
    out.append(f"- cases: {len(results)} total: " + ", ".join(f"{s} {n}" for s, n in c.items()))
    out.append(
        f"- pass rate: {fmt_rate(pass_rate(c))} ({c['PASS']} PASS of {ran} cases that ran to a verdict; "
        "the pass rate is PASS / (all cases except SKIP), so INTERMITTENT, ERROR and INTERRUPTED count against it "
        "and SKIP is left out; no status other than PASS is ever counted as a pass)"
    )
    out.append(f"- release_ready: **{md_escape(decision.label)}** (see Release recommendation)")
    out += [f"- release profile: {md_escape(line)}" for line in decision.profiles]

    out += ["", "## Results per cluster and suite", ""]
    rows = [[g.cluster, g.suite, g.status, *g.counts.values(), g.total, g.rate] for g in view.suites]
    out += _md_table(["Cluster", "Suite", "Status", *c.keys(), "TOTAL", "Pass rate"], rows)

    out += ["", "## Cases", "", *_case_rows(run_dir, results)]

    problems = [r for r in results if record_status(r) in FAILURE_STATUSES]
    if problems:
        out += ["", "## Failed and unfinished cases", ""]
        for r in problems:
            summary = md_escape(cell_text(r.summary))
            out.append(f"- **{record_status(r).value}** {md_escape(case_where(r))}: {summary}")
            out += [f"  - {md_escape(line.strip())}" for line in failure_text(r).splitlines()]

    out += ["", "## Key metrics", ""]
    metric_rows = [
        [r.cluster, r.case_id, k, run_store.format_value(v, str(k))]
        for r in results
        for k, v in (r.metrics or {}).items()
    ]
    out += _md_table(["Cluster", "Case", "Metric", "Value"], metric_rows) if metric_rows else ["No metrics recorded."]

    iso_rows = isolation_table.isolation_rows(results)
    if iso_rows:
        out += ["", "## Isolation", "", "What a workload could hold on each allocation path under its memory quota, "
                "and the GPU time it got on each kernel launch path under its core quota (docs/isolation.md): "
                "memory held = accepted <= quota + tolerance, accuracy = accepted / quota; core held = GPU share "
                "within the seed's tolerance of the quota's, accuracy = share / the quota's share.", ""]
        out += _md_table(isolation_table.HEADER, iso_rows)

    out += [
        "",
        "## Coverage",
        "",
        "A required case is covered when it ran to PASS or FAIL; SKIP, ERROR, INTERRUPTED and missing are not.",
        "",
    ]
    cov_rows = []
    for case_id in sorted(required, key=run_store.natural_key):
        found = [r for r in results if r.case_id == case_id]
        cov_rows += [
            [
                case_id,
                r.cluster,
                r.suite,
                record_status(r).value,
                "yes" if record_status(r) in (Status.PASS, Status.FAIL) else "no",
            ]
            for r in found
        ]
        if not found:
            cov_rows.append([case_id, "", "", "missing", "no"])
    cov_header = ["Case", "Cluster", "Suite", "Status", "Covered"]
    out += _md_table(cov_header, cov_rows) if cov_rows else ["No required cases."]

    out += ["", "## Release recommendation", "", f"release_ready: **{md_escape(decision.label)}**", ""]
    if decision.profiles:
        out += ["Decided by the release profile of each cluster (docs/release.md):", ""]
        out += [f"- {md_escape(line)}" for line in decision.profiles] + [""]
    if decision.ready:
        out.append("Every required case ran to PASS with the SUT in its path, and no case is FAIL, INTERMITTENT, "
                   "ERROR or INTERRUPTED.")
    else:
        out += ["Reasons:", ""] + [f"- {md_escape(reason)}" for reason in decision.reasons]
    out += ["", md_escape(view.scope)]
    not_required = [r for r in results if r.case_id not in required and record_status(r) is Status.SKIP]
    if not_required:
        out += ["", "Skipped cases that are not required: " + ", ".join(md_escape(case_where(r)) for r in not_required)]

    plots = _plots(run_dir, results)
    if plots:
        out += ["", "## Plots", "", *plots]
    return "\n".join(out).rstrip("\n") + "\n"




