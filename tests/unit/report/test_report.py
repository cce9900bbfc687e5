"""Reports rebuilt from result.json: TSV escaping, aggregation, JUnit, markdown, release recommendation."""

from __future__ import annotations

import re
import tempfile
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.report.test_artifacts import case_record, put
from xpushare.model.verdict import Status
from xpushare.report import build, markdown, run_store, summaries

NOW = datetime(2026, 2, 15, 14, 0, 0, tzinfo=timezone.utc)
NASTY = "quota 30|60\tratio=1.5\nsecond line \\t literal, C:\\path | \x1b[31mred"

# One case per status on two clusters; FUNC-002's summary has a pipe, a tab, a newline and backslashes.
MIXED: list[dict[str, Any]] = [
    dict(cluster="c1", suite="functional", case_id="FUNC-001", status="PASS", summary="ok", duration_s=10.0),
    dict(cluster="c1", suite="functional", case_id="FUNC-002", status="FAIL", summary=NASTY, duration_s=5.5,
         checks=[
             {"name": "order", "expression": "runtime_30 > runtime_60", "values": {"runtime_30": 9}, "ok": False},
             {"name": "health", "expression": "HTTP_CODE == 200", "values": {"HTTP_CODE": 200}, "ok": True},
         ],
         evidence=["pods/p30.log", "metrics_mid.txt"]),
    dict(cluster="c1", suite="performance", case_id="PERF-001", status="SKIP", summary="SKIP: no GPU", duration_s=0.5),
    dict(cluster="c2", suite="metrics", case_id="MET-001", status="ERROR", summary="kubectl timed out",
         error="timeout 30s"),
    dict(cluster="c2", suite="stability", case_id="STAB-001", status="INTERRUPTED", summary="Ctrl-C", duration_s=2.0),
]


def make_run(root: Path, specs: list[dict[str, Any]]) -> Path:
    run = run_store.run_dir(root, "r1")
    for spec in specs:
        cdir = put(run, **spec)
        run_store.write_analysis(cdir, case_record(**spec))
    return run


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, build.ReportPaths]:
    run = make_run(tmp_path, MIXED)
    return run, build.build(run, now=NOW)


def split_md_row(line: str) -> list[str]:
    """Cells of a markdown table row, honouring backslash escapes (``\\|`` is not a separator)."""
    assert line.startswith("|") and line.endswith("|"), line
    cells, cur, i, body = [], "", 0, line[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            cur += body[i : i + 2]
            i += 2
            continue
        if ch == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur.strip())
    return cells


