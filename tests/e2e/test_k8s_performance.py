"""Performance suite end to end on the lab: real SSH, real kubectl, the real SUT on simulated GPUs.

The lab runs the upstream scheduler and client library (tests/lab/README-kube.md) with 500 ms quota
windows (``XPUSHARE_COMPUTE_WINDOW_MS``, the SUT's minimum). A W6 at n = 2048 is 12 000 adds of 0.5 ms of
simulated GPU time each: kernels sleep on the simulated GPU's timeline, so runtimes follow the quota, not
the machine's CPU speed, and no test here needs the cores to itself. Measured on 2 cores with one other
lab run beside it, the seed's tolerances hold (the healthy run still takes a lab tolerance for PERF-011,
:data:`LAB_QUOTA_TOLERANCE`, for a machine loaded more than that):

* baseline 6.08-6.26 s (over ``perf_baseline_min_s`` 5); the bracketing baselines of one PERF-011 run
  differed by 0.03 % to 2.7 %;
* PERF-011 errors (±8 %) in four runs: q25 -1.7 / +1.3 / +0.4 / +1.8 %, q50 +0.1 / +0.3 / +3.5 / -1.8 %, q75
  -0.4 / -0.4 / +1.8 / -0.8 % (at most 3.8 % against either baseline). A run ends within a quota window,
  so it is quantised by at most ``(1 - q) x window``: 0.375 s of the 24.5 s at 25 %, 0.25 s of 12.2 s at
  50 %, 0.125 s of 8.1 s at 75 % (<= 2 %); PERF-003, the same ladder (its own baselines, the same W6 on the
  lab), PASSes in the same healthy run, monotonic and within the run's tolerance;
* PERF-007 (25 % -> 75 %) in five runs: exported after 1.8-4.8 s, W5 rate changed after 1.3-4.7 s (the
  scheduler re-reads annotations every 5 s), gain 2.97-3.21 (ideal 3);
* PERF-004 (30 % + 60 % on one GPU) FAILs on the healthy SUT, finding 15 of docs/findings.md: pair
  ratio +26.5 to +29.3 % over the ideal 2 in five runs, the 30 % pod +9.1 to +11.7 % long, the 60 % pod
  -12.2 to -13.9 % short. Both quota pods hold the lock at once and the scheduler bills each half of the
  shared wall time, whatever share of the device each got; window quantisation (<= 2 %) does not explain
  it. The test asserts that FAIL.

Broken SUTs are mutant builds (tests/lab/mutants) that every node runs for one test; each FAILs the
precision cases at the seed's tolerances (three runs): ``no-core-enforcement`` PERF-011 q25 -73.5 to -73.9 %,
PERF-004 ratio -34.3 to -34.5 %, PERF-007 gain 1.02-1.03; ``quota-stingy-30`` PERF-011 q50 +35.8 to +40.8 %,
PERF-004 pods +48.5 to +50.6 % and +21.8 to +23.2 %; ``quota-generous-30`` PERF-011 q25 -21.6 to -23.4 % (idle lab),
q75 -20.4 % with three CPU-bound processes at the other labs' priority beside it.
``invoke judge --set`` flips the stored PERF-011 verdict offline. Length on 2 cores: 5.4 min (the healthy run
~2 min, each mutant run 40-80 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.cluster import LabCluster
from tests.lab.env import LAB_OPTIONS, LAB_WORKLOAD_ARGS
from tests.lab.kubelab import inventory_fixture, started_kube_lab
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT

#: Lab parameters of the performance suite (the seed's tolerances stay at their defaults).
#: The ``lab`` cluster's parameters (tests/lab/env.py) but for PERF-007's W5: n 2048 (0.5 ms per add, a quarter
#: of the launches of the lab's n 1024 per second of GPU time), so its throughput is the device's, not Python's.
PERF_PARAMS: dict[str, Any] = {"workload_args": {**LAB_WORKLOAD_ARGS, "w5_quota_probe": ["--n", "2048"]}}


#: The pods' priority of this module's lab: the highest, above the other pytest workers' labs (their pods run at
#: the lab's default -10), so that the runtime ratios measure the quota, not the other labs' load (a healthy
#: PERF-004 read +34 % once with four labs on two cores at the same priority; at -15, a CPU weight only three
#: times theirs, a healthy PERF-011 q25 read +17 % with a fifth process tree busy beside the four workers; at -20
#: the weight is nine times theirs).
PRECISION_POD_NICE = -20


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with pytest.MonkeyPatch.context() as env:  # read by the lab's kubelet when it starts
        env.setenv("XPUSHARE_LAB_POD_NICE", str(PRECISION_POD_NICE))
        yield from started_kube_lab(tmp_path_factory, "perf-kube", **LAB_OPTIONS)


inventory = inventory_fixture("perf-inv", params=PERF_PARAMS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("perf-runs")


def invoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=timeout)


def perf(inventory: Path, root: Path, run_id: str, *cases: str, sets: tuple[str, ...] = ()) -> \
        subprocess.CompletedProcess:
    args = [a for c in cases for a in ("--case", c)] + [a for s in sets for a in ("--set", s)]
    return invoke("perf", "--cluster", "lab", "--inventory", str(inventory), "--run-id", run_id, "--root", str(root),
                  *args)


def results(root: Path, run_id: str) -> dict[str, dict]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "performance"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


def explain(got: dict[str, dict], proc: subprocess.CompletedProcess) -> str:
    lines = [f"{k}: {v['status']} {v['summary']} {json.dumps(v['metrics'].get('ratios'))} "
             f"baseline {v['metrics'].get('baseline_samples_s') or v['metrics'].get('baseline_s')}"
             for k, v in got.items()]
    return "\n".join(lines) + "\n" + proc.stdout[-2000:] + proc.stderr[-2000:]


#: The healthy run's PERF-011 tolerance. The seed's ±8 % held in every run on a 2-core machine with one other lab
#: beside it (above), but not with three other pytest workers' labs on the same 2 cores: q25 +8.6 to +8.9 %, later
#: +11.1 to +13.6 % (q50 +3.4 to +5.7 %, q75 +0.5 to +3.7 %), +17 % once with a fifth process tree busy beside
#: them. A client handed the lock while descheduled starts its launches late, a few ms of a 500 ms window, which is
#: a larger part of a 25 % share than of a 75 % one; on real GPUs the same cases are within ±4 % (docs/runs). The
#: mutants are judged at the seed's ±8 % and stay outside it (-21 % and beyond, +35 % and beyond).
LAB_QUOTA_TOLERANCE = 0.16


def test_healthy_sut_verdicts_and_plots_are_reported(inventory: Path, runs: Path) -> None:
    proc = perf(inventory, runs, "healthy", "PERF-003", "PERF-011", "PERF-004", "PERF-007",
                sets=(f"perf_quota_tolerance={LAB_QUOTA_TOLERANCE}",))
    got = results(runs, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    assert set(statuses) == {"PERF-003", "PERF-004", "PERF-007", "PERF-011"}, explain(got, proc)
    assert got["PERF-004"]["metrics"]["placement"]  # the pair's GPUs, from the registration lines
    report = (runs / ".tmplog" / "healthy" / "xpushare" / "run-report.md").read_text()
    for png in ("PERF-011/runtime_vs_quota.png", "PERF-004/runtime_vs_quota.png", "PERF-007/throughput_timeline.png"):
        assert png in report
        assert (runs / ".tmplog" / "healthy" / "xpushare" / "lab" / "performance" / png).is_file()
    assert statuses["PERF-011"] == statuses["PERF-003"] == statuses["PERF-007"] == "PASS", explain(got, proc)
    assert set(got["PERF-003"]["metrics"]["ratios"]) == {"25", "50", "75"}  # the whole ladder, monotonic
    p11 = got["PERF-011"]
    assert set(p11["metrics"]["ratios"]) == {"25", "50", "75"}
    assert len(p11["metrics"]["baseline_samples_s"]) == 2  # bracketed: before and after the quota pods
    assert p11["thresholds"]["perf_quota_tolerance"] == LAB_QUOTA_TOLERANCE
    p7 = got["PERF-007"]["metrics"]
    assert 0 <= p7["metric_latency_s"] <= 15 and 0 <= p7["throughput_latency_s"] <= 15, explain(got, proc)
    # docs/findings.md 15: two quota clients that share the GPU are billed half the wall time each, whatever
    # share of the device each got; the 60 % pod gets more than its share while both run, the 30 % pod less
    p4 = got["PERF-004"]
    assert p4["thresholds"]["perf_mixed_tolerance"] == 0.10  # the seed's default
    assert p4["status"] == "FAIL" and "runtime_ratio" in p4["summary"], explain(got, proc)
    assert p4["metrics"]["ratio_error"] > 0.10, explain(got, proc)
    assert p4["metrics"]["ratios"]["30"]["error"] > 0 > p4["metrics"]["ratios"]["60"]["error"], explain(got, proc)
    assert proc.returncode == 1


def test_rejudge_with_another_tolerance_flips_the_stored_verdict(runs: Path) -> None:
    stored = results(runs, "healthy").get("PERF-011")
    if stored is None:
        pytest.skip("needs the stored run of test_healthy_sut_verdicts_and_plots_are_reported")
    if stored["status"] == "PASS":  # tighten: the same evidence FAILs
        tolerance, want = "0.001", "FAIL"
    elif stored["status"] == "FAIL" and "monotonic" not in stored["summary"]:  # loosen: the same evidence PASSes
        tolerance, want = "0.99", "PASS"  # a fraction: the parameter's rule refuses 5
    else:
        pytest.skip(f"stored PERF-011 is {stored['status']}: {stored['summary']}")
    proc = invoke("judge", "--run-id", "healthy", "--root", str(runs), "--set", f"perf_quota_tolerance={tolerance}",
                  "--apply")
    got = results(runs, "healthy")["PERF-011"]
    assert got["status"] == want, proc.stdout + proc.stderr
    assert got["thresholds"]["perf_quota_tolerance"] == float(tolerance)
    assert f"PERF-011 {want} (was {stored['status']})" in proc.stdout
    assert got["metrics"]["ratios"] == stored["metrics"]["ratios"]  # same evidence, other threshold


def perf_on_mutant(kube_lab: LabCluster, mutant: str, inventory: Path, runs: Path, run_id: str, *cases: str,
                   sets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``cases`` with every node on the ``mutant`` build of the SUT (the schedulers restart on it)."""
    with kube_lab.running_mutant(mutant):
        return perf(inventory, runs, run_id, *cases, sets=sets)


