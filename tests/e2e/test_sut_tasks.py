"""``invoke sut.status|stop|start|restart`` on the Kubernetes lab: the real scheduler's DaemonSet parked on a node
selector no node has (its pods go away), brought back, and rolled (new pods), with the exit statuses the tasks
document (status 1 while the SUT is not running)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "sut-kube", **LAB_OPTIONS)


def sut(task: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", f"sut.{task}", "--cluster", "lab", "--inventory",
                     str(inventory)], cwd=ROOT, timeout=300)


def scheduler_pods(kube_lab: LabCluster) -> list[str]:
    kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                      context="lab", namespace="xpushare-system")
    return [p.name for p in kubectl.list_pods("name=xpushare-scheduler")]


def test_stop_start_restart_the_daemonsets(ssh_lab: SshLab, kube_lab: LabCluster,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    inventory = write_inventory(tmp_path_factory.mktemp("sut-inv") / "inventory.yaml", ssh_lab, kube_lab)
    first = sut("status", inventory)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "xpushare-scheduler" in first.stdout and "xpushare-device-plugin" in first.stdout
    before = scheduler_pods(kube_lab)
    assert len(before) == 2

    stopped = sut("stop", inventory)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    down = sut("status", inventory)
    assert down.returncode == 1 and "desired 0" in down.stdout, down.stdout

    started = sut("start", inventory)
    assert started.returncode == 0, started.stdout + started.stderr
    assert sut("status", inventory).returncode == 0

    restarted = sut("restart", inventory)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    after = scheduler_pods(kube_lab)
    assert len(after) == 2 and not set(after) & set(before)  # new pods: the DaemonSet was rolled
