"""ISO judgments on recorded outputs of each system (issue 38): held, held but not usable (MPS's context counts
against its limit) and bypassed kept apart with how far off; HAMi-core and MPS must show the workload in their own
lines (the HAMi-core log lines and the MPS server log as their sources print them), else ERROR, premise sut."""

from __future__ import annotations

from typing import Any

from tests.paths import REPO_ROOT
from tests.unit.judge.test_isolation import line
from tests.unit.judge.test_isolation_compute import line as compute_line
from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import judge_compute_path, judge_memory_path
from xpushare.model.case_record import CaseRecord
from xpushare.model.workload import WorkloadRecord
from xpushare.report.isolation_table import isolation_rows as rows_of

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "parsers"
MIB = 1 << 20
QUOTA = 1024 * MIB
TH = {"iso_memory_tolerance_ratio": 0.02}
POD = "iso-001-probe"
PID = 4242


def isolation_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """:func:`xpushare.report.isolation_table.isolation_rows` of stored records (as result.json holds them)."""
    return rows_of([CaseRecord.from_json({"cluster": "", **r}) for r in records])


def evidence(log: str, files: dict[str, str] | None = None, pid: int = PID) -> Evidence:
    rec = WorkloadRecord(POD, "Succeeded", 0, "n1", started=1000.0, finished=1010.0, log=f"pods/{POD}.log",
                         host_pid=pid)
    return Evidence.from_parts([rec], {POD: log + "\nPASS\n--- 1.0 seconds ---\n"}, files=files or {}, mode="host")


def plan(sut: str, path: str = "cuMemAlloc") -> dict[str, Any]:
    return {"pods": [POD], "path": path, "quota_bytes": QUOTA, "quota_source": "env", "sut": sut}


def probe(accepted: int, refused: int = 64 * MIB, error: str = "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY(2)",
          path: str = "cuMemAlloc") -> str:
    return line(path, accepted=accepted, refused=refused, cap=3 * QUOTA, error=error)


SERVER_LOG = (FIXTURES / "mps_server.log").read_text()
HAMI_LOG = (FIXTURES / "hami_core_probe.log").read_text()
HAMI_INIT = "\n".join(HAMI_LOG.splitlines()[:2]) + "\n"  # its Initializing/Initialized lines alone


def test_mps_held_but_not_usable_is_fail_apart_from_bypassed_with_how_far_off() -> None:
    # what an H200 gave under CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G: 448 MiB, the context counted against it
    v = judge_memory_path(evidence(probe(448 * MIB), {"scheduler.log": SERVER_LOG}), TH, plan("mps"))
    assert v.status.value == "FAIL", v.summary
    assert v.summary.startswith("quota_usable: cuMemAlloc held but not usable: only 448 MiB of a 1024 MiB quota")
    assert "-576 MiB, -56.2%" in v.summary and "bypassed" not in v.summary
    m = v.metrics
    assert (m["outcome"], m["held"], m["usable"], m["usable_short_bytes"], m["usable_short_ratio"]) == (
        "held, not usable", True, False, 576 * MIB, 0.5625)
    assert m["sut"] == "mps" and m["bypass_bytes"] == 0
    assert next(c for c in v.checks if c.name == "sut_in_path").ok is True
    row = isolation_rows([{"suite": "isolation", "cluster": "m", "case_id": "ISO-001", "status": "FAIL",
                           "metrics": m}])[0]
    assert row[4] == "held, not usable"


def test_a_bypass_says_by_how_much() -> None:
    v = judge_memory_path(evidence(HAMI_INIT + probe(3 * QUOTA, refused=0, error="none", path="cuMemCreate")),
                          TH, plan("hami-core", "cuMemCreate"))
    assert v.status.value == "FAIL"
    assert v.summary == ("quota_held: cuMemCreate bypassed: held 3072 MiB under a 1024 MiB quota (+2048 MiB, "
                         "+200.0%; the probe stopped at its cap)")
    assert v.metrics["outcome"] == "bypassed" and v.metrics["bypass_ratio"] == 2.0


def test_hami_core_held_is_pass_with_its_init_line() -> None:
    v = judge_memory_path(evidence(HAMI_LOG), TH, plan("hami-core"))
    assert v.status.value == "PASS", v.summary
    assert v.metrics["outcome"] == "held" and v.metrics["usable_short_bytes"] == 0


