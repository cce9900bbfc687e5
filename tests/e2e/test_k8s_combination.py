"""COMBO suite end to end in Kubernetes mode: real SSH to the lab hosts, real kubectl, the lab cluster running
the real SUT (the upstream scheduler and client library on simulated GPUs, tests/lab/README-kube.md).

`invoke combo --cluster lab` on a healthy lab: COMBO-002/003 and 005..008 PASS, and COMBO-001 FAILs on one
check only, ``quota_held``: the real library let a 1 GiB chunk through a 32 MiB quota because the limit reaches it
after registration (docs/findings.md #13); the rest of COMBO-001 (refused by the quota, applied by the scheduler,
its memory probe held at the quota) holds. COMBO-004 FAILs on ``change1_usable``/``change2_usable`` only: its
memory probe cannot use a raised quota past the first one (#18). A broken lab turns exactly the right cases to FAIL:

* ``annotations_denied`` (the API server answers the scheduler's pod reads with 403): the initial quotas are
  never read: COMBO-001 (oversubscription lets the allocation through) and COMBO-003 (no initial limits);
* mutant ``annotations-never-reread`` (annotations read only at REGISTER): COMBO-004's changes never arrive;
* mutant ``quota-metrics-missing`` (the per-client quota families not written): COMBO-003 (the bash harness
  passed it).

Lab-sized parameters (the ``lab`` cluster's, :func:`tests.lab.env.lab_params`), measured on the lab
(1e12 FLOP/s, 100e9 B/s per simulated GPU, 500 ms quota windows, the SUT's minimum):

* dynamic changes: the real watcher polls every 5 s (two pod GETs per client, about 50 ms each on the lab),
  so a change reached the scheduler 0.3-4.9 s after its annotate call (three runs); 4 s steps lost changes
  (COMBO-005's first one was overtaken by the second) and took COMBO-004's end snapshot before its last
  change; steps of 8 s hold every change for at least 3 probe lines, and W5 runs 8 x (changes + 2) + 1 s
  (49 s for COMBO-004, 41 s for COMBO-005/006);
* probes every 1 s: the largest gap seen was 1.0 s at a 30 % quota, so the stall bound is 3 s (the seed's
  30 s for a 10 s interval, scaled);
* W2 (n 2048, 4000 iterations) is 2.0 s of GPU time: 2.6 s at 80 %, 2.7-3.1 s at 70 %, 5.0 s at 40 %,
  6.9-7.4 s at 30 % (COMBO-002's 30/70 ratio 2.75); W3 (n 1024, 50 steps, 0.1 s sleep) 8.2 s at 60 %; W5 at
  n 1024 (16 MiB) for 8 s (COMBO-007) and 12 s (COMBO-008), so every pod of a case still runs when
  ``metrics_mid`` is scraped; COMBO-006's W5 did 1900 / 5300 / 2600 / 7400 it/s at 30 / 80 / 40 / 100 %;
* memory quotas on the lab's 1600 MiB GPU (64 MiB allocatable without a limit): 32 MiB for COMBO-001 (the
  oversubscription workload asks for 1.5 x 1600 MiB in 1 GiB chunks), otherwise fractions of the card that
  the workloads fit in (256-1024 MiB, the seed's ratios).

Durations on 2 shared cores: the healthy suite 189 s, the broken-lab tests 10 s (denied), 55 s (never
reread) and 15 s (quota metrics); the module 4.5 minutes with the lab's start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster
from tests.lab.env import LAB_OPTIONS
from tests.lab.kubelab import inventory_fixture, kube_lab_fixture
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT
CASES = [f"COMBO-00{i}" for i in range(1, 9)]
MIB = 2**20
kube_lab = kube_lab_fixture("combo-kube", **LAB_OPTIONS)


lab_inventory = inventory_fixture("combo-inv")


def run_combo(
    inventory: Path, root: Path, run_id: str, *cases: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    args = [a for c in cases for a in ("--case", c)]
    return run_tool(
        [sys.executable, "-m", "invoke", "combo", "--cluster", "lab", "--inventory", str(inventory),
         "--run-id", run_id, "--root", str(root), *args],
        cwd=ROOT, timeout=timeout,
    )


def results(root: Path, run_id: str) -> dict[str, dict]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "combination"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


def verdict(got: dict[str, dict], case: str, proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """(status, summary) of one case; a missing result fails with the task's output."""
    assert case in got, f"no result for {case} (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return got[case]["status"], got[case]["summary"]


def failed_checks(result: dict) -> list[str]:
    return [c["name"] for c in result["checks"] if c["ok"] is False]


