"""``invoke report`` of a run that ended early counts every selected case: in junit.xml a required case the run
never reached is an error, an optional one skipped; a run that reached every case gets no extra entry."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from tests.unit.report.test_artifacts import put
from xpushare.report import run_store

ROOT = REPO_ROOT
SELECTED = [{"cluster": "c1", "suite": "functional", "case_id": f"FUNC-00{i}", "title": f"t{i}"} for i in (1, 2, 3)]


def _run(tmp_path: Path, statuses: dict[str, str]) -> Path:
    run = run_store.run_dir(tmp_path, "r1")
    for case_id, status in statuses.items():
        put(run, case_id=case_id, status=status)
    run_store.write_run_meta(run, {"run_id": "r1", "selected": SELECTED, "required": ["FUNC-001", "FUNC-002"],
                                   "interrupted": len(statuses) < 3})
    return run


def _report(tmp_path: Path) -> ET.Element:
    res = run_tool([sys.executable, "-m", "invoke", "report", "--run-id", "r1", "--root", str(tmp_path)],
                   cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    return ET.parse(run_store.run_dir(tmp_path, "r1") / "junit.xml").getroot()


def test_an_interrupted_run_counts_the_cases_it_never_reached(tmp_path: Path) -> None:
    _run(tmp_path, {"FUNC-001": "INTERRUPTED"})
    root = _report(tmp_path)
    assert (root.get("tests"), root.get("errors"), root.get("failures"), root.get("skipped")) == ("3", "2", "0", "1")
    never = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert never["FUNC-002 t2"].find("error") is not None  # required, never run
    assert "never run" in (never["FUNC-002 t2"].find("error").get("message") or "")  # type: ignore[union-attr]
    assert never["FUNC-003 t3"].find("skipped") is not None  # optional, never run


def test_a_complete_run_has_no_never_run_entries(tmp_path: Path) -> None:
    _run(tmp_path, {"FUNC-001": "PASS", "FUNC-002": "PASS", "FUNC-003": "PASS"})
    root = _report(tmp_path)
    assert (root.get("tests"), root.get("errors"), root.get("skipped")) == ("3", "0", "0")
    assert "never run" not in ET.tostring(root, encoding="unicode")
