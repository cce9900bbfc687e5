"""Host mode's harvest under faults on the host-mode lab (real sshd, the real SUT on simulated GPUs,
:mod:`tests.lab.hostlab`): a GPU host's SSH session killed during the harvest, or its sshd stopped, makes the
case ERROR naming the incomplete evidence and the fault, never PASS, never a traceback; every piece read before
and after the fault is kept, and the lost reads are noted in ``harvest-errors.txt``. The control: the same
FUNC-001 run with nothing failing PASSes and notes nothing.

The run is driven in-process through the task glue (``cli.guard.guarded`` around ``engine.suite_run.run``), with a
wrapper around a harvest method to inject the fault at that point (as tests/e2e/test_faults_while_running.py does
in Kubernetes mode). One FUNC-001 pod (about 2 s of simulated GPU work) per run; two hosts, the pod and the
scheduler on the first.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_faults_while_running import (
    Outcome,
    assert_no_traceback,
    assert_run_reported,
    kill_session_during,
    wrap,
)
from tests.e2e.test_faults_while_running import run_case as faults_run_case
from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from xpushare.backends import leftovers
from xpushare.backends.host import HostBackend
from xpushare.backends.host_scheduler import HostScheduler
from xpushare.inventory import schema

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE1, NODE2 = "hh-node1", "hh-node2"  # NODE1: the pod's host and the scheduler's (the inventory's first)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLab]:
    require_lab("host-mode lab", unavailable_reason())
    with HostLab(tmp_path_factory.mktemp("harvest-hostlab"), nodes=(NODE1, NODE2), base_address="127.0.77.1") as lab:
        yield lab


@pytest.fixture(scope="module")
def inventory(lab: HostLab) -> Path:
    # the lease in the lab's directory: /tmp is shared with other host labs of this machine
    params = {"workload_args": {"w2_medium_add": ["--n", "2048", "--iters", "40", "--no-progress"]},
              "pod_timeout_s": 60, "lease_path": str(lab.workdir / "run.lease")}
    return lab.write_inventory(lab.workdir / "inventory.yaml", params=params)


@pytest.fixture(autouse=True)
def _hosts_up_after(lab: HostLab) -> Iterator[None]:
    yield
    assert lab.ssh is not None
    for name in (NODE1, NODE2):
        if not lab.ssh.is_running(name):
            lab.ssh.start_host(name)


def run_case(inventory: Path, root: Path, run_id: str) -> Outcome:
    """``invoke func --cluster hostlab --case FUNC-001`` in this process, with no traceback and its reports
    written (:func:`tests.e2e.test_faults_while_running.run_case`)."""
    o = faults_run_case(inventory, root, run_id, CLUSTER)
    assert_no_traceback(o)
    assert_run_reported(o)
    return o


def noted(o: Outcome) -> str:
    path = o.case_dir / "harvest-errors.txt"
    return path.read_text() if path.exists() else ""


#: What a healthy host-mode FUNC-001 harvests (and the fault tests keep, except the piece they lose).
POD_FILES = {"pods.json", "pods/func-001-w2.log"}
NODE_FILES = {f"remote_{NODE1}_nvidia_smi.txt", f"remote_{NODE1}_dmon.txt", f"remote_{NODE2}_nvidia_smi.txt",
              f"remote_{NODE2}_dmon.txt", f"sampler/{NODE1}_gpu.csv", f"sampler/{NODE2}_gpu.csv"}
SCHEDULER_FILES = {"scheduler.log", "scheduler_node.txt", "metrics.txt", "metrics_health.txt", "scheduler_proc.txt"}


def test_without_a_fault_the_case_passes(inventory: Path, tmp_path: Path) -> None:
    o = run_case(inventory, tmp_path, "healthy")
    assert o.record["status"] == "PASS" and o.status == 0, o.explain() + json.dumps(o.record)[:2000]
    assert o.files() >= POD_FILES | NODE_FILES | SCHEDULER_FILES, o.files()
    assert noted(o) == ""


def test_gpu_host_session_killed_mid_harvest(inventory: Path, lab: HostLab, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's host's sshd session dies while the harvest's ``nvidia-smi`` runs there: only that read is
    lost (the next read reconnects), the case is ERROR naming it, everything else is kept."""
    assert lab.ssh is not None
    ssh = lab.ssh
    watchers: list[threading.Thread] = []
    wrap(monkeypatch, HostBackend, "harvest",
         lambda: watchers.append(kill_session_during(ssh, NODE1, "nvidia-smi: not found")))
    o = run_case(inventory, tmp_path, "host-ssh-mid-harvest")
    assert watchers and watchers[0].killed, "the session was never killed mid-command"  # type: ignore[attr-defined]
    rec = o.record
    assert rec["status"] == "ERROR" and o.status == 1, o.explain()
    assert "evidence incomplete" in rec["summary"], rec["summary"]
    assert f"node {NODE1}: nvidia-smi: {NODE1}: connection lost" in rec["summary"], rec["summary"]
    lost = {f"remote_{NODE1}_nvidia_smi.txt"}
    assert POD_FILES | (NODE_FILES - lost) | SCHEDULER_FILES | {"harvest-errors.txt"} <= o.files(), o.files()
    assert not lost & o.files()
    assert noted(o).startswith(f"node {NODE1}: nvidia-smi: {NODE1}: connection lost"), noted(o)


