"""The compute probe's line (written by ``workloads/compute_probe.py``, parsed by ``parsers/compute_probe``) and
the compute isolation judgment (``judge/isolation.judge_compute_path``): the GPU share against the core quota,
the two clocks, co-location with a neighbour, and never PASS on missing evidence."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import xpushare.cases.isolation  # noqa: F401  (registers the ISO cases)
from tests.paths import REPO_ROOT
from xpushare.backends.base import CAP_CLIENT_LIBRARY
from xpushare.cases.base import REGISTRY
from xpushare.engine.lifecycle import skip_reason
from xpushare.evidence.store import Evidence
from xpushare.judge.isolation import judge_compute_path
from xpushare.model.case_record import CaseRecord
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.compute_probe import parse_text
from xpushare.report.isolation_table import isolation_rows as rows_of

WORKLOADS = REPO_ROOT / "xpushare" / "data" / "workloads"
sys.path.insert(0, str(WORKLOADS))
probe: Any = importlib.import_module("compute_probe")

TH = {"iso_compute_skip_intervals": 1, "iso_compute_sources_tolerance": 0.05, "perf_quota_tolerance": 0.08,
      "perf_mixed_tolerance": 0.10, "perf_mixed_tolerance_t4": 0.12}
POD, NEIGHBOUR = "iso-011-probe", "iso-014-probe-z"


def isolation_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """:func:`xpushare.report.isolation_table.isolation_rows` of stored records (as result.json holds them)."""
    return rows_of([CaseRecord.from_json({"cluster": "", **r}) for r in records])


def line(busy: float = 0.5, index: int = 1, path: str = "cuLaunchKernel", status: str = "ok",
         kernel_ms: float = 4.0, wall_ms: float | None = None, error: str = "none") -> str:
    """A probe line of a 4 s interval in which the kernels filled ``busy`` of the time."""
    kernels = round(busy * 4000 / kernel_ms) if status == "ok" else 0
    iv = probe.Interval(path, status, kernels, kernels // 8, 4.0 if status == "ok" else 0.0, kernel_ms,
                        wall_ms if wall_ms is not None else kernel_ms * 1.003, "sim", error)
    return str(probe.format_line(iv, index, "run", 3.0 + 4 * index))


def log(*lines: str) -> str:
    return "\n".join(lines) + "\nPASS\n--- 20.0 seconds ---\n"


def record(name: str, gpu: str | None = "GPU-a", phase: str = "Succeeded") -> WorkloadRecord:
    return WorkloadRecord(name, phase, 0 if phase == "Succeeded" else 1, "n1", started=1000.0, finished=1020.0,
                     log=f"pods/{name}.log", gpu=gpu)


def evidence(logs: dict[str, str], recs: list[WorkloadRecord] | None = None) -> Evidence:
    return Evidence.from_parts(recs or [record(p) for p in logs], logs, mode="k8s")


def plan(path: str = "cuLaunchKernel", neighbour: str | None = None) -> dict[str, Any]:
    pods = [POD, NEIGHBOUR] if neighbour else [POD]
    return {"pods": pods, "path": path, "core_limit": 50, "quota_source": "annotation", "neighbour": neighbour,
            "neighbour_core_limit": 40 if neighbour else None}


def test_the_probe_line_round_trips_through_the_parser() -> None:
    text = "2026-11-27T10:00:00.000000000Z " + line(0.5) + "\nother\n" + line(status="unavailable",
                                                                                error="the CUDA driver has no X")
    got, bad = parse_text(text)
    assert (got.path, got.interval, got.kernels, got.wall_s, got.kernel_ms_events) == ("cuLaunchKernel", 1, 500,
                                                                                        4.0, 4.0)
    assert got.busy_events == 0.5 and got.timestamp is not None and got.device == "sim"
    assert bad.status == "unavailable" and bad.error == "the CUDA driver has no X"
    assert parse_text("[XPUSHARE][COMPUTE_PROBE] path=x interval=oops") == []


def test_half_the_gpu_under_a_50_percent_quota_is_pass() -> None:
    v = judge_compute_path(evidence({POD: log(line(1.0, 0), line(0.5, 1), line(0.51, 2))}), TH, plan())
    assert v.status.value == "PASS", v.summary
    assert v.metrics["held"] is True and v.metrics["intervals"] == 2 and abs(v.metrics["accuracy"] - 1.01) < 0.01
    assert "within ±8%" in v.summary  # the first interval (1.0, start-up) is not judged


def test_the_whole_gpu_under_a_50_percent_quota_is_fail_bypassed() -> None:
    v = judge_compute_path(evidence({POD: log(line(1.0, 0), line(0.99, 1), line(0.99, 2))}),
                           TH, plan("cuGraphLaunch"))
    assert v.status.value == "FAIL" and "bypassed" in v.summary, v.summary
    assert v.metrics["held"] is False and v.metrics["path"] == "cuGraphLaunch"
    rows = isolation_rows([{"suite": "isolation", "case_id": "ISO-013", "cluster": "c", "status": "FAIL",
                            "metrics": v.metrics}])
    assert rows == [["c", "ISO-013", "cuGraphLaunch", "50 % core (annotation)", "bypassed", "1.980", "FAIL"]]


def test_less_than_the_quota_is_fail_starved() -> None:
    v = judge_compute_path(evidence({POD: log(line(0.5, 0), line(0.40, 1))}), TH, plan())
    assert v.status.value == "FAIL" and "starved" in v.summary, v.summary


def test_events_longer_than_the_process_saw_are_error_not_a_verdict() -> None:
    # a batch that waited inside (a held lock, a neighbour) makes the wall clock's bound longer: fine
    v = judge_compute_path(evidence({POD: log(line(0.5, 0), line(0.5, 1, wall_ms=5.0))}), TH, plan())
    assert v.status.value == "PASS", v.summary
    v = judge_compute_path(evidence({POD: log(line(0.5, 0), line(0.5, 1, wall_ms=3.0))}), TH, plan())
    assert v.status.value == "ERROR" and "clocks_agree" in v.summary, v.summary


def test_missing_or_unavailable_lines_are_error() -> None:
    v = judge_compute_path(evidence({POD: log(line(0.5, 0))}), TH, plan())  # nothing past the skipped interval
    assert v.status.value == "ERROR", v.summary
    v = judge_compute_path(evidence({POD: log(line(status="unavailable", index=0,
                                                   error="the CUDA driver has no cuLaunchKernelEx"))}),
                           TH, plan("cuLaunchKernelEx"))
    assert v.status.value == "ERROR" and "not a verdict on the SUT" in v.summary, v.summary
    v = judge_compute_path(evidence({POD: ""}), TH, plan())
    assert v.status.value == "ERROR"


def test_beside_a_neighbour_the_mixed_tolerance_applies_and_placement_is_confirmed() -> None:
    logs = {POD: log(line(0.5, 0), line(0.545, 1)), NEIGHBOUR: log(line(0.4, 0), line(0.4, 1))}
    v = judge_compute_path(evidence(logs), TH, plan(neighbour=NEIGHBOUR))
    assert v.status.value == "PASS", v.summary  # +9 %: beyond ±8 %, within the mixed ±10 %
    assert v.metrics["neighbour_share"]["busy_events"] == 0.4 and "beside a 40 % neighbour" in v.summary
    assert v.metrics["neighbour_held"] is True
    starved = {POD: logs[POD], NEIGHBOUR: log(line(0.4, 0), line(0.2, 1))}  # the probe took the neighbour's time
    v = judge_compute_path(evidence(starved), TH, plan(neighbour=NEIGHBOUR))
    assert v.status.value == "FAIL" and v.summary.startswith("neighbour_quota_held") and "starved" in v.summary
    v = judge_compute_path(evidence(logs, [record(POD), record(NEIGHBOUR, gpu="GPU-b")]), TH, plan(neighbour=NEIGHBOUR))
    assert v.status.value == "ERROR" and v.summary.startswith("premise unmet: two-pods-one-gpu: co-location")
    v = judge_compute_path(evidence(logs, [record(POD), record(NEIGHBOUR, phase="Failed")]), TH,
                           plan(neighbour=NEIGHBOUR))
    assert v.status.value == "FAIL", v.summary  # a failed neighbour is not hidden behind a SKIP


def test_the_probe_runs_every_path_on_the_simulated_gpu(tmp_path: Path) -> None:
    assert sorted(probe.PATHS) == ["cuGraphLaunch", "cuLaunchKernel", "cuLaunchKernelEx"]
    assert probe.main(["--path", "nope"]) == 1


def stamped(second: int, text: str) -> str:
    return f"2026-11-27T10:00:{second:02d}.000000Z {text}"


def test_the_neighbour_is_judged_only_while_the_probe_ran() -> None:
    # the probe's intervals end at 8 and 12 s; the neighbour's at 8, 12 (beside it: 0.1) and 16, 20 (alone: 0.4)
    probe_log = log(stamped(4, line(0.9, 0)), stamped(8, line(0.9, 1)), stamped(12, line(0.9, 2)))
    n_log = log(*(stamped(4 * (i + 1), line(0.1 if i < 3 else 0.4, i)) for i in range(5)))
    v = judge_compute_path(evidence({POD: probe_log, NEIGHBOUR: n_log}), TH, plan("cuGraphLaunch", NEIGHBOUR))
    assert v.metrics["neighbour_share"]["intervals"] == 2 and v.metrics["neighbour_share"]["busy_events"] == 0.1
    assert v.status.value == "FAIL" and "neighbour_quota_held" in v.summary and v.metrics["neighbour_held"] is False


def test_the_busy_kernel_assembles_for_sm_80_and_sm_90(tmp_path: Path) -> None:
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas (CUDA toolkit) on this machine")
    source = tmp_path / "busy.ptx"
    source.write_bytes(probe.BUSY_PTX.rstrip(b"\0"))
    for arch in ("sm_80", "sm_90"):
        proc = subprocess.run([ptxas, f"-arch={arch}", str(source), "-o", str(tmp_path / f"{arch}.cubin")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr


def test_compute_cases_skip_in_host_mode_where_the_system_has_no_core_quota_variable() -> None:
    # the project's SUT takes a core quota only as an annotation; HAMi-core and MPS by a variable (issue 38)
    import dataclasses

    from xpushare.engine.lifecycle import cluster_facts
    from xpushare.inventory.schema import local_cluster

    caps = frozenset({CAP_CLIENT_LIBRARY})
    host = dataclasses.replace(local_cluster(), sut_lib="/x/lib.so")
    for case in ("ISO-011", "ISO-012", "ISO-013", "ISO-014", "ISO-015", "ISO-016"):
        reason = skip_reason(REGISTRY[case], caps, "host", cluster_facts(host, caps, 1))
        assert reason == ("premise unmet: core-quota: sut xpushare sets a core quota only as a pod annotation "
                          "(Kubernetes mode)"), (case, reason)
        for sut in ("hami-core", "mps"):
            facts = cluster_facts(dataclasses.replace(host, sut=sut), caps, 1)
            assert skip_reason(REGISTRY[case], caps, "host", facts) is None, (case, sut)
        assert skip_reason(REGISTRY[case], caps, "k8s") is None


def test_shares_that_add_up_to_more_than_the_gpu_are_error_not_a_verdict() -> None:
    # what a clock-spinning kernel gave on a real H200 beside a neighbour: 0.82 + 0.71 of one GPU
    logs = {POD: log(line(0.82, 0), line(0.82, 1)), NEIGHBOUR: log(line(0.71, 0), line(0.71, 1))}
    v = judge_compute_path(evidence(logs), TH, plan(neighbour=NEIGHBOUR))
    assert v.status.value == "ERROR", v.summary
    assert "shares_fit_one_gpu" in v.summary and "1.530" in v.summary
    total = next(c for c in v.checks if c.name == "shares_fit_one_gpu")
    assert total.values["total"] == 1.53
    # a bypassing probe that leaves the neighbour its remainder is still a FAIL (0.93 + 0.07 fits one GPU)
    logs = {POD: log(line(0.93, 0), line(0.93, 1)), NEIGHBOUR: log(line(0.07, 0), line(0.07, 1))}
    v = judge_compute_path(evidence(logs), TH, plan(neighbour=NEIGHBOUR))
    assert v.status.value == "FAIL" and "core_quota_held" in v.summary
