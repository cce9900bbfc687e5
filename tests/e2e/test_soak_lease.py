"""A soak holds its cluster's lease for its whole life (host-mode lab: real SSH, the real SUT, the lock file on the
first GPU host): an ``invoke func`` started during the soak is refused with one line naming the soak's run (exit 2,
nothing written), a ``func --wait`` waits and runs once the soak has released the cluster, and both
PASS (STAB-002, FUNC-001).

Broken: a soak run without the lease (the run's ``lease.held_all`` left out for it) lets that ``func`` start (exit 0
instead of 2) beside the soak, whose workloads its run-start cleanup removes; the test then fails at the refusal.
About 35 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT

#: A lab-sized STAB-002 (tests/e2e/test_host_stability.py's values) on one simulated GPU; the lease renewed every
#: second so that a waiting run polls it every second.
PARAMS: dict[str, Any] = {
    "workload_args": {
        "w2_medium_add": ["--n", "512", "--iters", "300", "--no-progress"],
        "w3_idle_add": ["--n", "512", "--steps", "8", "--sleep-s", "0.1", "--no-progress"],
        "w5_quota_probe": ["--n", "1024", "--interval-s", "0.5", "--no-progress"],
    },
    "pod_timeout_s": 120, "sample_interval_s": 1, "soak_poll_s": 1, "progress_s": 5, "checkpoint_s": 3,
    "interim_report_s": 15, "log_rotate_s": 10, "settle_s": 10, "backoff_max_s": 3, "round_timeout_s": 60,
    "stop_grace_s": 10, "soak_plots": False, "trend_min_samples": 4, "stab002_pods_small": 1,
    "stab002_pods_large": 2, "lease_renew_s": 1, "lease_stale_s": 60,
}


def invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


def run_meta(root: Path, run_id: str) -> dict[str, Any]:
    return json.loads((root / ".tmplog" / run_id / "xpushare" / "run.json").read_text())


def test_a_func_run_during_a_soak_is_refused_or_waits(tmp_path: Path) -> None:
    require_lab("host-mode lab", unavailable_reason())
    with HostLab(tmp_path / "lab", nodes=("sl-node1",), gpus=1, base_address="127.0.94.1") as lab:
        data = lab.inventory(params=PARAMS)
        lease_file = Path(data["clusters"][CLUSTER]["params"]["lease_path"])
        inv = tmp_path / "inventory.yaml"
        inv.write_text(yaml.safe_dump(data, sort_keys=False))
        common = ("--cluster", CLUSTER, "--inventory", str(inv), "--root", str(tmp_path))
        soak = subprocess.Popen(invoke("soak", *common, "--run-id", "soak", "--case", "STAB-002", "--minutes", "0.4"),
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waited: subprocess.Popen[str] | None = None
        try:
            deadline = time.monotonic() + 120
            while not (tmp_path / ".tmplog" / "soak" / "xpushare" / "run.json").exists():
                assert soak.poll() is None and time.monotonic() < deadline, "the soak never started"
                time.sleep(0.5)

            refused = subprocess.run(invoke("func", *common, "--run-id", "func", "--case", "FUNC-009"), cwd=ROOT,
                                     capture_output=True, text=True, timeout=120)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1 and f"cluster {CLUSTER} is in use by run soak" in lines[0], refused.stderr
            assert not (tmp_path / ".tmplog" / "func").exists()  # refused before anything was written
            assert json.loads(lease_file.read_text())["run_id"] == "soak"

            waited = subprocess.Popen(invoke("func", *common, "--run-id", "waited", "--case", "FUNC-001", "--wait"),
                                      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            soak_out, soak_err = soak.communicate(timeout=300)
            waited_out, waited_err = waited.communicate(timeout=300)
        finally:
            for proc in (soak, waited):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert soak.returncode == 0, soak_out[-3000:] + soak_err[-2000:]
        assert waited.returncode == 0, waited_out[-3000:] + waited_err[-2000:]
        assert f"cluster {CLUSTER} is in use by run soak" in waited_out and "waiting for it (--wait)" in waited_out
        soak_meta, waited_meta = run_meta(tmp_path, "soak"), run_meta(tmp_path, "waited")
        assert waited_meta["started"] >= soak_meta["ended"], (soak_meta, waited_meta)  # never both on the cluster
        result = json.loads((tmp_path / ".tmplog" / "soak" / "xpushare" / CLUSTER / "stability" / "STAB-002"
                             / "result.json").read_text())
        assert result["status"] == "PASS", result["summary"]
        waited_result = json.loads((tmp_path / ".tmplog" / "waited" / "xpushare" / CLUSTER / "functional" / "FUNC-001"
                                    / "result.json").read_text())
        assert waited_result["status"] == "PASS", waited_result["summary"]
        assert not lease_file.exists(), "the lease was not released"
