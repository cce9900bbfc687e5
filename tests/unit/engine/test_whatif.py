"""``invoke judge --set`` is a what-if: it shows the re-judged verdicts and what changed, and the stored run (its
``result.json``, run.json, reports, how ``invoke runs`` lists it) stays as it was; ``--apply`` stores the
re-judgment beside the run's own verdicts."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from tests.unit.report.test_artifacts import put
from xpushare.engine import stored_run, whatif
from xpushare.report import run_store
from xpushare.report.runs import list_runs


def invoke(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=REPO_ROOT,
                    timeout=120)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_judge_without_apply_changes_nothing_stored(tmp_path: Path) -> None:
    run = run_store.run_dir(tmp_path, "r1")
    # FUNC-001 stored PASS without any evidence: judged again it is no PASS, a change the what-if must show
    put(run, case_id="FUNC-001", status="PASS", summary="ok")
    put(run, case_id="FUNC-009", status="SKIP", summary="SKIP: needs k8s")
    stored_run.rebuild_reports("r1", root=tmp_path)
    listed = [r.to_dict() for r in list_runs(tmp_path)]
    before = snapshot(tmp_path)

    proc = invoke("judge", "--run-id", "r1", "--set", "pod_timeout_s=900", root=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the exit status the run would have
    assert "FUNC-001" in proc.stdout and "(was PASS)" in proc.stdout and "nothing stored" in proc.stdout
    assert "re-judged" not in proc.stdout
    assert snapshot(tmp_path) == before, "a what-if changed the stored run"
    assert [r.to_dict() for r in list_runs(tmp_path)] == listed

    out = io.StringIO()
    assert whatif.whatif("r1", [], root=tmp_path, out=out, fmt="json") == 1
    record = json.loads(out.getvalue())
    assert record["applied"] is False and record["exit_status"] == 1
    assert record["changes"] == [{"cluster": "c1", "case_id": "FUNC-001", "before": "PASS",
                                  "after": record["cases"][0]["status"]}]
    assert record["cases"][0]["stored_status"] == "PASS" and record["cases"][1]["status"] == "SKIP"
    assert snapshot(tmp_path) == before

    assert stored_run.rejudge("r1", [], root=tmp_path, out=io.StringIO()) == 1  # --apply
    case = run_store.case_dir(run, "c1", "functional", "FUNC-001")
    assert json.loads((case / "result.original.json").read_text())["status"] == "PASS"
    assert json.loads((case / "result.json").read_text())["summary"].startswith("re-judged ")
