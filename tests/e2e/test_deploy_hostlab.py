"""``invoke deploy`` onto a host-mode cluster over real SSH, then the suites against what it installed.

The host-mode lab (:mod:`tests.lab.hostlab`) starts one GPU host with two simulated GPUs and *no* scheduler;
``invoke deploy --cluster hostlab --sut-src <upstream tree>`` copies the source over SFTP, builds it with the
host's gcc/make, installs the library and scheduler under the host's directory (the inventory's ``sut_lib`` and
``scheduler.*``) and starts the scheduler under deploy's supervisor with its metrics on. Then, through that
deployed SUT: ``invoke sut.status`` (healthy), ``invoke func`` FUNC-001/003/006 (FUNC-006 needs the deployed
library to refuse the allocation over its memory quota: PASS proves the preload works), FAIL-005 with the CUDA
error-injection shim deploy built on the host (``<state_dir>/faultshim/libcuda.so.1``, in front of the host's driver,
here the simulated GPU's; the inventory names no injector: the case finds the deployed one), ``invoke sut.restart``
(new pid), ``invoke undeploy`` (gone, the shim with it; ``sut.status`` exits 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from tests.lab.sut import default_source
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=timeout)


def test_deploy_then_func_through_the_deployed_sut_then_undeploy(tmp_path: Path) -> None:
    require_lab("host-mode lab", unavailable_reason())
    w2 = ["--n", "512", "--iters", "300", "--no-progress"]  # about 1 s on the lab's simulated GPU
    with HostLab(tmp_path / "lab", nodes=("hl-deploy",), gpus=2, base_address="127.0.75.1",
                 start_schedulers=False) as lab:
        import yaml

        inv = tmp_path / "inventory.yaml"
        params = {"func003_pods": 4, "func006_memory_limit": "1Mi", "fault_injector": "auto",
                  "workload_args": {"w2_medium_add": w2, "w5_quota_probe": ["--n", "1024", "--no-progress"]},
                  # FAIL-005 lab-sized as in tests/e2e/test_gpu_faults.py
                  "pod_timeout_s": 90, "fail_fault_load_s": 10, "fail_fault_after_s": 4, "fail_settle_s": 2,
                  "fail_rate_margin_s": 1.5, "fail_probe_interval_s": 0.4}
        data = lab.deploy_inventory(params=params)
        sched = data["clusters"][CLUSTER]["scheduler"]
        sched["process_name"] = sched["binary"]  # FAIL-005 follows the scheduler process
        inv.write_text(yaml.safe_dump(data, sort_keys=False))
        common = ("--cluster", CLUSTER, "--inventory", str(inv))
        deployed = invoke("deploy", *common, "--sut-src", str(default_source()))
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "built and installed; started (process)" in deployed.stdout
        shim = Path(sched["state_dir"]) / "faultshim" / "libcuda.so.1"
        assert f"fault shim at {shim}" in deployed.stdout, deployed.stdout

        status = invoke("sut.status", *common)
        assert status.returncode == 0 and "/healthz 200" in status.stdout, status.stdout + status.stderr
        first_pid = status.stdout.split("pid ")[1].split(",")[0]

        func = invoke("func", *common, "--run-id", "deployed", "--root", str(tmp_path), "--case", "FUNC-001",
                      "--case", "FUNC-003", "--case", "FUNC-006")
        run = tmp_path / ".tmplog" / "deployed" / "xpushare" / CLUSTER / "functional"
        verdicts = {c: json.loads((run / c / "result.json").read_text())["status"]
                    for c in ("FUNC-001", "FUNC-003", "FUNC-006")}
        assert verdicts == dict.fromkeys(verdicts, "PASS"), (verdicts, func.stdout[-2000:])
        # the deployed scheduler registered the workloads (its log is the one the inventory names)
        assert "Registered client" in (run / "FUNC-003" / "scheduler.log").read_text()

        fail = invoke("fail", *common, "--run-id", "shim", "--root", str(tmp_path), "--case", "FAIL-005",
                      "--allow-disruptive")
        case = tmp_path / ".tmplog" / "shim" / "xpushare" / CLUSTER / "stability" / "FAIL-005"
        got = json.loads((case / "result.json").read_text())
        assert got["status"] == "PASS", (got["summary"], fail.stdout[-2000:])
        plan = json.loads((case / "plan.json").read_text())
        assert plan["injector"] == {"via": "faultshim", "shim": str(shim), "source": f"invoke deploy ({shim})"}
        assert "[FAULTSHIM] injected illegal-address" in (case / "pods" / "fail-005-victim-1.log").read_text()

        restarted = invoke("sut.restart", *common)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert f"pid {first_pid}," not in restarted.stdout

        removed = invoke("undeploy", *common)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        gone = invoke("sut.status", *common)
        assert gone.returncode == 1 and "not running" in gone.stdout, gone.stdout
        assert not shim.exists()
