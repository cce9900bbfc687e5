"""The memory probe's line (written by ``workloads/mem_probe.py``, parsed by ``parsers/mem_probe``) and the
isolation judgment (``judge/isolation``): held / usable / accuracy, and never PASS on missing evidence."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import judge_memory_path, phase_lines
from xpushare.model.case_record import CaseRecord
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.mem_probe import parse_text
from xpushare.report.isolation_table import isolation_rows as rows_of

WORKLOADS = REPO_ROOT / "xpushare" / "data" / "workloads"
sys.path.insert(0, str(WORKLOADS))
probe: Any = importlib.import_module("mem_probe")

MIB = 1 << 20
QUOTA = 256 * MIB
TH = {"iso_memory_tolerance_ratio": 0.02}
POD = "iso-001-probe"


def isolation_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """:func:`xpushare.report.isolation_table.isolation_rows` of stored records (as result.json holds them)."""
    return rows_of([CaseRecord.from_json({"cluster": "", **r}) for r in records])


def line(path: str = "cuMemAlloc", accepted: int = QUOTA, refused: int = 64 * MIB, cap: int = 3 * QUOTA,
         status: str = "ok", error: str = "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY(2)", **kw: Any) -> str:
    a = probe.Attempt(path, cap, 64 * MIB, accepted, refused, error, status, 123, 456, kw.get("detail", "-"))
    return str(probe.format_line(a, kw.get("round_no", 0), kw.get("phase", "start"), kw.get("elapsed", 0.5)))


def evidence(log: str, phase: str = "Succeeded", code: int = 0) -> Evidence:
    rec = WorkloadRecord(POD, phase, code, "n1", started=1000.0, finished=1010.0, log=f"pods/{POD}.log", host_pid=42)
    return Evidence.from_parts([rec], {POD: log + "\nPASS\n--- 1.0 seconds ---\n"}, mode="host")


def plan(path: str = "cuMemAlloc") -> dict[str, Any]:
    return {"pods": [POD], "path": path, "quota_bytes": QUOTA, "quota_source": "env"}


def test_the_probe_line_round_trips_through_the_parser() -> None:
    text = "2026-11-27T10:00:00.000000000Z " + line(error="OutOfMemoryError: CUDA out of memory. Tried 64 MiB")
    (got,) = parse_text(text + "\nother\n")
    assert (got.path, got.accepted_bytes, got.refused_bytes, got.cap_bytes, got.mem_free, got.mem_total) == (
        "cuMemAlloc", QUOTA, 64 * MIB, 3 * QUOTA, 123, 456)
    assert got.error == "OutOfMemoryError: CUDA out of memory. Tried 64 MiB" and got.refused
    assert got.timestamp is not None and got.status == "ok" and got.detail == "-"
    assert parse_text("[XPUSHARE][MEM_PROBE] path=x round=oops") == []


def test_refused_at_the_quota_is_pass_with_its_accuracy() -> None:
    v = judge_memory_path(evidence(line()), TH, plan())
    assert v.status.value == "PASS", v.summary
    assert v.metrics["accuracy"] == 1.0 and v.metrics["held"] is True and "accuracy 1.000" in v.summary


def test_a_path_that_holds_three_times_the_quota_is_fail() -> None:
    v = judge_memory_path(evidence(line("cuMemCreate", accepted=3 * QUOTA, refused=0, error="none")), TH, plan())
    assert v.status.value == "FAIL" and "quota_held" in v.summary and "bypassed" in v.summary, v.summary
    assert v.metrics["accuracy"] == 3.0 and v.metrics["held"] is False


def test_within_the_tolerance_is_held_and_refused_far_below_is_not_usable() -> None:
    tol = int(0.02 * QUOTA)
    assert judge_memory_path(evidence(line(accepted=QUOTA + tol)), TH, plan()).status.value == "PASS"
    assert judge_memory_path(evidence(line(accepted=QUOTA + tol + 1)), TH, plan()).status.value == "FAIL"
    v = judge_memory_path(evidence(line(accepted=64 * MIB)), TH, plan())
    assert v.status.value == "FAIL" and "quota_usable" in v.summary, v.summary


@pytest.mark.parametrize(("log", "why"), [
    ("", "no [XPUSHARE][MEM_PROBE] line"),
    (line("torch-expandable", 0, 0, 0, "unavailable", "torch not importable: No module named 'torch'"),
     "node prerequisite missing"),
    (line(status="error", accepted=0, refused=0, error="RuntimeError: cuMemMap returned CUresult(1)"),
     "the probe failed"),
    # capped at the quota: nothing beyond it was asked for, so nothing proves the quota held
    (line(accepted=QUOTA, refused=0, cap=QUOTA, error="none"), "cap"),
])
def test_missing_or_unusable_evidence_is_error_never_pass(log: str, why: str) -> None:
    v = judge_memory_path(evidence(log), TH, plan())
    assert v.status.value == "ERROR" and why in v.summary, v.summary


def test_a_child_process_adds_to_the_parent() -> None:
    text = line("child-process", accepted=2 * QUOTA, detail=f"parent:{QUOTA},child:{QUOTA}")
    v = judge_memory_path(evidence(text), TH, plan("child-process"))
    assert v.status.value == "FAIL" and v.metrics["detail"] == f"parent:{QUOTA},child:{QUOTA}"


def test_isolation_table_rows() -> None:
    v = judge_memory_path(evidence(line("cuMemAllocManaged", accepted=3 * QUOTA, refused=0, error="none")), TH,
                          plan("cuMemAllocManaged"))
    rec = {"cluster": "c1", "suite": "isolation", "case_id": "ISO-002", "status": v.status.value,
           "metrics": v.metrics}
    assert isolation_rows([rec, {"suite": "functional", "case_id": "FUNC-001", "status": "PASS"}]) == [
        ["c1", "ISO-002", "cuMemAllocManaged", "256 MiB (env)", "bypassed", "3.000", "FAIL"]]


def test_phase_lines_split_at_a_change() -> None:
    text = "\n".join(line(elapsed=e, round_no=i) for i, e in enumerate((0.1, 5.0, 20.0)))
    before, after = phase_lines(parse_text(text), 1000.0, 1004.0, 10.0)
    assert [x.round for x in before] == [0] and [x.round for x in after] == [2]
