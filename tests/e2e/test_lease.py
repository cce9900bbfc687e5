"""Two runs on one lab cluster (real SSH, real kubectl, the lab API server's Lease): the second refuses with one
line naming the holder (exit 2), a ``--wait`` run starts once the first released the cluster, both PASS, and
no run-start cleanup ever deletes the live run's pods. About a minute on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_OPTIONS
from tests.lab.kubelab import inventory_fixture, kube_lab_fixture
from tests.paths import REPO_ROOT
from xpushare.backends.k8s import K8sBackend
from xpushare.inventory import schema
from xpushare.transport.kube_errors import KubeNotFound
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT
#: The first run's pod: 2048-wide adds, 60000 of them, about 30 s on a simulated GPU: the intruder, the refused second
#: run and the third run's start act meanwhile (15 s was once too short on a loaded 2-core machine).
LONG_W2 = 'workload_args={w2_medium_add: [--n, "2048", --iters, "60000", --no-progress]}'


kube_lab = kube_lab_fixture("lease-kube", **LAB_OPTIONS)


inventory = inventory_fixture("lease-inv", params={"lease_renew_s": 1, "lease_stale_s": 30})


def func(inventory: Path, root: Path, run_id: str, case: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "func", "--cluster", "lab", "--inventory", str(inventory),
            "--run-id", run_id, "--root", str(root), "--case", case, *extra]


def result(root: Path, run_id: str, case: str) -> dict:
    return json.loads((root / ".tmplog" / run_id / "xpushare" / "lab" / "functional" / case / "result.json")
                      .read_text())


def run_meta(root: Path, run_id: str) -> dict:
    return json.loads((root / ".tmplog" / run_id / "xpushare" / "run.json").read_text())


def test_two_runs_on_one_cluster(inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                      context="lab", namespace="default")
    first = subprocess.Popen(func(inventory, tmp_path, "first", "FUNC-001", "--set", LONG_W2), cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    third: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 180
        pods: list[str] = []
        while not pods and first.poll() is None and time.monotonic() < deadline:
            pods = [p.name for p in kubectl.list_pods("xpushare/run-id=first", all_namespaces=True)
                    if p.phase == "Running"]
            time.sleep(0.5)
        assert pods, "the first run's pod never ran"
        lease = kubectl.get_json(["get", "leases", "xpushare-run"])
        assert lease["spec"]["holderIdentity"].endswith(" first")

        # Run-start cleanup of something that holds no lease (metrics-check, legacy) spares the live run.
        intruder = K8sBackend(schema.load(str(inventory)).cluster("lab"))
        try:
            intruder.prepare_run("intruder")
        finally:
            intruder.close()
        assert {p.name for p in kubectl.list_pods("xpushare/run-id=first", all_namespaces=True)} >= set(pods)

        second = subprocess.run(func(inventory, tmp_path, "second", "FUNC-002"), cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "cluster lab is in use by run first" in lines[0], second.stderr
        assert not (tmp_path / ".tmplog" / "second").exists()

        third = subprocess.Popen(func(inventory, tmp_path, "third", "FUNC-002", "--wait"), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out1, err1 = first.communicate(timeout=600)
        out3, err3 = third.communicate(timeout=600)
    finally:
        for proc in (first, third):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    assert first.returncode == 0, out1[-3000:] + err1[-2000:]
    assert third.returncode == 0, out3[-3000:] + err3[-2000:]
    assert "cluster lab is in use by run first" in out3 and "waiting for it (--wait)" in out3
    assert result(tmp_path, "first", "FUNC-001")["status"] == "PASS"
    assert result(tmp_path, "third", "FUNC-002")["status"] == "PASS"
    assert run_meta(tmp_path, "third")["started"] >= run_meta(tmp_path, "first")["ended"]
    with pytest.raises(KubeNotFound):  # released by the last run
        kubectl.get_json(["get", "leases", "xpushare-run"])
