"""The lab cluster on the real SUT: the upstream scheduler and client library built from source, run on
simulated GPUs (tests/lab/README-kube.md, "The real SUT").

Checks the wiring end to end through real kubectl: pods register with the real scheduler over its fixed
socket in their node's mount namespace, the scheduler reads their annotations from the lab API server over
TLS with the service-account token, compute quotas slow a workload in proportion (sleeping kernels, so the
ratio does not depend on the machine's load), the memory limit rejects an allocation with the library's own
line, and the cluster faults act on the real process. A mutant build (a patched tree) is chosen per node.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.kubelab import started_kube_lab
from tests.processes import alive
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab]
CORE, MEM = "xpushare.com/gpu-core-limit", "xpushare.com/gpu-memory-limit"
#: 2048 x 2048 fp32 adds move 50 MB each: 0.5 ms at the lab GPU's 100 GB/s, 4000 of them = 2.0 s of GPU time.
W2 = ["python", "workloads/w2_medium_add.py", "--n", "2048", "--iters", "4000", "--no-progress"]


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "real-sut", gpu_bandwidth=100e9)


@pytest.fixture
def kubectl(real_lab: LabCluster) -> Iterator[Kubectl]:
    k = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(real_lab.kubeconfig_path),
                context="lab", namespace="default", request_timeout_s=30)
    yield k
    k.delete("test", wait=False, grace_period_s=0)  # every pod here carries a ``test`` label


def pod(name: str, argv: list[str], *, node: str, annotations: dict[str, str] | None = None,
        env: dict[str, str] | None = None) -> str:
    """A one-container GPU pod manifest (YAML) labelled ``test=<name>``."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"test": name},
                         "annotations": annotations or {}},
            "spec": {"restartPolicy": "Never", "nodeName": node, "containers": [{
                "name": "w", "image": "lab", "command": argv,
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                "resources": {"limits": {"xpushare.com/gpu": "1"}}}]}})


def runtime_s(k: Kubectl, name: str) -> float:
    m = re.search(r"^--- ([0-9.]+) seconds ---$", k.logs(name, timestamps=False), re.M)
    assert m is not None, k.logs(name, timestamps=False)
    return float(m.group(1))


def metrics(lab: LabCluster, node: str) -> dict[str, Any]:
    with urllib.request.urlopen(lab.scheduler_url(node), timeout=5) as resp:
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


def test_real_scheduler_serves_the_simulated_gpus(real_lab: LabCluster) -> None:
    fams = metrics(real_lab, "lab-node1")
    assert fams["xpushare_nvml_up"].samples[0].value == 1
    assert {s.labels["gpu_uuid"] for s in fams["xpushare_gpu_info"].samples} == set(real_lab.gpu_uuids("lab-node1"))
    pid = real_lab.scheduler_pid("lab-node1")
    assert pid is not None
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        assert fh.read().split(b"\0")[0].endswith(b"xpushare-scheduler")


def test_annotation_quota_slows_the_workload_in_proportion(real_lab: LabCluster, kubectl: Kubectl) -> None:
    """Two W2 pods on different GPUs of one node: 100 % and a 50 % annotation read by the real scheduler."""
    k = kubectl
    k.apply(pod("test-free", W2, node="lab-node2"))
    k.apply(pod("test-half", W2, node="lab-node2", annotations={CORE: "50"}))
    k.wait_pods("test in (test-free,test-half)", until="terminal", count=2, timeout_s=90, poll_s=0.5)
    free, half = runtime_s(k, "test-free"), runtime_s(k, "test-half")
    assert 1.9 <= free <= 2.6, free  # 2.0 s of simulated GPU time
    assert 1.7 <= half / free <= 2.4, (free, half)  # the quota, not the machine's load
    assert "Core limit = 50%" in k.logs("test-half", timestamps=False)


