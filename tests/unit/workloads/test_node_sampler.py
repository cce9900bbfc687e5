"""Tests of ``workloads/node_sampler.py`` (NVML / nvidia-smi sampler writing gpu.csv and procs.csv).

Parsers are checked against the captured nvidia-smi output in tests/fixtures/samples/ (H200, with headers
and units) and against header-less / unit-less text as the fallback's own queries produce. The sampler
itself runs as a subprocess: without any GPU (no_gpu.txt), and with a fake ``nvidia-smi`` first on PATH.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SAMPLER = ROOT / "workloads" / "node_sampler.py"
SAMPLES = ROOT / "tests" / "fixtures" / "samples"
MIB = 1 << 20
H200_UUID = "GPU-ae708708-d6f0-f18f-0d42-ab51554bfb37"


def _load_sampler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("xpushare_node_sampler", SAMPLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


ns = _load_sampler()
src = sys.modules["_sampler_sources"]  # its sources, imported by the sampler from its own directory


# ---------------------------------------------------------------------------------------------------------
# Pure parsing
# ---------------------------------------------------------------------------------------------------------


def test_parse_query_gpu_fixture_busy() -> None:
    rows = src.parse_query_gpu_csv((SAMPLES / "nvidia_smi_query_busy.csv").read_text())
    assert rows == [src.GpuSample(0, H200_UUID, 100.0, 1605 * MIB, 143771 * MIB)]


def test_parse_query_gpu_fixture_idle() -> None:
    rows = src.parse_query_gpu_csv((SAMPLES / "nvidia_smi_query_idle.csv").read_text())
    assert len(rows) == 1
    assert (rows[0].sm_util_pct, rows[0].mem_used_bytes, rows[0].mem_total_bytes) == (0.0, 0, 143771 * MIB)


def test_parse_query_gpu_fixture_uuid_matches_nvidia_smi_l() -> None:
    listed = (SAMPLES / "nvidia_smi_L.txt").read_text()
    rows = src.parse_query_gpu_csv((SAMPLES / "nvidia_smi_query_busy.csv").read_text())
    assert f"GPU {rows[0].gpu_index}: " in listed and f"(UUID: {rows[0].uuid})" in listed


@pytest.mark.parametrize(
    "text",
    [
        "0, GPU-a, 37, 1605, 143771\n1, GPU-b, [N/A], 0, 143771\n",  # noheader,nounits (the fallback's query)
        "0, GPU-a, 37 %, 1605 MiB, 143771 MiB\n1, GPU-b, [N/A], 0 MiB, 143771 MiB\n",  # noheader with units
        "index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
        "0, GPU-a, 37 %, 1605 MiB, 143771 MiB\n\n1, GPU-b, [Not Supported], 0 MiB, 143771 MiB\n",
    ],
)
def test_parse_query_gpu_with_and_without_header_and_units(text: str) -> None:
    rows = src.parse_query_gpu_csv(text)
    assert rows == [
        src.GpuSample(0, "GPU-a", 37.0, 1605 * MIB, 143771 * MIB),
        src.GpuSample(1, "GPU-b", None, 0, 143771 * MIB),
    ]


def test_parse_query_gpu_reordered_header() -> None:
    text = "memory.total [MiB], uuid, index\n16384 MiB, GPU-t4, 3\n"
    assert src.parse_query_gpu_csv(text) == [src.GpuSample(3, "GPU-t4", None, None, 16384 * MIB)]


@pytest.mark.parametrize(
    "text",
    [
        "0, GPU-a, 37, 1605\n",  # a field short
        "0, GPU-a, 37, 1605 MB, 100\n",  # unknown unit
        "0, GPU-a, 137, 1605, 100\n",  # utilisation over 100 %
        "0, GPU-a, 37, lots, 100\n",
        "name, memory.total [MiB]\nT4, 15360 MiB\n",  # no index/uuid
    ],
)
def test_parse_query_gpu_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        src.parse_query_gpu_csv(text)


def test_parse_query_gpu_empty() -> None:
    assert src.parse_query_gpu_csv("") == []
    assert src.parse_query_gpu_csv("\n  \n") == []


def test_parse_compute_apps_fixture() -> None:
    text = (SAMPLES / "nvidia_smi_compute_apps.csv").read_text()
    assert src.parse_compute_apps_csv(text, {H200_UUID: 0}) == [src.ProcSample(0, 478, 610 * MIB, H200_UUID)]
    # a UUID that the GPU query did not list keeps the row, without an index
    assert src.parse_compute_apps_csv(text, {}) == [src.ProcSample(None, 478, 610 * MIB, H200_UUID)]


def test_parse_compute_apps_noheader() -> None:
    text = "478, GPU-a, 610\n479, GPU-b, [N/A]\n"
    assert src.parse_compute_apps_csv(text, {"GPU-a": 0, "GPU-b": 1}) == [
        src.ProcSample(0, 478, 610 * MIB, "GPU-a"),
        src.ProcSample(1, 479, None, "GPU-b"),
    ]


@pytest.mark.parametrize("text", ["", "No running processes found\n", "pid, gpu_uuid, used_gpu_memory [MiB]\n"])
def test_parse_compute_apps_nothing_running(text: str) -> None:
    assert src.parse_compute_apps_csv(text, {}) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("610 MiB", 610 * MIB),
        ("610", 610 * MIB),
        (" 1.5 GiB ", 3 * (1 << 29)),
        ("512 KiB", 512 * 1024),
        ("7 B", 7),
        ("[N/A]", None),
        ("N/A", None),
        ("[Insufficient Permissions]", None),
        ("", None),
    ],
)
def test_parse_mem_bytes(text: str, expected: int | None) -> None:
    assert src.parse_mem_bytes(text) == expected


@pytest.mark.parametrize("text", ["-1 MiB", "12 MB", "abc", "1 2"])
def test_parse_mem_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        src.parse_mem_bytes(text)


@given(st.integers(min_value=0, max_value=10**7))
@settings(max_examples=50, deadline=None)
def test_parse_mem_bytes_units_agree(mib: int) -> None:
    assert src.parse_mem_bytes(f"{mib} MiB") == src.parse_mem_bytes(str(mib)) == mib * MIB


@pytest.mark.parametrize(
    ("cell", "field"),
    [
        (" memory.total [MiB]", "memory.total"),
        ("used_gpu_memory [MiB]", "used_memory"),
        ("utilization.gpu [%]", "utilization.gpu"),
        ("UUID", "uuid"),
    ],
)
def test_normalize_field(cell: str, field: str) -> None:
    assert src.normalize_field(cell) == field


def test_csv_rows_format() -> None:
    sample = src.Sample(
        1700000000.123456,
        [src.GpuSample(0, "GPU-a", 37.5, 10, 20), src.GpuSample(1, "GPU-b", None, None, 20)],
        [src.ProcSample(None, 42, None)],
    )
    assert ns.gpu_rows(sample) == [
        ["1700000000.123", "0", "GPU-a", "37.5", "10", "20"],
        ["1700000000.123", "1", "GPU-b", "", "", "20"],
    ]
    assert ns.proc_rows(sample) == [["1700000000.123", "", "42", ""]]


@pytest.mark.parametrize(("value", "disabled"), [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_nvml_disabled(value: str | None, disabled: bool) -> None:
    env = {} if value is None else {src.NO_NVML_ENV: value}
    assert src.nvml_disabled(env) is disabled


# ---------------------------------------------------------------------------------------------------------
# NVML backend with a fake pynvml module (in process)
# ---------------------------------------------------------------------------------------------------------


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The subset of pynvml the sampler calls; GPU 1 does not support utilisation."""

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return b"GPU-fake-0" if handle == 0 else "GPU-fake-1"  # old pynvml returned bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        if handle == 1:
            raise FakeNvmlError("Not Supported")
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(handle + 1) * MIB, total=16 * 1024 * MIB, free=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        if handle == 0:
            return [SimpleNamespace(pid=100, usedGpuMemory=5 * MIB), SimpleNamespace(pid=101, usedGpuMemory=None)]
        return []


