"""Run reports rebuilt from the stored ``result.json`` files alone (so ``invoke report --run-id X`` works offline).

:func:`build` writes into the run directory:

* ``case-summary.tsv``: ``cluster suite case_id status summary case_log_dir``, one row per case (latest
  attempt), ``case_log_dir`` relative to the run directory.
* ``run-summary.tsv``: ``cluster suite selector status``; per (cluster, suite) one ``all`` row with the
  aggregate status (:func:`aggregate_status`), then one row per case with the case id as selector.
* ``junit.xml``: one ``<testsuite name="<cluster>.<suite>">`` per pair (landscape.md section 3).
* ``run-report.md``: overview, per-suite counts, cases, problems, key metrics, coverage, release
  recommendation, plots.

TSV escaping (bash-harness.md section 9 item 17 is the defect this avoids): every field is written with
:func:`tsv_escape`, which replaces backslash, tab, newline and carriage return with ``\\\\``, ``\\t``, ``\\n``
and ``\\r``, and any other control character (or U+2028/U+2029) with ``\\xNN``/``\\uNNNN``. A row is therefore
always one line of tab-separated fields, whatever splits lines; :func:`read_tsv` undoes it. The csv module is
not used because it would quote embedded newlines and so spread one row over several lines.

Counting rules: only PASS counts as a pass. SKIP, ERROR and INTERRUPTED are counted as themselves and never
as PASS; the pass rate is ``PASS / (cases not SKIP)``.
"""

from __future__ import annotations

import math
import re
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xpushare import artifacts
from xpushare.model import Status

CASE_SUMMARY_HEADER = ("cluster", "suite", "case_id", "status", "summary", "case_log_dir")
RUN_SUMMARY_HEADER = ("cluster", "suite", "selector", "status")
STATUS_ORDER: tuple[Status, ...] = (Status.PASS, Status.FAIL, Status.SKIP, Status.ERROR, Status.INTERRUPTED)

Result = Mapping[str, Any]


@dataclass(frozen=True)
class ReportPaths:
    """The files written by :func:`build` (absolute paths inside the run directory)."""

    case_summary: Path
    run_summary: Path
    junit: Path
    markdown: Path


# --------------------------------------------------------------------------------------------- counting


def _status(record: Result) -> Status:
    """The record's status; ``ValueError`` if it is not one of the five."""
    return Status(record["status"])


def counts(results: Iterable[Result]) -> dict[str, int]:
    """``{"PASS": n, "FAIL": n, "SKIP": n, "ERROR": n, "INTERRUPTED": n}``, every key present, in that order.

    ``ValueError`` on a record whose status is not one of the five (records from
    :func:`~xpushare.artifacts.load_results` are already normalised).
    """
    out = {s.value: 0 for s in STATUS_ORDER}
    for r in results:
        out[_status(r).value] += 1
    return out


def pass_rate(c: Mapping[str, int]) -> float | None:
    """PASS / (PASS + FAIL + ERROR + INTERRUPTED) from :func:`counts`, i.e. SKIP leaves the denominator.

    None when no case ran (every case SKIP, or none at all).
    """
    ran = sum(c[s.value] for s in STATUS_ORDER if s is not Status.SKIP)
    return c[Status.PASS.value] / ran if ran else None


def aggregate_status(statuses: Iterable[Status | str]) -> Status:
    """Status of a group of cases (a suite): FAIL if any FAIL; else ERROR if any ERROR; else INTERRUPTED if
    any INTERRUPTED; else PASS if at least one PASS (the rest being SKIP, which are listed per case); else
    SKIP (all SKIP, or no case at all). An all-SKIP suite is never PASS."""
    present = {Status(s) for s in statuses}
    for s in (Status.FAIL, Status.ERROR, Status.INTERRUPTED, Status.PASS):
        if s in present:
            return s
    return Status.SKIP


