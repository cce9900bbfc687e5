"""The CUDA error-injection shim (workloads/faultshim/) on the lab: shim + the real SUT + the simulated driver.

The shim stands in for the real driver's ``libcuda.so.1`` (its ``libcuda-real.so.1`` points at the simulated one)
and is loaded after the client library, ``LD_PRELOAD="libxpushare.so <shim>"`` (the order its README documents).
The scheduler runs in a private mount namespace (root, ``unshare``/``nsenter``), as in tests/unit/lab/test_simgpu.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import GiB, SimDevice, SimGpuBuild, build_simgpu, make_uuid, write_config
from tests.paths import REPO_ROOT
from xpushare.model.gpu_faults import SHIM_ENV, fault_spec

REPO = REPO_ROOT
DEV0 = SimDevice(make_uuid(0, "faultshim"), "NVIDIA A100-SXM4-40GB", 4 * GiB, 1e12, 1e12)

#: argv: launches; prints one JSON line per launch+sync with both result codes, then whether the shim is loaded.
CLIENT = textwrap.dedent(r'''
    import ctypes, json, sys
    cu = ctypes.CDLL("libcuda.so.1")
    U64 = ctypes.c_ulonglong
    assert cu.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    cu.cuCtxSetCurrent(ctx)
    mod, f = ctypes.c_void_p(), ctypes.c_void_p()
    cu.cuModuleLoadData(ctypes.byref(mod), b"image")
    cu.cuModuleGetFunction(ctypes.byref(f), mod, b"simgpu_sleep")
    ns = U64(1000000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
    for _ in range(int(sys.argv[1])):
        rc = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        print(json.dumps({"launch": rc, "sync": cu.cuCtxSynchronize()}), flush=True)
    print(json.dumps({"shim": hasattr(cu, "faultshimVersion") and cu.faultshimVersion()}), flush=True)
''')


@pytest.fixture(scope="module")
def simgpu() -> SimGpuBuild:
    try:
        return build_simgpu()
    except BuildError as exc:
        pytest.skip(f"simulated GPU not buildable: {exc}")


@pytest.fixture(scope="module")
def shim(simgpu: SimGpuBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp("faultshim")
    proc = subprocess.run([sys.executable, str(REPO / "workloads/faultshim/build.py"), "--out", str(out),
                           "--real-libcuda", str(simgpu.libcuda)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def test_build_again_replaces_its_own_shim_and_refuses_a_foreign_library(simgpu: SimGpuBuild, shim: Path,
                                                                         tmp_path: Path) -> None:
    build = [sys.executable, str(REPO / "workloads/faultshim/build.py"), "--real-libcuda", str(simgpu.libcuda)]
    again = subprocess.run([*build, "--out", str(shim.parent)], capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr  # an earlier build of the shim is replaced
    foreign = tmp_path / "driver"
    foreign.mkdir()
    (foreign / "libcuda.so.1").write_bytes(b"\x7fELF a real driver")
    proc = subprocess.run([*build, "--out", str(foreign)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "refusing" in proc.stderr
    assert (foreign / "libcuda.so.1").read_bytes() == b"\x7fELF a real driver"
    (foreign / "libcuda.so.1").unlink()
    (foreign / "libcuda-real.so.1").write_text("not a link")
    proc = subprocess.run([*build, "--out", str(foreign)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and (foreign / "libcuda-real.so.1").read_text() == "not a link"


def _env(simgpu: SimGpuBuild, config: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                                             "SIMGPU_FAULT", SHIM_ENV)}
    env.update(simgpu.env(config), SIMGPU_KMSG=str(config.parent / "kmsg"), **extra)
    return env


def _run(argv: list[str], env: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_shim_alone_injects_after_n_calls_and_touches_no_gpu_state(simgpu: SimGpuBuild, shim: Path,
                                                                    tmp_path: Path) -> None:
    config = write_config(tmp_path / "devices", [DEV0])
    out, err = _run([sys.executable, "-c", CLIENT, "3"],
                    _env(simgpu, config, LD_PRELOAD=str(shim), **{SHIM_ENV: fault_spec("illegal-address",
                                                                                          after_calls=3)}))
    # counted: launch, sync, launch | sync fails (700), then sticky
    assert out[:3] == [{"launch": 0, "sync": 0}, {"launch": 0, "sync": 700}, {"launch": 700, "sync": 700}]
    assert out[3] == {"shim": 1}
    assert re.search(r"\[FAULTSHIM\] injected illegal-address \(CUDA error 700\) into cuCtxSynchronize after 3 "
                     r"calls", err), err
    assert not (tmp_path / "kmsg").exists()  # the shim returns errors; it writes no Xid (nothing happened to a GPU)


def test_shim_without_a_fault_is_transparent(simgpu: SimGpuBuild, shim: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "devices", [DEV0])
    out, err = _run([sys.executable, "-c", CLIENT, "3"], _env(simgpu, config, LD_PRELOAD=str(shim)))
    assert out == [{"launch": 0, "sync": 0}] * 3 + [{"shim": 1}]
    assert "FAULTSHIM" not in err


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture()
def namespace() -> Iterator[tuple[str, ...]]:
    """``nsenter`` argv prefix into a private mount namespace with a tmpfs on /run (the scheduler's socket)."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "nsenter", "mount")):
        if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
            pytest.fail("needs root and unshare/nsenter/mount")
        pytest.skip("needs root and unshare/nsenter/mount")
    holder = subprocess.Popen(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run && mkdir -p /run/xpushare "
                               "&& echo ready && exec sleep 600"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        yield ("nsenter", "-t", str(holder.pid), "-m", "--")
    finally:
        holder.kill()
        holder.wait()


def test_shim_under_the_real_sut(simgpu: SimGpuBuild, shim: Path, tmp_path: Path,
                                 namespace: tuple[str, ...]) -> None:
    from tests.lab.sut import build_sut

    try:
        sut = build_sut()
    except BuildError as exc:
        pytest.skip(f"cannot build the SUT: {exc}")
    config = write_config(tmp_path / "devices", [DEV0])
    port = _free_port()
    log = tmp_path / "scheduler.log"
    with log.open("w") as fh:
        scheduler = subprocess.Popen([*namespace, str(sut.scheduler)], stdout=fh, stderr=subprocess.STDOUT,
                                     env=_env(simgpu, config, XPUSHARE_METRICS_ENABLE="1",
                                              XPUSHARE_METRICS_ADDR=f"127.0.0.1:{port}"),
                                     start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while "Registered" not in log.read_text() and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        env = _env(simgpu, config, LD_PRELOAD=f"{sut.library} {shim}", NVIDIA_VISIBLE_DEVICES=DEV0.uuid,
                   **{SHIM_ENV: fault_spec("launch-failure", after_calls=4)})
        out, err = _run([*namespace, sys.executable, "-c", CLIENT, "3"], env)
        # the application's launches went through the client library (its WARN line names the shim's error),
        # the library's calls reached the shim, and the scheduler registered the client
        assert out[:3] == [{"launch": 0, "sync": 0}, {"launch": 0, "sync": 0}, {"launch": 719, "sync": 719}], err
        assert out[3] == {"shim": 1}
        assert "[FAULTSHIM] injected launch-failure (CUDA error 719) into cuLaunchKernel after 4 calls" in err
        assert re.search(r"cuLaunchKernel returned CUDA_ERROR_LAUNCH_FAILED", err), err
        deadline = time.monotonic() + 10
        while "Removing client" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text()
        assert re.search(rf"Registered client \w+ on GPU {DEV0.uuid}", text), text
        assert "Removing client" in text  # the client that ended with a CUDA error is removed
        assert scheduler.poll() is None, text
    finally:
        scheduler.kill()
        scheduler.wait()
