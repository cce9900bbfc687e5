"""The lab's verdicts do not depend on the machine's load: the concurrency and quota-precision cases on a machine
busy with other work give the verdicts the idle lab gives.

On the lab the "GPU" advances only while a client submits kernels, so a client starved of CPU measures the
machine's load, not the SUT's quota. Measured on a 2-core machine with two CPU-bound processes beside the lab
(tests/lab/cpu_load.py) and the lab's pods at the default priority: PERF-011 FAIL q25 +8.5 % .. +9.2 % (the
seed's ±8 %) and PERF-003 FAIL q50 +9.2 %, where the idle lab gave PASS (errors within ±1.5 %). With the lab's pod
processes above the machine's other work (``POD_NICE`` -10 in tests/lab/kubelet.py, as a GPU node gives its pods
cores of their own), the same load gave PASS: PERF-003 q25 -2.3 %, q50 -0.2 %, q75 +2.0 %; PERF-011 q25 +4.5 %,
q50 +1.4 %, q75 -0.6 %. No lab tolerance is widened: the seed's ±8 % holds under load.

The module runs its cases while two processes spin on the cores for the whole run. Under pytest-xdist it runs last,
alone (``cpu_exclusive``, tests/cpu_share.py): the load is the two spinners the figures above were measured
with, not whatever the other workers' labs happen to run beside it (their pods run at the same raised priority as
this lab's, so with three or more workers the load had no bound and PERF-011 went past ±8 %).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.lab.cpu_load import busy_cpus
from tests.lab.env import LAB_OPTIONS
from tests.lab.kubelab import inventory_fixture, kube_lab_fixture
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT
#: The cases whose verdicts rest on concurrency (FUNC-002) and on runtime ratios (PERF-011, quota precision), as
#: on the idle lab. PERF-003 is not run here: on the lab it is the same quota ladder (``quota_ladder`` of
#: xpushare/cases/performance.py) with the same workload (W6) as PERF-011, judged on the same runtime ratios, so
#: under the load its verdict would repeat PERF-011's measurement; this test runs alone at the end of the suite,
#: where each of its seconds is a second of CI (43 s a ladder). PERF-003's whole ladder is judged on the
#: unmodified build in the healthy test of tests/e2e/test_k8s_performance.py.
CASES = ("FUNC-002", "PERF-011")
#: The ladder at its smallest step only: the load weighs most there (a client handed the lock while descheduled
#: starts its launches late, a larger part of a 25 % share than of a 75 % one: q25 +4.5 % above, the largest
#: error). Every step is judged without the spinners in tests/e2e/test_k8s_performance.py.
QUOTA_SETS = ("perf011_quotas=[25]",)

kube_lab = kube_lab_fixture("load-kube", **LAB_OPTIONS)
inventory = inventory_fixture("load-inv")


@pytest.mark.cpu_exclusive
def test_quota_verdicts_hold_while_the_machine_is_busy(inventory: Path, tmp_path: Path) -> None:
    with busy_cpus(2):
        proc = run_tool(
            [sys.executable, "-m", "invoke", "matrix", "--cluster", "lab", "--inventory", str(inventory),
             "--run-id", "loaded", "--root", str(tmp_path), *(a for c in CASES for a in ("--case", c)),
             *(a for q in QUOTA_SETS for a in ("--set", q))], cwd=ROOT, timeout=1200)
    base = tmp_path / ".tmplog" / "loaded" / "xpushare" / "lab"
    got = {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/*/result.json")}
    detail = "\n".join(f"{k}: {v['status']} {v['summary']}" for k, v in sorted(got.items()))
    assert {k: v["status"] for k, v in got.items()} == dict.fromkeys(CASES, "PASS"), \
        detail + "\n" + proc.stdout[-2000:] + proc.stderr[-2000:]
    # the largest quota error against the seed's ±8 %
    assert got["PERF-011"]["metrics"]["max_abs_error"] <= 0.08, got["PERF-011"]["metrics"]["ratios"]
