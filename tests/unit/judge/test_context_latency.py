"""PERF-013: the context probe's line (written by ``workloads/ctx_probe.py``, parsed by ``parsers/ctx_probe``), the
probe itself on the simulated GPU, and the judgment (``judge/context_latency``): the median wait for a first
context and kernel against ``perf013_max_total_ms``; never PASS on missing evidence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from tests.unit.judge.test_isolation_compute import record
from tests.unit.workloads.test_compute_probe import sim_env
from xpushare.cases.base import REGISTRY
from xpushare.evidence.store import Evidence
from xpushare.judge.context_latency import judge_context_latency
from xpushare.judge.sut_path import with_sut_checks
from xpushare.model.case_record import CaseRecord
from xpushare.parsers.ctx_probe import parse_text
from xpushare.report.compare import Comparison
from xpushare.report.compare import compare_results as compare_records

PROBE = REPO_ROOT / "xpushare" / "data" / "workloads" / "ctx_probe.py"
TH = {"perf013_max_total_ms": 1000.0}


def compare_results(runs: list[tuple[str, list[dict[str, Any]]]]) -> Comparison:
    """:func:`xpushare.report.compare.compare_results` of stored records (as result.json holds them)."""
    return compare_records([(run_id, [CaseRecord.from_json(r) for r in records]) for run_id, records in runs])


def line(init: float = 40.0, context: float = 60.0, alloc: float = 1.0, launch: float = 5.0, status: str = "ok",
         error: str = "none") -> str:
    total = init + context + alloc + launch
    return (f"[XPUSHARE][CTX_PROBE] status={status} init_ms={init:.3f} context_ms={context:.3f} alloc_ms={alloc:.3f} "
            f"launch_ms={launch:.3f} total_ms={total:.3f} device=gpu error={error}\nPASS\n--- 0.2 seconds ---\n")


def judge(logs: dict[str, str], sut: str = "xpushare") -> Any:
    ev = Evidence.from_parts([record(p) for p in logs], logs, mode="host")
    return judge_context_latency(ev, TH, {"pods": list(logs), "sut": sut})


def test_the_line_round_trips_and_a_step_not_reached_is_nan() -> None:
    (got,) = parse_text("2026-11-29T10:00:00Z " + line(init=12.5))
    assert got.complete and got.steps()["total_ms"] == 78.5 and got.init_ms == 12.5
    (bad,) = parse_text("[XPUSHARE][CTX_PROBE] status=error init_ms=3.000 context_ms=nan alloc_ms=nan launch_ms=nan "
                        "total_ms=nan device=gpu error=CudaDriverError: cuCtxSetCurrent failed")
    assert not bad.complete and bad.error.startswith("CudaDriverError")
    assert parse_text("[XPUSHARE][CTX_PROBE] status=ok init_ms=x") == []


def test_the_median_wait_within_the_limit_is_pass() -> None:
    v = judge({f"perf-013-r{i}": line(init=40 + i) for i in range(1, 6)})
    assert v.status.value == "PASS", v.summary
    assert v.metrics["median_ms"]["init_ms"] == 43.0 and v.metrics["median_ms"]["total_ms"] == 109.0
    assert "after 109.0 ms (median of 5; init 43.0" in v.summary and "within 1000 ms" in v.summary


def test_a_scheduler_that_keeps_registration_waiting_is_fail_naming_the_step() -> None:
    # register-after-5s: every REGISTER waits 5 s, so cuInit (where the client registers) takes 5 s
    v = judge({f"perf-013-r{i}": line(init=5012.0) for i in range(1, 4)})
    assert v.status.value == "FAIL" and "slowest step init_ms 5012 ms" in v.summary, v.summary


def test_one_slow_process_of_five_does_not_decide_the_median() -> None:
    logs = {f"perf-013-r{i}": line() for i in range(1, 5)}
    logs["perf-013-r5"] = line(init=3000.0)
    assert judge(logs).status.value == "PASS"


@pytest.mark.parametrize("log", ["", line(status="unavailable", error="no libcuda.so.1"),
                                 "[XPUSHARE][CTX_PROBE] status=error init_ms=3.000 context_ms=nan alloc_ms=nan "
                                 "launch_ms=nan total_ms=nan device=gpu error=CudaDriverError: x\n"])
def test_a_process_that_did_not_measure_is_error(log: str) -> None:
    v = judge({"perf-013-r1": line(), "perf-013-r2": log})
    assert v.status.value == "ERROR", v.summary


def test_an_mps_client_the_server_never_saw_is_error_naming_the_premise() -> None:
    # the proof is added after the judgment, as for every performance case (engine/lifecycle.py)
    logs = {"perf-013-r1": line()}
    ev = Evidence.from_parts([record(p) for p in logs], logs, mode="host")
    v = with_sut_checks(judge(logs, sut="mps"), ev, {}, {"pods": list(logs), "sut": "mps"})
    assert v.status.value == "ERROR" and "premise unmet: sut" in v.summary, v.summary


def test_the_case_and_the_comparison_cell() -> None:
    case = REGISTRY["PERF-013"]
    assert case.params["perf013_max_total_ms"] == 1000.0 and {"sut", "gpu"} <= set(case.requires)
    v = judge({f"perf-013-r{i}": line() for i in range(1, 4)})
    c = compare_results([("r", [{"suite": "performance", "cluster": "c", "case_id": "PERF-013",
                                 "status": v.status.value, "metrics": v.metrics, "summary": v.summary}])])
    assert c.rows() == [["PERF-013", "-", "first kernel 106.0 ms (init 40.0, context 60.0) PASS"]]


def test_the_probe_on_the_simulated_gpu(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(PROBE)], env=sim_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (got,) = parse_text(proc.stdout)
    assert got.complete and got.device == "sim" and 0 < got.total_ms < 5000, got
    assert "PASS" in proc.stdout.splitlines()