def test_enforcement_off_fails_the_precision_cases(inventory: Path, kube_lab: LabCluster, runs: Path) -> None:
    # one quota is enough to show it (an unenforced 25 % runs 4x too fast) and keeps the module short
    proc = perf_on_mutant(kube_lab, "no-core-enforcement", inventory, runs, "noenf", "PERF-011", "PERF-004",
                          "PERF-007", sets=("perf011_quotas=[25]",))
    got = results(runs, "noenf")
    assert got["PERF-011"]["status"] == "FAIL" and "quota_precision" in got["PERF-011"]["summary"], explain(got, proc)
    assert got["PERF-011"]["metrics"]["ratios"]["25"]["error"] < -0.5, explain(got, proc)
    # both pods run unthrottled side by side: a runtime ratio near 1 instead of 2
    p4 = got["PERF-004"]
    assert p4["status"] == "FAIL" and "runtime_ratio" in p4["summary"], explain(got, proc)
    assert p4["metrics"]["ratio_error"] < -0.2, explain(got, proc)
    # the annotation is read and exported, but the throughput does not follow it
    p7 = got["PERF-007"]
    assert p7["status"] == "FAIL" and "throughput_changed" in p7["summary"], explain(got, proc)
    assert p7["metrics"].get("metric_latency_s") is not None, explain(got, proc)
    assert proc.returncode == 1


