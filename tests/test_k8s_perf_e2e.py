"""Performance suite end to end on the lab: real SSH, real kubectl, the lab cluster's duty-cycled core quotas.

The lab scheduler enforces a core limit by SIGSTOP/SIGCONT of the pod's processes in quota windows
(tests/lab/README-kube.md), so the runtime ratios are real measurements. An accurate lab PASSes PERF-011,
PERF-004 and PERF-007; with the enforcement switched off (``no_enforcement``) or skewed by 30 % (``skew`` 0.7,
too stingy, and 1.3, too generous) the precision cases FAIL at the seed's tolerances (±8 %, ±10 %);
``invoke judge --set`` flips a stored verdict offline.

How the lab holds still enough to measure:

* it bills a pod's on-CPU time against its budget, so other load does not eat a quota pod's budget;
* each lab GPU delivers ``GPU_SPEED`` (0.8) of one core, to the 100 % baseline too: the baseline is
  paced like a quota pod, so it no longer runs at whatever share of a core the machine leaves it (before
  pacing, a loaded machine slowed the baseline alone: every quota error negative, -10 % to -13 %);
* 500 ms windows: a runtime is quantised by at most one window's pause, ``(1 - q × speed) × window``:
  0.1 s of the ~6.5 s baseline, 0.4 s of the ~26 s run at 25 % (<= 2 %);
* the healthy and the skew tests are marked ``cpu_exclusive`` (under pytest-xdist the other worker pauses,
  tests/conftest.py).

What it cannot hold still is the CPU itself: the same W6 work (six runs of 90 000 iterations at n=512, one thread)
took 4.30-4.69 s from one run to the next on an idle 2-core machine (±4.5 %), so a ratio of two runs carries up to
±9 % before any quota error. The healthy run is therefore judged at the lab's noise floor, ±15 % (``LAB_TOLERANCES``,
recorded in its thresholds), which still separates the faults (+43 % with skew 0.7, -23 % with 1.3, -75 % without
enforcement) that the other tests judge at the seed's defaults. Measured healthy errors with these settings: PERF-011
+6.0/-2.4/+1.2 %, +3.6/-2.0/-2.6 % and +6.5/+6.3/-1.8 %, PERF-004 pair ratio +5.0 %, +3.9 % and -2.8 %. The CPU's
speed also drifts within a ladder: one PERF-011 baseline took 7.27 s (6.40 s in the run before) while the ladder's
last pod ran at the usual speed, so q75 came out at -14.6 %. PERF-011 therefore brackets its quota pods with two
baselines and judges against both (docs/performance.md): a drift that decides the verdict is an inconclusive ERROR,
reported here as a skip with the numbers, as is a non-PASS while other work left the machine saturated (CPU idle <
``SATURATED_IDLE``). Expected length on 2 cores: ~4-5 min.
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
from tests.lab.env import LAB_GPU_MEMORY_BYTES, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
#: Each lab GPU delivers this share of one core, to the 100 % baseline too (tests/lab/README-kube.md).
GPU_SPEED = 0.8
#: The lab's noise floor for the healthy run (see the module docstring); the fault runs keep the seed's defaults.
LAB_TOLERANCES = ("perf_quota_tolerance=0.15", "perf_mixed_tolerance=0.15")
#: CPU idle share (all cores) below which the machine counts as saturated by other work during a run.
SATURATED_IDLE = 0.10

#: Lab parameters of the performance suite (the seed's tolerances stay at their defaults).
PERF_PARAMS: dict[str, Any] = {
    "workload_args": {
        "w2_medium_add": ["--n", "512", "--iters", "10000", "--no-progress"],
        "w6_fixed_add": ["--n", "512", "--iters", "130000", "--no-progress"],
    },
    "perf_pod_env": {"OMP_NUM_THREADS": "1"},
    "perf_baseline_min_s": 5,
    # fillers only hold the other GPU of the node while the pair is placed: an idle workload, so the
    # 2 CPU cores are left to the pair
    "perf_filler_workload": "w3_idle_add",
    "perf_filler_args": ["--n", "64", "--steps", "100", "--sleep-s", "0.1", "--no-progress"],
    "perf_placement_timeout_s": 30,
    "perf007_pre_s": 6,
    "perf007_post_s": 10,
    "perf007_settle_s": 5,
    "perf007_poll_s": 0.5,
    "perf007_metric_timeout_s": 20,
}


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    # 500 ms quota windows and a GPU at 0.8 of a core (explicitly: the sizes above are computed for them)
    yield from started_kube_lab(tmp_path_factory, "perf-kube", gpu_memory_bytes=LAB_GPU_MEMORY_BYTES, window_ms=500,
                                gpu_speed=GPU_SPEED)


@pytest.fixture(scope="module")
def inventory(ssh_lab: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("perf-inv") / "inventory.yaml"
    return write_inventory(path, ssh_lab, kube_lab, params=PERF_PARAMS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("perf-runs")


def cpu_times() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of all CPUs from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def invoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


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


@pytest.mark.cpu_exclusive  # runtimes of quota pods: the other xdist worker pauses meanwhile
def test_accurate_lab_passes_and_plots_are_reported(inventory: Path, runs: Path) -> None:
    idle0, total0 = cpu_times()
    proc = perf(inventory, runs, "healthy", "PERF-011", "PERF-004", "PERF-007", sets=LAB_TOLERANCES)
    idle1, total1 = cpu_times()
    idle = (idle1 - idle0) / max(1, total1 - total0)
    got = results(runs, "healthy")
    statuses = {k: v["status"] for k, v in got.items()}
    # ERROR only as an inconclusive precision check: the bracketing baselines drifted across the tolerance
    inconclusive = {k for k, v in got.items() if v["status"] == "ERROR" and "inconclusive" in v["summary"]}
    assert set(statuses) == {"PERF-004", "PERF-007", "PERF-011"}, explain(got, proc)
    assert {k for k, v in statuses.items() if v == "ERROR"} <= inconclusive, explain(got, proc)
    assert got["PERF-004"]["metrics"]["placement"]  # the pair's GPUs, from the registration lines
    report = (runs / ".tmplog" / "healthy" / "xpushare" / "run-report.md").read_text()
    for png in ("PERF-011/runtime_vs_quota.png", "PERF-004/runtime_vs_quota.png", "PERF-007/throughput_timeline.png"):
        assert png in report
        assert (runs / ".tmplog" / "healthy" / "xpushare" / "lab" / "performance" / png).is_file()
    if set(statuses.values()) != {"PASS"} and idle < SATURATED_IDLE:
        pytest.skip(f"CPU idle {idle:.0%} during the run: the 2 cores were saturated by other work, so the "
                    f"lab's duty-cycled ratios are not a measurement of the quota; got\n{explain(got, proc)}")
    if inconclusive and "FAIL" not in statuses.values():
        pytest.skip(f"the machine's speed drifted during the ladder (the tool says inconclusive); got\n"
                    f"{explain(got, proc)}")
    assert set(statuses.values()) == {"PASS"}, f"CPU idle {idle:.0%}\n" + explain(got, proc)
    assert proc.returncode == 0
    p11 = got["PERF-011"]
    assert set(p11["metrics"]["ratios"]) == {"25", "50", "75"}
    assert len(p11["metrics"]["baseline_samples_s"]) == 2  # bracketed: before and after the quota pods
    assert p11["thresholds"]["perf_quota_tolerance"] == 0.15  # the lab's noise floor, recorded with the verdict
    assert got["PERF-004"]["thresholds"]["perf_mixed_tolerance"] == 0.15
    p7 = got["PERF-007"]["metrics"]
    assert 0 <= p7["metric_latency_s"] <= 15 and 0 <= p7["throughput_latency_s"] <= 15


def test_rejudge_with_another_tolerance_flips_the_stored_verdict(runs: Path) -> None:
    stored = results(runs, "healthy").get("PERF-011")
    if stored is None:
        pytest.skip("needs the stored run of test_accurate_lab_passes_and_plots_are_reported")
    if stored["status"] == "PASS":  # tighten: the same evidence FAILs
        tolerance, want = "0.001", "FAIL"
    elif stored["status"] == "FAIL" and "monotonic" not in stored["summary"]:  # loosen: the same evidence PASSes
        tolerance, want = "5", "PASS"
    else:
        pytest.skip(f"stored PERF-011 is {stored['status']}: {stored['summary']}")
    proc = invoke("judge", "--run-id", "healthy", "--root", str(runs), "--set", f"perf_quota_tolerance={tolerance}")
    got = results(runs, "healthy")["PERF-011"]
    assert got["status"] == want, proc.stdout + proc.stderr
    assert got["thresholds"]["perf_quota_tolerance"] == float(tolerance)
    assert f"PERF-011 {want} (was {stored['status']})" in proc.stdout
    assert got["metrics"]["ratios"] == stored["metrics"]["ratios"]  # same evidence, other threshold


def test_enforcement_off_fails_the_precision_cases(inventory: Path, kube_lab: LabCluster, runs: Path) -> None:
    kube_lab.set_faults(None, no_enforcement=True)
    try:
        # one quota is enough to show it (an unenforced 25 % runs ~4x too fast) and keeps the module short
        proc = perf(inventory, runs, "noenf", "PERF-011", "PERF-004", sets=("perf011_quotas=[25]",))
    finally:
        kube_lab.set_faults(None, no_enforcement=False)
    got = results(runs, "noenf")
    assert got["PERF-011"]["status"] == "FAIL" and "quota_precision" in got["PERF-011"]["summary"], explain(got, proc)
    assert got["PERF-004"]["status"] == "FAIL" and "runtime_ratio" in got["PERF-004"]["summary"], explain(got, proc)
    assert proc.returncode == 1


# A skew of 30 % in either direction. Too stingy (0.7): every quota runs 1/0.7 = +43 % long, the 30/60 pair included
# (it needs only 63 % of the GPU). Too generous (1.3): a single 25 % pod runs -23 % short; the generous pair is left
# out, as it would ask for 117 % of the GPU, so the GPU itself caps it and its expected errors (-10 % / -16 %) sit
# inside the lab's ±9 % noise. Both are cpu_exclusive: another worker's pods would blur the signal.
SKEWS = {
    "stingy": (0.7, ("PERF-011", "PERF-004"), "50", 1),
    "generous": (1.3, ("PERF-011",), "25", -1),
}


@pytest.mark.cpu_exclusive
@pytest.mark.parametrize("direction", sorted(SKEWS))
def test_skewed_enforcement_fails_the_precision_cases(inventory: Path, kube_lab: LabCluster, runs: Path,
                                                      direction: str) -> None:
    skew, cases, quota, sign = SKEWS[direction]
    run_id = f"skew-{direction}"
    kube_lab.set_faults(None, skew=skew)
    try:  # one quota is enough to show the skew and keeps the module short
        proc = perf(inventory, runs, run_id, *cases, sets=(f"perf011_quotas=[{quota}]",))
    finally:
        kube_lab.set_faults(None, skew=None)
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
