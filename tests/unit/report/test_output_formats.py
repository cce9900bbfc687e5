"""``--output json|yaml`` of ``put``, ``get``, ``judge`` and ``report``: the records alone on stdout, for programs.

``put``/``get`` run on the built-in ``local`` cluster (this machine, no SSH); ``judge``/``report`` on a stored run
written by the test (no cluster is contacted).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from tests.unit.report.test_artifacts import put as put_record
from xpushare import adhoc
from xpushare.inventory.schema import local_cluster

ROOT = REPO_ROOT


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args], cwd=ROOT, timeout=120)


def test_put_and_get_records_per_host(tmp_path: Path) -> None:
    src = tmp_path / "w.txt"
    src.write_text("hello\n", encoding="utf-8")
    hosts = list(local_cluster().hosts)
    out = io.StringIO()
    status = adhoc.put_files(hosts, str(src), str(tmp_path / "to") + "/", forks=1, out=out, fmt="json")
    assert status == 0
    assert json.loads(out.getvalue()) == [{"host": "localhost", "status": "ok", "path": str(tmp_path / "to" / "w.txt"),
                                           "replaced": False, "error": None}]
    out = io.StringIO()
    status = adhoc.get_files(hosts, str(tmp_path / "missing.txt"), str(tmp_path / "back"), forks=1, out=out,
                             fmt="yaml")
    assert status == 1
    (record,) = yaml.safe_load(out.getvalue())
    assert record["host"] == "localhost" and record["status"] == "ERROR" and record["path"] is None
    assert record["error"] and "\n" not in record["error"]


def test_put_task_takes_output_json(tmp_path: Path) -> None:
    src = tmp_path / "w.txt"
    src.write_text("hello\n", encoding="utf-8")
    proc = invoke("put", "--cluster", "local", "-o", "json", str(src), str(tmp_path / "copy.txt"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["path"] == str(tmp_path / "copy.txt")
    proc = invoke("get", "--cluster", "local", "--output", "json", str(tmp_path / "copy.txt"), str(tmp_path / "g"))
    assert proc.returncode == 0, proc.stderr
    assert Path(json.loads(proc.stdout)[0]["path"]).read_text(encoding="utf-8") == "hello\n"
    bad = invoke("put", "--cluster", "local", "-o", "xml", str(src), str(tmp_path / "x.txt"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --output takes one of")


def test_report_and_judge_print_one_record(tmp_path: Path) -> None:
    from xpushare.report import run_store

    run = run_store.run_dir(tmp_path, "r1")
    put_record(run, case_id="FUNC-001", status="PASS", summary="ok")
    put_record(run, case_id="FUNC-009", status="SKIP", summary="SKIP: needs k8s")
    proc = invoke("report", "--run-id", "r1", "--root", str(tmp_path), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["run_id"] == "r1" and record["counts"]["PASS"] == 1 and record["counts"]["SKIP"] == 1
    assert Path(record["report"]).is_file() and Path(record["html"]).is_file()
    assert {c["case_id"] for c in record["cases"]} == {"FUNC-001", "FUNC-009"}
    proc = invoke("judge", "--run-id", "r1", "--root", str(tmp_path), "-o", "yaml")
    assert proc.returncode in (0, 1), proc.stderr
    record = yaml.safe_load(proc.stdout)
    assert record["run_id"] == "r1" and record["overrides"] == {} and "release_ready" in record
    assert record["exit_status"] == proc.returncode
    # FUNC-001 has no evidence: re-judged, its status changes, and the change is listed
    assert [(c["case_id"], c["before"]) for c in record["changes"]] == [("FUNC-001", "PASS")]
    assert "[xpushare] FUNC-001" in proc.stderr  # the per-case lines go to stderr
