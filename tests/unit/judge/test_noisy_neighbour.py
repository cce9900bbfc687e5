"""PERF-012's judgment (``judge/noisy_neighbour.judge_noisy_neighbour``): a slice's GPU share beside a noisy
neighbour against its share alone, from the compute probe's own lines; FAIL when the neighbour took part of the
slice, ERROR when a probe measured nothing or the pair was not on one GPU, never PASS on missing evidence."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.judge.test_isolation_compute import TH, line, log, record
from tests.unit.judge.test_isolation_cross_sut import HAMI_INIT
from xpushare.cases.base import REGISTRY
from xpushare.evidence.store import Evidence
from xpushare.judge.noisy_neighbour import judge_noisy_neighbour
from xpushare.judge.sut_path import with_sut_checks


def names(q: int) -> tuple[str, str, str]:
    return f"perf-012-q{q}-alone", f"perf-012-q{q}-a", f"perf-012-q{q}-z"


def plan(*slices: int, model: str = "NVIDIA H200") -> dict[str, Any]:
    rows = [{"slice": q, "alone": names(q)[0], "victim": names(q)[1], "noisy": names(q)[2], "noisy_core_limit": 100 - q}
            for q in slices]
    return {"pods": [n for q in slices for n in names(q)], "slices": rows, "gpu_model": model, "sut": "hami-core",
            "quota_source": "env", "quota_var": "CUDA_DEVICE_SM_LIMIT", "path": "cuLaunchKernel"}


def run(shares: dict[int, tuple[float, float, float]], *, noisy_gpu: str = "GPU-a",
        model: str = "NVIDIA H200", alone_log: str | None = None, hami: str = HAMI_INIT) -> Any:
    """Judge slices ``q -> (share alone, share beside, the neighbour's share)``, two judged intervals each, as
    HAMi-core's workloads (its ``Initializing`` line in each log: the system in the path)."""
    logs: dict[str, str] = {}
    recs = []
    for q, (alone, beside, noisy) in shares.items():
        a, v, n = names(q)
        logs[a] = hami + (alone_log if alone_log is not None else log(line(1.0, 0), line(alone, 1), line(alone, 2)))
        logs[v] = hami + log(line(1.0, 0), line(beside, 1), line(beside, 2))
        logs[n] = hami + log(line(noisy, 0), line(noisy, 1), line(noisy, 2), line(noisy, 3))
        recs += [record(a), record(v), record(n, gpu=noisy_gpu)]
    ev = Evidence.from_parts(recs, logs, mode="host")
    return judge_noisy_neighbour(ev, TH, plan(*shares, model=model))


def test_each_slice_keeps_its_share_beside_the_neighbour_is_pass() -> None:
    v = run({25: (0.25, 0.245, 0.74), 50: (0.5, 0.49, 0.5), 75: (0.75, 0.76, 0.24)})
    assert v.status.value == "PASS", v.summary
    assert [r["impact"] for r in v.metrics["slices"]] == [-0.02, -0.02, 0.0133]
    assert "25 %: -2.0%" in v.summary and "within ±10%" in v.summary
    assert v.thresholds["perf_mixed_tolerance"] == 0.10


def test_a_neighbour_that_takes_half_the_slice_is_fail() -> None:
    # no core enforcement: alone the probe has the whole GPU, beside the neighbour half of it
    v = run({25: (1.0, 0.5, 0.5), 75: (0.75, 0.74, 0.25)})
    assert v.status.value == "FAIL", v.summary
    assert "25 % slice: 125.0 kernels/s beside the neighbour against 250.0 alone (-50.0%" in v.summary
    assert v.metrics["worst_impact"] == -0.5


def test_kernels_stretched_by_a_concurrent_neighbour_are_judged_by_the_work_done() -> None:
    # an H200 under the project's SUT: beside the neighbour each kernel took 4.52 ms instead of 3.98, the same
    # kernels per second: the GPU share reads +13 %, the slice lost nothing
    a, v, n = names(25)
    logs = {a: HAMI_INIT + log(line(1.0, 0), line(0.25, 1), line(0.25, 2)),
            v: HAMI_INIT + log(line(1.0, 0), line(0.2825, 1, kernel_ms=4.52), line(0.2825, 2, kernel_ms=4.52)),
            n: HAMI_INIT + log(*(line(0.72, i) for i in range(4)))}
    verdict = judge_noisy_neighbour(Evidence.from_parts([record(a), record(v), record(n)], logs, mode="host"), TH,
                                    plan(25))
    assert verdict.status.value == "PASS", verdict.summary
    row = verdict.metrics["slices"][0]
    assert row["impact"] == 0.0 and row["share_beside"] > 1.1 * row["share_alone"], row


def test_a_slice_that_gets_more_beside_the_neighbour_is_fail_too() -> None:
    v = run({50: (0.4, 0.5, 0.5)})
    assert v.status.value == "FAIL" and "+25.0%" in v.summary, v.summary


def test_the_t4_tolerance_applies_on_a_t4() -> None:
    assert run({50: (0.5, 0.445, 0.5)}).status.value == "FAIL"
    v = run({50: (0.5, 0.445, 0.5)}, model="Tesla T4")
    assert v.status.value == "PASS" and v.thresholds["perf_mixed_tolerance_t4"] == 0.12, v.summary


def test_a_pair_not_on_one_gpu_is_error_naming_the_premise() -> None:
    v = run({50: (0.5, 0.5, 0.5)}, noisy_gpu="GPU-b")
    assert v.status.value == "ERROR" and "two-pods-one-gpu" in v.summary, v.summary


@pytest.mark.parametrize("alone_log", [log(line(0.5, 0)), log(line(status="unavailable", index=0,
                                                                       error="no CUDA driver"))])
def test_a_probe_that_measured_nothing_is_error(alone_log: str) -> None:
    v = run({50: (0.5, 0.5, 0.5)}, alone_log=alone_log)
    assert v.status.value == "ERROR", v.summary


def test_workloads_the_system_never_saw_are_error_naming_the_premise() -> None:
    # the proof is added after the judgment, as for every performance case (engine/lifecycle.py)
    plain = run({50: (0.5, 0.5, 0.5)}, hami="")
    a, v, n = names(50)
    ev = Evidence.from_parts([record(a), record(v), record(n)], {p: log(line(0.5, 1)) for p in (a, v, n)}, mode="host")
    checked = with_sut_checks(plain, ev, {}, plan(50))
    assert checked.status.value == "ERROR" and "premise unmet: sut" in checked.summary, checked.summary
    assert run({50: (0.5, 0.5, 0.5)}).status.value == "PASS"


def test_an_empty_plan_is_not_a_pass() -> None:
    v = judge_noisy_neighbour(Evidence.from_parts([], {}, mode="host"), TH, {"pods": [], "slices": []})
    assert v.status.value == "ERROR", v.summary


def test_the_case_is_registered_with_its_premises_and_the_seed_tolerance() -> None:
    case = REGISTRY["PERF-012"]
    assert case.suite == "performance" and case.params["perf012_slices"] == [25, 50, 75]
    assert {"core-quota", "two-pods-one-gpu", "sut", "gpu"} <= set(case.requires)
    assert case.params["perf_mixed_tolerance"] == 0.10 and case.measures_gpu
