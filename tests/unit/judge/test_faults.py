"""FAIL-005..007's judgment (xpushare/judge/faults.py) on hand-made evidence: each check can fail."""

from __future__ import annotations

from typing import Any

from xpushare.cases.stability import GPU_FAULT_PARAMS
from xpushare.evidence.store import Evidence
from xpushare.judge.faults import judge_gpu_fault, window_rates
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord

T0 = 1_800_000_000.0
GPU_A, GPU_B = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"
TH = {**GPU_FAULT_PARAMS, "fail_rate_margin_s": 1.0, "pod_timeout_s": 60}


def w5_log(rates: list[int], *, died: str | None = None) -> str:
    """A W5 log: one probe line per second at the given per-second rates, then PASS (or a CUDA error)."""
    lines, it = [], 0
    for s, r in enumerate(rates, start=1):
        it += int(r)
        lines.append(f"[XPUSHARE][QUOTA_PROBE] elapsed={s:.3f}s it={it} it_per_sec={it / s:.2f}")
    if died:
        lines.append(f"RuntimeError: cuLaunchKernel returned {died} (700)")
    else:
        lines += ["PASS", f"--- {len(rates):.3f} seconds ---"]
    return "\n".join(lines) + "\n"


def rec(name: str, gpu: str, phase: str, finished: float, pid: int) -> WorkloadRecord:
    return WorkloadRecord(name, phase, exit_code=0 if phase == "Succeeded" else 1, node="n1", gpu=gpu, started=T0,
                     finished=finished, host_pid=pid)


def evidence(*, ghost: bool = False, slow: bool = False, victim_ok: bool = False) -> tuple[Evidence, dict[str, Any]]:
    victim = "fail-005-victim-1"
    pods = [rec(victim, GPU_A, "Succeeded" if victim_ok else "Failed", T0 + 5, 101),
            rec("fail-005-same-1", GPU_A, "Succeeded", T0 + 12, 102),
            rec("fail-005-other-1", GPU_B, "Succeeded", T0 + 12, 103),
            rec("fail-005-probe-same", GPU_A, "Succeeded", T0 + 20, 104)]
    logs = {victim: w5_log([50] * 5, died=None if victim_ok else "CUDA_ERROR_ILLEGAL_ADDRESS"),
            "fail-005-same-1": w5_log([50] * 5 + ([10] * 7 if slow else [100] * 7)),
            "fail-005-other-1": w5_log([100] * 12),
            "fail-005-probe-same": "PASS\n--- 1.000 seconds ---\n"}
    page = "\n".join(['xpushare_client_info{namespace="none",pod="none",host_pid="102"} 1',
                      *(['xpushare_client_info{namespace="none",pod="none",host_pid="101"} 1'] if ghost else [])])
    facts = [{"node": "n1", "instance": "42", "healthy": True, "restarts": 0, "error": None}]
    plan = {"fault": {"kind": "illegal-address", "applied": True, "victims": [victim]}, "victim_pods": [victim],
            "neighbour_pods": ["fail-005-same-1", "fail-005-other-1"], "probe_pods": ["fail-005-probe-same"],
            "scheduler_before": facts, "scheduler_after": facts,
            "metrics_after": {"n1": {"file": "metrics_after_fault.txt", "ok": True, "http_code": 200,
                                     "client_info": [["none", "none"]] * (2 if ghost else 1),
                                     "client_pids": [102, 101] if ghost else [102]}}}
    log = "".join(f"[XPUSHARE][DEBUG]: SO_PEERCRED: client fd=7 pid={p} (client reported pid={p})\n"
                  f"[XPUSHARE][INFO]: Registered client {i:016x} on GPU {g} with Pod name = none, Pod namespace = "
                  "none\n" for i, g, p in ((1, GPU_A, 101), (2, GPU_A, 102), (3, GPU_B, 103), (4, GPU_A, 104)))
    log += "[XPUSHARE][INFO]: Removing client 0000000000000001\n"
    ev = Evidence.from_parts(pods, logs, {"metrics_after_fault.txt": page, "scheduler.log": log}, mode="host")
    return ev, plan


def test_window_rates_split_at_the_fault() -> None:
    log = w5_log([50] * 5 + [100] * 7)
    before, after, nb, na = window_rates(log, rec("x", GPU_A, "Succeeded", T0 + 12, 1), T0 + 5, T0 + 5, 1.0)
    assert before == 50 and after == 100 and nb == 4 and na == 7


def test_healthy_evidence_passes() -> None:
    ev, plan = evidence()
    v = judge_gpu_fault(ev, TH, plan)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["same_gpu"]["fail-005-same-1"]["rate_after"] == 100


def test_a_ghost_a_stalled_neighbour_and_a_missing_fault() -> None:
    ev, plan = evidence(ghost=True)
    v = judge_gpu_fault(ev, TH, plan)
    assert v.status is Status.FAIL and "failed_clients_removed" in v.summary and "host_pid 101" in v.summary
    ev, plan = evidence(slow=True)
    v = judge_gpu_fault(ev, TH, plan)
    assert v.status is Status.FAIL and "progress_same_gpu: fail-005-same-1 slowed from 50.00 to 10.00" in v.summary
    ev, plan = evidence(victim_ok=True, ghost=True)  # no fault: ERROR whatever else failed
    v = judge_gpu_fault(ev, TH, plan)
    assert v.status is Status.ERROR and v.summary.startswith("fault_injected"), v.summary


def test_a_restarted_scheduler_fails() -> None:
    ev, plan = evidence()
    plan["scheduler_after"] = [{**plan["scheduler_after"][0], "instance": "43"}]
    v = judge_gpu_fault(ev, TH, plan)
    assert v.status is Status.FAIL and "scheduler_survived" in v.summary
