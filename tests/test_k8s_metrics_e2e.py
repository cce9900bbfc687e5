"""The metrics suite end to end on the lab: real SSH to the lab hosts, real kubectl, the lab schedulers.

``invoke metrics --cluster lab`` passes MET-001..008 on a healthy lab (lab-sized durations; the lab's
stand-ins for NVML and dmon are described below); the broken-lab switches turn exactly the right case:
``metrics_missing`` fails MET-002, ``scheduler_down`` fails MET-001 (FAIL or ERROR). ``invoke
metrics-check --url`` passes on the idle lab scheduler.

Lab-sized parameters (the inventory's ``params``): short durations (MET-006 10 s, MET-007 10 s,
MET-008 6 s); ``met003_require_nvml: false`` (the lab nodes have no NVML and no nvidia-smi: the node
sampler runs and records ``no_gpu.txt``); ``met006_dmon_command``: ``tests/lab/fakedmon.py``, which
measures the lab GPU's busy share (the clients' CPU share) from /proc, independently of the scheduler;
MET-008: the lab GPU has 1600 MiB of which each client's context takes 256 MiB and W5's tensors count
``8 n²`` bytes, so ``--n 4096`` shows 384 MiB (ratio 0.24) and the alert ratio is 0.2 (a bare probe,
``n`` 512, stays at 0.16).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_GPU_MEMORY_BYTES, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab
from xpushare.collect.metrics import parse_exposition
from xpushare.kube import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
CASES = [f"MET-{i:03d}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "met-kube", gpu_memory_bytes=LAB_GPU_MEMORY_BYTES)


def lab_params(lab: LabCluster) -> dict:
    return {
        "met_settle_s": 15,
        "met_poll_s": 0.5,
        "met_probe_duration_s": 120,
        "met003_require_nvml": False,
        "met005_before_s": 2,
        "met005_timeout_s": 20,
        "met006_duration_s": 10,
        "met006_dmon_command": [sys.executable, str(ROOT / "tests" / "lab" / "fakedmon.py"), "--workdir",
                                str(lab.workdir), "--node", "{node}"],
        "met007_duration_s": 10,
        "met008_n": 4096,
        "met008_alert_ratio": 0.2,
        "met008_duration_s": 6,
    }


@pytest.fixture(scope="module")
def lab_inventory(ssh_lab: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("met-inv") / "inventory.yaml"
    return write_inventory(path, ssh_lab, kube_lab, params=lab_params(kube_lab))


def kubectl_for(lab: LabCluster) -> Kubectl:
    kubectl = find_kubectl()
    assert kubectl is not None
    return Kubectl(LocalHost(), kubectl=kubectl, kubeconfig=str(lab.kubeconfig_path), context="lab",
                   namespace="default", request_timeout_s=30)


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def run_metrics(inventory: Path, root: Path, run_id: str, *cases: str, sets: tuple[str, ...] = ()
                ) -> subprocess.CompletedProcess:
    args = [a for c in cases for a in ("--case", c)] + [a for s in sets for a in ("--set", s)]
    return invoke("metrics", "--cluster", "lab", "--inventory", str(inventory), "--run-id", run_id,
                  "--root", str(root), *args)


def results(root: Path, run_id: str) -> dict[str, dict]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "metrics"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


def wait_idle(lab: LabCluster, timeout_s: float = 30.0) -> None:
    """Until no node's scheduler shows a client (probes of earlier tests may still be going)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    for node in lab.nodes:
        while True:
            with opener.open(lab.scheduler_url(node), timeout=5) as resp:
                if not parse_exposition(resp.read().decode()).values("client_info"):
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"clients still registered on {node} after {timeout_s} s")
            time.sleep(0.2)