# A budget 30 % off in either direction. Too stingy (x 0.7): every quota runs 1/0.7 = +43 % long, both pods of the
# 30/60 pair included. Too generous (x 1.3): a single pod runs 1/1.3 - 1 = -23 % short at any quota up to 76 %; the
# generous pair is left out, as its budgets (39 % + 78 %) would ask for 117 % of each window. The generous run is
# judged at 75 %: a loaded machine lengthens a throttled client's runs by its late starts after each lock hand-off,
# which weigh most against a small share (healthy q25 up to +19 %, q75 within +4 % on CI's load), and that
# lengthening cancels part of the generous skew (q25 -8.5 %, q50 -7.3 % on CI, inconclusive against ±8 %).
SKEWS = {
    "stingy": ("quota-stingy-30", ("PERF-011", "PERF-004"), "50", 1),
    "generous": ("quota-generous-30", ("PERF-011",), "75", -1),
}


@pytest.mark.parametrize("direction", sorted(SKEWS))
def test_skewed_enforcement_fails_the_precision_cases(inventory: Path, kube_lab: LabCluster, runs: Path,
                                                      direction: str) -> None:
    mutant, cases, quota, sign = SKEWS[direction]
    run_id = f"skew-{direction}"
    # one quota is enough to show the skew and keeps the module short
    proc = perf_on_mutant(kube_lab, mutant, inventory, runs, run_id, *cases, sets=(f"perf011_quotas=[{quota}]",))
    got = results(runs, run_id)
    assert set(got) == set(cases), explain(got, proc)
    p11 = got["PERF-011"]
    assert p11["status"] == "FAIL" and "quota_precision" in p11["summary"], explain(got, proc)
    assert p11["thresholds"]["perf_quota_tolerance"] == 0.08  # the seed's default
    assert sign * p11["metrics"]["ratios"][quota]["error"] > 0.08, explain(got, proc)
    if "PERF-004" in got:
        p4 = got["PERF-004"]
        assert p4["status"] == "FAIL" and "runtime_vs_baseline" in p4["summary"], explain(got, proc)
        assert all(sign * r["error"] > 0.10 for r in p4["metrics"]["ratios"].values()), explain(got, proc)
    assert proc.returncode == 1
