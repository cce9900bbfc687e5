"""``--maxfail`` end to end on the built-in ``local`` cluster: the cases after the limit are recorded as not run."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

ROOT = REPO_ROOT
BROKEN = ["--set", 'workload_args={w2_medium_add: [--n, "-5"]}']


def invoke(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=ROOT, timeout=240)


def test_maxfail_stops_and_records_the_rest_as_not_run(tmp_path: Path) -> None:
    proc = invoke("func", "--cluster", "local", "--run-id", "mf", "--case", "FUNC-001,FUNC-002", "--maxfail", "1",
                  *BROKEN, root=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rd = tmp_path / ".tmplog" / "mf" / "xpushare"
    first = json.loads((rd / "local" / "functional" / "FUNC-001" / "result.json").read_text())
    rest = json.loads((rd / "local" / "functional" / "FUNC-002" / "result.json").read_text())
    assert first["status"] == "FAIL"
    assert rest["status"] == "INTERRUPTED" and rest["not_run"] and "--maxfail 1" in rest["summary"]
    cases = {tc.get("name", "").split()[0]: tc for tc in ET.parse(rd / "junit.xml").getroot().iter("testcase")}
    assert cases["FUNC-002"].find("error") is not None  # not run is never a pass
    assert "release_ready: **NO**" in (rd / "run-report.md").read_text()
    # Without the limit the second case runs (and fails the same way).
    again = invoke("func", "--cluster", "local", "--run-id", "mf", "--resume", "--case", "FUNC-00[12]", *BROKEN,
                   root=tmp_path)
    assert again.returncode == 1
    rest = json.loads((rd / "local" / "functional" / "FUNC-002" / "result.json").read_text())
    assert rest["status"] == "FAIL" and "not_run" not in rest