def test_scheduler_host_sshd_stopped_mid_harvest(inventory: Path, lab: HostLab, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The first host's sshd stops when the harvest turns to the scheduler's evidence (the host went away):
    each of its reads is a fault naming the unreachable host, the pods' and both nodes' evidence read before is
    kept, the case is ERROR. Once the host is back, ``invoke clean``'s code removes what the failed cleanup
    left there."""
    assert lab.ssh is not None
    ssh = lab.ssh
    wrap(monkeypatch, HostScheduler, "harvest", lambda: ssh.stop_host(NODE1))
    o = run_case(inventory, tmp_path, "host-sshd-mid-harvest")
    rec = o.record
    assert rec["status"] == "ERROR" and o.status == 1, o.explain()
    assert "evidence incomplete" in rec["summary"] and f"scheduler log: {NODE1}: cannot connect" in rec["summary"], \
        rec["summary"]
    assert POD_FILES | NODE_FILES | {"harvest-errors.txt"} <= o.files(), o.files()
    assert not {"scheduler.log", "metrics.txt"} & o.files(), o.files()
    assert "scheduler /metrics: " in noted(o) and "scheduler /proc: " in noted(o), noted(o)
    ssh.start_host(NODE1)
    removed = leftovers.clean(schema.load(str(inventory)).cluster(CLUSTER), o.run_id)
    first = next(r for r in removed if r.where == NODE1)
    assert first.error is None and first.entries, first.lines()


def test_a_gpu_host_down_before_the_run_leaves_the_run_to_the_other(inventory: Path, lab: HostLab,
                                                                      tmp_path: Path) -> None:
    """Partial cluster (docs/reliability.md): the second GPU host's sshd is stopped before the run. Before: one line,
    exit 3, nothing ran and no report. Now FUNC-001 runs on the host that answers and PASSes, the run exits 3 and its
    reports list the dead host with why."""
    assert lab.ssh is not None
    # an earlier test's run could not release its lease (its host was down when it ended): that run is over
    (lab.workdir / "run.lease").unlink(missing_ok=True)
    lab.ssh.stop_host(NODE2)
    o = faults_run_case(inventory, tmp_path, "host-down-before", CLUSTER)
    assert (o.run_dir / "run.json").is_file(), o.explain()
    assert_no_traceback(o)
    assert_run_reported(o)
    assert o.status == 3, o.explain()
    assert o.record["status"] == "PASS", o.explain() + json.dumps(o.record)[:2000]
    assert f"{NODE2} (gpu): UNREACHABLE (refused)" in o.out + o.err, o.explain()
    meta = json.loads((o.run_dir / "run.json").read_text())
    assert [(u["host"], u["why"]) for u in meta["unreachable"]] == [(NODE2, "refused")]
    assert f"{NODE2} (gpu): UNREACHABLE (refused)" in (o.run_dir / "run-report.md").read_text()
    assert o.files() >= POD_FILES | SCHEDULER_FILES and not any(NODE2 in f for f in o.files()), o.files()


def test_the_scheduler_host_down_before_the_run_is_error_naming_it(inventory: Path, lab: HostLab,
                                                                     tmp_path: Path) -> None:
    """The first GPU host (the inventory's scheduler is there) does not answer: FUNC-001 reads that scheduler, so it
    is ERROR naming the host; the lease lives on the host that answers; the reports are written; exit 3."""
    assert lab.ssh is not None
    # an earlier test's run could not release its lease (its host was down when it ended): that run is over
    (lab.workdir / "run.lease").unlink(missing_ok=True)
    lab.ssh.stop_host(NODE1)
    o = faults_run_case(inventory, tmp_path, "scheduler-host-down-before", CLUSTER)
    assert (o.run_dir / "run.json").is_file(), o.explain()
    assert_no_traceback(o)
    assert_run_reported(o)
    assert o.status == 3, o.explain()
    rec = o.record
    assert rec["status"] == "ERROR" and f"{NODE1}: UNREACHABLE (refused)" in rec["summary"], rec["summary"]
    meta = json.loads((o.run_dir / "run.json").read_text())
    assert [(u["host"], u["role"]) for u in meta["unreachable"]] == [(NODE1, "gpu")]
