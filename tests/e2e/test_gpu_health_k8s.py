"""A GPU fault during a case is ERROR in Kubernetes mode too (docs/faults.md): a lab cluster of its own (fake API
server, kubelets, the real SUT on simulated GPUs) with the lab inventory, whose ``node_health_env`` gives the
health capture on each node its simulated GPUs and kernel log (``SIMGPU_KMSG``, tests/lab/env.py).

FUNC-001 (one W2 pod) runs twice: untouched it PASSes with both captures of the pod's node and ``gpu_health``
ok; with an Xid 79 written into the pod's node's kernel log for each of its GPUs at the harvest boundary
(before :meth:`K8sBackend.harvest`), it is ERROR "GPU fault on <node> GPU <uuid> during the case (Xid 79: ...)".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_faults_while_running import Outcome, assert_no_traceback, run_case
from tests.lab.cluster import LabCluster
from tests.lab.env import LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab, started_ssh_lab
from tests.lab.simgpu import append_kmsg, pci_bus_id, xid_line
from tests.lab.sshd import SshLab
from xpushare.backends.k8s import K8sBackend

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "gpuhealth-kube", **LAB_OPTIONS)


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    yield from started_ssh_lab(tmp_path_factory, "gpuhealth-ssh")


@pytest.fixture(scope="module")
def inventory(ssh: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_inventory(tmp_path_factory.mktemp("gpuhealth-inv") / "inventory.yaml", ssh, kube_lab,
                           params={"pod_timeout_s": 60})


def pod_node(o: Outcome) -> str:
    records = json.loads((o.case_dir / "pods.json").read_text())
    (node,) = {r["node"] for r in records}
    return str(node)


def test_without_a_fault_the_case_passes_with_both_captures(inventory: Path, tmp_path: Path) -> None:
    o = run_case(inventory, tmp_path, "healthy")
    assert_no_traceback(o)
    assert o.record["status"] == "PASS", o.explain()
    node = pod_node(o)
    assert {f"gpu_health/{node}-before.txt", f"gpu_health/{node}-after.txt"} <= o.files()
    check = next(c for c in o.record["checks"] if c["name"] == "gpu_health")
    assert check["ok"] is True and node in check["values"]["healthy"], check
    text = (o.case_dir / f"gpu_health/{node}-after.txt").read_text()
    assert "## nvidia-smi exit=0" in text and "## kernel-log source=dmesg" in text, text


def test_xid_79_on_the_pod_node_is_error(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    original = K8sBackend.harvest

    def harvest(self: K8sBackend) -> list[str]:
        for node in {p.node for p in self.case_pods() if p.node}:
            for index in range(len(kube_lab.gpu_uuids(node))):
                append_kmsg(kube_lab.kmsg(node), xid_line(pci_bus_id(index), 79, "GPU has fallen off the bus."))
        return original(self)

    monkeypatch.setattr(K8sBackend, "harvest", harvest)
    o = run_case(inventory, tmp_path, "xid79")
    assert_no_traceback(o)
    node = pod_node(o)
    assert o.record["status"] == "ERROR", o.explain()
    summary = o.record["summary"]
    assert summary.startswith(f"GPU fault on {node} GPU GPU-") and \
        "during the case (Xid 79: GPU has fallen off the bus): not a verdict on the SUT (was PASS: " in summary, summary
    uuid = summary.split(" GPU ", 2)[1].split(" ")[0]
    assert uuid in kube_lab.gpu_uuids(node), (uuid, kube_lab.gpu_uuids(node))
