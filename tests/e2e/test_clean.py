"""``invoke clean`` after a SIGKILL on the lab cluster (real SSH, real kubectl, the lab API server and kubelets):
the Kubernetes half of the cleanup against real objects, not only its selectors (tests/unit/backends/test_leftovers.py).

A real ``invoke func --cluster lab`` runs one case (its workloads shipped in a ConfigMap, as on a real cluster)
and is SIGKILLed while its pod runs: nothing of its own cleanup runs, so its namespace (``xpushare-<run id>``,
with its pod and ConfigMap), its log stream on the master and its lease are left. ``invoke clean --cluster lab
--run-id X`` deletes the namespace by label and stops the stream, saying what it removed; a second ``clean``
says nothing is left. The dead run's lease, though fresh, names a holder whose process on this machine is gone:
``clean`` does not count it as a live run, and the next run takes it over at once and says so (a holder on another
machine would block until the lease is stale, ``lease_stale_s``). About 40 s on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_OPTIONS
from tests.lab.kubelab import inventory_fixture, kube_lab_fixture
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.backends.k8s_names import run_namespace
from xpushare.engine.lease import live_run_ids
from xpushare.inventory import schema
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT
RUN = "killed"
#: The killed run's pod: about 15 s of simulated GPU work, so it still runs when the tool dies.
LONG_W2 = 'workload_args={w2_medium_add: [--n, "2048", --iters, "30000", --no-progress]}'


kube_lab = kube_lab_fixture("clean-kube", **LAB_OPTIONS)


# a lease that would stay fresh for the whole test: only its dead holder lets the next run take it
inventory = inventory_fixture("clean-inv", params={"pod_workload_configmap": True, "lease_renew_s": 1,
                                                   "lease_stale_s": 600})


def invoke(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=timeout)


def test_clean_after_sigkill_removes_the_runs_namespace(inventory: Path, kube_lab: LabCluster,
                                                        tmp_path: Path) -> None:
    # the run's pods and ConfigMap live in its own namespace; the lease in the home namespace (default)
    kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                      context="lab", namespace=run_namespace(RUN))
    selector = f"app.kubernetes.io/managed-by=xpushare,xpushare/run-id={RUN}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "func", "--cluster", "lab", "--inventory", str(inventory), "--run-id", RUN,
         "--root", str(tmp_path), "--case", "FUNC-001", "--set", LONG_W2],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        pods: list[str] = []
        while not pods and proc.poll() is None and time.monotonic() < deadline:
            pods = [p.name for p in kubectl.list_pods(selector) if p.phase == "Running"]
            time.sleep(0.3)
        assert pods, "the run's pod never ran"
        proc.send_signal(signal.SIGKILL)  # the tool only: its pod, ConfigMap, log stream and lease stay
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    configmaps = [c["metadata"]["name"] for c in
                  kubectl.get_json(["get", "configmaps", "-l", selector, "-o", "json"])["items"]]
    assert configmaps == [f"xpushare-workloads-{RUN}"], configmaps
    assert {p.name for p in kubectl.list_pods(selector)} == set(pods)
    lease = kubectl.get_json(["get", "leases", "xpushare-run"], namespace="default")
    assert lease["spec"]["holderIdentity"].endswith(f" {RUN}"), lease["spec"]
    # fresh, but its holder's process on this machine is gone: not a live run that clean must spare
    assert live_run_ids(schema.load(str(inventory)).cluster("lab")) == frozenset()

    res = invoke("clean", "--cluster", "lab", "--inventory", str(inventory), "--run-id", RUN)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    deleted = next(ln for ln in lines if ln.startswith("lab (kubernetes): deleted: "))
    assert f"namespace/{run_namespace(RUN)}" in deleted, lines  # with its pods and ConfigMap
    assert any(ln.startswith("lab-master: stopped: ") and "-schedlog" in ln for ln in lines), lines
    assert kubectl.list_pods(selector, all_namespaces=True) == []
    assert kubectl.get_json(["get", "configmaps", "-l", selector, "-A", "-o", "json"], namespace=None)["items"] == []
    assert kubectl.get_json(["get", "namespaces", "-l", selector], namespace=None)["items"] == []

    again = invoke("clean", "--cluster", "lab", "--inventory", str(inventory), "--run-id", RUN)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines() and all(ln.endswith(": nothing left") for ln in again.stdout.splitlines()), \
        again.stdout

    # The dead run's lease (fresh for 600 s more) does not block the next run from this machine.
    nxt = invoke("func", "--cluster", "lab", "--inventory", str(inventory), "--run-id", "after", "--root",
                 str(tmp_path), "--case", "FUNC-001")
    assert nxt.returncode == 0, nxt.stdout[-3000:] + nxt.stderr[-2000:]
    assert f"took the lease of cluster lab from run {RUN}" in nxt.stdout + nxt.stderr, nxt.stdout + nxt.stderr
    assert "on this machine is gone" in nxt.stdout + nxt.stderr
    result = tmp_path / ".tmplog" / "after" / "xpushare" / "lab" / "functional" / "FUNC-001" / "result.json"
    assert json.loads(result.read_text())["status"] == "PASS"
