"""Verdicts of the legacy scenarios (xpushare/legacy/judgments.py): PASS only on full evidence, the legacy
scripts' weak rules made strict, missing evidence ERROR."""

from __future__ import annotations

from xpushare.evidence.store import Evidence
from xpushare.legacy import judgments
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord

NS = "default"
GOOD = ("[XPUSHARE][INFO][2026-02-14 10:00:00] 100%|##########| 10/10 [00:01<00:00, 9.50it/s]\n"
        "PASS\n--- 1.5 seconds ---\n")


def ok(name: str, node: str = "n1") -> WorkloadRecord:
    return WorkloadRecord(name=name, phase="Succeeded", exit_code=0, node=node, started=100.0, finished=102.0)


def failed(name: str) -> WorkloadRecord:
    return WorkloadRecord(name=name, phase="Failed", exit_code=1, node="n1", started=100.0, finished=101.0)


def registered(*pods: tuple[str, str], prefix: str = "[pod/s/c] ") -> str:
    return "".join(
        f"{prefix}[XPUSHARE][INFO]: Registered client {i:016x} on GPU {gpu} with Pod name = {pod}, "
        f"Pod namespace = {NS}\n" for i, (pod, gpu) in enumerate(pods, start=1))


def test_all_pass_needs_every_pod_passed_and_registered() -> None:
    plan = {"pods": ["a", "b"], "namespace": NS}
    sched = registered(("a", "GPU-0"), ("b", "GPU-1"))
    ev = Evidence.from_parts([ok("a"), ok("b")], {"a": GOOD, "b": GOOD}, {"scheduler.log": sched})
    v = judgments.judge_all_pass(ev, {}, plan)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["gpus_used"] == 2 and v.metrics["pods_per_gpu"] == {"GPU-0": 1, "GPU-1": 1}
    assert v.metrics["speed_avg_it_s"] == 9.5

    # PASS word without the runtime line: FAIL (the bash accepted the word or the phase).
    ev = Evidence.from_parts([ok("a"), ok("b")], {"a": GOOD, "b": "PASS\n"}, {"scheduler.log": sched})
    assert judgments.judge_all_pass(ev, {}, plan).status is Status.FAIL

    # A pod that never registered with the scheduler did not run under the SUT.
    ev = Evidence.from_parts([ok("a"), ok("b")], {"a": GOOD, "b": GOOD}, {"scheduler.log": registered(("a", "G"))})
    v = judgments.judge_all_pass(ev, {}, plan)
    assert v.status is Status.FAIL and "never registered" in v.summary

    # No scheduler log: the placement cannot be judged -> ERROR, never PASS.
    ev = Evidence.from_parts([ok("a"), ok("b")], {"a": GOOD, "b": GOOD})
    assert judgments.judge_all_pass(ev, {}, plan).status is Status.ERROR

    # No log for a pod: ERROR.
    ev = Evidence.from_parts([ok("a"), ok("b")], {"a": GOOD}, {"scheduler.log": sched})
    assert judgments.judge_all_pass(ev, {}, plan).status is Status.ERROR


def test_baseline_judges_only_the_native_pods() -> None:
    plan = {"pods": ["pytorch-add-baseline"], "workloads": {"pytorch-add-baseline": "standard"}}
    ev = Evidence.from_parts([ok("pytorch-add-baseline")], {"pytorch-add-baseline": GOOD})
    v = judgments.judge_baseline(ev, {}, plan)
    assert v.status is Status.PASS and v.metrics["durations_s"] == {"pytorch-add-baseline": 2}
    ev = Evidence.from_parts([failed("pytorch-add-baseline")], {"pytorch-add-baseline": "Traceback\n"})
    assert judgments.judge_baseline(ev, {}, plan).status is Status.FAIL