def test_metrics_check_url_on_the_idle_lab(kube_lab: LabCluster) -> None:
    wait_idle(kube_lab)
    proc = invoke("metrics-check", "--url", kube_lab.scheduler_url("lab-node1", ""), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "15/15 PASS" in proc.stdout


def test_healthy_lab_metrics_suite(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    proc = run_metrics(lab_inventory, tmp_path, "healthy")
    got = results(tmp_path, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    detail = proc.stdout[-4000:] + proc.stderr[-2000:] + json.dumps(
        {k: v["summary"] for k, v in got.items()}, indent=1)
    assert statuses == dict.fromkeys(CASES, "PASS"), detail
    assert proc.returncode == 0, detail
    case = tmp_path / ".tmplog/healthy/xpushare/lab/metrics"
    assert "HTTP_CODE=200" in (case / "MET-001/metrics_health.txt").read_text()
    # every probe case judged the scheduler of the probe's node, scraped on that node
    for cid in ("MET-002", "MET-003", "MET-004", "MET-005", "MET-006", "MET-008"):
        plan = json.loads((case / cid / "plan.json").read_text())
        assert plan["target"]["node"] == plan["node"] and plan["target"]["fetched_from"] == plan["node"], cid
        assert plan["target"]["url"] == f"http://{kube_lab.scheduler_address(plan['node'])}:9402", cid
    node3 = json.loads((case / "MET-003/plan.json").read_text())["node"]
    assert (case / f"MET-003/sampler/{node3}_no_gpu.txt").is_file()  # the sampler ran on the probe's node
    assert "NVML cross-check not possible" in got["MET-003"]["summary"]
    assert got["MET-004"]["metrics"]["metric_core_quota_percent"] == 35
    assert 0 < got["MET-005"]["metrics"]["dynamic_quota_metric_latency_sec"] <= 15
    node6 = json.loads((case / "MET-006/plan.json").read_text())["node"]
    assert "sm" in (case / f"MET-006/remote_{node6}_dmon.txt").read_text()
    assert got["MET-006"]["metrics"]["max_gpu_util_ratio"] >= 0.1
    m7 = got["MET-007"]["metrics"]
    assert m7["metrics_stress_sample_count"] >= 5 and m7["success_ratio"] == 1.0
    assert m7["scrape_latency_p50_s"] is not None and m7["scrape_latency_p99_s"] is not None
    assert json.loads((case / "MET-007/plan.json").read_text())["target"]["latency"].startswith("curl time_total")
    assert got["MET-008"]["metrics"]["peak_gpu_memory_used_ratio"] > 0.2


def test_metrics_missing_fails_met002(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kube_lab.set_faults(None, metrics_missing=True)  # drops client_info, gpu_utilization_ratio, messages_total
    try:
        proc = run_metrics(lab_inventory, tmp_path, "missing", "MET-002", sets=("met_settle_s=4",))
    finally:
        kube_lab.set_faults(None, metrics_missing=[])
    got = results(tmp_path, "missing")["MET-002"]
    assert got["status"] == "FAIL", got["summary"]
    assert "xpushare_client_info" in got["metrics"]["missing_metrics"]
    assert "xpushare_scheduler_messages_total" in got["metrics"]["missing_metrics"]
    assert proc.returncode == 1


def test_scheduler_down_fails_met001(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kube_lab.set_faults(None, scheduler_down=True)
    try:
        for node in kube_lab.nodes:
            kube_lab.wait_scheduler(node, up=False, timeout_s=10)
        proc = run_metrics(lab_inventory, tmp_path, "down", "MET-001")
    finally:
        kube_lab.set_faults(None, scheduler_down=False)
        kubectl = kubectl_for(kube_lab)
        names = kube_lab.names
        for pod in kubectl.list_pods(names.scheduler_label, namespace=names.namespace):  # skip the back-off
            kubectl.delete(name=pod.name, namespace=names.namespace, timeout_s=20)
        for node in kube_lab.nodes:
            kube_lab.wait_scheduler(node, up=True, timeout_s=30)
    got = results(tmp_path, "down")["MET-001"]
    assert got["status"] in ("FAIL", "ERROR"), got["summary"]
    assert proc.returncode == 1
