"""``report.html``: self-contained, escaped, every case with its checks, thresholds, metrics, plots and files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xpushare.model.verdict import Check
from xpushare.report import build, html, plots, run_store
from xpushare.report.summaries import run_overview

HOSTILE = '<script>alert("x")</script> & </details>'


def _run(tmp_path: Path) -> Path:
    run_dir = run_store.run_dir(tmp_path, "h1")
    run_store.write_run_meta(run_dir, {"run_id": "h1", "clusters": ["lab"], "started": "2026-01-01T10:00:00+00:00",
                                       "ended": "2026-01-01T10:05:00+00:00"})
    fail = run_store.case_dir(run_dir, "lab", "performance", "PERF-011")
    made = plots.runtime_vs_quota(fail / "runtime_vs_quota.png", baseline_s=6.0, runtimes={50: 12.5, 25: 24.0})
    assert made.path is not None, made.note
    (fail / "pods").mkdir()
    (fail / "pods" / "a b#1.log").write_text("log\n")
    (fail / "fake.png").write_text("not a png")
    run_store.write_result(fail, {
        "run_id": "h1", "cluster": "lab", "suite": "performance", "case_id": "PERF-011", "title": "Quota linearity",
        "status": "FAIL", "summary": HOSTILE, "duration_s": 75.0,
        "checks": [Check("quota_precision", "|err| <= 0.08", {"err": 0.31}, False, detail=HOSTILE),
                   Check("pods_succeeded", "all pods Succeeded", {}, True)],
        "thresholds": {"perf_quota_tolerance": 0.08}, "metrics": {"ratios": {"25": {"error": 0.31}}},
        "evidence": ["runtime_vs_quota.png", "pods/a b#1.log", "gone.txt"],
    })
    ok = run_store.case_dir(run_dir, "lab", "functional", "FUNC-001")
    run_store.write_result(ok, {"run_id": "h1", "cluster": "lab", "suite": "functional", "case_id": "FUNC-001",
                                "status": "PASS", "summary": "fine", "metrics": {"runtime_s": 1.5}})
    err = run_store.case_dir(run_dir, "lab", "functional", "FUNC-002")
    run_store.write_result(err, {"run_id": "h1", "cluster": "lab", "suite": "functional", "case_id": "FUNC-002",
                                 "status": "ERROR", "summary": "no evidence", "error": "kubectl: connection refused"})
    return run_dir


def _page(run_dir: Path) -> str:
    """``report.html`` of ``run_dir`` as :func:`build.build` renders it."""
    results = run_store.load_results(run_dir)
    return html.render_html(run_dir, results, run_overview(results), run_id="h1")


def test_build_writes_a_self_contained_escaped_page(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    paths = build.build(run_dir)
    assert paths.html == run_dir / "report.html"
    page = paths.html.read_text(encoding="utf-8")
    assert "<script>alert" not in page and page.count("</details>") == 3  # stored text closes no element
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;/details&gt;" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no resource may come from the network"
    assert page.count("<script>") == 1  # the filter script, inline
    assert page.count('src="data:image/png;base64,') == 1  # the real plot; fake.png is linked, not embedded
    assert 'href="performance/PERF-011/fake.png"' not in page and 'href="lab/performance/PERF-011/fake.png"' in page
    assert 'href="lab/performance/PERF-011/pods/a%20b%231.log"' in page
    assert "<code>gone.txt</code>" in page  # named as evidence, absent: said, not linked
    assert 'data-status="FAIL" data-suite="performance"' in page and '<option value="functional">' in page
    assert "release_ready: <strong>NO</strong>" in page
    assert "kubectl: connection refused" in page and "err = 0.31" in page and "ratios" in page


def test_cases_fail_and_error_open_and_counts_are_shown(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    page = _page(run_dir)
    opened = re.findall(r'<details class="case (\w+)"[^>]*?(open)?>', page.replace("\n", " "))
    assert sorted(s for s, o in opened if o) == ["ERROR", "FAIL"], opened
    assert re.search(r'<div class="n">1</div><div>PASS</div>', page)
    assert "no checks recorded" in page  # the ERROR case has none


def test_a_png_over_the_cap_is_linked_not_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _run(tmp_path)
    monkeypatch.setattr(html, "MAX_EMBEDDED_PNG", 10)
    page = _page(run_dir)
    assert "data:image/png" not in page and "not embedded" in page


def test_an_empty_run_still_renders(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "e")
    run_dir.mkdir(parents=True)
    page = build.build(run_dir).html.read_text()
    assert "no case results in this run" in page and "release_ready: <strong>NO</strong>" in page



def test_case_anchors_count_from_one(tmp_path: Path) -> None:
    from xpushare.report import build, run_store

    run_dir = run_store.run_dir(tmp_path, "a1")
    for case_id in ("FUNC-001", "FUNC-002"):
        run_store.write_result(run_store.case_dir(run_dir, "c1", "functional", case_id),
                               {"run_id": "a1", "cluster": "c1", "suite": "functional", "case_id": case_id,
                                "status": "PASS", "summary": ""})
    page = build.build(run_dir).html.read_text()
    assert 'id="case-1"' in page and 'id="case-2"' in page and 'id="case-0"' not in page
