"""The simulated GPU's health (docs/faults.md, tests/lab/README-simgpu.md "Health"): the stub NVML reports the
ECC counters, retired pages, remapped rows, throttle reasons and PCI bus id of ``struct simgpu_health``, a lost
device answers ``NVML_ERROR_GPU_IS_LOST``, the ``nvidia-smi`` look-alike answers the health query, and the
``dmesg`` look-alike prints the node's kernel log ``SIMGPU_KMSG``. The tool's own capture command
(evidence/gpu_health.py) runs against all of it and its parser reads the result."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import (
    GiB,
    SimDevice,
    SimGpuBuild,
    append_kmsg,
    build_simgpu,
    make_uuid,
    pci_bus_id,
    set_health,
    start_kmsg,
    write_config,
    xid_line,
)
from xpushare.evidence.gpu_health import capture_argv
from xpushare.parsers.gpu_health import parse_capture

DEV0 = SimDevice(make_uuid(0, "health"), "NVIDIA A100-SXM4-40GB", 4 * GiB)
DEV1 = SimDevice(make_uuid(1, "health"), "NVIDIA A100-SXM4-40GB", 4 * GiB)

NVML_HEALTH = textwrap.dedent("""
    import json, pynvml
    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
        except pynvml.NVMLError as exc:
            out.append({"index": i, "error": str(exc)})
            continue
        e = pynvml.nvmlDeviceGetTotalEccErrors
        out.append({
            "index": i,
            "bus": pynvml.nvmlDeviceGetPciInfo(h).busId.decode() if isinstance(pynvml.nvmlDeviceGetPciInfo(h).busId,
                                                                                bytes) else
                   pynvml.nvmlDeviceGetPciInfo(h).busId,
            "ecc": [e(h, t, c) for t in (0, 1) for c in (0, 1)],
            "retired": list(pynvml.nvmlDeviceGetRetiredPages(h, 1)),
            "remapped": list(pynvml.nvmlDeviceGetRemappedRows(h)),
            "throttle": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        })
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def build() -> SimGpuBuild:
    try:
        return build_simgpu()
    except BuildError as exc:
        pytest.skip(f"simulated GPU not buildable: {exc}")


def env_of(build: SimGpuBuild, config: Path, kmsg: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "SIMGPU_KMSG")}
    env.update(build.env(config))
    if kmsg is not None:
        env["SIMGPU_KMSG"] = str(kmsg)
    return env


def nvml(env: dict[str, str]) -> list[dict[str, object]]:
    import json

    proc = subprocess.run([sys.executable, "-c", NVML_HEALTH], capture_output=True, text=True, env=env, timeout=30,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, object]] = json.loads(proc.stdout)
    return result


def test_nvml_reports_health_and_a_lost_gpu(build: SimGpuBuild, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    config = write_config(tmp_path / "devices", [DEV0, DEV1])
    env = env_of(build, config, None)
    healthy = nvml(env)
    assert healthy[0] == {"index": 0, "bus": "00000000:01:00.0", "ecc": [0, 0, 0, 0], "retired": [],
                          "remapped": [0, 0, 0, 0], "throttle": 1}
    set_health(config, DEV1.uuid, ecc_volatile_corrected=5, ecc_volatile_uncorrected=2, ecc_aggregate_corrected=7,
               ecc_aggregate_uncorrected=3, retired_pages_dbe=2, remap_failure=1)
    set_health(config, DEV0.uuid, lost=1)
    sick = nvml(env)
    assert sick[0]["index"] == 0 and "GPU is lost" in str(sick[0]["error"])
    assert sick[1] == {"index": 1, "bus": "00000000:02:00.0", "ecc": [5, 7, 2, 3], "retired": [4096, 8192],
                       "remapped": [0, 2, 0, 1], "throttle": 1}


def test_the_tool_capture_reads_nvidia_smi_and_dmesg(build: SimGpuBuild, tmp_path: Path) -> None:
    config = write_config(tmp_path / "devices", [DEV0, DEV1])
    kmsg = start_kmsg(tmp_path / "kmsg", "node-a")
    env = env_of(build, config, kmsg)
    assert shutil.which("dmesg", path=env["PATH"]) == str(build.directory / "dmesg")
    append_kmsg(kmsg, xid_line(pci_bus_id(1), 48, "An uncorrectable double bit error (DBE) has been detected.",
                               pid=77, name="python3"))
    set_health(config, DEV1.uuid, ecc_volatile_uncorrected=1, ecc_aggregate_uncorrected=1)
    out = subprocess.run(capture_argv(), capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    cap = parse_capture(out)
    assert cap.smi_exit == 0 and cap.kernel_log == "dmesg" and cap.kernel_log_lines == 2, out
    assert [(g.uuid, g.bus, g.ecc_volatile_uncorrected) for g in cap.gpus] == [
        (DEV0.uuid, "0000:01:00", 0), (DEV1.uuid, "0000:02:00", 1)]
    assert [(e.xid, e.bus, e.pid) for e in cap.xids] == [(48, "0000:02:00", 77)]
    set_health(config, DEV0.uuid, lost=1)
    lost = parse_capture(subprocess.run(capture_argv(), capture_output=True, text=True, env=env, timeout=60,
                                        check=True).stdout)
    assert lost.smi_exit == 15 and lost.lost == ["0000:01:00"] and [g.uuid for g in lost.gpus] == [DEV1.uuid]
    blind = parse_capture(subprocess.run(capture_argv(), capture_output=True, text=True,
                                         env=env_of(build, config, tmp_path / "missing"), timeout=60,
                                         check=True).stdout)
    if blind.kernel_log is None:  # the host's own journalctl may still answer; the look-alike alone must not
        assert "Operation not permitted" in blind.kernel_log_error


def test_dmesg_look_alike_options(build: SimGpuBuild, tmp_path: Path) -> None:
    kmsg = start_kmsg(tmp_path / "kmsg", "node-b")
    dmesg = str(build.directory / "dmesg")
    env = {"SIMGPU_KMSG": str(kmsg), "PATH": os.defpath}
    for args in (["--time-format=iso"], ["--time-format", "iso", "-k", "--nopager"]):
        res = subprocess.run([dmesg, *args], capture_output=True, text=True, env=env, timeout=10, check=False)
        assert res.returncode == 0 and "Linux version 6.8.0-simgpu (lab node node-b)" in res.stdout
    bad = subprocess.run([dmesg, "-T"], capture_output=True, text=True, env=env, timeout=10, check=False)
    assert bad.returncode == 1 and "not simulated" in bad.stderr
    denied = subprocess.run([dmesg], capture_output=True, text=True, env={"PATH": os.defpath}, timeout=10,
                            check=False)
    assert denied.returncode == 1 and "Operation not permitted" in denied.stderr


def test_a_driver_that_knows_only_clocks_event_reasons_is_asked_again(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\ncase "$1" in *clocks_throttle_reasons*) echo \'Field "clocks_throttle_reasons.active" '
                    'is not a valid field to query.\'; exit 2;; esac\n'
                    'echo "0, GPU-x, 00000000:01:00.0, 0, 0, 0, 0, 0, No, No, No, 0x0000000000000004"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.defpath}", "SIMGPU_KMSG": str(start_kmsg(tmp_path / "kmsg", "n"))}
    out = subprocess.run(capture_argv((str(fake),)), capture_output=True, text=True, env=env, timeout=30,
                         check=True).stdout
    cap = parse_capture(out)
    assert cap.smi_exit == 0 and [(g.uuid, g.throttle_reasons) for g in cap.gpus] == [("GPU-x", 4)], out
