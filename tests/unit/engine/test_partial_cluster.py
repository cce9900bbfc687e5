"""A host-mode cluster with one GPU host that does not answer (docs/reliability.md §partial clusters): the run goes
on with the host that answers, the cases that need the dead one are ERROR naming it, the reports are written and
list it, and the exit status is 3. The dead host is a real SSH connection refused on 127.0.0.1 (nothing listens);
the live one is this machine (``connection: local``), running tiny CPU workloads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.backends.host import HostBackend
from xpushare.inventory.schema import load
from xpushare.model.errors import HostUnreachable
from xpushare.model.workload import WorkloadSpec

FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "20"]}']


def closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def inventory(tmp_path: Path, *, live: bool = True) -> Path:
    port = closed_port()
    hosts = {"gone": f"{{address: 127.0.0.1, port: {port}, roles: [gpu], gpus: [0]}}"}
    if live:
        hosts = {"here": "{connection: local, roles: [master, gpu]}", **hosts}
    lines = ["defaults:", "  ssh: {connect_timeout: 2, connect_retries: 1, host_key_policy: ignore}", "clusters:",
             "  part:", "    mode: host", f"    python: {sys.executable}", "    hosts:",
             *(f"      {name}: {spec}" for name, spec in hosts.items())]
    path = tmp_path / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def invoke(tmp_path: Path, inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``invoke func`` on cluster ``part`` with the premises this machine cannot meet (the SUT, a GPU) waived
    (tests/premise_free.py): what is under test is the run's going on without a host."""
    env = {**os.environ, "XPUSHARE_LEASE_DIR": str(tmp_path)}
    return run_tool([sys.executable, "-m", "tests.premise_free", "func", "--cluster", "part",
                     "--inventory", str(inv), "--root", str(tmp_path), *args], cwd=REPO_ROOT, timeout=300, env=env)


def result(run_dir: Path, case: str) -> dict:
    return json.loads((run_dir / "part" / "functional" / case / "result.json").read_text())


def test_the_run_goes_on_with_the_host_that_answers(tmp_path: Path) -> None:
    """Before: one line ``gone: cannot connect ...``, exit 3, nothing ran and no report was written."""
    proc = invoke(tmp_path, inventory(tmp_path), "--run-id", "p1", "--case", "FUNC-001,FUNC-003", *FAST)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3, text
    assert "Traceback" not in text
    assert "gone (gpu): UNREACHABLE (refused)" in text, text
    run_dir = tmp_path / ".tmplog" / "p1" / "xpushare"
    one, three = result(run_dir, "FUNC-001"), result(run_dir, "FUNC-003")
    assert one["status"] != "ERROR" and "gone" not in one["summary"], one  # ran on the host that answers
    assert "pods/func-001-w2.log" in one["evidence"]
    # FUNC-003 spreads its pods over the cluster's GPUs: it needs every GPU host
    assert three["status"] == "ERROR" and "gone: UNREACHABLE (refused)" in three["summary"], three
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["exit_status"] == 3
    assert [(u["cluster"], u["host"], u["role"], u["why"]) for u in meta["unreachable"]] == [
        ("part", "gone", "gpu", "refused")]
    report = (run_dir / "run-report.md").read_text()
    assert "1 host(s) UNREACHABLE" in report and "part: gone (gpu): UNREACHABLE (refused)" in report, report
    assert (run_dir / "junit.xml").is_file()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["host"], e["why"]) for e in events if e["event"] == "host_unreachable"] == [("gone", "refused")]


def test_a_cluster_none_of_whose_gpu_hosts_answers_has_every_case_error(tmp_path: Path) -> None:
    proc = invoke(tmp_path, inventory(tmp_path, live=False), "--run-id", "p2", "--case", "FUNC-001,FUNC-002")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3 and "Traceback" not in text, text
    run_dir = tmp_path / ".tmplog" / "p2" / "xpushare"
    for case in ("FUNC-001", "FUNC-002"):
        rec = result(run_dir, case)
        assert rec["status"] == "ERROR", rec
        assert rec["summary"].startswith("cluster part unreachable (no GPU host of it answers): gone: "
                                         "UNREACHABLE (refused)"), rec["summary"]
    assert (run_dir / "run-report.md").is_file() and (run_dir / "junit.xml").is_file()
    assert json.loads((run_dir / "run.json").read_text())["unreachable"][0]["host"] == "gone"


def test_a_pod_pinned_to_the_dead_host_fails_naming_it(tmp_path: Path) -> None:
    cluster = load(str(inventory(tmp_path))).cluster("part")
    backend = HostBackend(cluster)
    backend.prepare_run("r")
    try:
        assert [u.host for u in backend.unreachable()] == ["gone"] and list(backend.hosts) == ["here"]
        with pytest.raises(HostUnreachable, match=r"gone: UNREACHABLE \(refused\).*pod p is placed on it"):
            backend._choose(WorkloadSpec(name="p", workload="w2_medium_add", node="gone"))
        with pytest.raises(HostUnreachable, match="GPU count of cluster part needs every GPU host"):
            backend.parts.placement.gpu_count()
        assert backend._choose(WorkloadSpec(name="q", workload="w2_medium_add"))[0] == "here"
    finally:
        backend.close()


def test_a_kubernetes_cluster_whose_master_does_not_answer_has_every_case_error(tmp_path: Path) -> None:
    """Before: one line, exit 3, no report."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults:\n  ssh: {connect_timeout: 2, connect_retries: 1, host_key_policy: ignore}\n"
                   "clusters:\n  part:\n    mode: k8s\n    hosts:\n"
                   f"      m: {{address: 127.0.0.1, port: {closed_port()}, roles: [master]}}\n"
                   "      g: {connection: local, roles: [gpu]}\n")
    proc = invoke(tmp_path, inv, "--run-id", "p3", "--case", "FUNC-001,FUNC-009")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3 and "Traceback" not in text, text
    run_dir = tmp_path / ".tmplog" / "p3" / "xpushare"
    for case in ("FUNC-001", "FUNC-009"):
        rec = result(run_dir, case)
        assert rec["status"] == "ERROR", rec
        assert rec["summary"].startswith("cluster part unreachable (its master does not answer): m: "
                                         "UNREACHABLE (refused)"), rec["summary"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert [(u["host"], u["role"]) for u in meta["unreachable"]] == [("m", "master")]
    assert (run_dir / "run-report.md").is_file() and (run_dir / "junit.xml").is_file()