def test_nvml_backend_sample() -> None:
    fake = FakeNvml()
    backend = src.NvmlBackend(fake)
    sample = backend.sample()
    assert sample.gpus == [
        src.GpuSample(0, "GPU-fake-0", 87.0, MIB, 16 * 1024 * MIB),
        src.GpuSample(1, "GPU-fake-1", None, 2 * MIB, 16 * 1024 * MIB),
    ]
    assert sample.procs == [src.ProcSample(0, 100, 5 * MIB, "GPU-fake-0"), src.ProcSample(0, 101, None, "GPU-fake-0")]
    assert len(sample.errors) == 1 and "Not Supported" in sample.errors[0]
    backend.close()
    backend.close()
    assert fake.shutdowns == 1


def _args(out_dir: Path, **kw: Any) -> argparse.Namespace:
    args = ns.build_parser().parse_args(["--out-dir", str(out_dir)])
    for key, value in kw.items():
        setattr(args, key, value)
    return args


def _read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


def test_run_with_fake_nvml_writes_csv(tmp_path: Path) -> None:
    log = io.StringIO()
    rc = ns.run(_args(tmp_path, count=2, interval_s=0.05), ns.StopFlag(), environ={}, nvml_loader=FakeNvml, log=log)
    assert rc == 0
    gpu = _read_csv(tmp_path / "gpu.csv")
    assert gpu[0] == list(ns.GPU_COLUMNS)
    assert [r[1:] for r in gpu[1:]] == [
        ["0", "GPU-fake-0", "87", str(MIB), str(16 * 1024 * MIB)],
        ["1", "GPU-fake-1", "", str(2 * MIB), str(16 * 1024 * MIB)],
    ] * 2
    procs = _read_csv(tmp_path / "procs.csv")
    assert procs[0] == list(ns.PROC_COLUMNS)
    assert [r[1:] for r in procs[1:]] == [["0", "100", str(5 * MIB)], ["0", "101", ""]] * 2
    assert "backend=nvml" in (tmp_path / "sampler_source.txt").read_text()
    # the unsupported field is recorded once, not once per sample
    errors = (tmp_path / "errors.txt").read_text().splitlines()
    assert len(errors) == 1 and "Not Supported" in errors[0]
    # a second run appends without a second header
    ns.run(_args(tmp_path, count=1), ns.StopFlag(), environ={}, nvml_loader=FakeNvml, log=log)
    gpu = _read_csv(tmp_path / "gpu.csv")
    assert len(gpu) == 1 + 2 * 3 and gpu.count(list(ns.GPU_COLUMNS)) == 1


