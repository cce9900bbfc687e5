"""PERF judgments (xpushare/judge/performance.py) on evidence of a healthy and of a broken system, and ``invoke judge``
re-judging a stored PERF run with other tolerances (offline, no cluster)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend, FakeKube, FakePlacement
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.engine import lifecycle, stored_run
from xpushare.evidence.store import Evidence
from xpushare.judge import performance as judge_perf
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord, WorkloadSpec, write_pod_records
from xpushare.report import run_store

TH: dict[str, Any] = {k: v for c in REGISTRY.values() if c.suite == "performance" for k, v in c.params.items()}
TH.update(perf_baseline_min_s=60)


def rec(name: str, *, phase: str = "Succeeded", code: int | None = 0, gpu: str | None = "GPU-a",
        node: str = "n1", start: float = 100.0, end: float = 200.0) -> WorkloadRecord:
    return WorkloadRecord(name=name, phase=phase, exit_code=code, node=node, gpu=gpu, started=start, finished=end)


def log(runtime: float | None, passed: bool = True) -> str:
    text = "[XPUSHARE][INFO]: Client ID = 0123456789abcdef\n"
    if passed:
        text += "PASS\n"
    if runtime is not None:
        text += f"--- {runtime} seconds ---\n"
    return text


def ladder(base: float, runtimes: dict[str, float], *, base_ok: bool = True,
           base_after: float | None = None) -> tuple[Evidence, dict[str, Any]]:
    """A PERF-011 ladder; ``base_after``: the bracketing baseline sample run after the quota pods."""
    bases = {"base": base} if base_after is None else {"base": base, "base-after": base_after}
    pods = [rec(b) for b in bases] + [rec(f"q{q}") for q in runtimes]
    logs = {**{b: log(v, base_ok) for b, v in bases.items()}, **{f"q{q}": log(v) for q, v in runtimes.items()}}
    plan = {"baseline_pods": list(bases), "quota_pods": {q: f"q{q}" for q in runtimes}, "gpu_model": "Tesla T4"}
    return Evidence.from_parts(pods, logs), plan


# ------------------------------------------------------------------------------------------------ model


def test_ideal_factor_hard_cap_and_oversubscription_scaling() -> None:
    assert judge_perf.ideal_factor(25) == 4.0
    assert judge_perf.ideal_factor(100) == 1.0
    assert judge_perf.ideal_factor(30, [30, 60]) == pytest.approx(100 / 30)
    # 70 + 60 = 130 > 100: budgets scaled by 100/130 (docs/sut/scheduler.md §compute-quota: 53.8 % and 46.2 %)
    assert 100 / judge_perf.ideal_factor(70, [70, 60]) == pytest.approx(53.846, abs=1e-3)
    with pytest.raises(ValueError):
        judge_perf.ideal_factor(0)


def test_tolerance_is_per_gpu_model() -> None:
    assert judge_perf.tolerance_for(TH, {"gpu_model": "Tesla T4"}, mixed=True) == (0.12, "perf_mixed_tolerance_t4")
    assert judge_perf.tolerance_for(TH, {"gpu_model": "A800"}, mixed=True) == (0.10, "perf_mixed_tolerance")
    assert judge_perf.tolerance_for(TH, {"gpu_model": "Tesla T4"}, mixed=False) == (0.08, "perf_quota_tolerance")


# ------------------------------------------------------------------------------------------------ PERF-001


def test_baseline_pass_records_model_and_runtime() -> None:
    ev = Evidence.from_parts([rec("base")], {"base": log(120.5)})
    v = judge_perf.judge_baseline(ev, TH, {"baseline_pods": ["base"], "gpu_model": "Tesla T4", "workload": "w6"})
    assert v.status is Status.PASS, v.summary
    assert v.metrics["baseline_runtime_s"] == 120.5 and v.metrics["gpu_model"] == "Tesla T4"


def test_baseline_too_short_is_error_not_pass() -> None:
    ev = Evidence.from_parts([rec("base")], {"base": log(12.0)})
    v = judge_perf.judge_baseline(ev, TH, {"baseline_pods": ["base"]})
    assert v.status is Status.ERROR and "too short" in v.summary


def test_baseline_failed_pod_fails() -> None:
    ev = Evidence.from_parts([rec("base", phase="Failed", code=1)], {"base": "Traceback\n"})
    assert judge_perf.judge_baseline(ev, TH, {"baseline_pods": ["base"]}).status is Status.FAIL


# ------------------------------------------------------------------------------------------------ PERF-011 / 003


def test_quota_precision_healthy_passes_with_errors_recorded() -> None:
    ev, plan = ladder(100.0, {"25": 404.0, "50": 197.0, "75": 136.0})
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["ratios"]["25"] == {"runtime_s": 404.0, "ratio_vs_baseline": 4.04, "ideal_ratio": 4.0,
                                         "error": 0.01}
    assert "q50 -1.5%" in v.summary


def test_quota_not_enforced_fails() -> None:
    ev, plan = ladder(100.0, {"25": 100.0, "50": 101.0, "75": 100.5})
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.FAIL
    assert "monotonic" in v.summary and "quota_precision" in v.summary


def test_quota_skewed_by_30_percent_fails_precision_only() -> None:
    # the cap lets 1.3x the budget through: runtime = B * 100 / (1.3 q)
    ev, plan = ladder(100.0, {"25": 400 / 1.3, "50": 200 / 1.3, "75": 133.3 / 1.3})
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.FAIL
    assert "monotonic" not in v.summary and "-23.1%" in v.summary
    # PERF-003's check set with the error not judged would pass on monotonicity alone
    assert judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=False).status is Status.PASS


def test_quota_tolerance_is_a_parameter() -> None:
    ev, plan = ladder(100.0, {"25": 440.0, "50": 210.0, "75": 140.0})  # +10 %, +5 %, +5 %
    assert judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True).status is Status.FAIL
    loose = {**TH, "perf_quota_tolerance": 0.12}
    assert judge_perf.judge_quota_ladder(ev, loose, plan, judge_error=True).status is Status.PASS


def test_quota_missing_runtime_is_never_pass() -> None:
    ev, plan = ladder(100.0, {"25": 400.0, "50": 200.0, "75": 133.0})
    ev.logs["q50"] = "PASS\n"
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.FAIL and "quota_pods_succeeded" in v.summary


def test_bracketed_baseline_passes_when_every_sample_agrees() -> None:
    ev, plan = ladder(100.0, {"25": 404.0, "50": 197.0, "75": 136.0}, base_after=102.0)
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["baseline_s"] == 101.0 and v.metrics["baseline_samples_s"] == [100.0, 102.0]
    assert v.metrics["baseline_drift"] == 0.02
    assert v.metrics["ratios"]["25"]["error_range"] == [-0.0098, 0.01]  # against 102 s and against 100 s


def test_baseline_drift_that_decides_the_verdict_is_error_never_pass() -> None:
    # q50 is exact against the first sample and -9.1 % against the second (the GPU slowed by 10 %)
    ev, plan = ladder(100.0, {"25": 420.0, "50": 200.0, "75": 140.0}, base_after=110.0)
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.ERROR, v.summary
    assert "inconclusive" in v.summary and "drifted +10.0%" in v.summary and "q50 -9.1%..+0.0%" in v.summary
    # the same runtimes against a steady baseline pass
    ev, plan = ladder(100.0, {"25": 420.0, "50": 200.0, "75": 140.0}, base_after=100.0)
    assert judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True).status is Status.PASS


def test_skew_beyond_the_tolerance_against_every_sample_fails_despite_drift() -> None:
    ev, plan = ladder(100.0, {"25": 400 / 1.3, "50": 200 / 1.3, "75": 133.3 / 1.3}, base_after=110.0)
    v = judge_perf.judge_quota_ladder(ev, TH, plan, judge_error=True)
    assert v.status is Status.FAIL
    assert "q50 -30.1%..-23.1%" in v.summary


def test_ladder_brackets_the_quota_pods_with_a_second_baseline(tmp_path: Path) -> None:
    from xpushare.cases import performance

    for bracket, want in ((True, ["base", "q25", "q75", "base-after"]), (False, ["base", "q25", "q75"])):
        sim = GpuPlans([("GPU-a", "GPU-a")])
        (tmp_path / str(bracket)).mkdir()
        run = fake_run(tmp_path / str(bracket), sim, case_id="PERF-011", perf_baseline_bracket=bracket)
        performance.quota_ladder(run, "w6_fixed_add", [25, 75])
        assert sim.started() == [f"perf-011-{n}" for n in want]
        assert run.plan["baseline_pods"] == [f"perf-011-{n}" for n in want if n.startswith("base")]


# ------------------------------------------------------------------------------------------------ PERF-004


def mixed(r30: float, r60: float, *, base: float = 100.0, gpus: tuple[str, str] = ("GPU-a", "GPU-a"),
          model: str = "A800") -> tuple[Evidence, dict[str, Any]]:
    pods = [rec("lo", gpu=gpus[0]), rec("fill", gpu="GPU-b"), rec("hi", gpu=gpus[1]), rec("base")]
    logs = {"lo": log(r30), "fill": log(50.0), "hi": log(r60), "base": log(base)}
    plan = {"pair": ["lo", "hi"], "pair_quotas": [30, 60], "pods": ["lo", "fill", "hi", "base"],
            "baseline_pods": ["base"], "gpu_model": model}
    return Evidence.from_parts(pods, logs), plan


def test_mixed_healthy_passes() -> None:
    ev, plan = mixed(340.0, 163.0)
    v = judge_perf.judge_mixed(ev, TH, plan)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["ideal_ratio"] == 2.0 and v.metrics["ratio_low_over_high"] == pytest.approx(2.0859, abs=1e-4)


def test_mixed_not_colocated_is_premise_error_never_pass() -> None:
    ev, plan = mixed(333.0, 167.0, gpus=("GPU-a", "GPU-b"))
    v = judge_perf.judge_mixed(ev, TH, plan)
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-pods-one-gpu: co-location")
    v = judge_perf.judge_mixed(ev, TH, {**plan, "colocation_failed": True, "attempts": [{"attempt": 1}]})
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-pods-one-gpu: ")


def test_mixed_no_enforcement_and_skew_fail() -> None:
    ev, plan = mixed(101.0, 100.0)
    v = judge_perf.judge_mixed(ev, TH, plan)
    assert v.status is Status.FAIL and "runtime_ratio" in v.summary
    ev, plan = mixed(333.3 / 1.3, 166.7 / 1.3)  # ratio right, both too fast
    v = judge_perf.judge_mixed(ev, TH, plan)
    assert v.status is Status.FAIL and "runtime_vs_baseline" in v.summary and "runtime_ratio" not in v.summary


def test_mixed_t4_gets_the_wider_tolerance() -> None:
    ev, plan = mixed(370.0, 167.0, model="A800")  # ratio 2.216: +10.8 %
    assert judge_perf.judge_mixed(ev, TH, plan).status is Status.FAIL
    ev, plan = mixed(370.0, 167.0, model="Tesla T4")
    assert judge_perf.judge_mixed(ev, TH, plan).status is Status.PASS


# ------------------------------------------------------------------------------------------------ PERF-002


def overhead(off: float, on: float, scrapes: int = 3, code: int = 200) -> tuple[Evidence, dict[str, Any]]:
    files = {"metrics_stress.jsonl": "".join(json.dumps({"t0": i, "t1": i + 0.1, "file": f"m/{i}.txt"}) + "\n"
                                             for i in range(scrapes))}
    files.update({f"m/{i}.txt": f"xpushare_nvml_up 1\n\nHTTP_CODE={code}\n" for i in range(scrapes)})
    ev = Evidence.from_parts([rec("off"), rec("on")], {"off": log(off), "on": log(on)}, files)
    return ev, {"mode": "scrape", "interval_s": 2, "off_pods": ["off"], "on_pods": ["on"]}


def test_overhead_within_5_percent_passes_and_names_the_mode() -> None:
    ev, plan = overhead(100.0, 103.0)
    v = judge_perf.judge_overhead(ev, TH, plan)
    assert v.status is Status.PASS and "not scraped vs scraped every 2 s" in v.summary
    assert v.metrics["overhead_pct"] == 3.0


def test_overhead_too_high_fails() -> None:
    ev, plan = overhead(100.0, 108.0)
    v = judge_perf.judge_overhead(ev, TH, plan)
    assert v.status is Status.FAIL and "8.00 %" in v.summary


def test_overhead_without_a_successful_scrape_is_error() -> None:
    ev, plan = overhead(100.0, 100.0, code=0)
    v = judge_perf.judge_overhead(ev, TH, plan)
    assert v.status is Status.ERROR and "load_applied" in v.summary


# ------------------------------------------------------------------------------------------------ PERF-007


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


T0 = 1_760_000_000.0


def dynamic(change_at: float | None, *, metric_at: float | None = 2.5, r0: float = 25.0, r1: float = 75.0,
            sched_at: float = 2.0) -> tuple[Evidence, dict[str, Any]]:
    """W5 probes every 1 s from T0-10 to T0+30; the rate steps from r0 to r1 at T0 + change_at."""
    lines, it = [], 0.0
    for k in range(-10, 31):
        t = T0 + k
        if k > -10:
            a, b = t - 1, t
            if change_at is None or b <= T0 + change_at:
                it += r0
            elif a >= T0 + change_at:
                it += r1
            else:
                it += r0 * (T0 + change_at - a) + r1 * (b - T0 - change_at)
        lines.append(f"{_ts(t)} [XPUSHARE][QUOTA_PROBE] elapsed={k + 10:.1f}s it={int(it)} it_per_sec=1.00")
    lines.append(f"{_ts(T0 + 2)} [XPUSHARE][INFO]: Core limit updated dynamically to 75%")
    lines += [f"{_ts(T0 + 31)} PASS", f"{_ts(T0 + 31)} --- 41.0 seconds ---"]
    pod = "perf-007-w5"
    files = {
        "annotations.jsonl": json.dumps({"time": T0, "pod": pod, "annotations": {"core": "75"}}) + "\n",
        "scheduler.log": f"{_ts(T0 + sched_at)} [XPUSHARE][INFO]: Compute limit changed for pod default/{pod}: "
                         "25% -> 75%\n",
        "metrics_probe.jsonl": "",
    }
    for i, t in enumerate((0.5, 1.5, 2.5, 3.5)):
        value = 75 if metric_at is not None and t >= metric_at else 25
        files[f"metrics_probe/{i}.txt"] = (
            f'xpushare_client_core_quota_config_percent{{namespace="default",pod="{pod}",client_id="x",'
            f'gpu_uuid="g"}} {value}\n\nHTTP_CODE=200\n')
        files["metrics_probe.jsonl"] += json.dumps({"t0": T0 + t - 0.1, "t1": T0 + t, "file": f"metrics_probe/{i}.txt"})
        files["metrics_probe.jsonl"] += "\n"
    ev = Evidence.from_parts([rec(pod)], {pod: "\n".join(lines) + "\n"}, files)
    return ev, {"pods": [pod], "from": 25, "to": 75, "namespace": "default"}


def test_step_time_recovers_the_change_between_probes() -> None:
    ev, _plan = dynamic(3.4)
    step = judge_perf.step_time(judge_perf.probe_points(ev, "perf-007-w5"), T0, 10)
    assert step["r0"] == pytest.approx(25, abs=0.5) and step["r1"] == pytest.approx(75, abs=0.5)
    assert step["t"] - T0 == pytest.approx(3.4, abs=0.1)


def test_dynamic_latency_healthy_passes() -> None:
    ev, plan = dynamic(3.4)
    v = judge_perf.judge_dynamic_latency(ev, {**TH, "perf007_settle_s": 10}, plan)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["metric_latency_s"] == 2.5
    assert v.metrics["throughput_latency_s"] == pytest.approx(3.4, abs=0.1)


def test_dynamic_latency_late_change_fails() -> None:
    ev, plan = dynamic(18.0)
    v = judge_perf.judge_dynamic_latency(ev, {**TH, "perf007_settle_s": 20}, plan)
    assert v.status is Status.FAIL and "throughput_latency" in v.summary


def test_dynamic_latency_no_throughput_change_fails() -> None:
    ev, plan = dynamic(None)
    v = judge_perf.judge_dynamic_latency(ev, {**TH, "perf007_settle_s": 10}, plan)
    assert v.status is Status.FAIL and "throughput_changed" in v.summary


def test_dynamic_latency_metric_never_exported_fails() -> None:
    ev, plan = dynamic(3.4, metric_at=None)
    v = judge_perf.judge_dynamic_latency(ev, {**TH, "perf007_settle_s": 10}, plan)
    assert v.status is Status.FAIL and "metric_latency" in v.summary


# ------------------------------------------------------------------------------------------------ PERF-008


def scale(makespans: dict[int, float]) -> tuple[Evidence, dict[str, Any]]:
    pods, logs, steps = [], {}, []
    for n, span in makespans.items():
        names = [f"s{n}-{i}" for i in range(n)]
        steps.append({"n": n, "pods": names})
        for p in names:
            pods.append(rec(p, start=0.0, end=span))
            logs[p] = log(span - 2)
    return Evidence.from_parts(pods, logs), {"steps": steps, "cap": 16, "cap_reason": "4 GPU(s) x 4", "dropped": [32]}


def test_scale_ladder_healthy_passes_with_cap_in_summary() -> None:
    ev, plan = scale({2: 100.0, 4: 110.0, 8: 200.0, 16: 390.0})
    v = judge_perf.judge_scale_ladder(ev, TH, plan)
    assert v.status is Status.PASS, v.summary
    assert "capped at 16 pods" in v.summary and "[32]" in v.summary
    assert v.metrics["steps"][0]["aggregate_runs_per_s"] == 0.02


def test_scale_ladder_cliff_fails() -> None:
    ev, plan = scale({2: 100.0, 4: 110.0, 8: 400.0})
    v = judge_perf.judge_scale_ladder(ev, TH, plan)
    assert v.status is Status.FAIL and "n=8" in v.summary


def test_scale_ladder_failed_pod_fails() -> None:
    ev, plan = scale({2: 100.0, 4: 110.0})
    ev.pods[3] = rec("s4-1", phase="Failed", code=1, start=0, end=110)
    assert judge_perf.judge_scale_ladder(ev, TH, plan).status is Status.FAIL


def test_scale_ladder_without_capacity_is_skip() -> None:
    v = judge_perf.judge_scale_ladder(Evidence.from_parts([], {}), TH, {"skip": "no step fits"})
    assert v.status is Status.SKIP


# ------------------------------------------------------------------------------------------------ PERF-009/010


def linear(runtimes: dict[str, list[float]], base: float = 100.0) -> tuple[Evidence, dict[str, Any]]:
    pods, logs, names = [rec("base")], {"base": log(base)}, []
    for gpu, rts in runtimes.items():
        for i, r in enumerate(rts):
            name = f"{gpu}-{i}"
            names.append(name)
            pods.append(rec(name, gpu=gpu))
            logs[name] = log(r)
    return Evidence.from_parts(pods, logs), {"baseline_pods": ["base"], "load_pods": names}


def test_single_card_linearity_healthy_and_broken() -> None:
    ev, plan = linear({"GPU-a": [395, 402, 405, 398]})
    assert judge_perf.judge_linearity(ev, TH, plan, multi_card=False).status is Status.PASS
    ev, plan = linear({"GPU-a": [600, 610, 590, 605]})  # 50 % sharing overhead
    v = judge_perf.judge_linearity(ev, TH, plan, multi_card=False)
    assert v.status is Status.FAIL and "GPU-a" in v.summary


def test_single_card_linearity_is_judged_on_the_span_of_staggered_pods() -> None:
    """Four pods of 100 s of work each on one shared GPU that is never idle, started 40 s apart: the span is 400 s
    (ratio 4, PASS) while the mean runtime is 315 s (3.15, -21 %: the lab's healthy PERF-009 measured -16/-20 %)."""
    def stamped(end: float, runtime: float) -> str:
        ts = datetime.fromtimestamp(1_800_000_000 + end, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return f"{ts} PASS\n{ts} --- {runtime} seconds ---\n"

    runs = {"c-0": (0, 340), "c-1": (40, 370), "c-2": (80, 390), "c-3": (120, 400)}
    pods, logs = [rec("base")], {"base": log(100.0)}
    for name, (start, end) in runs.items():
        pods.append(rec(name, gpu="GPU-a"))
        logs[name] = stamped(end, end - start)
    ev, plan = Evidence.from_parts(pods, logs), {"baseline_pods": ["base"], "load_pods": list(runs)}
    v = judge_perf.judge_linearity(ev, TH, plan, multi_card=False)
    row = next(iter(v.metrics["gpus"].values()))
    assert v.status is Status.PASS and row["ratio_of"] == "span" and row["span_s"] == 400.0, row
    assert row["mean_runtime_s"] == 315.0  # the mean alone (-21 %) would have failed a healthy GPU
    logs["c-3"] = stamped(600, 570)  # one pod slowed: the span grows past the tolerance
    assert judge_perf.judge_linearity(Evidence.from_parts(pods, logs), TH, plan, multi_card=False).status \
        is Status.FAIL


def test_linearity_skips_when_placement_does_not_apply() -> None:
    ev, plan = linear({"GPU-a": [100], "GPU-b": [100]})
    assert judge_perf.judge_linearity(ev, TH, plan, multi_card=False).status is Status.SKIP
    assert judge_perf.judge_linearity(ev, TH, plan, multi_card=True).status is Status.PASS
    ev, plan = linear({"GPU-a": [200, 200]})
    assert judge_perf.judge_linearity(ev, TH, plan, multi_card=True).status is Status.SKIP


def test_multi_card_interference_fails() -> None:
    ev, plan = linear({"GPU-a": [100], "GPU-b": [150]})
    assert judge_perf.judge_linearity(ev, TH, plan, multi_card=True).status is Status.FAIL


# ------------------------------------------------------------------------------------------------ PERF-005/006


def test_oversub_cost_recorded_and_skip_elsewhere() -> None:
    ev = Evidence.from_parts([rec("off"), rec("on"), rec("x1")], {"off": log(100.0), "on": log(112.0),
                                                                  "x1": log(300.0)})
    plan = {"off_pod": "off", "on_pod": "on", "factor_pods": {"1.5": "x1"}}
    v = judge_perf.judge_oversub_cost(ev, TH, plan)
    assert v.status is Status.PASS and v.metrics["cost_pct"] == 12.0
    assert judge_perf.judge_oversub_cost(ev, {**TH, "perf_oversub_max_cost_pct": 10}, plan).status is Status.FAIL
    assert judge_perf.judge_oversub_cost(ev, TH, {"skip": "T4 only"}).status is Status.SKIP
    ev.pods[2] = rec("x1", phase="Failed", code=1)
    assert judge_perf.judge_oversub_cost(ev, TH, plan).status is Status.FAIL


# ------------------------------------------------------------------------------------------------ measurements


def test_common_measurements_from_dmon_sampler_and_scheduler_log(tmp_path: Path) -> None:
    (tmp_path / "remote_n1_dmon.txt").write_text(
        "# gpu    sm   mem   enc   dec\n# Idx     %     %     %     %\n"
        + "".join(f"    0    {v}    10     0     0\n    1     -     0     0     0\n" for v in (20, 30, 40, 50, 60))
    )
    (tmp_path / "sampler").mkdir()
    (tmp_path / "sampler" / "h1_gpu.csv").write_text(
        "timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes\n1,0,U,10,1,2\n2,0,U,90,1,2\n")
    (tmp_path / "scheduler.log").write_text(
        "2026-01-01T00:00:00Z [XPUSHARE][INFO]: Sent LOCK_OK to client 0123456789abcdef\n"
        "2026-01-01T00:00:01Z [XPUSHARE][INFO]: Sent DROP_LOCK to client 0123456789abcdef\n"
        "2026-01-01T00:00:10Z [XPUSHARE][INFO]: Sent LOCK_OK to client 0123456789abcdef\n")
    write_pod_records(tmp_path, [])
    m = judge_perf.common_measurements(Evidence.load(tmp_path))
    assert m["gpu_util"]["source"] == "dmon"
    assert m["gpu_util"]["gpus"]["n1/gpu0"] == {"p50": 40.0, "p95": 58.0, "samples": 5}
    assert "n1/gpu1" not in m["gpu_util"]["gpus"]  # no numeric sample
    assert m["gpu_util"]["gpus"]["h1/gpu0"]["p50"] == 50.0
    assert m["scheduler"] == {"lock_ok": 2, "drop_lock": 1, "throttles": 0, "span_s": 10.0, "lock_ok_per_s": 0.2,
                              "drop_lock_per_s": 0.1}


# ------------------------------------------------------------------------------------------------ re-judging


def store_perf011(root: Path, run_id: str, runtimes: dict[str, float]) -> Path:
    """A stored PERF-011 case (evidence, plan, result.json) as the engine leaves it."""
    run_dir = run_store.run_dir(root, run_id)
    case_dir = run_store.case_dir(run_dir, "lab", "performance", "PERF-011")
    (case_dir / "pods").mkdir(parents=True)
    names = {"base": "perf-011-base", **{q: f"perf-011-q{q}" for q in runtimes}}
    write_pod_records(case_dir, [rec(n) for n in names.values()])
    # the scheduler registered every pod: the SUT was in each one's path (judge/sut_path.py)
    (case_dir / "scheduler.log").write_text("".join(
        f"[XPUSHARE][INFO]: Registered client {i:016x} on GPU GPU-lab-0 with Pod name = {n}, Pod namespace = default\n"
        for i, n in enumerate(names.values(), 1)))
    (case_dir / "pods" / "perf-011-base.log").write_text(log(100.0))
    for q, v in runtimes.items():
        (case_dir / "pods" / f"perf-011-q{q}.log").write_text(log(v))
    plan = {"baseline_pods": [names["base"]], "quota_pods": {q: names[q] for q in runtimes}, "gpu_model": "lab"}
    (case_dir / "plan.json").write_text(json.dumps(plan))
    case = REGISTRY["PERF-011"]
    params = {"pod_timeout_s": 1800, "workload_args": {}, **case.params}
    verdict = lifecycle.judge_case(case, case_dir, params)
    record = {"run_id": run_id, "cluster": "lab", "suite": "performance", "case_id": "PERF-011",
              "title": case.title, "status": verdict.status.value, "summary": verdict.summary,
              "thresholds": params, "metrics": verdict.metrics, "checks": [], "evidence": verdict.evidence,
              "required": True, "error": None}
    run_store.write_result(case_dir, record)
    run_store.write_run_meta(run_dir, {"run_id": run_id, "clusters": ["lab"], "required": ["PERF-011"]})
    return case_dir


def test_rejudge_flips_a_stored_perf_verdict_with_another_tolerance(tmp_path: Path) -> None:
    case_dir = store_perf011(tmp_path, "r1", {"25": 440.0, "50": 210.0, "75": 140.0})  # +10 %, +5 %, +5 %
    assert json.loads((case_dir / "result.json").read_text())["status"] == "FAIL"
    assert (case_dir / "runtime_vs_quota.png").is_file()
    status = stored_run.rejudge("r1", ["perf_quota_tolerance=0.12"], root=tmp_path)
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "PASS" and int(status) == 0
    assert result["thresholds"]["perf_quota_tolerance"] == 0.12
    assert "runtime_vs_quota.png" in result["evidence"]
    status = stored_run.rejudge("r1", ["perf_quota_tolerance=0.08"], root=tmp_path)
    assert json.loads((case_dir / "result.json").read_text())["status"] == "FAIL" and int(status) == 1
    report = (run_store.run_dir(tmp_path, "r1") / "run-report.md").read_text()
    assert "runtime_vs_quota.png" in report


# ------------------------------------------------------------------------------------------------ acts (fakes)


class GpuPlans:
    """A Kubernetes cluster where pods of attempt ``k`` land on ``plans[k]`` = (GPU of -a, GPU of -z): its
    :attr:`backend` (a fake) starts pods onto those GPUs, its scheduler log registers them there, deleting a pod
    (:attr:`deleted`) or the cleanup (:attr:`cleanups`) frees them; the scheduler DaemonSet's environment is
    ``XPUSHARE_METRICS_ENABLE=1``, its edits in ``kube.calls``."""

    def __init__(self, plans: list[tuple[str, str]]) -> None:
        self.plans = plans
        self.attempt = 0
        self.gpu_of: dict[str, str] = {}
        self.deleted: list[str] = []
        self.cleanups = 0
        self.kube = FakeKube(env={"XPUSHARE_METRICS_ENABLE": "1"}, scheduler_log=self.log,
                             on_delete_pod=self.delete)
        self.backend = FakeBackend(mode="k8s", kubernetes=self.kube, on_start=self.start, on_cleanup=self.cleanup,
                                   placement=FakePlacement(colocation=("n1", 2)))

    def start(self, pods: Sequence[WorkloadSpec]) -> None:
        a_gpu, z_gpu = self.plans[min(self.attempt, len(self.plans) - 1)]
        self.attempt += 1
        for p in pods:
            self.gpu_of[p.name] = a_gpu if "-a" in p.name else (z_gpu if "-z" in p.name else "GPU-b")

    def log(self) -> str:
        lines = []
        for i, (pod, gpu) in enumerate(self.gpu_of.items()):
            lines.append(f"[pod/s/c] 2026-01-01T00:00:0{i % 10}Z [XPUSHARE][INFO]: Registered client "
                         f"{i:016x} on GPU {gpu} with Pod name = {pod}, Pod namespace = default")
        return "\n".join(lines) + "\n"

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.gpu_of.pop(name, None)

    def cleanup(self) -> None:
        self.cleanups += 1
        self.gpu_of.clear()

    def started(self) -> list[str]:
        return [p.name for p in self.backend.started]


def fake_run(tmp_path: Path, sim: GpuPlans, case_id: str = "PERF-004", **params: Any) -> Any:
    from xpushare.cases.base import CaseRun
    from xpushare.cases.performance import COMMON
    from xpushare.inventory import schema

    cluster = schema.load(None).cluster("local")
    # sizing has its own tests (tests/unit/cases/test_sizing.py): these fakes print no runtime for a calibration pod
    return CaseRun(case_id, tmp_path, sim.backend, cluster, {**COMMON, "pod_timeout_s": 10, "workload_args": {},
                                                             "perf_autosize": False,
                                                             "perf_placement_timeout_s": 0, **params})


def test_colocation_retries_until_the_pair_shares_a_gpu(tmp_path: Path) -> None:
    from xpushare.cases import performance_workloads

    sim = GpuPlans([("GPU-a", "GPU-b"), ("GPU-a", "GPU-a")])
    run = fake_run(tmp_path, sim)
    pods = performance_workloads.start_colocated(run, "mix", "w6_fixed_add", {"core_limit": 30}, {"core_limit": 60})
    assert pods is not None and [p.name for p in pods] == ["perf-004-mix-r2-a", "perf-004-mix-r2-fill1",
                                                            "perf-004-mix-r2-z"]
    assert sim.deleted == ["perf-004-mix-a", "perf-004-mix-fill1", "perf-004-mix-z"]
    assert sim.cleanups == 0 and len(run.plan["attempts"]) == 2
    assert run.plan["pods"] == [p.name for p in pods] and run.plan["pair"] == ["perf-004-mix-r2-a",
                                                                               "perf-004-mix-r2-z"]
    assert dict(pods[0].env) == {} and pods[0].core_limit == 30 and pods[2].core_limit == 60


def test_colocation_gives_up_after_bounded_retries_and_the_case_is_premise_error(tmp_path: Path) -> None:
    from xpushare.cases import performance_workloads

    sim = GpuPlans([("GPU-a", "GPU-b")])
    run = fake_run(tmp_path, sim, perf_placement_retries=3, perf_filler_workload="w3_idle_add",
                   perf_filler_args=["--steps", "5"])
    got = performance_workloads.start_colocated(run, "mix", "w6_fixed_add", {"core_limit": 30}, {"core_limit": 60})
    assert got is None
    assert sim.attempt == 3 and len(sim.deleted) == 9 and run.plan["colocation_failed"] is True
    saved = json.loads((tmp_path / "plan.json").read_text())
    v = judge_perf.judge_mixed(Evidence.from_parts([], {}), TH, {**saved, "pair_quotas": [30, 60],
                                                                  "baseline_pods": []})
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-pods-one-gpu: ") \
        and "3 attempt(s)" in v.summary


def test_fillers_run_the_filler_workload(tmp_path: Path) -> None:
    from xpushare.cases import performance_workloads

    sim = GpuPlans([("GPU-a", "GPU-a")])
    run = fake_run(tmp_path, sim, perf_filler_workload="w3_idle_add", perf_filler_args=["--steps", "5"],
                   perf_pod_env={"OMP_NUM_THREADS": "1"})
    pods = performance_workloads.start_colocated(run, "mix", "w6_fixed_add", {"core_limit": 30}, {"core_limit": 60})
    assert pods is not None
    assert [(p.workload, p.args) for p in pods] == [("w6_fixed_add", ()), ("w3_idle_add", ("--steps", "5")),
                                                    ("w6_fixed_add", ())]
    assert dict(pods[0].env) == {"OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("original", ["1", None])
def test_exporter_redeploy_restores_the_daemonset(tmp_path: Path, original: str | None) -> None:
    from xpushare.cases import performance_workloads

    sim = GpuPlans([("GPU-a", "GPU-a")])
    if original is None:
        sim.kube.env = {}
    run = fake_run(tmp_path, sim)
    with pytest.raises(RuntimeError), performance_workloads.exporter_disabled(run):
        assert sim.kube.calls[0] == ["set", "env", "daemonset/xpushare-scheduler", "XPUSHARE_METRICS_ENABLE=0"]
        raise RuntimeError("the off run failed")
    restore = "XPUSHARE_METRICS_ENABLE=1" if original else "XPUSHARE_METRICS_ENABLE-"
    assert sim.kube.calls[-2] == ["set", "env", "daemonset/xpushare-scheduler", restore]
    assert sim.kube.calls[-1] == ["rollout", "status", "xpushare-scheduler"]
    assert run.plan["exporter_env"] == {"variable": "XPUSHARE_METRICS_ENABLE", "original": original, "off": "0"}


# ------------------------------------------------------------------------------------------------ the perf task


def test_perf_task_on_local_skips_naming_the_premises_and_rejudge_keeps_the_skips(tmp_path: Path) -> None:
    """``invoke perf`` on the built-in local cluster (host mode, no SUT, no GPU): PERF-001 SKIPs, premise ``sut``
    (issue 35: it PASSed, a baseline of a system that never ran), the quota cases SKIP, premise ``kubernetes``;
    ``invoke judge --set perf_baseline_min_s=...`` leaves a SKIP a SKIP (the baseline's own re-judgment on
    stored evidence: test_baseline_* above, and the lab's test_k8s_performance)."""
    import subprocess
    import sys

    root_dir = REPO_ROOT

    def invoke(*args: str) -> subprocess.CompletedProcess[str]:
        return run_tool([sys.executable, "-m", "invoke", *args, "--root", str(tmp_path)], cwd=root_dir, timeout=300)

    fast = ["--set", 'workload_args={w6_fixed_add: [--n, "64", --iters, "200", --no-progress]}']
    proc = invoke("perf", "--cluster", "local", "--run-id", "lp", "--case", "PERF-001", "--case", "PERF-011",
                  "--set", "perf_baseline_min_s=0.0001", *fast)
    base = run_store.run_dir(tmp_path, "lp") / "local" / "performance"
    r1 = json.loads((base / "PERF-001" / "result.json").read_text())
    assert proc.returncode == 0 and r1["status"] == "SKIP", proc.stdout + proc.stderr
    assert r1["summary"].startswith("premise unmet: sut: ") and not (base / "PERF-001" / "pods.json").exists()
    r11 = json.loads((base / "PERF-011" / "result.json").read_text())
    assert r11["status"] == "SKIP" and r11["summary"].startswith("premise unmet: kubernetes: ")
    proc = invoke("judge", "--run-id", "lp", "--set", "perf_baseline_min_s=60")
    r1 = json.loads((base / "PERF-001" / "result.json").read_text())
    assert proc.returncode == 0 and r1["status"] == "SKIP", proc.stdout + proc.stderr
    proc = invoke("perf", "--cluster", "local", "--case", "PERF-001", "--set", "perf_quota_tolerance=0.1")
    assert proc.returncode == 2 and "unknown parameter" in proc.stderr


def test_linearity_without_a_load_pods_log_is_error_not_skip() -> None:
    """A load pod whose log was not collected (placement known only for the others): the case cannot be judged,
    and that must not read as SKIP "no GPU shared"."""
    ev, plan = linear({"GPU-a": [100], "GPU-b": [100]})
    ev.logs.pop(plan["load_pods"][0])
    v = judge_perf.judge_linearity(ev, TH, plan, multi_card=False)
    assert v.status is Status.ERROR and "load_pods_succeeded" in v.summary, v.summary
