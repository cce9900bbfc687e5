"""Sizes that fit the hardware (cases/sizing.py) and the "GPU busy" guard of the PERF cases
(evidence/gpu_apps.py, engine/lifecycle.with_idle_check), on fakes and on the real captured sample."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from tests.paths import FIXTURES
from xpushare.cases import sizing
from xpushare.cases.base import CaseRun
from xpushare.cases.performance import COMMON
from xpushare.engine.lifecycle import with_idle_check
from xpushare.evidence import gpu_apps
from xpushare.evidence.store import Evidence
from xpushare.inventory import schema
from xpushare.inventory.sut_profiles import PROFILES
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.transport.base import CommandResult

SAMPLES = FIXTURES / "samples"
W6 = "w6_fixed_add"


def calibration(rate: float | None, model: str = "H100") -> FakeBackend:
    """Runs calibration pods instantly: a pod with ``--iters N`` reports ``N / rate`` seconds (None: it fails)."""
    backend: FakeBackend

    def log(pod: str) -> str:
        args = next(p for p in backend.started if p.name == pod).args
        iters = int(args[args.index("--iters") + 1])
        info = (f"[XPUSHARE][INFO] workload=w6 device=cuda:0 name='NVIDIA {model} X' model={model!r} "
                f"n=14000 iters={iters} sync_every=1000\n")
        if rate is None:
            return info + "Traceback (most recent call last):\nRuntimeError: CUDA error\n"
        return info + f"PASS\n--- {iters / rate!r} seconds ---\n"

    backend = FakeBackend(log=log)
    return backend


def case_run(tmp_path: Path, backend: FakeBackend, gpu_model: str | None, **params: Any) -> CaseRun:
    cluster = schema.load(None).cluster("local")
    cluster = dataclasses.replace(cluster, gpu_model=gpu_model)
    return CaseRun("PERF-001", tmp_path, backend, cluster, {**COMMON, "workload_args": {}, **params})


def test_a_known_fast_gpu_gets_more_iterations(tmp_path: Path) -> None:
    run = case_run(tmp_path, calibration(None), "NVIDIA H100 80GB HBM3")
    record = sizing.fit_to_hardware(run, W6)
    rate = 3.02e12 / (12 * 14000**2)
    want = math.ceil(90 * rate / 1000) * 1000
    assert record["source"] == "model H100" and record["default_iters"] == 60000
    assert run.sized_args[W6] == ("--iters", str(want))
    assert record["expected_s"] >= 90
    assert run.pod("base", W6).args[-2:] == ("--iters", str(want))
    assert run.plan["sizing"][W6] is record


def test_a_slow_gpu_keeps_the_legacy_count(tmp_path: Path) -> None:
    run = case_run(tmp_path, calibration(None), "Tesla T4")
    record = sizing.fit_to_hardware(run, W6)
    assert W6 not in run.sized_args and record["iters"] == 60000 and record["expected_s"] > 500


def test_an_explicit_iteration_count_wins(tmp_path: Path) -> None:
    run = case_run(tmp_path, calibration(None), "H100", workload_args={W6: ["--iters", "777"]})
    assert sizing.fit_to_hardware(run, W6)["source"] == "workload_args"
    assert W6 not in run.sized_args


def test_an_unknown_gpu_is_calibrated_until_the_run_is_long_enough(tmp_path: Path) -> None:
    backend = calibration(10000.0, model="H200")
    run = case_run(tmp_path, backend, None, perf_size_target_s=30)
    record = sizing.fit_to_hardware(run, W6)
    cal = record["calibration"]
    # 1000 iterations last 0.1 s (< 2 s): again with 8 x as many, until one lasts 2 s or 3 pods ran
    assert cal["samples"] == [[1000, 0.1], [8000, 0.8], [64000, 6.4]] and len(cal["pods"]) == 3
    assert cal["model"] == "H200" and record["source"] == "calibration"
    assert run.sized_args[W6] == ("--iters", "300000")
    assert "pods" not in run.plan  # calibration pods are not judged


def test_a_failed_calibration_keeps_the_defaults(tmp_path: Path) -> None:
    run = case_run(tmp_path, calibration(None), None)
    record = sizing.fit_to_hardware(run, W6)
    assert record["note"].startswith("no rate measured") and W6 not in run.sized_args


def test_sizing_can_be_turned_off(tmp_path: Path) -> None:
    run = case_run(tmp_path, calibration(None), "H100", perf_autosize=False)
    assert sizing.fit_to_hardware(run, W6)["source"].startswith("off") and not run.sized_args


# ------------------------------------------------------------------------------------------------ GPU busy


class SmiHost:
    name = "gpu1"

    def __init__(self, output: str) -> None:
        self.output = output
        self.argv: list[str] = []

    def run(self, argv: list[str], **_: Any) -> CommandResult:
        self.argv = list(argv)
        return CommandResult(host=self.name, argv=tuple(argv), stdout=self.output, stderr="", exit_code=0,
                             duration_s=0.01)


def files(before: str, after: str, tmp_path: Path) -> dict[str, str | None]:
    gpu_apps.capture({"gpu1": SmiHost(before)}, tmp_path, "before")  # type: ignore[dict-item]
    gpu_apps.capture({"gpu1": SmiHost(after)}, tmp_path, "after")  # type: ignore[dict-item]
    return {gpu_apps.file_name(t): (tmp_path / gpu_apps.file_name(t)).read_text() for t in gpu_apps.TAGS}


def test_an_idle_gpu_passes_the_check(tmp_path: Path) -> None:
    header = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"
    check = gpu_apps.idle_check(files(header, header, tmp_path))
    assert check.ok is True and check.detail == ""


def test_a_leftover_process_makes_the_gpu_busy(tmp_path: Path) -> None:
    busy = (SAMPLES / "nvidia_smi_compute_apps.csv").read_text()  # a real workload process on an H200
    header = busy.splitlines()[0] + "\n"
    check = gpu_apps.idle_check(files(busy, header, tmp_path))
    assert check.ok is None
    assert check.detail.startswith("GPU busy: before gpu1: pid 478 python3 (610 MiB) on GPU-")
    doc = json.loads((tmp_path / "gpu_apps" / "before.json").read_text())
    assert doc["gpu1"]["exit"] == 0


def test_the_mps_server_is_the_system_not_another_tenant(tmp_path: Path) -> None:
    # what an H200 listed after PERF-012 under MPS: the server holds the context for its clients and stays
    header = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"
    server = header + "12852, nvidia-cuda-mps-server, 66 MiB, GPU-55d3955f-b277-f8c0-4cb8-1039edd4fd51\n"
    text_of = files(header, server, tmp_path)
    assert gpu_apps.idle_check(text_of).ok is None  # another system's run: a busy GPU
    check = gpu_apps.idle_check(text_of, PROFILES["mps"].gpu_processes)
    assert check.ok is True and check.values["own_processes_ignored"] == ["nvidia-cuda-mps-server"]
    other = server + "478, /usr/bin/python3, 610 MiB, GPU-55d3955f-b277-f8c0-4cb8-1039edd4fd51\n"
    assert gpu_apps.idle_check(files(header, other, tmp_path), ("nvidia-cuda-mps-server",)).ok is None


def test_a_host_without_nvidia_smi_is_named_not_judged(tmp_path: Path) -> None:
    check = gpu_apps.idle_check(files(gpu_apps.NOT_FOUND + "\n", gpu_apps.NOT_FOUND + "\n", tmp_path))
    assert check.ok is True and "not observable" in check.detail and "nvidia-smi: not found" in check.detail


def test_snapshots_not_taken_are_named() -> None:
    check = gpu_apps.idle_check({})
    assert check.ok is True and "before: not captured" in check.detail


@pytest.mark.parametrize("status", [Status.PASS, Status.FAIL])
def test_a_busy_gpu_turns_any_measurement_into_error(tmp_path: Path, status: Status) -> None:
    busy = (SAMPLES / "nvidia_smi_compute_apps.csv").read_text()
    files(busy, busy, tmp_path)
    verdict = Verdict(status, "baseline 40 s", [Check("x", "x", {}, status is Status.PASS)])
    out = with_idle_check(verdict, Evidence.from_parts([], {}, case_dir=tmp_path))
    assert out.status is Status.ERROR and out.summary.startswith("GPU busy: before gpu1: pid 478")
    assert f"(was {status}" in out.summary and "gpu_apps/before.json" in out.evidence


def test_an_idle_gpu_leaves_the_verdict_alone(tmp_path: Path) -> None:
    header = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"
    files(header, header, tmp_path)
    verdict = Verdict(Status.FAIL, "slow", [Check("x", "x", {}, False)])
    out = with_idle_check(verdict, Evidence.from_parts([], {}, case_dir=tmp_path))
    assert out.status is Status.FAIL and out.checks[-1].name == "gpu_idle"