def test_run_nvml_init_failure_without_smi_writes_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    out = tmp_path / "out"
    rc = ns.run(
        _args(out, count=2), ns.StopFlag(), environ={}, nvml_loader=lambda: FakeNvml(fail_init=True), log=io.StringIO()
    )
    assert rc == 0
    text = (out / "no_gpu.txt").read_text()
    assert "NVML: FakeNvmlError: Driver Not Loaded" in text
    assert "nvidia-smi not found" in text
    assert not (out / "gpu.csv").exists()


def test_run_pynvml_missing_is_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))

    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'pynvml'")

    ns.run(_args(tmp_path, count=1), ns.StopFlag(), environ={}, nvml_loader=missing, log=io.StringIO())
    assert "pynvml not importable" in (tmp_path / "no_gpu.txt").read_text()


# ---------------------------------------------------------------------------------------------------------
# Subprocess runs
# ---------------------------------------------------------------------------------------------------------

FAKE_SMI = """\
#!/bin/sh
# fake nvidia-smi for the sampler tests: logs its arguments, prints two GPUs and two processes
echo "$*" >> "$(dirname "$0")/calls.log"
case "$1" in
  --query-gpu=*)
    if [ -n "$FAKE_SMI_FAIL" ]; then
      echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
      exit 9
    fi
    echo "0, GPU-aaaa, 55, 3000, 15360"
    echo "1, GPU-bbbb, [N/A], 0, 15360" ;;
  --query-compute-apps=*)
    echo "4242, GPU-aaaa, 2990"
    echo "4343, GPU-zzzz, 12" ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def fake_smi_dir(tmp_path: Path) -> Path:
    """A directory holding an executable fake ``nvidia-smi``."""
    if shutil.which("sh") is None:
        pytest.skip("needs /bin/sh")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text(FAKE_SMI)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bindir


def _env(path_first: Path | None, **extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env.pop(src.NO_NVML_ENV, None)
    env.update(extra)
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


def _sampler(args: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SAMPLER), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_no_gpu_on_this_machine_writes_no_gpu_txt(tmp_path: Path) -> None:
    """Plain run in the real environment: on a machine without GPU it records no_gpu.txt and exits 0."""
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi present: this machine may have a GPU")
    try:
        module = src.import_pynvml()
        module.nvmlInit()
    except Exception:
        pass
    else:
        module.nvmlShutdown()
        pytest.skip("NVML works here")
    out = tmp_path / "out"
    proc = _sampler(["--count", "2", "--out-dir", str(out)], _env(None))
    assert proc.returncode == 0, proc.stderr
    text = (out / "no_gpu.txt").read_text()
    assert "NVML: " in text and "nvidia-smi not found" in text
    assert not (out / "gpu.csv").exists()


def test_no_gpu_hermetic(tmp_path: Path) -> None:
    """NVML disabled and no nvidia-smi on PATH: no_gpu.txt names both reasons, exit 0."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = _env(None, **{src.NO_NVML_ENV: "1"})
    env["PATH"] = str(empty)
    proc = _sampler(["--count", "2", "--out-dir", str(tmp_path / "out")], env)
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "out" / "no_gpu.txt").read_text().splitlines()
    assert f"NVML: disabled by {src.NO_NVML_ENV}='1'" in lines
    assert any(line.startswith("nvidia-smi not found") for line in lines)