MEMLIMIT_PLAN = {"tests": [
    {"n": 1, "label": "1Gi limit", "pod": "memlimit-test-1gi", "expect": "rejected"},
    {"n": 2, "label": "4Gi limit", "pod": "memlimit-test-4gi", "expect": "pass"},
    {"n": 3, "label": "no limit", "pod": "memlimit-test-nolimit", "expect": "pass"},
]}
LIMIT_INFO = "[XPUSHARE][INFO]: GPU memory limit set to 1073741824 bytes (1.00 GiB)\n"
REJECTED = LIMIT_INFO + (
    "[XPUSHARE][WARN]: cuMemAlloc rejected: 784334848 + 784334848 = 1568669696 would exceed limit 1073741824 bytes\n"
    "RuntimeError: CUDA out of memory. Tried to allocate 748.00 MiB\n")


def test_memlimit_refusal_needs_a_real_rejection_line() -> None:
    pods = [failed("memlimit-test-1gi"), ok("memlimit-test-4gi"), ok("memlimit-test-nolimit")]
    logs = {"memlimit-test-1gi": REJECTED, "memlimit-test-4gi": GOOD, "memlimit-test-nolimit": GOOD}
    v = judgments.judge_memlimit(Evidence.from_parts(pods, logs), {}, MEMLIMIT_PLAN)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["tests"] == {"Test 1 (1Gi limit)": "PASS", "Test 2 (4Gi limit)": "PASS",
                                  "Test 3 (no limit)": "PASS"}
    # The script passed test 1 on the INFO line "memory limit" alone; a pod that died for another reason
    # (or never allocated) is not a refusal.
    logs["memlimit-test-1gi"] = LIMIT_INFO + "Traceback: ImportError: no torch\n"
    v = judgments.judge_memlimit(Evidence.from_parts(pods, logs), {}, MEMLIMIT_PLAN)
    assert v.status is Status.FAIL and v.metrics["tests"]["Test 1 (1Gi limit)"] == "FAIL"
    # The low-limit pod passing means the limit was not enforced.
    pods[0] = ok("memlimit-test-1gi")
    logs["memlimit-test-1gi"] = LIMIT_INFO + GOOD
    assert judgments.judge_memlimit(Evidence.from_parts(pods, logs), {}, MEMLIMIT_PLAN).status is Status.FAIL


def test_memlimit_summary_block() -> None:
    text = judgments.memlimit_summary({"Test 1 (1Gi limit)": "PASS", "Test 2 (4Gi limit)": "FAIL"})
    assert text.splitlines() == ["  Test 1 (1Gi limit): PASS", "  Test 2 (4Gi limit): FAIL",
                                 "Total: 1 passed, 1 failed", "  Some tests failed."]


GI = 2**30
DYN_PLAN = {"namespace": NS, "manual_pod": "manual-dynamic-test", "late_pod": "manual-dynamic-test-late",
            "late_value": "1Gi", "late_bytes": GI,
            "steps": [{"value": "2Gi", "bytes": 2 * GI}, {"value": "4Gi", "bytes": 4 * GI},
                      {"value": None, "bytes": None}]}


def dyn_log(values: list[int]) -> str:
    lines = [registered(("manual-dynamic-test", "G"), prefix="").strip()]
    old = 0
    for v in values:
        lines.append(f"[XPUSHARE][INFO]: Memory limit changed for pod {NS}/manual-dynamic-test: {old} -> {v} bytes")
        lines.append(f"[XPUSHARE][INFO]: Sending UPDATE_LIMIT to client 0000000000000001: {v} bytes")
        old = v
    lines.append(f"[XPUSHARE][INFO]: Applying initial memory limit for {NS}/manual-dynamic-test-late: {GI} bytes")
    return "\n".join(lines) + "\n"


