"""Kubernetes mode end to end: real SSH to the lab hosts, real kubectl on the lab master, the lab cluster.

The lab runs the real scheduler and client library on simulated GPUs. `invoke func --cluster lab` reaches
the expected verdicts on the healthy build, each run in a namespace of its own (removed at its end), two tenants
in two more (FUNC-013); a broken one turns exactly the right cases to FAIL: the mutants
`annotations-never-reread` (dynamic changes lost), `no-core-enforcement` (core quota ignored) and
`annotations-default-namespace` (annotations read from namespace `default`), and the real scheduler killed
(`scheduler_down`). About 4 minutes on 2 cores.
"""

from __future__ import annotations

import json
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
    yield from started_kube_lab(tmp_path_factory, "e2e-kube", **LAB_OPTIONS)


@pytest.fixture
def lab_kubectl_for(kube_lab: LabCluster) -> Kubectl:
    return Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                   context="lab", namespace="default", request_timeout_s=30)


@pytest.fixture(scope="module")
def lab_inventory(ssh_lab: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_inventory(tmp_path_factory.mktemp("e2e-inv") / "inventory.yaml", ssh_lab, kube_lab)


def run_func(
    inventory: Path, root: Path, run_id: str, *cases: str, timeout: float = 900
) -> subprocess.CompletedProcess:
    args = [a for c in cases for a in ("--case", c)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "func",
            "--cluster",
            "lab",
            "--inventory",
            str(inventory),
            "--run-id",
            run_id,
            "--root",
            str(root),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def results(root: Path, run_id: str) -> dict[str, dict]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "functional"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


#: Healthy-lab cases: placement, quota rejection and dynamic changes.
CI_CASES = ("FUNC-001", "FUNC-002", "FUNC-004", "FUNC-006", "FUNC-007", "FUNC-010", "FUNC-012", "FUNC-013")
#: What the unmodified SUT gets on them: FUNC-010 FAILs on a defect of the SUT (docs/findings.md 18: a raised
#: memory quota cannot be used past the first one); tests/e2e/test_k8s_isolation.py has the details.
CI_EXPECTED = {**dict.fromkeys(CI_CASES, "PASS"), "FUNC-010": "FAIL"}
#: Cases judged on runtime ratios of duty-cycled processes or on many pods.
TIMING_CASES = ("FUNC-003", "FUNC-005", "FUNC-008", "FUNC-009", "FUNC-011")


def test_healthy_lab_functional_cases(lab_inventory: Path, lab_kubectl_for: Kubectl, tmp_path: Path) -> None:
    proc = run_func(lab_inventory, tmp_path, "healthy", *CI_CASES)
    got = results(tmp_path, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    assert statuses == CI_EXPECTED, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert got["FUNC-010"]["summary"].startswith("change1_usable:"), got["FUNC-010"]["summary"]
    assert proc.returncode == 1  # the finding's FAIL
    assert got["FUNC-002"]["kubectl_calls"] > 0
    case = tmp_path / ".tmplog/healthy/xpushare/lab/functional/FUNC-012"
    for name in ("scheduler.log", "metrics.txt", "metrics_health.txt", "scheduler_proc.txt", "cluster_snapshot.txt",
                 "device-plugin.log", "gpu_mapping.txt", "annotations.jsonl"):
        assert (case / name).is_file(), name
    assert "HTTP_CODE=200" in (case / "metrics_health.txt").read_text()
    latencies = got["FUNC-012"]["metrics"]["latency_s"]
    assert set(latencies) == {"80", "100"} and all(0 <= v <= 15 for v in latencies.values())
    mapping = (tmp_path / ".tmplog/healthy/xpushare/lab/functional/FUNC-002/gpu_mapping.txt").read_text()
    assert "GPU-lab-" in mapping
    # the run's pods lived in its own namespace; two tenants' same-named pods in two more; all of them gone now
    pods = json.loads((case / "pods.json").read_text())
    assert {p["namespace"] for p in pods} == {"xpushare-healthy"}
    tenants = got["FUNC-013"]["metrics"]["tenants"]
    assert {t["namespace"] for t in tenants.values()} == {"xpushare-healthy-a", "xpushare-healthy-b"}
    assert len({t["pod"] for t in tenants.values()}) == 1
    left = lab_kubectl_for.get_json(["get", "namespaces"], namespace=None)["items"]
    assert not [n["metadata"]["name"] for n in left if n["metadata"]["name"].startswith("xpushare-healthy")]


def test_healthy_lab_timing_cases(lab_inventory: Path, tmp_path: Path) -> None:
    proc = run_func(lab_inventory, tmp_path, "timing", *TIMING_CASES, timeout=1800)
    got = results(tmp_path, "timing")
    statuses = {k: v["status"] for k, v in got.items()}
    assert statuses == dict.fromkeys(TIMING_CASES, "PASS"), proc.stdout[-3000:] + proc.stderr[-2000:]
    runtimes = got["FUNC-008"]["metrics"]["runtime_s"]
    assert runtimes["25"] > runtimes["50"] > runtimes["75"]
    assert all(abs(e) < 0.5 for e in got["FUNC-008"]["metrics"]["error_vs_ideal"].values())  # quotas, not noise


def test_annotations_never_reread_fail_the_dynamic_cases(lab_inventory: Path, kube_lab: LabCluster,
                                                         tmp_path: Path) -> None:
    """A scheduler that reads annotations at REGISTER only: the initial quotas hold, changes are lost."""
    with kube_lab.running_mutant("annotations-never-reread"):
        proc = run_func(lab_inventory, tmp_path, "noann", "FUNC-010", "FUNC-012")
    got = results(tmp_path, "noann")
    assert got["FUNC-010"]["status"] == "FAIL" and "memory_change_logged" in got["FUNC-010"]["summary"]
    assert got["FUNC-012"]["status"] == "FAIL" and "compute_change_logged" in got["FUNC-012"]["summary"]
    assert proc.returncode == 1


def test_annotations_from_the_default_namespace_fail_the_tenants(lab_inventory: Path, kube_lab: LabCluster,
                                                                 tmp_path: Path) -> None:
    """A scheduler that reads every pod's annotations from namespace `default`: in namespaces of their own, the
    tenants' quotas never arrive (the unmodified build PASSes FUNC-013 in the healthy run above)."""
    with kube_lab.running_mutant("annotations-default-namespace"):
        proc = run_func(lab_inventory, tmp_path, "wrongns", "FUNC-013")
    got = results(tmp_path, "wrongns")["FUNC-013"]
    assert got["status"] == "FAIL", proc.stdout[-3000:] + proc.stderr[-2000:]
    # neither tenant's pod got its quota (the library without one refused early on the lab's simulated GPU)
    assert "quota_applied[a]" in got["summary"] and "quota_applied[b]" in got["summary"], got["summary"]


def test_quota_not_enforced_fails_static_compute(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    with kube_lab.running_mutant("no-core-enforcement"):
        run_func(lab_inventory, tmp_path, "noenf", "FUNC-008")
    got = results(tmp_path, "noenf")
    assert got["FUNC-008"]["status"] == "FAIL", got["FUNC-008"]["summary"]


def test_scheduler_down_fails_oversub_case(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    kube_lab.set_faults(None, scheduler_down=True)
    try:
        run_func(lab_inventory, tmp_path, "down", "FUNC-005")
    finally:
        kube_lab.set_faults(None, scheduler_down=False)  # returns once every scheduler answers again
    got = results(tmp_path, "down")
    # Without a scheduler the oversubscribed pod fails (and, where no other lab runs on the machine, the
    # scheduler liveness check fails too: process lookup on a node matches any lab scheduler here).
    summary = got["FUNC-005"]["summary"]
    assert got["FUNC-005"]["status"] == "FAIL", summary
    assert "scheduler_alive" in summary or "pods_succeeded" in summary


def test_packing_device_plugin_fails_the_spread_case(lab_inventory: Path, kube_lab: LabCluster,
                                                     lab_kubectl_for: Kubectl, tmp_path: Path) -> None:
    """One schedulable node with two GPUs and a device plugin that packs: FUNC-003 sees every pod on one GPU."""
    lab_kubectl_for.cordon("lab-node2")
    kube_lab.set_faults(None, pack_one_gpu=True)
    try:
        run_func(lab_inventory, tmp_path, "packed", "FUNC-003")
    finally:
        kube_lab.set_faults(None, pack_one_gpu=False)
        lab_kubectl_for.uncordon("lab-node2")
    got = results(tmp_path, "packed")["FUNC-003"]
    assert got["status"] == "FAIL" and "spread_over_gpus" in got["summary"], got["summary"]


def test_lab_run_writes_events_and_debug_log(lab_inventory: Path, tmp_path: Path) -> None:
    """A suite run over SSH and kubectl: ``events.jsonl`` has a start and an end per case matching the stored
    verdicts, the pods' phases, and ``debug.log`` the SSH command lines (kubectl among them)."""
    from xpushare.evidence import events

    proc = run_func(lab_inventory, tmp_path, "observed", "FUNC-001", "FUNC-006")
    run_dir = tmp_path / ".tmplog" / "observed" / "xpushare"
    got = events.read(run_dir)
    stored = results(tmp_path, "observed")
    assert set(stored) == {"FUNC-001", "FUNC-006"}, proc.stdout[-3000:] + proc.stderr[-2000:]
    for case, record in stored.items():
        assert [e["case_id"] for e in got if e["event"] == "case_started"].count(case) == 1
        [ended] = [e for e in got if e["event"] == "case_ended" and e["case_id"] == case]
        assert ended["status"] == record["status"], case
    assert {e["case_id"] for e in got if e["event"] == "pod_phase"} == {"FUNC-001", "FUNC-006"}
    assert got[-1]["event"] == "run_ended" and got[-1]["exit_status"] == proc.returncode
    log = (run_dir / "debug.log").read_text()
    assert any("lab-master$ " in line and "kubectl" in line for line in log.splitlines() if "xpushare.commands" in line)
    assert " -> exit 0 in " in log and "paramiko" in log  # the SSH library's records land here, not on stderr
    assert "paramiko" not in proc.stderr


def test_lab_and_local_in_one_run(lab_inventory: Path, tmp_path: Path) -> None:
    """``--cluster lab,local``: both clusters run concurrently into one run directory and one report; ``local``
    (host mode, no client library, no annotations) SKIPs what the lab PASSes, and the run's verdict covers both."""
    proc = run_tool(
        [sys.executable, "-m", "invoke", "func", "--cluster", "lab,local", "--inventory", str(lab_inventory),
         "--run-id", "both", "--root", str(tmp_path), "--case", "FUNC-004", "--case", "FUNC-011"],
        cwd=ROOT, timeout=900,
    )
    rd = tmp_path / ".tmplog" / "both" / "xpushare"
    got = {(p.parts[-4], p.parent.name): json.loads(p.read_text())["status"] for p in rd.glob("*/*/*/result.json")}
    assert got == {("lab", "FUNC-004"): "PASS", ("lab", "FUNC-011"): "PASS", ("local", "FUNC-004"): "SKIP",
                   ("local", "FUNC-011"): "SKIP"}, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0
    assert json.loads((rd / "run.json").read_text())["clusters"] == ["lab", "local"]
    junit = (rd / "junit.xml").read_text()
    assert 'name="lab.functional"' in junit and 'name="local.functional"' in junit
    rows = (rd / "case-summary.tsv").read_text().splitlines()[1:]
    assert sorted(r.split("\t")[0] for r in rows) == ["lab", "lab", "local", "local"]
    assert "release_ready: **NO**" in (rd / "run-report.md").read_text()  # local's SKIPs of required cases
    events = [json.loads(line) for line in (rd / "events.jsonl").read_text().splitlines()]
    assert {e["cluster"] for e in events if e["event"] == "case_ended"} == {"lab", "local"}