def test_fake_nvidia_smi_fallback(tmp_path: Path, fake_smi_dir: Path) -> None:
    out = tmp_path / "out"
    before = time.time()
    proc = _sampler(
        ["--count", "2", "--interval-s", "0.1", "--out-dir", str(out)],
        _env(fake_smi_dir, **{src.NO_NVML_ENV: "1"}),
    )
    after = time.time()
    assert proc.returncode == 0, proc.stderr
    assert b"\r" not in (out / "gpu.csv").read_bytes(), "plain \\n line ends"
    gpu = _read_csv(out / "gpu.csv")
    assert gpu[0] == ["timestamp", "gpu_index", "uuid", "sm_util_pct", "mem_used_bytes", "mem_total_bytes"]
    assert [r[1:] for r in gpu[1:]] == [
        ["0", "GPU-aaaa", "55", str(3000 * MIB), str(15360 * MIB)],
        ["1", "GPU-bbbb", "", "0", str(15360 * MIB)],
    ] * 2
    stamps = sorted({float(r[0]) for r in gpu[1:]})
    assert len(stamps) == 2 and before - 1 <= stamps[0] < stamps[1] <= after + 1
    assert stamps[1] - stamps[0] >= 0.09  # --interval-s 0.1
    procs = _read_csv(out / "procs.csv")
    assert procs[0] == ["timestamp", "gpu_index", "pid", "used_bytes"]
    assert [r[1:] for r in procs[1:]] == [["0", "4242", str(2990 * MIB)], ["", "4343", str(12 * MIB)]] * 2
    calls = (fake_smi_dir / "calls.log").read_text().splitlines()
    assert (
        calls
        == [
            "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits",
            "--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits",
        ]
        * 2
    )
    source = (out / "sampler_source.txt").read_text()
    assert "backend=nvidia-smi" in source and src.NO_NVML_ENV in source
    assert not (out / "no_gpu.txt").exists()


def test_failing_nvidia_smi_is_recorded_as_no_gpu(tmp_path: Path, fake_smi_dir: Path) -> None:
    out = tmp_path / "out"
    proc = _sampler(
        ["--count", "2", "--out-dir", str(out)], _env(fake_smi_dir, **{src.NO_NVML_ENV: "1", "FAKE_SMI_FAIL": "1"})
    )
    assert proc.returncode == 0, proc.stderr
    text = (out / "no_gpu.txt").read_text()
    assert "exited 9" in text and "couldn't communicate with the NVIDIA driver" in text


def test_duration_stops_sampling(tmp_path: Path, fake_smi_dir: Path) -> None:
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = _sampler(
        ["--duration-s", "0.5", "--interval-s", "0.2", "--out-dir", str(out)],
        _env(fake_smi_dir, **{src.NO_NVML_ENV: "1"}),
    )
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - started < 15
    samples = {r[0] for r in _read_csv(out / "gpu.csv")[1:]}
    assert 2 <= len(samples) <= 3  # at 0, 0.2, 0.4 s (fewer only if a read was very slow)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(tmp_path: Path, fake_smi_dir: Path, signum: int) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, str(SAMPLER), "--interval-s", "0.1", "--out-dir", str(out)],
        env=_env(fake_smi_dir, **{src.NO_NVML_ENV: "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        gpu_csv = out / "gpu.csv"
        while time.monotonic() < deadline:
            if gpu_csv.exists() and len(_read_csv(gpu_csv)) >= 1 + 2 * 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("sampler wrote no rows")
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert f"stopped by signal {int(signum)}" in stderr
    rows = _read_csv(out / "gpu.csv")
    assert len(rows) >= 5 and all(len(r) == 6 for r in rows)
    assert (len(rows) - 1) % 2 == 0  # whole samples only (two GPUs each)


def test_help_lists_flags() -> None:
    text = ns.build_parser().format_help()
    for flag in ("--out-dir", "--interval-s", "--duration-s", "--count", "--nvidia-smi"):
        assert flag in text
    assert src.NO_NVML_ENV in text