def test_dynamic_limit_needs_each_value_logged_and_the_late_client_refused() -> None:
    pods = [WorkloadRecord(name="manual-dynamic-test", phase="Running"), failed("manual-dynamic-test-late")]
    logs = {"manual-dynamic-test": "", "manual-dynamic-test-late": REJECTED}
    v = judgments.judge_dynamic_limit(Evidence.from_parts(pods, logs, {"scheduler.log": dyn_log([2 * GI, 4 * GI])}),
                                      {}, DYN_PLAN)
    assert v.status is Status.PASS, v.summary
    v = judgments.judge_dynamic_limit(Evidence.from_parts(pods, logs, {"scheduler.log": dyn_log([2 * GI])}),
                                      {}, DYN_PLAN)
    assert v.status is Status.FAIL and "memory_changes_logged" in v.summary
    v = judgments.judge_dynamic_limit(Evidence.from_parts(pods, logs), {}, DYN_PLAN)
    assert v.status is Status.ERROR


def dmon(samples: list[tuple[int, int]]) -> str:
    """``nvidia-smi dmon -s u`` text, one row per (gpu, sm) pair in order."""
    rows = ["# gpu    sm   mem   enc   dec   jpg   ofa", "# Idx     %     %     %     %     %     %"]
    rows += [f"    {g}   {sm:3d}     5     0     0     0     0" for g, sm in samples]
    return "\n".join(rows) + "\n"


COMPUTE_PLAN = {
    "pods": ["manual-dynamic-test"], "namespace": NS,
    "changes": [{"pod": "manual-dynamic-test", "value": 30}, {"pod": "manual-dynamic-test", "value": 80}],
    "phases": [{"name": "Step 1 (30%)", "start_s": 2, "end_s": 6, "targets": {"manual-dynamic-test": 30}},
               {"name": "Step 2 (80%)", "start_s": 8, "end_s": 12, "targets": {"manual-dynamic-test": 80}}],
}
COMPUTE_SCHED = registered(("manual-dynamic-test", "GPU-b"), prefix="") + (
    f"[XPUSHARE][INFO]: Compute limit changed for pod {NS}/manual-dynamic-test: 100% -> 30%\n"
    f"[XPUSHARE][INFO]: Compute limit changed for pod {NS}/manual-dynamic-test: 30% -> 80%\n")
SMI_L = "GPU 0: Tesla T4 (UUID: GPU-a)\nGPU 1: Tesla T4 (UUID: GPU-b)\n"


def compute_evidence(sm_gpu1: list[int], *, with_dmon: bool = True) -> Evidence:
    files = {"scheduler.log": COMPUTE_SCHED, "nvidia_smi_L_n1.txt": SMI_L}
    if with_dmon:
        samples = [s for sm in sm_gpu1 for s in ((0, 0), (1, sm))]  # GPU 0 idle, GPU 1 the pod's
        files["remote_n1_dmon.txt"] = dmon(samples)
    pods = [WorkloadRecord(name="manual-dynamic-test", phase="Running", node="n1")]
    return Evidence.from_parts(pods, {"manual-dynamic-test": ""}, files)


def test_compute_utilisation_of_the_pods_gpu_follows_the_limit() -> None:
    th = {"legacy_util_tolerance": 15}
    sm = [100, 100, 31, 29, 33, 28, 90, 90, 82, 79, 85, 77, 100]
    v = judgments.judge_compute(compute_evidence(sm), th, COMPUTE_PLAN)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["gpu_of_pod"] == {"manual-dynamic-test": "n1/GPU 1"}
    phase1 = v.metrics["utilisation"]["Step 1 (30%): manual-dynamic-test"]
    assert phase1["samples"] == 4 and abs(phase1["actual"] - 30.25) < 1e-9

    # The limit not enforced: utilisation stays at 100 %.
    v = judgments.judge_compute(compute_evidence([100] * 13), th, COMPUTE_PLAN)
    assert v.status is Status.FAIL and "utilisation_follows_limit" in v.summary

    # No dmon capture (no nvidia-smi on the node): unevaluable -> ERROR, never PASS.
    v = judgments.judge_compute(compute_evidence(sm, with_dmon=False), th, COMPUTE_PLAN)
    assert v.status is Status.ERROR
    text = judgments.format_compute_analysis(v.metrics, 15)
    assert "NOT EVALUATED: no dmon capture" in text