def _groups(results: Sequence[Result]) -> dict[tuple[str, str], list[Result]]:
    """Results grouped by (cluster, suite), in the order of ``results`` (already sorted by load_results)."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((str(r["cluster"]), str(r["suite"])), []).append(r)
    return groups


# --------------------------------------------------------------------------------------------- TSV

_TSV_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_TSV_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
_TSV_SPECIAL = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TSV_ESCAPE_SEQ = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL)


def tsv_escape(value: Any) -> str:
    """``str(value)`` (None -> ``""``) escaped for one TSV field: backslash, tab, LF and CR become ``\\\\``,
    ``\\t``, ``\\n``, ``\\r``; other control characters and U+2028/U+2029 become ``\\xNN``/``\\uNNNN``."""
    text = "" if value is None else str(value)
    return _TSV_SPECIAL.sub(lambda m: _TSV_ESCAPES.get(m.group(0)) or artifacts.escape_char(m.group(0)), text)


def _unescape_one(m: re.Match[str]) -> str:
    seq = m.group(1)
    if len(seq) > 1:
        return chr(int(seq[1:], 16))
    return _TSV_UNESCAPES.get(seq, m.group(0))


def tsv_unescape(text: str) -> str:
    """Inverse of :func:`tsv_escape`; an unknown escape such as ``\\q`` is kept as written."""
    return _TSV_ESCAPE_SEQ.sub(_unescape_one, text)


def format_tsv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """TSV text: the header and the escaped rows, each ending in ``\\n``."""
    lines = ["\t".join(header)] + ["\t".join(tsv_escape(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def read_tsv(path: Path) -> list[list[str]]:
    """Rows of a TSV written by :func:`build` (header included), split on ``\\n`` and tab, unescaped."""
    text = Path(path).read_text(encoding="utf-8")
    return [[tsv_unescape(f) for f in line.split("\t")] for line in text.split("\n") if line != ""]


def case_summary_rows(results: Sequence[Result]) -> list[tuple[str, ...]]:
    """Rows of ``case-summary.tsv`` (without the header), one per result."""
    return [
        (
            str(r["cluster"]),
            str(r["suite"]),
            str(r["case_id"]),
            _status(r).value,
            _text(r.get("summary")),
            str(r.get("case_log_dir", "")),
        )
        for r in results
    ]


def run_summary_rows(results: Sequence[Result]) -> list[tuple[str, ...]]:
    """Rows of ``run-summary.tsv`` (without the header): per (cluster, suite) the ``all`` row, then its cases."""
    rows: list[tuple[str, ...]] = []
    for (cluster, suite), group in _groups(results).items():
        rows.append((cluster, suite, "all", aggregate_status(_status(r) for r in group).value))
        rows.extend((cluster, suite, str(r["case_id"]), _status(r).value) for r in group)
    return rows


def _text(value: Any) -> str:
    """The stored summary as text (None -> ""); kept verbatim, escaping happens when written."""
    return "" if value is None else str(value)


# --------------------------------------------------------------------------------------------- JUnit

_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: Any) -> str:
    """Text safe for XML 1.0: characters it cannot hold (ANSI ESC, NUL, lone surrogates) become ``\\xNN``."""
    return _XML_ILLEGAL.sub(lambda m: artifacts.escape_char(m.group(0)), "" if value is None else str(value))


def _duration(record: Result) -> float:
    d = record.get("duration_s")
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) else 0.0


def _failure_text(record: Result) -> str:
    lines = []
    for c in record.get("checks") or []:
        if isinstance(c, Mapping) and c.get("ok") is not True:
            verdict = "FAIL" if c.get("ok") is False else "n.a."
            values = ", ".join(f"{k}={artifacts.format_value(v)}" for k, v in (c.get("values") or {}).items())
            line = f"[{verdict}] {c.get('name', '?')}: {c.get('expression', '')}"
            lines.append(line + (f" with {values}" if values else ""))
            if c.get("detail"):
                lines.append(f"    {c['detail']}")
    if record.get("error"):
        lines.append(f"error: {record['error']}")
    base = str(record.get("case_log_dir", ""))
    evidence = [f"{base}/{e}" if base else str(e) for e in record.get("evidence") or []]
    lines.append(f"case dir: {base}")
    lines.extend(f"evidence: {e}" for e in evidence)
    return "\n".join(lines)


def _set_counts(elem: ET.Element, group: Sequence[Result]) -> None:
    c = counts(group)
    elem.set("tests", str(len(group)))
    elem.set("failures", str(c["FAIL"]))
    elem.set("errors", str(c["ERROR"] + c["INTERRUPTED"]))
    elem.set("skipped", str(c["SKIP"]))
    elem.set("time", f"{sum(_duration(r) for r in group):.3f}")


def junit_tree(results: Sequence[Result], run_id: str) -> ET.Element:
    """JUnit XML root: ``<testsuites>`` holding one ``<testsuite name="cluster.suite">`` per pair.

    FAIL -> ``<failure message=summary>``, ERROR -> ``<error message=summary>``, INTERRUPTED ->
    ``<error message="interrupted" type="interrupted">``, SKIP -> ``<skipped message=summary>``; the element
    text lists the failed/unevaluated checks, the error text and the evidence paths (relative to the run
    directory). ``errors`` counts ERROR and INTERRUPTED. ``time`` is in seconds.
    """
    root = ET.Element("testsuites", name=f"xpushare {run_id}")
    _set_counts(root, results)
    for (cluster, suite), group in _groups(results).items():
        ts = ET.SubElement(root, "testsuite", name=f"{cluster}.{suite}")
        _set_counts(ts, group)
        started = [str(r["started"]) for r in group if r.get("started")]
        if started:
            ts.set("timestamp", min(started))
        props = ET.SubElement(ts, "properties")
        for name, value in (("run_id", run_id), ("cluster", cluster), ("suite", suite)):
            ET.SubElement(props, "property", name=name, value=_xml_text(value))
        for r in group:
            name = f"{r['case_id']} {r.get('title') or ''}".strip()
            tc = ET.SubElement(
                ts, "testcase", classname=f"{cluster}.{suite}", name=_xml_text(name), time=f"{_duration(r):.3f}"
            )
            status, summary = _status(r), _xml_text(r.get("summary"))
            if status is Status.FAIL:
                ET.SubElement(tc, "failure", message=summary, type="FAIL").text = _xml_text(_failure_text(r))
            elif status is Status.ERROR:
                ET.SubElement(tc, "error", message=summary, type="ERROR").text = _xml_text(_failure_text(r))
            elif status is Status.INTERRUPTED:
                el = ET.SubElement(tc, "error", message="interrupted", type="interrupted")
                el.text = _xml_text(f"{r.get('summary') or ''}\n{_failure_text(r)}".strip())
            elif status is Status.SKIP:
                ET.SubElement(tc, "skipped", message=summary)
            ET.SubElement(tc, "system-out").text = _xml_text(f"case dir: {r.get('case_log_dir', '')}")
    ET.indent(root)
    return root


# --------------------------------------------------------------------------------------------- release


@dataclass(frozen=True)
class ReleaseDecision:
    """``ready`` is True only if ``reasons`` is empty; each reason is one readable line."""

    ready: bool
    reasons: tuple[str, ...]


def default_required(results: Iterable[Result]) -> set[str]:
    """Case ids whose records say ``required`` (a missing key counts as required)."""
    return {str(r["case_id"]) for r in results if r.get("required", True) is not False}


def _where(r: Result) -> str:
    return f"{r['cluster']}/{r['suite']}/{r['case_id']}"


def release_decision(
    results: Sequence[Result],
    required: set[str] | None = None,
    *,
    clusters: Iterable[str] = (),
    interrupted: bool = False,
) -> ReleaseDecision:
    """Release recommendation: ready only if there are results, at least one PASS, no case (required or not)
    is FAIL, ERROR or INTERRUPTED, every ``required`` case id has a result and none of its results is SKIP,
    every cluster in ``clusters`` (from run.json) has results, and the run was not ``interrupted``.

    ``required`` defaults to :func:`default_required`. Otherwise NO, with one reason per problem.
    """
    required = default_required(results) if required is None else set(required)
    reasons: list[str] = []
    if not results:
        reasons.append("no case results in this run")
    if interrupted:
        reasons.append("the run was interrupted (Ctrl-C) before it finished")
    for status in (Status.FAIL, Status.ERROR, Status.INTERRUPTED):
        for r in results:
            if _status(r) is status:
                reasons.append(f"{status.value}: {_where(r)}: {_text(r.get('summary'))}")
    present = {str(r["case_id"]) for r in results}
    for case_id in sorted(required - present, key=artifacts.natural_key):
        reasons.append(f"required case missing: {case_id}")
    for r in results:
        if str(r["case_id"]) in required and _status(r) is Status.SKIP:
            reasons.append(f"required case skipped: {_where(r)}: {_text(r.get('summary'))}")
    seen_clusters = {str(r["cluster"]) for r in results}
    for cluster in sorted(set(clusters) - seen_clusters, key=artifacts.natural_key):
        reasons.append(f"cluster {cluster} has no case results")
    if results and not any(_status(r) is Status.PASS for r in results):
        reasons.append("no case passed")
    return ReleaseDecision(not reasons, tuple(reasons))


# --------------------------------------------------------------------------------------------- markdown


def md_escape(value: Any) -> str:
    """Text safe inside a markdown table cell: ``\\``, ``|``, ``&``, ``<``, ``>`` escaped, newlines as ``<br>``,
    other control characters escaped (:func:`~xpushare.artifacts.show_controls`)."""
    text = "" if value is None else str(value)
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return artifacts.show_controls(re.sub(r"\r\n|\r|\n", "<br>", text))


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return lines


def _md_link(text: str, rel_path: str) -> str:
    """``[text](path)`` with the path percent-encoded (slashes kept); the text is cell-escaped."""
    return f"[{md_escape(text)}]({urllib.parse.quote(rel_path)})"


def _fmt_duration(record: Result) -> str:
    if record.get("duration_s") is None:
        return "n/a"
    seconds = _duration(record)
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.1f}%"


def _case_rows(run_dir: Path, results: Sequence[Result]) -> list[str]:
    lines = ["| Cluster | Suite | Case | Title | Status | Duration | Summary | Analysis |", "|" + "---|" * 8]
    for r in results:
        base = str(r.get("case_log_dir", ""))
        has_analysis = (run_dir / base / artifacts.ANALYSIS_FILE).is_file()
        target = f"{base}/{artifacts.ANALYSIS_FILE}" if has_analysis else f"{base}/"
        cells = [
            md_escape(v)
            for v in (
                r["cluster"],
                r["suite"],
                r["case_id"],
                r.get("title"),
                _status(r).value,
                _fmt_duration(r),
                _text(r.get("summary")),
            )
        ]
        cells.append(_md_link(target.rsplit("/", 2)[-1] or "case dir", target))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _plots(run_dir: Path, results: Sequence[Result]) -> list[str]:
    lines: list[str] = []
    for r in results:
        base = run_dir / str(r.get("case_log_dir", ""))
        pngs = sorted(p for p in base.rglob("*.png") if artifacts.ATTEMPTS_DIR not in p.relative_to(base).parts[:1])
        for png in pngs:
            rel = png.relative_to(run_dir).as_posix()
            image = f"![{md_escape(png.stem)}]({urllib.parse.quote(rel)})"
            lines += [f"### {md_escape(_where(r))}: {md_escape(png.name)}", "", image, ""]
    return lines


def render_markdown(
    run_dir: Path,
    results: Sequence[Result],
    *,
    run_id: str,
    meta: Mapping[str, Any] | None = None,
    required: set[str] | None = None,
    now: datetime | None = None,
) -> str:
    """Text of ``run-report.md``; links are relative to ``run_dir`` (where the file is written)."""
    meta = meta or {}
    now = now or datetime.now(timezone.utc)
    c = counts(results)
    clusters = sorted({str(r["cluster"]) for r in results} | set(meta.get("clusters") or []), key=artifacts.natural_key)
    decision = release_decision(
        results, required, clusters=meta.get("clusters") or (), interrupted=bool(meta.get("interrupted"))
    )
    required = default_required(results) if required is None else set(required)
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
        out.append("- **the run was interrupted**; `--resume` runs the unfinished cases")
    out.append(f"- cases: {len(results)} total: " + ", ".join(f"{s} {n}" for s, n in c.items()))
    out.append(
        f"- pass rate: {_fmt_rate(pass_rate(c))} ({c['PASS']} PASS of {ran} cases that ran to a verdict; "
        "the pass rate is PASS / (all cases except SKIP), so ERROR and INTERRUPTED count against it and SKIP "
        "is left out; no status other than PASS is ever counted as a pass)"
    )
    out.append(f"- release_ready: **{'YES' if decision.ready else 'NO'}** (see Release recommendation)")

    out += ["", "## Results per cluster and suite", ""]
    rows = []
    for (cluster, suite), group in _groups(results).items():
        gc = counts(group)
        status = aggregate_status(_status(r) for r in group).value
        rows.append([cluster, suite, status, *gc.values(), len(group), _fmt_rate(pass_rate(gc))])
    out += _md_table(["Cluster", "Suite", "Status", *c.keys(), "TOTAL", "Pass rate"], rows)

    out += ["", "## Cases", "", *_case_rows(run_dir, results)]

    problems = [r for r in results if _status(r) in (Status.FAIL, Status.ERROR, Status.INTERRUPTED)]
    if problems:
        out += ["", "## Failed and unfinished cases", ""]
        for r in problems:
            out.append(f"- **{_status(r).value}** {md_escape(_where(r))}: {md_escape(_text(r.get('summary')))}")
            out += [f"  - {md_escape(line.strip())}" for line in _failure_text(r).splitlines()]

    out += ["", "## Key metrics", ""]
    metric_rows = [
        [r["cluster"], r["case_id"], k, artifacts.format_value(v)]
        for r in results
        for k, v in (r.get("metrics") or {}).items()
    ]
    out += _md_table(["Cluster", "Case", "Metric", "Value"], metric_rows) if metric_rows else ["No metrics recorded."]

    out += [
        "",
        "## Coverage",
        "",
        "A required case is covered when it ran to PASS or FAIL; SKIP, ERROR, INTERRUPTED and missing are not.",
        "",
    ]
    cov_rows = []
    for case_id in sorted(required, key=artifacts.natural_key):
        found = [r for r in results if str(r["case_id"]) == case_id]
        cov_rows += [
            [
                case_id,
                r["cluster"],
                r["suite"],
                _status(r).value,
                "yes" if _status(r) in (Status.PASS, Status.FAIL) else "no",
            ]
            for r in found
        ]
        if not found:
            cov_rows.append([case_id, "", "", "missing", "no"])
    cov_header = ["Case", "Cluster", "Suite", "Status", "Covered"]
    out += _md_table(cov_header, cov_rows) if cov_rows else ["No required cases."]

    out += ["", "## Release recommendation", "", f"release_ready: **{'YES' if decision.ready else 'NO'}**", ""]
    if decision.ready:
        out.append("Every required case ran and no case is FAIL, ERROR or INTERRUPTED.")
    else:
        out += ["Reasons:", ""] + [f"- {md_escape(reason)}" for reason in decision.reasons]
    not_required = [r for r in results if str(r["case_id"]) not in required and _status(r) is Status.SKIP]
    if not_required:
        out += ["", "Skipped cases that are not required: " + ", ".join(md_escape(_where(r)) for r in not_required)]

    plots = _plots(run_dir, results)
    if plots:
        out += ["", "## Plots", "", *plots]
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------- build


def build(run_dir: Path, *, required: set[str] | None = None, now: datetime | None = None) -> ReportPaths:
    """(Re)write the four report files of ``run_dir`` from its ``result.json`` files and ``run.json``.

    ``required``: case ids the release recommendation needs (default: records flagged ``required``, which is
    every case unless the engine marked it optional). ``now`` is the "generated at" time (default: now, UTC).
    The run id comes from run.json, else from the directory name ``.tmplog/<run-id>/xpushare``.
    Each file is written atomically.
    """
    run_dir = Path(run_dir)
    results = artifacts.load_results(run_dir)
    meta = artifacts.read_run_meta(run_dir) or {}
    run_id = str(meta.get("run_id") or run_dir.parent.name)
    paths = ReportPaths(
        case_summary=run_dir / "case-summary.tsv",
        run_summary=run_dir / "run-summary.tsv",
        junit=run_dir / "junit.xml",
        markdown=run_dir / "run-report.md",
    )
    artifacts.atomic_write_text(paths.case_summary, format_tsv(CASE_SUMMARY_HEADER, case_summary_rows(results)))
    artifacts.atomic_write_text(paths.run_summary, format_tsv(RUN_SUMMARY_HEADER, run_summary_rows(results)))
    xml = ET.tostring(junit_tree(results, run_id), encoding="unicode")
    artifacts.atomic_write_text(paths.junit, '<?xml version="1.0" encoding="UTF-8"?>\n' + xml + "\n")
    text = render_markdown(run_dir, results, run_id=run_id, meta=meta, required=required, now=now)
    artifacts.atomic_write_text(paths.markdown, text)
    return paths
