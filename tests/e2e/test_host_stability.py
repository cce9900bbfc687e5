"""Stability, leak, fault and soak in host mode, over real SSH against the real SUT deployed by ``invoke deploy``.

The host-mode lab (:mod:`tests.lab.hostlab`) starts one GPU host (one simulated GPU) with no scheduler;
``invoke deploy`` builds and installs the SUT there and runs the scheduler under deploy's supervisor (a shell
loop that restarts it within a second). The inventory names the installed binary as ``scheduler.process_name``,
so the host backend has ``scheduler-process``: it follows that process's ``/proc`` figures and ``/metrics``.

* healthy: ``invoke stab --case STAB-001`` (no core limit in host mode, noted in plan.json), ``invoke leak``
  (LEAK-001..005) and ``invoke fail --allow-disruptive --case FAIL-001`` (kill -TERM the scheduler under
  load; the supervisor's new process answers /healthz) PASS; STAB-003/004 SKIP (annotations);
* ``invoke soak --cluster hostlab --case STAB-002`` (lab-sized: 20 s): PASS with the soak's checkpoint, time
  series and report;
* broken system: the host's scheduler from the ``leak-per-registration`` mutant (4 MiB and one eventfd per
  REGISTER, never freed; started by the lab, not supervised): LEAK-001 and LEAK-002 FAIL; FAIL-001 against this
  unsupervised scheduler FAILs and says that nothing restarted it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from tests.lab.mutants import build_mutant
from tests.lab.sut import default_source
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT

#: Lab-sized stability parameters (the seed's hours as seconds; tests/lab/env.py's k8s values) for one simulated
#: GPU: W4 of 20 x 2 MiB, W2 of 500 adds (about 1 s), W5 for fail_load_s.
PARAMS: dict[str, Any] = {
    "workload_args": {
        "w2_medium_add": ["--n", "512", "--iters", "300", "--no-progress"],
        "w3_idle_add": ["--n", "512", "--steps", "8", "--sleep-s", "0.1", "--no-progress"],
        "w4_alloc_free": ["--rounds", "20", "--mib", "2", "--no-progress"],
        "w5_quota_probe": ["--n", "1024", "--interval-s", "0.5", "--no-progress"],
    },
    "pod_timeout_s": 120,
    "sample_interval_s": 1, "soak_poll_s": 1, "progress_s": 5, "checkpoint_s": 3, "interim_report_s": 15,
    "log_rotate_s": 10, "settle_s": 10, "backoff_max_s": 3, "round_timeout_s": 60, "stop_grace_s": 10,
    "soak_plots": False, "trend_min_samples": 4,
    "stab_duration_s": 8, "stab001_pods": 2, "stab002_pods_small": 1, "stab002_pods_large": 2,
    "leak_rounds": 3, "leak003_pods": 2, "leak_churn_rounds": 2, "leak_pods": 2,
    "fail_pods": 1, "fail_load_s": 8, "fail_pre_fault_s": 2, "fail_restart_timeout_s": 20,
    "fail_recovery_max_s": 20, "fail_pending_max_s": 60,
}
LEAKS = [f"LEAK-00{i}" for i in range(1, 6)]


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=timeout)


def verdicts(root: Path, *run_ids: str) -> dict[str, dict[str, Any]]:
    """``case -> result.json`` of the stability cases of these runs."""
    got = {}
    for run_id in run_ids:
        base = root / ".tmplog" / run_id / "xpushare" / CLUSTER / "stability"
        got.update({p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")})
    return got


def test_host_stability_healthy_then_broken(tmp_path: Path) -> None:
    require_lab("host-mode lab", unavailable_reason())
    with HostLab(tmp_path / "lab", nodes=("hs-node1",), gpus=1, base_address="127.0.76.1",
                 start_schedulers=False) as lab:
        data = lab.deploy_inventory(params=PARAMS)
        sched = data["clusters"][CLUSTER]["scheduler"]
        sched["process_name"] = sched["binary"]
        inv = tmp_path / "inventory.yaml"
        inv.write_text(yaml.safe_dump(data, sort_keys=False))
        common = ("--cluster", CLUSTER, "--inventory", str(inv), "--root", str(tmp_path))
        deployed = invoke("deploy", "--cluster", CLUSTER, "--inventory", str(inv), "--sut-src", str(default_source()))
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr

        # healthy, supervised scheduler
        stab = invoke("stab", *common, "--run-id", "stab")
        leak = invoke("leak", *common, "--run-id", "leak")
        fail = invoke("fail", *common, "--run-id", "fail", "--allow-disruptive", "--case", "FAIL-001")
        got = verdicts(tmp_path, "stab", "leak", "fail")
        status = {c: r["status"] for c, r in got.items()}
        out = stab.stdout[-1500:] + leak.stdout[-1500:] + fail.stdout[-1500:]
        assert status.get("STAB-001") == "PASS", (status, got.get("STAB-001", {}).get("summary"), out)
        assert all(status.get(c) == "PASS" for c in LEAKS), ({c: got[c]["summary"] for c in got}, out)
        assert status.get("FAIL-001") == "PASS", (got.get("FAIL-001", {}).get("summary"), out)
        assert status.get("STAB-003") == status.get("STAB-004") == "SKIP", status
        def case(run_id: str, case_id: str) -> Path:
            return tmp_path / ".tmplog" / run_id / "xpushare" / CLUSTER / "stability" / case_id

        assert "no annotations" in json.loads((case("stab", "STAB-001") / "plan.json").read_text())["core_limit_note"]
        plan = json.loads((case("fail", "FAIL-001") / "plan.json").read_text())
        assert plan["fault"]["kind"].startswith("kill -TERM scheduler pid") and plan["restored"] is True, plan

        # a short soak, same checkpoints and reports as on Kubernetes
        soak = invoke("soak", *common, "--run-id", "soak", "--case", "STAB-002", "--minutes", "0.35")
        sdir = case("soak", "STAB-002")
        assert soak.returncode == 0, soak.stdout[-3000:] + soak.stderr[-2000:]
        for name in ("checkpoint.json", "samples.csv", "metrics.csv", "schedulers.csv", "soak-report.md"):
            assert (sdir / "soak" / name).exists(), name
        assert json.loads((sdir / "result.json").read_text())["status"] == "PASS"

        # broken: the leaking mutant, started by the lab (no supervisor)
        assert invoke("undeploy", "--cluster", CLUSTER, "--inventory", str(inv)).returncode == 0
        lab.set_sut("hs-node1", build_mutant("leak-per-registration").directory)
        node = lab.nodes["hs-node1"]
        data["clusters"][CLUSTER]["sut_lib"] = str(lab.inventory()["clusters"][CLUSTER]["sut_lib"])
        data["clusters"][CLUSTER]["scheduler"] = {"metrics_url": node.metrics_url, "log_file": str(node.log_file),
                                                 "process_name": str(node.scheduler_path)}
        data["clusters"][CLUSTER]["params"].update(leak_rounds=6, leak_pods=3)
        inv.write_text(yaml.safe_dump(data, sort_keys=False))
        invoke("leak", *common, "--run-id", "broken-leak", "--case", "LEAK-001", "--case", "LEAK-002")
        invoke("fail", *common, "--run-id", "broken-fail", "--allow-disruptive", "--case", "FAIL-001")
        got = verdicts(tmp_path, "broken-leak", "broken-fail")
        for leak in ("LEAK-001", "LEAK-002"):  # the checks' figures, so that a miss says what was sampled
            assert got[leak]["status"] == "FAIL", (got[leak]["summary"], got[leak]["metrics"],
                                                   [(c["name"], c["ok"], c["values"]) for c in got[leak]["checks"]])
        assert got["FAIL-001"]["status"] == "FAIL", got["FAIL-001"]["summary"]
        assert "nothing restarted it" in got["FAIL-001"]["summary"], got["FAIL-001"]["summary"]