def test_compute_two_pods_on_one_gpu_compare_the_sum_of_limits() -> None:
    plan = {"pods": ["a", "b"], "namespace": NS, "changes": [{"pod": "a", "value": 30}, {"pod": "b", "value": 60}],
            "phases": [{"name": "S1", "start_s": 0, "end_s": 4, "targets": {"a": 30, "b": 60}}]}
    sched = registered(("a", "GPU-b"), ("b", "GPU-b"), prefix="") + (
        f"[XPUSHARE][INFO]: Compute limit changed for pod {NS}/a: 100% -> 30%\n"
        f"[XPUSHARE][INFO]: Compute limit changed for pod {NS}/b: 100% -> 60%\n")
    files = {"scheduler.log": sched, "nvidia_smi_L_n1.txt": SMI_L,
             "remote_n1_dmon.txt": dmon([(1, 88), (1, 92), (1, 91), (1, 89)])}
    pods = [WorkloadRecord(name="a", phase="Running", node="n1"), WorkloadRecord(name="b", phase="Running", node="n1")]
    v = judgments.judge_compute(Evidence.from_parts(pods, {"a": "", "b": ""}, files),
                                {"legacy_util_tolerance": 15}, plan)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["utilisation"]["S1: a+b"]["target"] == 90


def test_complex2_needs_the_initial_core_limit_for_each_pod() -> None:
    plan = {"pods": ["c1", "c2"], "namespace": NS, "core_limit": 50}
    sched = registered(("c1", "G"), ("c2", "G")) + "".join(
        f"[pod/s/c] [XPUSHARE][INFO]: Applying initial compute limit for {NS}/{p}: 50%\n" for p in ("c1", "c2"))
    ev = Evidence.from_parts([ok("c1"), ok("c2")], {"c1": GOOD, "c2": GOOD}, {"scheduler.log": sched})
    assert judgments.judge_complex2(ev, {}, plan).status is Status.PASS
    sched_one = sched.rsplit("[pod/s/c] [XPUSHARE][INFO]: Applying", 1)[0]
    ev = Evidence.from_parts([ok("c1"), ok("c2")], {"c1": GOOD, "c2": GOOD}, {"scheduler.log": sched_one})
    v = judgments.judge_complex2(ev, {}, plan)
    assert v.status is Status.FAIL and "c2" in v.summary


def test_smoke_needs_health_and_the_messages_family() -> None:
    plan = {"pods": ["xpushare-smoke-c1"], "metric_prefix": "xpushare_", "backend": "cuda"}
    metrics = 'xpushare_scheduler_messages_total{type="REGISTER"} 3\n'
    nvml = 'xpushare_gpu_sampler_backend_info{backend="nvml"} 1\n'
    files = {"metrics_health.txt": "OK\nHTTP_CODE=200\n", "metrics.txt": metrics + nvml}
    ev = Evidence.from_parts([ok("xpushare-smoke-c1")], {"xpushare-smoke-c1": GOOD}, files)
    v = judgments.judge_smoke(ev, {}, plan)
    assert v.status is Status.PASS and v.summary == "workload and metrics passed"
    files["metrics.txt"] = metrics
    v = judgments.judge_smoke(Evidence.from_parts(ev.pods, ev.logs, files), {}, plan)
    assert v.status is Status.PASS and "WARN: no NVML" in v.summary
    files["metrics_health.txt"] = "\nHTTP_CODE=000\n"
    assert judgments.judge_smoke(Evidence.from_parts(ev.pods, ev.logs, files), {}, plan).status is Status.FAIL
    del files["metrics_health.txt"]
    assert judgments.judge_smoke(Evidence.from_parts(ev.pods, ev.logs, files), {}, plan).status is Status.ERROR


def test_phase_average_window() -> None:
    assert judgments.phase_average([10, None, 30, 50], 1, 4) == (40.0, 2)
    assert judgments.phase_average([10], 5, 9) == (None, 0)