def test_memory_limit_rejects_with_the_library_line(real_lab: LabCluster, kubectl: Kubectl) -> None:
    k = kubectl
    k.apply(pod("test-mem", ["python", "workloads/w2_medium_add.py", "--n", "4096", "--iters", "1",
                             "--no-progress"], node="lab-node1", env={"XPUSHARE_GPU_MEMORY_LIMIT": "64Mi"}))
    done = k.wait_pods("test=test-mem", until="terminal", count=1, timeout_s=60, poll_s=0.5)[0]
    out = k.logs("test-mem", timestamps=False)
    assert (done.phase, done.exit_code) == ("Failed", 1), out
    assert re.search(r"\[XPUSHARE\]\[WARN\]: cuMemAlloc rejected: \d+ \+ \d+ = \d+ would exceed limit 67108864", out)
    assert "CUDA out of memory" in out


def test_scheduler_down_fault_kills_the_real_process(real_lab: LabCluster, kubectl: Kubectl) -> None:
    before = real_lab.scheduler_pid("lab-node1")
    real_lab.set_faults("lab-node1", scheduler_down=True)
    try:
        real_lab.wait_scheduler("lab-node1", up=False, timeout_s=10)
        assert before is not None and not alive(before)
        kubectl.apply(pod("test-nosched", W2, node="lab-node1"))
        done = kubectl.wait_pods("test=test-nosched", until="terminal", count=1, timeout_s=60, poll_s=0.5)[0]
        assert done.phase == "Failed"  # the real library cannot connect to the socket and exits
        assert "scheduler.sock" in kubectl.logs("test-nosched", timestamps=False)
    finally:
        real_lab.set_faults("lab-node1", scheduler_down=False)
    assert real_lab.scheduler_pid("lab-node1") not in (None, before)


def test_annotations_denied_fault_leaves_the_quota_unread(real_lab: LabCluster, kubectl: Kubectl) -> None:
    real_lab.set_faults(None, annotations_denied=True)
    try:
        kubectl.apply(pod("test-denied", [*W2[:-3], "--iters", "200", "--no-progress"], node="lab-node1",
                          annotations={CORE: "30"}))
        kubectl.wait_pods("test=test-denied", until="terminal", count=1, timeout_s=60, poll_s=0.5)
        out = kubectl.logs("test-denied", timestamps=False)
    finally:
        real_lab.set_faults(None, annotations_denied=False)
    assert "Core limit = 30%" not in out and "PASS" in out, out




def test_sut_fault_runs_a_mutant_build_on_one_node(real_lab: LabCluster) -> None:
    """The ``sut`` fault swaps a node's build: its scheduler restarts on the mutant, the other node keeps upstream."""
    before = real_lab.scheduler_pid("lab-node2")
    with real_lab.running_mutant("metrics-missing", "lab-node2"):
        assert real_lab.scheduler_pid("lab-node2") not in (None, before)
        assert "xpushare_client_info" not in metrics(real_lab, "lab-node2")
        assert "xpushare_client_info" in metrics(real_lab, "lab-node1")
    assert "xpushare_client_info" in metrics(real_lab, "lab-node2")


def environ(pid: int | None) -> dict[str, str]:
    """The environment a running process was started with."""
    assert pid is not None
    with open(f"/proc/{pid}/environ", "rb") as fh:
        pairs = [item.decode(errors="replace").partition("=") for item in fh.read().split(b"\0") if item]
    return {k: v for k, _, v in pairs}


def test_scheduler_env_fault_restarts_a_scheduler_with_the_setting(real_lab: LabCluster) -> None:
    """The ``scheduler_env`` fault: the node's scheduler restarts with the extra environment, the other node's
    keeps its own; cleared, the node's scheduler restarts without it."""
    setting = {"XPUSHARE_SWITCH_TIME_MODE": "fixed", "XPUSHARE_SWITCH_TIME_FIXED": "1"}
    before = real_lab.scheduler_pid("lab-node2")
    real_lab.set_faults("lab-node2", scheduler_env=setting)
    try:
        during = real_lab.scheduler_pid("lab-node2")
        assert during not in (None, before)
        assert setting.items() <= environ(during).items()
        assert "XPUSHARE_SWITCH_TIME_FIXED" not in environ(real_lab.scheduler_pid("lab-node1"))
    finally:
        real_lab.set_faults("lab-node2", scheduler_env=None)
    after = real_lab.scheduler_pid("lab-node2")
    assert after not in (None, during) and "XPUSHARE_SWITCH_TIME_FIXED" not in environ(after)
