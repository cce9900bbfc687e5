"""Several clusters in one run (``--cluster a,local``): one run directory, one report, per-cluster resume and
interrupts. Both clusters are this machine in host mode (real processes, tiny CPU workloads); cluster ``a``'s
inventory parameters break its workload, so the two clusters' verdicts differ."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xpushare.engine.clusters import cluster_names, run_concurrently
from xpushare.model.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}']
INVENTORY = """\
clusters:
  a:
    mode: host
    sut: xpushare
    hosts:
      box: {connection: local, roles: [master, gpu]}
    params:
      workload_args: {w2_medium_add: [--n, "-5"]}
"""


def invoke(*args: str, root: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args, "--root", str(root)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY, encoding="utf-8")
    return path


def result(root: Path, run_id: str, cluster: str, case: str) -> dict:
    path = root / ".tmplog" / run_id / "xpushare" / cluster / "functional" / case / "result.json"
    return json.loads(path.read_text())


def test_cluster_names_are_a_comma_list_without_repeats() -> None:
    assert cluster_names("c1") == ("c1",)
    assert cluster_names("c1, c2") == ("c1", "c2")
    for bad in ("c1,", ",", "c1,c1"):
        with pytest.raises(UsageError):
            cluster_names(bad)


def test_jobs_run_concurrently_and_errors_are_kept_per_cluster() -> None:
    import threading

    both = threading.Barrier(2, timeout=10)  # each job waits for the other: only concurrent jobs get past it

    def ok() -> bool:
        both.wait()
        return False

    def broken() -> bool:
        both.wait()
        raise RuntimeError("c2 unreachable")

    outcome = run_concurrently({"c1": ok, "c2": broken})
    assert not outcome.interrupted and list(outcome.errors) == ["c2"]
    assert run_concurrently({"c1": lambda: False, "c2": lambda: True}).interrupted


def test_two_clusters_one_run_dir_one_report_then_resume_per_cluster(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    first = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m1", "--case", "FUNC-001",
                   root=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr  # a FAIL on one cluster fails the run
    assert result(tmp_path, "m1", "a", "FUNC-001")["status"] == "FAIL"
    assert result(tmp_path, "m1", "local", "FUNC-001")["status"] == "PASS"
    assert "a: FUNC-001" in first.stdout and "local: FUNC-001" in first.stdout
    rd = tmp_path / ".tmplog" / "m1" / "xpushare"
    assert json.loads((rd / "run.json").read_text())["clusters"] == ["a", "local"]
    rows = {tuple(r.split("\t")[:4]) for r in (rd / "run-summary.tsv").read_text().splitlines()[1:]}
    assert ("a", "functional", "all", "FAIL") in rows and ("local", "functional", "all", "PASS") in rows
    junit = (rd / "junit.xml").read_text()
    assert 'name="a.functional"' in junit and 'name="local.functional"' in junit
    report = (rd / "run-report.md").read_text()
    assert "clusters: a, local" in report
    passed_at = result(tmp_path, "m1", "local", "FUNC-001")["started"]
    again = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m1", "--resume",
                   "--case", "FUNC-001", *FAST, root=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert result(tmp_path, "m1", "a", "FUNC-001")["attempt"] == 2  # only the cluster whose case did not PASS
    assert result(tmp_path, "m1", "local", "FUNC-001")["started"] == passed_at


def test_bad_cluster_list_is_one_line_exit_2(tmp_path: Path) -> None:
    for value in ("local,", "local,local", "local,nope"):
        proc = invoke("func", "--cluster", value, "--case", "FUNC-001", root=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / ".tmplog").exists()  # nothing ran


@pytest.mark.slow
def test_ctrl_c_interrupts_every_cluster_and_resume_finishes_them(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    slow = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "100000000"]}']
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m2",
         "--case", "FUNC-001", "--case", "FUNC-002", *slow, "--root", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    rd = tmp_path / ".tmplog" / "m2" / "xpushare"
    pods = [rd / c / "functional" / "FUNC-001" / "pods.json" for c in ("a", "local")]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(p.exists() and '"Running"' in p.read_text() for p in pods):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    for cluster in ("a", "local"):
        assert (rd / cluster / "functional" / "FUNC-001" / "result.json").exists(), out
        assert result(tmp_path, "m2", cluster, "FUNC-001")["status"] == "INTERRUPTED", out
        assert not (rd / cluster / "functional" / "FUNC-002").exists()  # each cluster stopped
    assert (rd / "run-report.md").exists() and "--resume" in out
    resumed = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m2", "--resume",
                     "--case", "FUNC-001", "--case", "FUNC-002", *FAST, root=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for cluster in ("a", "local"):
        for case in ("FUNC-001", "FUNC-002"):
            assert result(tmp_path, "m2", cluster, case)["status"] == "PASS"