def test_healthy_lab_combination_suite(lab_inventory: Path, tmp_path: Path) -> None:
    proc = run_combo(lab_inventory, tmp_path, "healthy", timeout=1200)
    got = results(tmp_path, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    detail = json.dumps({k: v["summary"] for k, v in got.items()}, indent=1) + proc.stdout[-2000:] + proc.stderr[-2000:]
    # findings.md #13: the memory quota arrives after SCHED_ON, so a first chunk allocated before it is never checked
    # (a race: COMBO-001 FAILs when the chunk wins it, PASSes when the quota does); #18: COMBO-004's memory probe
    # cannot use a raised quota past the first one (no oversubscription)
    assert statuses == {**dict.fromkeys(CASES, "PASS"), "COMBO-001": statuses.get("COMBO-001"),
                        "COMBO-004": "FAIL"}, detail
    assert statuses["COMBO-001"] in ("FAIL", "PASS"), detail
    assert proc.returncode == 1
    case = tmp_path / ".tmplog/healthy/xpushare/lab/combination"
    # COMBO-001: refused by the quota (the library's line names it), not by the physical limit; what fails, when it
    # fails, is only that a whole 1 GiB chunk went through before the quota reached the client.
    combo1 = got["COMBO-001"]
    assert combo1["metrics"]["rejection_limit_bytes"] == 32 * MIB
    if combo1["status"] == "FAIL":
        assert failed_checks(combo1) == ["quota_held"], combo1["summary"]
        assert combo1["metrics"]["held_bytes_at_rejection"] == 1024 * MIB
    else:
        assert failed_checks(combo1) == [], combo1["summary"]
    # COMBO-002: the 70 % pod finished faster than the 30 % pod on the same simulated GPU.
    assert got["COMBO-002"]["metrics"]["ratio"] > 1.5, got["COMBO-002"]["metrics"]
    # COMBO-003/007/008 read the quota series per pod from the captures taken while the pods ran.
    for cid in ("COMBO-003", "COMBO-007", "COMBO-008"):
        plan = json.loads((case / cid / "plan.json").read_text())
        assert plan["metrics_mid"] and all((case / cid / f).is_file() for f in plan["metrics_mid"]), cid
    # COMBO-004: four changes, both kinds, each seen by the scheduler within one 5 s watcher poll (+ its GETs); what
    # fails is only the raised memory quota's use (finding 18)
    assert failed_checks(got["COMBO-004"]) == ["change1_usable", "change2_usable"], got["COMBO-004"]["summary"]
    latencies = got["COMBO-004"]["metrics"]["latency_s"]
    assert set(latencies) == {"512Mi", "80", "384Mi", "50"} and all(0 <= v <= 8 for v in latencies.values())
    assert (case / "COMBO-004" / "metrics_end.txt").is_file()
    # COMBO-006: throughput followed 30 -> 80 -> 40 -> 100 %.
    tp = got["COMBO-006"]["metrics"]["throughput_it_s"]
    assert tp[0] < tp[1] > tp[2] < tp[3], tp
    # COMBO-008: spread over GPUs of both lab nodes, counted from the registration lines.
    assert got["COMBO-008"]["metrics"]["distinct_gpus"] >= 2
    assert "GPU-lab-" in (case / "COMBO-008" / "gpu_mapping.txt").read_text()


def test_denied_annotations_fail_the_initial_quota_cases(lab_inventory: Path, kube_lab: LabCluster,
                                                         tmp_path: Path) -> None:
    """The scheduler cannot read any annotation: no memory quota, no core limits at registration."""
    kube_lab.set_faults(None, annotations_denied=True)
    try:
        proc = run_combo(lab_inventory, tmp_path, "denied", "COMBO-001", "COMBO-003")
    finally:
        kube_lab.set_faults(None, annotations_denied=False)
    got = results(tmp_path, "denied")
    status, summary = verdict(got, "COMBO-001", proc)
    assert status == "FAIL" and "allocation_rejected" in summary and "quota_applied_by_scheduler" in summary, summary
    status, summary = verdict(got, "COMBO-003", proc)
    assert status == "FAIL" and "initial_limits_logged" in summary, summary
    assert proc.returncode == 1


def test_annotations_never_reread_fail_the_dynamic_case(lab_inventory: Path, kube_lab: LabCluster,
                                                        tmp_path: Path) -> None:
    """Mutant: the watcher skips registered clients, so only the quotas read at REGISTER ever apply."""
    with kube_lab.running_mutant("annotations-never-reread"):
        proc = run_combo(lab_inventory, tmp_path, "noreread", "COMBO-004")
    got = results(tmp_path, "noreread")
    status, summary = verdict(got, "COMBO-004", proc)
    assert status == "FAIL" and "memory_change_logged[512Mi]" in summary, summary
    assert "compute_change_logged[80]" in failed_checks(got["COMBO-004"])
    # The initial quotas were read at REGISTER: the start snapshot still matches.
    assert not [c for c in failed_checks(got["COMBO-004"]) if c.startswith("metrics_start")]
    assert proc.returncode == 1


def test_missing_quota_metrics_fail_combo003(lab_inventory: Path, kube_lab: LabCluster, tmp_path: Path) -> None:
    """Mutant: the exporter drops the per-client quota families (quotas still apply)."""
    with kube_lab.running_mutant("quota-metrics-missing"):
        proc = run_combo(lab_inventory, tmp_path, "nomet", "COMBO-003")
    got = results(tmp_path, "nomet")
    status, summary = verdict(got, "COMBO-003", proc)
    assert status == "FAIL" and "no client_memory_quota_bytes series" in summary, summary
    # Only the metrics are missing: the pods passed and the scheduler applied the initial limits.
    assert all(c.startswith("quota_metrics[") for c in failed_checks(got["COMBO-003"])), summary
    assert proc.returncode == 1
