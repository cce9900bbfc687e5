"""Several clusters in one run (``--cluster a,local``): one run directory, one report, per-cluster resume and
interrupts, one lease per cluster, per-cluster dry run and events, ``--maxfail`` across the run. Both clusters are
this machine in host mode (real processes, tiny CPU workloads); cluster ``a``'s inventory parameters break its
workload, so the two clusters' verdicts differ."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.engine.clusters import Budget, cluster_names, disk_full, run_concurrently
from xpushare.engine.plan import case_params, select
from xpushare.engine.run import Run, RunHooks, RunSelection
from xpushare.evidence import events
from xpushare.inventory.schema import local_cluster
from xpushare.model.errors import UsageError
from xpushare.model.lease import Holder, LeaseSettings
from xpushare.transport.local import LocalHost
from xpushare.transport.lock_file import LockFileStore

ROOT = REPO_ROOT
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


def invoke(*args: str, root: Path, timeout: float = 240,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=ROOT,
                    timeout=timeout, env={**os.environ, **(env or {})})


def inventory(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY + extra, encoding="utf-8")
    return path


def result(root: Path, run_id: str, cluster: str, case: str) -> dict[str, Any]:
    path = root / ".tmplog" / run_id / "xpushare" / cluster / "functional" / case / "result.json"
    return dict(json.loads(path.read_text()))


# -- units -----------------------------------------------------------------------------------------------------


def test_cluster_names_are_a_comma_list_without_repeats() -> None:
    assert cluster_names("c1") == ("c1",)
    assert cluster_names("c1, c2") == ("c1", "c2")
    for bad in ("c1,", ",", "", "c1,c1"):
        with pytest.raises(UsageError):
            cluster_names(bad)


def test_jobs_run_concurrently_and_errors_are_kept_per_cluster() -> None:
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


def test_budget_counts_failures_across_threads_and_halts_once() -> None:
    budget = Budget(maxfail=50)
    workers = [threading.Thread(target=lambda: [budget.count(s) for s in ("FAIL", "PASS", "ERROR", "SKIP") * 1000])
               for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert budget.failures == 8000 and budget.exhausted()
    assert not Budget().exhausted()
    budget.halt("first")
    budget.halt("second")
    assert budget.halted == "first"
    assert disk_full(OSError(28, "No space left on device")) and not disk_full(OSError(13, "denied"))


def test_events_carry_the_cluster_of_the_thread_that_emits_them(tmp_path: Path) -> None:
    both = threading.Barrier(2, timeout=10)

    def cluster_thread(name: str) -> None:
        with events.cluster(name), events.case(f"{name}-case"):
            both.wait()  # both scopes open at once: a scope shared between threads would mix them up
            events.emit("case_started", suite="functional")
            both.wait()

    with events.recording(tmp_path):
        threads = [threading.Thread(target=cluster_thread, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        events.emit("run_ended", run_id="r")
    got = events.read(tmp_path)
    assert sorted((e["cluster"], e["case_id"]) for e in got[:2]) == [("a", "a-case"), ("b", "b-case")]
    assert "cluster" not in got[2] and "case_id" not in got[2]


def test_a_budget_spent_on_another_cluster_records_this_clusters_cases_as_not_run(tmp_path: Path) -> None:
    selection = select(case_ids=["FUNC-001", "FUNC-002"])
    cases = [REGISTRY["FUNC-001"], REGISTRY["FUNC-002"]]
    spent = Budget(maxfail=1, failures=1)  # the other cluster's FAIL
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed with the process

    def chosen(run: Run) -> RunSelection:
        return RunSelection("test", cases, frozenset(), {"local": cases},
                            lambda case, cluster: case_params(case, cluster, selection, {}))

    run = Run(root=tmp_path, clusters=[local_cluster()], run_id="r", out=devnull)
    assert not run._run_cases(local_cluster(), FakeBackend(), chosen(run), RunHooks(),
                              spent, [])
    for case in ("FUNC-001", "FUNC-002"):
        got = json.loads((run.dir / "local" / "functional" / case / "result.json").read_text())
        assert got["status"] == "INTERRUPTED" and "--maxfail 1 reached (1 FAIL/ERROR" in got["summary"]
    halted = Budget()
    halted.halt("the run directory is full (a)")
    run2 = Run(root=tmp_path / "r2", clusters=[local_cluster()], run_id="r2", out=devnull)
    run2._run_cases(local_cluster(), FakeBackend(), chosen(run2), RunHooks(), halted, [])
    assert not (tmp_path / "r2").exists()  # nothing started, nothing recorded


# -- through the CLI ---------------------------------------------------------------------------------------------


def test_bad_cluster_list_is_one_line_exit_2(tmp_path: Path) -> None:
    for value in ("local,", "local,local", "local,nope", ","):
        proc = invoke("func", "--cluster", value, "--case", "FUNC-001", root=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / ".tmplog").exists()  # nothing ran


def test_dry_run_plans_each_cluster(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    proc = invoke("func", "--cluster", "a,local", "--inventory", inv, "--case", "FUNC-001", "--dry-run",
                  root=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "dry run on a (host mode)" in proc.stdout and "dry run on local (host mode)" in proc.stdout
    as_json = invoke("combo", "--cluster", "local,a", "--inventory", inv, "--case", "FUNC-001", "--dry-run",
                     "--output", "json", root=tmp_path)
    plans = json.loads(as_json.stdout)
    assert [p["cluster"] for p in plans] == ["local", "a"] and all(len(p["cases"]) == 1 for p in plans)
    assert not (tmp_path / ".tmplog").exists()


def test_one_held_lease_refuses_the_whole_run(tmp_path: Path) -> None:
    """``a`` keeps its lease in a file of its own; ``local``'s is held by a live run: nothing starts, and the lease
    of ``a`` taken first is given back."""
    a_lease = tmp_path / "a.lease"
    inv = str(inventory(tmp_path, f"      lease_path: {a_lease}\n"))
    busy = Holder(run_id="busy-run", user="ana", machine=socket.gethostname(), pid=os.getpid(),
                  started="2026-01-01T00:00:00+00:00", token="t0")
    store = LockFileStore(LocalHost(), str(tmp_path / "xpushare-run.lease"))
    assert store.create(busy, LeaseSettings(renew_s=10, stale_s=60))
    proc = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m0", "--case", "FUNC-001",
                  root=tmp_path, env={"XPUSHARE_LEASE_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster local is in use by run busy-run" in lines[0], proc.stderr
    assert not (tmp_path / ".tmplog" / "m0").exists() and not a_lease.exists()


def test_two_clusters_one_run_dir_one_report_then_resume_per_cluster(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))  # a and local share this machine, so one lock file: the run holds it once
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
    assert "clusters: a, local" in (rd / "run-report.md").read_text()
    assert (rd / "report.html").exists()
    got = events.read(rd)
    assert sorted(e["cluster"] for e in got if e["event"] == "run_started") == ["a", "local"]
    ended = {(e["cluster"], e["case_id"]): e["status"] for e in got if e["event"] == "case_ended"}
    assert ended == {("a", "FUNC-001"): "FAIL", ("local", "FUNC-001"): "PASS"}
    assert all("cluster" in e for e in got if e["event"] != "run_ended")
    passed_at = result(tmp_path, "m1", "local", "FUNC-001")["started"]
    again = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m1", "--resume",
                   "--case", "FUNC-001", *FAST, root=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert result(tmp_path, "m1", "a", "FUNC-001")["attempt"] == 2  # only the cluster whose case did not PASS
    assert result(tmp_path, "m1", "local", "FUNC-001")["started"] == passed_at


def test_maxfail_counts_across_the_clusters(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    proc = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "mf", "--case", "FUNC-001",
                  "--case", "FUNC-002", "--maxfail", "1", root=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result(tmp_path, "mf", "a", "FUNC-001")["status"] == "FAIL"
    rest = result(tmp_path, "mf", "a", "FUNC-002")
    assert rest["status"] == "INTERRUPTED" and "--maxfail 1" in rest["summary"]


@pytest.mark.slow
def test_ctrl_c_interrupts_every_cluster_and_resume_finishes_them(tmp_path: Path) -> None:
    inv = str(inventory(tmp_path))
    slow = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "100000000"]}']
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.premise_free", "func", "--cluster", "a,local", "--inventory", inv,
         "--run-id", "m2",
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
        assert result(tmp_path, "m2", cluster, "FUNC-001")["status"] == "INTERRUPTED", out
        never = result(tmp_path, "m2", cluster, "FUNC-002")  # each cluster stopped: recorded, not run
        assert never["status"] == "INTERRUPTED" and never["not_run"], out
        assert not (rd / cluster / "functional" / "FUNC-002" / "pods.json").exists()
    assert (rd / "run-report.md").exists() and "--resume" in out
    resumed = invoke("func", "--cluster", "a,local", "--inventory", inv, "--run-id", "m2", "--resume",
                     "--case", "FUNC-001", "--case", "FUNC-002", *FAST, root=tmp_path)
    # resumed, both cases finish on both clusters; FUNC-002 without a GPU is ERROR naming its premise (exit 1)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    for cluster in ("a", "local"):
        assert result(tmp_path, "m2", cluster, "FUNC-001")["status"] == "PASS"
        func002 = result(tmp_path, "m2", cluster, "FUNC-002")
        assert func002["status"] == "ERROR" and func002["summary"].startswith("premise unmet: two-pods-one-gpu")