def md_section(text: str, title: str) -> str:
    """The body of ``## title`` up to the next ``## `` heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, f"section {title!r} missing"
    return m.group(1)


def md_table(section: str) -> list[list[str]]:
    rows = [split_md_row(line) for line in section.splitlines() if line.startswith("|")]
    header, sep, body = rows[0], rows[1], rows[2:]
    assert all(set(c) <= {"-"} for c in sep)
    assert all(len(r) == len(header) for r in body), body
    return [header, *body]


# --------------------------------------------------------------------------------------------- counting


def test_counts_keep_every_status_apart() -> None:
    results = [case_record(status=s) for s in ("PASS", "SKIP", "SKIP", "ERROR", "INTERRUPTED", "FAIL")]
    assert summaries.counts(results) == {"PASS": 1, "FAIL": 1, "INTERMITTENT": 0, "SKIP": 2, "ERROR": 1,
                                         "INTERRUPTED": 1}
    assert summaries.counts([]) == {"PASS": 0, "FAIL": 0, "INTERMITTENT": 0, "SKIP": 0, "ERROR": 0,
                                    "INTERRUPTED": 0}
    with pytest.raises(ValueError):
        summaries.counts([case_record(status="OK")])


def test_pass_rate_leaves_skip_out_of_the_denominator() -> None:
    # 1 PASS, 1 FAIL, 2 SKIP: the rate is 1 of the 2 that ran, not 1/4 and certainly not (1+2)/4.
    c = summaries.counts([case_record(status=s) for s in ("PASS", "FAIL", "SKIP", "SKIP")])
    assert summaries.pass_rate(c) == 0.5
    assert summaries.pass_rate(summaries.counts([case_record(status="SKIP")])) is None
    # ERROR and INTERRUPTED did not pass, so they stay in the denominator.
    c = summaries.counts([case_record(status=s) for s in ("PASS", "ERROR", "INTERRUPTED")])
    assert summaries.pass_rate(c) == 1 / 3


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["SKIP", "SKIP"], "SKIP"),
        ([], "SKIP"),
        (["PASS", "SKIP"], "PASS"),
        (["PASS", "PASS"], "PASS"),
        (["PASS", "SKIP", "INTERRUPTED"], "INTERRUPTED"),
        (["INTERRUPTED", "ERROR", "PASS"], "ERROR"),
        (["ERROR", "FAIL", "SKIP"], "FAIL"),
    ],
)
def test_aggregate_status(statuses: list[str], expected: str) -> None:
    assert summaries.aggregate_status(statuses) == Status(expected)


# --------------------------------------------------------------------------------------------- TSV


def test_case_summary_rows_are_single_lines_of_six_fields(mixed: tuple[Path, build.ReportPaths]) -> None:
    run, paths = mixed
    lines = paths.case_summary.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # ends with a newline
    lines = lines[:-1]
    assert lines[0] == "cluster\tsuite\tcase_id\tstatus\tsummary\tcase_log_dir"
    assert len(lines) == 1 + len(MIXED)
    assert all(len(line.split("\t")) == 6 for line in lines)
    rows = summaries.read_tsv(paths.case_summary)[1:]
    by_id = {row[2]: row for row in rows}
    assert by_id["FUNC-002"][4] == NASTY  # exact round trip, tab/newline/backslash included
    assert {row[2]: row[3] for row in rows} == {s["case_id"]: s["status"] for s in MIXED}
    for row in rows:
        assert not Path(row[5]).is_absolute()
        assert (run / row[5] / "result.json").is_file()


def test_run_summary_rows(mixed: tuple[Path, build.ReportPaths]) -> None:
    _, paths = mixed
    raw = paths.run_summary.read_text(encoding="utf-8").split("\n")[:-1]
    assert all(len(line.split("\t")) == 4 for line in raw)
    rows = summaries.read_tsv(paths.run_summary)
    assert rows[0] == ["cluster", "suite", "selector", "status"]
    suite_rows = {(r[0], r[1]): r[3] for r in rows[1:] if r[2] == "all"}
    assert suite_rows == {
        ("c1", "functional"): "FAIL",
        ("c1", "performance"): "SKIP",  # all SKIP: never PASS
        ("c2", "metrics"): "ERROR",
        ("c2", "stability"): "INTERRUPTED",
    }
    case_rows = {r[2]: r[3] for r in rows[1:] if r[2] != "all"}
    assert case_rows == {s["case_id"]: s["status"] for s in MIXED}


def test_tsv_escape_examples() -> None:
    assert summaries.tsv_escape("a\tb\nc\\d\re") == "a\\tb\\nc\\\\d\\re"
    assert summaries.tsv_unescape("a\\\\tb") == "a\\tb"  # escaped backslash followed by a plain t
    assert summaries.tsv_escape(None) == ""
    assert summaries.tsv_escape("\x1b[31mred\x85") == "\\x1b[31mred\\x85"  # no raw terminal escapes in the file


# Every code point, lone surrogates (from surrogateescape-decoded logs) and line separators included.
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()))


@given(ANY_TEXT)
def test_tsv_escape_round_trip(text: str) -> None:
    escaped = summaries.tsv_escape(text)
    assert "\t" not in escaped
    assert len(escaped.splitlines()) <= 1  # one line even for readers that split on U+0085, U+2028, \x0c...
    assert summaries.tsv_unescape(escaped) == text


@settings(max_examples=30, deadline=None)
@given(st.lists(ANY_TEXT, min_size=1, max_size=3))
def test_arbitrary_summaries_survive_build(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = run_store.run_dir(Path(tmp), "r1")
        for i, summary in enumerate(texts):
            put(run, case_id=f"FUNC-{i:03d}", status="FAIL", summary=summary)
        paths = build.build(run, now=NOW)
        raw = paths.case_summary.read_text(encoding="utf-8").splitlines()
        assert len(raw) == 1 + len(texts)
        assert all(len(line.split("\t")) == 6 for line in raw)
        assert [row[4] for row in summaries.read_tsv(paths.case_summary)[1:]] == texts
        ET.parse(paths.junit)  # still well-formed XML
        table = md_table(md_section(paths.markdown.read_text(encoding="utf-8"), "Cases"))
        assert len(table) == 1 + len(texts)


# --------------------------------------------------------------------------------------------- JUnit


def test_junit_counts_and_elements(mixed: tuple[Path, build.ReportPaths]) -> None:
    _, paths = mixed
    root = ET.parse(paths.junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("5", "1", "2", "1")
    suites = {ts.get("name"): ts for ts in root.findall("testsuite")}
    assert set(suites) == {"c1.functional", "c1.performance", "c2.metrics", "c2.stability"}
    func = suites["c1.functional"]
    assert (func.get("tests"), func.get("failures"), func.get("errors"), func.get("skipped")) == ("2", "1", "0", "0")
    assert float(func.get("time", "")) == pytest.approx(15.5)
    props = {p.get("name"): p.get("value") for p in func.iter("property")}
    assert props["run_id"] == "r1" and props["cluster"] == "c1"

    cases = {tc.get("name"): tc for ts in suites.values() for tc in ts.findall("testcase")}
    assert cases["FUNC-001 title of FUNC-001"].get("classname") == "c1.functional"
    assert list(cases["FUNC-001 title of FUNC-001"].iter("failure")) == []
    failure = cases["FUNC-002 title of FUNC-002"].find("failure")
    assert failure is not None
    assert failure.get("message") == NASTY.replace("\x1b", "\\x1b")  # tab/newline kept; ESC made legal
    assert "runtime_30 > runtime_60" in (failure.text or "")
    assert "HTTP_CODE" not in (failure.text or "")  # only the failed check
    assert "c1/functional/FUNC-002/pods/p30.log" in (failure.text or "")
    skipped = cases["PERF-001 title of PERF-001"].find("skipped")
    assert skipped is not None and skipped.get("message") == "SKIP: no GPU"
    error = cases["MET-001 title of MET-001"].find("error")
    assert error is not None and error.get("message") == "kubectl timed out"
    assert "timeout 30s" in (error.text or "")
    interrupted = cases["STAB-001 title of STAB-001"].find("error")
    assert interrupted is not None and interrupted.get("message") == "interrupted"
    # The per-suite counts add up to the totals.
    for attr in ("tests", "failures", "errors", "skipped"):
        assert sum(int(ts.get(attr, "0")) for ts in suites.values()) == int(root.get(attr, "-1"))


# --------------------------------------------------------------------------------------------- markdown


def test_markdown_totals_never_count_skip_as_pass(mixed: tuple[Path, build.ReportPaths]) -> None:
    _, paths = mixed
    text = paths.markdown.read_text(encoding="utf-8")
    overview = md_section(text, "Overview")
    assert "PASS 1, FAIL 1, INTERMITTENT 0, SKIP 1, ERROR 1, INTERRUPTED 1" in overview
    assert "pass rate: 25.0%" in overview  # 1 PASS of the 4 non-SKIP cases
    assert "SKIP" in overview.split("pass rate:")[1]  # the definition is stated

    table = md_table(md_section(text, "Results per cluster and suite"))
    header, rows = table[0], table[1:]
    assert header[:3] == ["Cluster", "Suite", "Status"]
    col = {name: i for i, name in enumerate(header)}
    for row in rows:
        numbers = [int(row[col[s]]) for s in ("PASS", "FAIL", "SKIP", "ERROR", "INTERRUPTED")]
        assert sum(numbers) == int(row[col["TOTAL"]])
    perf = next(r for r in rows if r[1] == "performance")
    assert (perf[col["Status"]], perf[col["PASS"]], perf[col["SKIP"]], perf[col["Pass rate"]]) == (
        "SKIP",
        "0",
        "1",
        "n/a",
    )


def test_markdown_case_table_escapes_and_links(mixed: tuple[Path, build.ReportPaths]) -> None:
    run, paths = mixed
    text = paths.markdown.read_text(encoding="utf-8")
    table = md_table(md_section(text, "Cases"))
    header, rows = table[0], table[1:]
    assert len(rows) == len(MIXED)
    row = next(r for r in rows if r[header.index("Case")] == "FUNC-002")
    summary = row[header.index("Summary")]
    assert "\\|" in summary and "<br>" in summary and "\n" not in summary
    link = re.fullmatch(r"\[(.+)\]\((.+)\)", row[header.index("Analysis")])
    assert link and link.group(2) == "c1/functional/FUNC-002/analysis.txt"
    assert (run / link.group(2)).is_file()
    assert "\x1b" not in text


def test_markdown_key_metrics_and_plots(tmp_path: Path) -> None:
    run = make_run(
        tmp_path, [dict(case_id="PERF-001", suite="performance", metrics={"runtime_s": 12.34567, "ratio": 2 / 3})]
    )
    cdir = run / "c1" / "performance" / "PERF-001"
    (cdir / "runtime.png").write_bytes(b"\x89PNG")
    (cdir / "attempts" / "1").mkdir(parents=True)
    (cdir / "attempts" / "1" / "old.png").write_bytes(b"\x89PNG")
    text = build.build(run, now=NOW).markdown.read_text(encoding="utf-8")
    metrics = md_table(md_section(text, "Key metrics"))[1:]
    assert ["c1", "PERF-001", "runtime_s", "12.346 s"] in metrics
    assert ["c1", "PERF-001", "ratio", "0.6667"] in metrics
    plots = md_section(text, "Plots")
    assert "(c1/performance/PERF-001/runtime.png)" in plots
    assert "old.png" not in plots


def test_build_is_offline_and_repeatable(mixed: tuple[Path, build.ReportPaths]) -> None:
    run, paths = mixed
    first = {p: p.read_bytes() for p in (paths.case_summary, paths.run_summary, paths.junit, paths.markdown)}
    again = build.build(run, now=NOW)
    assert {p: p.read_bytes() for p in (again.case_summary, again.run_summary, again.junit, again.markdown)} == first


def test_rebuild_uses_latest_attempt(tmp_path: Path) -> None:
    run = make_run(tmp_path, [dict(status="FAIL", summary="flaky")])
    cdir = run / "c1" / "functional" / "FUNC-001"
    run_store.archive_previous_attempt(cdir)
    put(run, status="PASS", summary="ok on retry", attempt=2)
    paths = build.build(run, now=NOW)
    rows = summaries.read_tsv(paths.case_summary)[1:]
    assert [(r[2], r[3], r[4]) for r in rows] == [("FUNC-001", "PASS", "ok on retry")]
    assert "release_ready: **YES**" in paths.markdown.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------- release

ALL_PASS: list[dict[str, Any]] = [
    dict(cluster="c1", suite="functional", case_id="FUNC-001"),
    dict(cluster="c1", suite="combination", case_id="COMBO-001"),
    dict(cluster="c2", suite="performance", case_id="PERF-001"),
]


def release_section(run: Path, **kw: Any) -> str:
    text = build.build(run, now=NOW, **kw).markdown.read_text(encoding="utf-8")
    return md_section(text, "Release recommendation")


def test_release_yes_only_when_all_pass(tmp_path: Path) -> None:
    run = make_run(tmp_path, ALL_PASS)
    section = release_section(run)
    assert "release_ready: **YES**" in section
    coverage = md_table(md_section((run / "run-report.md").read_text(encoding="utf-8"), "Coverage"))[1:]
    assert sorted(r[0] for r in coverage) == ["COMBO-001", "FUNC-001", "PERF-001"]
    assert all(r[-1] == "yes" for r in coverage)


@pytest.mark.parametrize("status", ["SKIP", "FAIL", "ERROR", "INTERRUPTED"])
def test_release_no_when_a_required_case_did_not_pass(tmp_path: Path, status: str) -> None:
    specs = [dict(s) for s in ALL_PASS]
    specs[1].update(status=status, summary=f"it was {status}")
    run = make_run(tmp_path, specs)
    section = release_section(run)
    assert "release_ready: **NO**" in section
    assert "c1/combination/COMBO-001" in section and f"it was {status}" in section
    coverage = md_table(md_section((run / "run-report.md").read_text(encoding="utf-8"), "Coverage"))[1:]
    combo = next(r for r in coverage if r[0] == "COMBO-001")
    assert combo[-1] == ("yes" if status == "FAIL" else "no")  # FAIL ran (covered) but still blocks release


def test_release_no_when_a_required_case_is_missing(tmp_path: Path) -> None:
    run = make_run(tmp_path, ALL_PASS)
    section = release_section(run, required={"FUNC-001", "COMBO-001", "PERF-001", "MET-004"})
    assert "release_ready: **NO**" in section
    assert "required case missing: MET-004" in section
    coverage = md_table(md_section((run / "run-report.md").read_text(encoding="utf-8"), "Coverage"))[1:]
    assert ["MET-004", "", "", "missing", "no"] in coverage


def test_release_ignores_skip_of_optional_case_but_not_its_failure(tmp_path: Path) -> None:
    specs: list[dict[str, Any]] = [
        *ALL_PASS,
        dict(case_id="FAIL-001", suite="stability", status="SKIP", required=False),
    ]
    assert "release_ready: **YES**" in release_section(make_run(tmp_path / "a", specs))
    specs[-1] = dict(case_id="FAIL-001", suite="stability", status="FAIL", required=False)
    assert "release_ready: **NO**" in release_section(make_run(tmp_path / "b", specs))


def test_release_no_for_silent_cluster_interrupted_run_or_nothing_passed(tmp_path: Path) -> None:
    decision = summaries.release_decision([case_record()], clusters=["c1", "c2"])
    assert not decision.ready and "cluster c2 has no case results" in decision.reasons
    assert not summaries.release_decision([case_record()], interrupted=True).ready
    assert not summaries.release_decision([]).ready
    assert not summaries.release_decision([case_record(status="SKIP", required=False)]).ready
    assert summaries.release_decision([case_record()], clusters=["c1"]).ready

    run = make_run(tmp_path, ALL_PASS)
    run_store.write_run_meta(run, {"run_id": "r1", "clusters": ["c1", "c2", "c3"], "interrupted": False})
    assert "cluster c3 has no case results" in release_section(run)

    run_store.write_run_meta(run, {"run_id": "r1", "clusters": ["c1", "c2"], "interrupted": True})
    assert "interrupted" in release_section(run)
    assert "the run was interrupted" in md_section((run / "run-report.md").read_text(encoding="utf-8"), "Overview")


def test_md_escape() -> None:
    assert markdown.md_escape("a|b\nc\\d<e>&") == "a\\|b<br>c\\\\d&lt;e>&"
    assert markdown.md_escape("ratio >= 0.8 & &lt;") == "ratio >= 0.8 & &amp;lt;"  # no literal &gt;= in the file
    assert split_md_row("| " + markdown.md_escape("x\\|y|z\\") + " | 2 |") == [markdown.md_escape("x\\|y|z\\"), "2"]


def test_release_says_it_covers_only_the_selected_cases(tmp_path: Path) -> None:
    run = make_run(tmp_path, ALL_PASS[:1])
    run_store.write_run_meta(run, {"run_id": "r1", "selection": "case=FUNC-001",
                                   "selected": [{"cluster": "c1", "suite": "functional", "case_id": "FUNC-001"}]})
    section = release_section(run)
    assert "release_ready: **YES**" in section
    assert "covers the 1 case(s) this run selected (selection: case=FUNC-001), not the cases of the matrix" in section
    assert "covers the 1 case(s) this run selected (selection: case=FUNC-001)" in (run / "report.html").read_text()
    bare = make_run(tmp_path / "bare", ALL_PASS)  # no run.json: the cases of the stored results
    assert "covers the 3 case(s) this run selected, not" in release_section(bare)


def test_format_value_gives_numbers_their_units() -> None:
    from xpushare.report.run_store import format_value

    shown = format_value({"ts": 1764211200.123456, "rss_bytes": 13201400.0, "ratio": 0.123456789012345,
                          "runtime_s": 12.3456789, "xs": list(range(12))})
    assert shown == ("{ts: 2025-11-27T02:40:00Z, rss_bytes: 12.6 MiB, ratio: 0.1235, runtime_s: 12.346 s, "
                     "xs: [0, 1, 2, 3, 4, 5, 6, 7, ... (+4 more)]}")  # no 15-digit floats, epochs or 1.32e+07
    assert format_value(13201400.0, "rss_bytes") == "12.6 MiB" and format_value(512, "x_bytes") == "512 B"
    assert format_value(3.0) == "3" and format_value(30, "core_pct") == "30 %"
    assert format_value(5, "count") == "5" and format_value(1e9 + 1, "fd_count") == "1000000001"