def test_hami_core_without_its_own_line_is_error_not_a_bypass() -> None:
    # HAMi-core not loaded (no preload, a wrong sut_lib): the probe held 3 GiB, but the system was never there
    v = judge_memory_path(evidence(probe(3 * QUOTA, refused=0, error="none")), TH, plan("hami-core"))
    assert v.status.value == "ERROR"
    assert v.summary.startswith("premise unmet: sut: hami-core not shown in the workloads' path: iso-001-probe "
                                "(pid 4242: no '[HAMI-core Msg(...)]: Initializing' line")
    # another process's line is not this workload's
    v = judge_memory_path(evidence(HAMI_LOG, pid=99), TH, plan("hami-core"))
    assert v.status.value == "ERROR" and "pid 99" in v.summary


def test_mps_without_the_workload_as_a_client_is_error() -> None:
    v = judge_memory_path(evidence(probe(QUOTA), {"scheduler.log": SERVER_LOG}, pid=77), TH, plan("mps"))
    assert v.status.value == "ERROR" and "pid 77 never connected to an MPS server" in v.summary
    v = judge_memory_path(evidence(probe(QUOTA)), TH, plan("mps"))
    assert v.status.value == "ERROR" and "no MPS server log stored" in v.summary


def test_the_project_sut_is_judged_as_before() -> None:
    v = judge_memory_path(evidence(probe(QUOTA)), TH, plan("xpushare"))
    assert v.status.value == "PASS" and not any(c.name == "sut_in_path" for c in v.checks)


def test_a_compute_case_of_hami_core_needs_its_line_too() -> None:
    lines = [compute_line(0.5, i) for i in range(3)]
    th = {"iso_compute_skip_intervals": 1, "iso_compute_sources_tolerance": 0.1, "perf_quota_tolerance": 0.08,
          "perf_mixed_tolerance": 0.1, "perf_mixed_tolerance_t4": 0.12}
    cplan = {"pods": [POD], "path": "cuLaunchKernel", "core_limit": 50, "neighbour": None,
             "neighbour_core_limit": None, "quota_source": "env", "sut": "hami-core"}
    v = judge_compute_path(evidence("\n".join(lines)), th, cplan)
    assert v.status.value == "ERROR" and v.summary.startswith("premise unmet: sut: hami-core"), v.summary
    v = judge_compute_path(evidence(HAMI_INIT + "\n".join(lines)), th, cplan)
    assert v.status.value == "PASS", v.summary


def recorded_probe_log(name: str) -> str:
    """A probe's log as recorded on the H200, less its closing lines (:func:`evidence` adds them)."""
    return (FIXTURES / name).read_text().replace("PASS\n", "").split("--- ")[0]


def test_hami_core_on_an_h200_is_held_but_not_usable() -> None:
    """What HAMi-core's own log and the probe said on an H200 (docs/runs/2026-11-28-cross-sut, run 3): refused at
    448 MiB of 1 GiB (HAMi-core counts the CUDA context, ~518 MiB, against the limit: its OOM line)."""
    v = judge_memory_path(evidence(recorded_probe_log("hami_core_r3_iso001_probe.log"), pid=875), TH, plan("hami-core"))
    assert v.status.value == "FAIL", v.summary
    assert v.summary.startswith("quota_usable: cuMemAlloc held but not usable: only 448 MiB of a 1024 MiB quota")
    assert v.metrics["outcome"] == "held, not usable" and v.metrics["sut"] == "hami-core"


def test_hami_core_failing_cuMemGetInfo_in_a_child_is_error_not_a_verdict() -> None:
    """Run 3's ISO-009: the child's context took HAMi-core's count over the limit and cuMemGetInfo_v2 failed with
    CUDA_ERROR_INVALID_VALUE: the probe could not finish its measurement, so no verdict on the quota."""
    v = judge_memory_path(evidence(recorded_probe_log("hami_core_r3_iso009_probe.log"), pid=3341), TH,
                          plan("hami-core", "child-process"))
    assert v.status.value == "ERROR", v.summary
    assert "cuMemGetInfo_v2 returned CUDA_ERROR_INVALID_VALUE" in v.summary
