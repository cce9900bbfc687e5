"""COMBO suite end to end in Kubernetes mode: real SSH to the lab hosts, real kubectl, the lab cluster.

`invoke combo --cluster lab` reaches PASS on every COMBO case of a healthy lab; a broken lab turns exactly
the right cases to FAIL: ignored annotations fail COMBO-004 (no change lines) and COMBO-001 (no quota, so
oversubscription lets the allocation through); missing quota metrics fail COMBO-003 (the bash harness
passed it).

Lab-sized parameters (inventory ``params``): a 4 s dynamic step (the lab watcher polls every second), a
32Mi quota for COMBO-001 (the lab's oversubscription workload asks for 1.5 x 64 MiB), short W5 runs for
COMBO-007/008, a probe-gap bound for a 1 s probe interval, short metrics_mid polling. About 4 minutes on
2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster
from tests.lab.env import LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
CASES = [f"COMBO-00{i}" for i in range(1, 9)]
LAB_COMBO_PARAMS = {
    "dynamic_step_s": 4,
    "combo001_memory_limit": "32Mi",
    "metrics_mid_timeout_s": 30,
    "metrics_mid_poll_s": 1,
    "max_probe_gap_s": 8,
    "combo007_w5_duration_s": 6,
    "combo008_w5_duration_s": 8,
}
QUOTA_FAMILIES = [
    "client_memory_quota_bytes",
    "client_core_quota_config_percent",
    "client_core_quota_effective_percent",
]


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "combo-kube", **LAB_OPTIONS)


@pytest.fixture(scope="module")
def lab_inventory(ssh_lab: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("combo-inv") / "inventory.yaml"
    return write_inventory(path, ssh_lab, kube_lab, params=LAB_COMBO_PARAMS)


def run_combo(
    inventory: Path, root: Path, run_id: str, *cases: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    args = [a for c in cases for a in ("--case", c)]
    return subprocess.run(
        [sys.executable, "-m", "invoke", "combo", "--cluster", "lab", "--inventory", str(inventory),
         "--run-id", run_id, "--root", str(root), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )


def results(root: Path, run_id: str) -> dict[str, dict]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "combination"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


def verdict(got: dict[str, dict], case: str, proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """(status, summary) of one case; a missing result fails with the task's output."""
    assert case in got, f"no result for {case} (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return got[case]["status"], got[case]["summary"]


def test_healthy_lab_combination_suite(lab_inventory: Path, tmp_path: Path) -> None:
    proc = run_combo(lab_inventory, tmp_path, "healthy", timeout=900)
    got = results(tmp_path, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    detail = json.dumps({k: v["summary"] for k, v in got.items()}, indent=1) + proc.stdout[-2000:] + proc.stderr[-2000:]
    assert statuses == dict.fromkeys(CASES, "PASS"), detail
    assert proc.returncode == 0
    case = tmp_path / ".tmplog/healthy/xpushare/lab/combination"
    # COMBO-001: refused by the quota (the library's line names it), not by the physical limit.
    assert got["COMBO-001"]["metrics"]["rejection_limit_bytes"] == 32 * 2**20
    # COMBO-003/007/008 read the quota series per pod from the captures taken while the pods ran.
    for cid in ("COMBO-003", "COMBO-007", "COMBO-008"):
        plan = json.loads((case / cid / "plan.json").read_text())
        assert plan["metrics_mid"] and all((case / cid / f).is_file() for f in plan["metrics_mid"]), cid
    # COMBO-004: four changes, both kinds, each seen within 15 s of its annotate call.
    latencies = got["COMBO-004"]["metrics"]["latency_s"]
    assert set(latencies) == {"4Gi", "80", "3Gi", "50"} and all(0 <= v <= 15 for v in latencies.values())
    assert (case / "COMBO-004" / "metrics_end.txt").is_file()
    # COMBO-008: spread over GPUs of both lab nodes, counted from the registration lines.
    assert got["COMBO-008"]["metrics"]["distinct_gpus"] >= 2
    assert "GPU-lab-" in (case / "COMBO-008" / "gpu_mapping.txt").read_text()


def test_ignored_annotations_fail_the_quota_cases(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kube_lab.set_faults(None, ignore_annotations=True)
    try:
        proc = run_combo(lab_inventory, tmp_path, "noann", "COMBO-001", "COMBO-004")
    finally:
        kube_lab.set_faults(None, ignore_annotations=False)
    got = results(tmp_path, "noann")
    status, summary = verdict(got, "COMBO-004", proc)
    assert status == "FAIL" and "memory_change_logged[4Gi]" in summary, summary
    status, summary = verdict(got, "COMBO-001", proc)
    assert status == "FAIL" and "allocation_rejected" in summary, summary
    assert proc.returncode == 1


def test_missing_quota_metrics_fail_combo003(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kube_lab.set_faults(None, metrics_missing=QUOTA_FAMILIES)
    try:
        proc = run_combo(lab_inventory, tmp_path, "nomet", "COMBO-003")
    finally:
        kube_lab.set_faults(None, metrics_missing=False)
    status, summary = verdict(results(tmp_path, "nomet"), "COMBO-003", proc)
    assert status == "FAIL" and "no client_memory_quota_bytes series" in summary, summary
    assert proc.returncode == 1
