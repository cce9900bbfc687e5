"""The lab's simulated GPU (tests/lab/simgpu.py): stub CUDA driver + NVML, alone and under the real SUT.

Clients are small ctypes programs (``CLIENT`` below) run as subprocesses, each with its own
``SIMGPU_CONFIG``; timings use CLOCK_MONOTONIC (``time.monotonic()``), which all processes share.
The SUT tests run the real ``xpushare-scheduler`` and ``libxpushare.so`` in a private mount namespace
(root and ``unshare``/``nsenter`` needed; skipped otherwise, failed with ``XPUSHARE_REQUIRE_LAB=1``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import (
    DEFAULT_CONTEXT_BYTES,
    GiB,
    MiB,
    SimDevice,
    SimGpuBuild,
    build_simgpu,
    make_uuid,
    state_dir,
    write_config,
)
from tests.paths import REPO_ROOT

#: Two devices: 1e12 FLOP/s and 1e12 bytes/s, so 1e12 FLOPs of simgpu_work last 1 s.
DEV0 = SimDevice(make_uuid(0, "test"), "NVIDIA A100-SXM4-40GB", 4 * GiB, 1e12, 1e12)
DEV1 = SimDevice(make_uuid(1, "test"), "NVIDIA H100 80GB HBM3", 8 * GiB, 2e12, 1e12)

#: A driver-API client. argv: ops, each NAME[:ARG[:ARG]]; prints one JSON line per op.
CLIENT = textwrap.dedent(r'''
    import ctypes, json, os, sys, time
    cu = ctypes.CDLL("libcuda.so.1")
    U64 = ctypes.c_ulonglong
    def emit(**kw):
        kw["t"] = time.monotonic()
        print(json.dumps(kw), flush=True)
    rc = cu.cuInit(0)
    if rc != 0:
        emit(op="init", rc=rc)
        sys.exit(3)
    dev = ctypes.c_int(int(os.environ.get("CLIENT_DEVICE", "0")))
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    mod = ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(mod), b"any image") == 0
    funcs = {}
    for name in ("simgpu_work", "simgpu_sleep", "simgpu_spin"):
        f = ctypes.c_void_p()
        assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
        funcs[name] = f
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), ctypes.c_size_t]
    cu.cuMemAllocManaged.argtypes = [ctypes.POINTER(U64), ctypes.c_size_t, ctypes.c_uint]
    cu.cuMemFree_v2.argtypes = [U64]
    ptrs = []
    def launch(name, *args):
        vals = [U64(int(float(a))) for a in args]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        return cu.cuLaunchKernel(funcs[name], 1, 1, 1, 1, 1, 1, 0, None, params, None)
    emit(op="setup", pid=os.getpid())
    for op in sys.argv[1:]:
        name, *args = op.split(":")
        if name in ("work", "sleep", "spin"):
            emit(op=name, rc=launch("simgpu_" + name, *args))
        elif name == "sync":
            emit(op=name, rc=cu.cuCtxSynchronize())
        elif name in ("alloc", "managed"):
            p = U64(0)
            if name == "alloc":
                rc = cu.cuMemAlloc_v2(ctypes.byref(p), int(float(args[0])))
            else:
                rc = cu.cuMemAllocManaged(ctypes.byref(p), int(float(args[0])), 1)
            if rc == 0:
                ptrs.append(p.value)
            emit(op=name, rc=rc)
        elif name == "freeall":
            emit(op=name, rc=max([cu.cuMemFree_v2(p) for p in ptrs] or [0]))
            ptrs.clear()
        elif name == "meminfo":
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            rc = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            emit(op=name, rc=rc, free=free.value, total=total.value)
        elif name == "copy":
            src = ctypes.create_string_buffer(b"simgpu!" * 8)
            back = ctypes.create_string_buffer(len(src))
            d = U64(0)
            rcs = [cu.cuMemAlloc_v2(ctypes.byref(d), len(src)),
                   cu.cuMemcpyHtoD_v2(d, src, ctypes.c_size_t(len(src))),
                   cu.cuMemcpyDtoH_v2(back, d, ctypes.c_size_t(len(src))),
                   cu.cuMemFree_v2(d)]
            emit(op=name, rc=max(rcs), same=back.raw == src.raw)
        elif name == "cpu":
            emit(op=name, cpu=time.process_time())
        elif name == "wait":
            while not os.path.exists(args[0]):
                time.sleep(0.002)
            emit(op=name)
        elif name == "ready":
            emit(op=name)
        else:
            raise SystemExit("unknown op " + op)
''')

#: Prints NVML's view as JSON: per device uuid, name, memory, utilisation, compute processes.
NVML_QUERY = textwrap.dedent(r'''
    import ctypes, json
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    class Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
    class Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
    class Proc(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
    out = {"init": nv.nvmlInit_v2(), "devices": []}
    n = ctypes.c_uint(0)
    if out["init"] == 0:
        assert nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
    for i in range(n.value):
        h = ctypes.c_void_p()
        assert nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
        name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
        assert nv.nvmlDeviceGetName(h, name, 96) == 0 and nv.nvmlDeviceGetUUID(h, uuid, 96) == 0
        mem, util = Mem(), Util()
        assert nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0
        assert nv.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0
        count = ctypes.c_uint(0)
        rc = nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), None)
        procs = (Proc * 64)()
        count.value = 64
        assert nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), procs) == 0
        h2 = ctypes.c_void_p()
        by_uuid = nv.nvmlDeviceGetHandleByUUID(uuid.value, ctypes.byref(h2))
        out["devices"].append({"name": name.value.decode(), "uuid": uuid.value.decode(), "total": mem.total,
                               "used": mem.used, "free": mem.free, "util": util.gpu, "size_probe_rc": rc,
                               "by_uuid_same": by_uuid == 0 and h2.value == h.value,
                               "procs": {str(procs[k].pid): procs[k].usedGpuMemory for k in range(count.value)}})
    print(json.dumps(out))
''')


def _lab_required(reason: str) -> None:
    """Skip with ``reason``; fail instead under ``XPUSHARE_REQUIRE_LAB=1`` (as in CI)."""
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"simulated GPU lab required (XPUSHARE_REQUIRE_LAB=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def simgpu() -> SimGpuBuild:
    """The built simulated GPU (skips where gcc is missing, fails with XPUSHARE_REQUIRE_LAB=1)."""
    if not sys.platform.startswith("linux"):
        _lab_required("the simulated GPU needs Linux")
    try:
        return build_simgpu()
    except BuildError as exc:
        _lab_required(f"cannot build the simulated GPU: {exc}")
        raise


@pytest.fixture
def lab(tmp_path: Path, simgpu: SimGpuBuild) -> Iterator[Lab]:
    """A fresh device file (DEV0, DEV1) in tmp_path; kills every process it started afterwards."""
    lab = Lab(simgpu, write_config(tmp_path / "devices", [DEV0, DEV1]), tmp_path)
    try:
        yield lab
    finally:
        lab.kill_all()


class Lab:
    """Runs clients against one device file."""

    def __init__(self, build: SimGpuBuild, config: Path, workdir: Path) -> None:
        self.build = build
        self.config = config
        self.workdir = workdir
        self.procs: list[subprocess.Popen[str]] = []
        (workdir / "client.py").write_text(CLIENT)
        (workdir / "nvml_query.py").write_text(NVML_QUERY)

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment + the simulated GPU's + ``extra``."""
        env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
        env.update(self.build.env(self.config))
        env.update(extra)
        return env

    def start(self, *ops: str, prefix: tuple[str, ...] = (), **extra: str) -> Client:
        """Start a client running ``ops`` (stdout: JSON lines; stderr: a file of its own)."""
        err = self.workdir / f"client-{len(self.procs)}.err"
        with err.open("w") as sink:
            proc = subprocess.Popen([*prefix, sys.executable, str(self.workdir / "client.py"), *ops],
                                    stdout=subprocess.PIPE, stderr=sink, text=True, env=self.env(**extra),
                                    start_new_session=True)
        self.procs.append(proc)
        return Client(proc, err)

    def run(self, *ops: str, **extra: str) -> list[dict[str, Any]]:
        """Run a client to completion; its JSON lines."""
        proc = subprocess.Popen([sys.executable, str(self.workdir / "client.py"), *ops], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(**extra), start_new_session=True)
        self.procs.append(proc)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"client failed ({proc.returncode}): {err}"
        return [json.loads(line) for line in out.splitlines()]

    def nvml(self, **extra: str) -> dict[str, Any]:
        """NVML's view (NVML_QUERY) from a fresh process."""
        proc = subprocess.run([sys.executable, str(self.workdir / "nvml_query.py")], capture_output=True, text=True,
                              env=self.env(**extra), timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def smi(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run the nvidia-smi look-alike (found on PATH, as the tool finds it)."""
        env = self.env(**extra)
        exe = shutil.which("nvidia-smi", path=env["PATH"])
        assert exe == str(self.build.nvidia_smi)
        return subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=30, check=False)

    def kill_all(self) -> None:
        """SIGKILL every process started here (by pid) and reap it."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the client and anything it started
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                proc.communicate(timeout=10)


class Client:
    """A running client: its process and a thread collecting its JSON lines."""

    def __init__(self, proc: subprocess.Popen[str], stderr: Path) -> None:
        self.proc = proc
        self.stderr = stderr
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    @property
    def pid(self) -> int:
        """The client's pid (also its process group and session id)."""
        return self.proc.pid

    def until(self, op: str, timeout: float = 20.0) -> dict[str, Any]:
        """Read JSON lines until the one of ``op``; fails after ``timeout`` seconds or when the client exits."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {op!r} line from the client in {timeout} s") from None
            if line is None:
                raise AssertionError(f"client exited before {op!r}: {self.stderr_text()}")
            if line.get("op") == op:
                return line

    def stderr_text(self) -> str:
        """What the client wrote to stderr so far."""
        return self.stderr.read_text()


# ---- build ----


def test_build_is_cached_and_clean(simgpu: SimGpuBuild) -> None:
    for name in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "nvidia-smi"):
        assert (simgpu.directory / name).is_file(), name
    assert simgpu.compiler_output == "", f"gcc warnings: {simgpu.compiler_output}"
    lib = simgpu.libcuda.stat()
    again = build_simgpu()
    assert again == simgpu
    assert simgpu.libcuda.stat().st_mtime_ns == lib.st_mtime_ns  # no rebuild
    out = subprocess.run([sys.executable, "-m", "tests.lab.simgpu"], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == str(simgpu.directory)


def test_exports(simgpu: SimGpuBuild) -> None:
    import ctypes

    cu = ctypes.CDLL(str(simgpu.libcuda))
    needed = [
        "cuInit", "cuMemAllocManaged", "cuMemFree_v2", "cuMemGetInfo_v2", "cuGetErrorString", "cuGetErrorName",
        "cuCtxSetCurrent", "cuCtxGetCurrent", "cuCtxSynchronize", "cuLaunchKernel", "cuMemcpy", "cuMemcpyAsync",
        "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoDAsync_v2", "cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAdvise", "cuDriverGetVersion",
        "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetUuid", "cuDeviceGetUuid_v2",
        "cuDeviceTotalMem_v2", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxRelease_v2", "cuCtxCreate_v2", "cuCtxDestroy_v2", "cuCtxGetDevice", "cuStreamCreate",
        "cuStreamDestroy_v2", "cuStreamSynchronize", "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx",
        "cuModuleGetFunction", "cuMemAlloc_v2", "simgpuVersion",
    ]
    missing = [name for name in needed if not hasattr(cu, name)]
    assert not missing
    assert cu.simgpuVersion() == 1
    version = ctypes.c_int()
    assert cu.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value == 12040
    text = ctypes.c_char_p()
    assert cu.cuGetErrorName(2, ctypes.byref(text)) == 0 and text.value == b"CUDA_ERROR_OUT_OF_MEMORY"
    assert cu.cuGetErrorString(2, ctypes.byref(text)) == 0 and text.value == b"out of memory"
    pfn = ctypes.c_void_p()
    assert cu.cuGetProcAddress(b"cuMemAlloc", ctypes.byref(pfn), 12040, ctypes.c_uint64(0)) == 0
    assert pfn.value == ctypes.cast(cu.cuMemAlloc_v2, ctypes.c_void_p).value
    assert cu.cuGetProcAddress(b"cuNoSuchThing", ctypes.byref(pfn), 12040, ctypes.c_uint64(0)) == 500
    nv = ctypes.CDLL(str(simgpu.libnvml))
    for name in ("nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
                 "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
                 "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
                 "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3",
                 "nvmlErrorString", "nvmlSystemGetDriverVersion", "nvmlDeviceGetIndex"):
        assert hasattr(nv, name), name


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SimDevice("GPU-a\tb")
    with pytest.raises(ValueError):
        SimDevice("GPU-x", total_bytes=-1)
    path = write_config(tmp_path / "sub" / "devices", [DEV0, SimDevice("plain-id", "Sim GPU", 1000, 1.5e9, 2e9)])
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1] == f"{DEV0.uuid}\tNVIDIA A100-SXM4-40GB\t{4 * GiB}\t1000000000000\t1000000000000"
    assert lines[2] == "plain-id\tSim GPU\t1000\t1500000000\t2000000000"
    assert state_dir(path) == tmp_path / "sub" / "devices.d"
    assert make_uuid(3) == make_uuid(3) and re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", make_uuid(3))


# ---- ctypes clients without the SUT ----


def test_identity_and_visible_devices(lab: Lab, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent('''
        import ctypes, json
        cu = ctypes.CDLL("libcuda.so.1")
        rc = cu.cuInit(0)
        out = {"init": rc, "devices": []}
        n = ctypes.c_int(0)
        if rc == 0:
            cu.cuDeviceGetCount(ctypes.byref(n))
        for i in range(n.value):
            name = ctypes.create_string_buffer(96)
            total = ctypes.c_size_t()
            uuid = ctypes.create_string_buffer(16)
            major, minor, sms = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
            assert cu.cuDeviceGetName(name, 96, i) == 0 and cu.cuDeviceTotalMem_v2(ctypes.byref(total), i) == 0
            assert cu.cuDeviceGetUuid_v2(uuid, i) == 0
            cu.cuDeviceGetAttribute(ctypes.byref(major), 75, i)
            cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, i)
            cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, i)
            out["devices"].append([name.value.decode(), total.value, uuid.raw.hex(), major.value, minor.value,
                                   sms.value])
        print(json.dumps(out))
    '''))

    def cuda(visible: str | None) -> dict[str, Any]:
        extra = {} if visible is None else {"NVIDIA_VISIBLE_DEVICES": visible}
        out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=lab.env(**extra),
                             timeout=30, check=True).stdout
        result: dict[str, Any] = json.loads(out)
        return result

    every = cuda(None)
    assert every["init"] == 0
    assert [d[:2] for d in every["devices"]] == [[DEV0.name, DEV0.total_bytes], [DEV1.name, DEV1.total_bytes]]
    assert every["devices"][0][2] == DEV0.uuid[4:].replace("-", "")  # the UUID's 16 bytes
    assert every["devices"][0][3:5] == [8, 0] and every["devices"][0][5] > 0
    assert cuda("all") == every
    assert [d[0] for d in cuda(f"{DEV1.uuid}")["devices"]] == [DEV1.name]
    assert [d[0] for d in cuda(f"1,bogus,{DEV0.uuid}")["devices"]] == [DEV1.name, DEV0.name]
    assert cuda("none")["init"] == 100  # CUDA_ERROR_NO_DEVICE
    assert lab.nvml(NVIDIA_VISIBLE_DEVICES="void")["devices"] == []
    view = lab.nvml(NVIDIA_VISIBLE_DEVICES=f"{DEV1.uuid}")["devices"]
    assert [(d["uuid"], d["name"], d["total"]) for d in view] == [(DEV1.uuid, DEV1.name, DEV1.total_bytes)]
    assert view[0]["by_uuid_same"]
    missing = lab.nvml(SIMGPU_CONFIG=str(tmp_path / "nowhere"))
    assert missing["init"] == 9  # NVML_ERROR_DRIVER_NOT_LOADED


def test_one_second_kernel_and_sleep_costs_no_cpu(lab: Lab) -> None:
    lines = lab.run("cpu", "work:1e12:0", "sync", "cpu", "sleep:2e8", "work:0:5e11", "sync", "cpu", "copy")
    launch, sync = lines[2], lines[3]
    assert launch["rc"] == 0 and sync["rc"] == 0
    # lower bounds are exact (the timeline), upper bounds allow for wake-up latency on a loaded machine
    assert 0.97 <= sync["t"] - launch["t"] <= 1.5
    assert 0.67 <= lines[7]["t"] - lines[5]["t"] <= 1.2  # 0.2 s sleep + 0.5 s of bytes
    assert lines[4]["cpu"] - lines[1]["cpu"] < 0.3, "sleeping through a kernel must not burn CPU"
    assert lines[-1]["same"] and lines[-1]["rc"] == 0


CONTEXTS = textwrap.dedent(r'''
    import ctypes, json, subprocess, sys, time
    cu = ctypes.CDLL("libcuda.so.1")
    U64, out = ctypes.c_ulonglong, {}
    p = U64(0)
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), ctypes.c_size_t]
    out["before_init"] = cu.cuMemAlloc_v2(ctypes.byref(p), 1024)
    assert cu.cuInit(0) == 0
    out["no_context"] = cu.cuMemAlloc_v2(ctypes.byref(p), 1024)
    ctx = ctypes.c_void_p()
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 1) == 0
    dev = ctypes.c_int(-1)
    assert cu.cuCtxGetDevice(ctypes.byref(dev)) == 0 and dev.value == 1
    assert cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 30) == 0
    def used():
        return json.loads(subprocess.run([sys.executable, sys.argv[1]], capture_output=True, text=True,
                                         check=True).stdout)["devices"][1]["used"]
    out["used_with_context"] = used()
    mod, f, g = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuModuleLoadDataEx(ctypes.byref(mod), b"x", 0, None, None) == 0
    out["unknown_kernel"] = cu.cuModuleGetFunction(ctypes.byref(g), mod, b"gemm")
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, b"simgpu_sleep") == 0
    stream, start, end = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(stream), 0) == 0
    assert cu.cuEventCreate(ctypes.byref(start), 0) == 0 and cu.cuEventCreate(ctypes.byref(end), 0) == 0
    ns = U64(300_000_000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
    t0 = time.monotonic()
    assert cu.cuEventRecord(start, stream) == 0
    assert cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, None) == 0
    assert cu.cuEventRecord(end, stream) == 0
    out["query_busy"] = cu.cuStreamQuery(stream)
    assert cu.cuStreamSynchronize(stream) == 0
    out["stream_sync_s"] = time.monotonic() - t0
    ms = ctypes.c_float()
    assert cu.cuEventElapsedTime(ctypes.byref(ms), start, end) == 0
    out["event_ms"] = ms.value
    out["query_idle"] = cu.cuStreamQuery(stream)
    assert cu.cuStreamDestroy_v2(stream) == 0 and cu.cuCtxDestroy_v2(ctx) == 0
    out["used_after_destroy"] = used()
    out["after_destroy"] = cu.cuMemAlloc_v2(ctypes.byref(p), 1024)
    print(json.dumps(out))
''')


def test_contexts_streams_events(lab: Lab, tmp_path: Path) -> None:
    (tmp_path / "contexts.py").write_text(CONTEXTS)
    proc = subprocess.run([sys.executable, str(tmp_path / "contexts.py"), str(tmp_path / "nvml_query.py")],
                          capture_output=True, text=True, env=lab.env(), timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["before_init"] == 3 and out["no_context"] == 201  # NOT_INITIALIZED, INVALID_CONTEXT
    assert out["used_with_context"] == GiB + DEFAULT_CONTEXT_BYTES
    assert out["unknown_kernel"] == 500  # CUDA_ERROR_NOT_FOUND
    assert out["query_busy"] == 600 and out["query_idle"] == 0  # CUDA_ERROR_NOT_READY while the kernel runs
    assert 0.29 <= out["stream_sync_s"] <= 0.5
    # the event pair brackets the 300 ms kernel; a loaded machine adds the launch's and the record's own delay on top
    assert 299.0 <= out["event_ms"] <= 320.0
    assert out["used_after_destroy"] == 0  # destroying a context frees its memory and overhead
    assert out["after_destroy"] == 201


def test_spin_kernel_burns_cpu(lab: Lab) -> None:
    lines = lab.run("cpu", "spin:5e8", "sync", "cpu")
    assert lines[3]["rc"] == 0
    assert 0.5 <= lines[3]["t"] - lines[2]["t"] <= 1.0
    # busy-waiting for 0.5 s of wall time; on a shared 2-core machine the process gets only part of a core
    assert lines[4]["cpu"] - lines[1]["cpu"] >= 0.15


def _contend(lab: Lab, tmp_path: Path, devices: tuple[int, int]) -> float:
    """Two clients with 1 s of work each, released together; seconds until the later one synced."""
    go = tmp_path / f"go-{devices[0]}{devices[1]}"
    procs = [lab.start("ready", f"wait:{go}", "work:5e11:0", "work:5e11:0", "sync", CLIENT_DEVICE=str(d))
             for d in devices]
    for proc in procs:
        proc.until("ready")
    t0 = time.monotonic()
    go.touch()
    ends = []
    for proc in procs:
        line = proc.until("sync")
        assert line["rc"] == 0
        ends.append(line["t"] - t0)
    return max(ends)


def test_two_clients_contend_on_one_gpu_not_on_two(lab: Lab, tmp_path: Path) -> None:
    same = _contend(lab, tmp_path, (0, 0))
    assert 1.95 <= same <= 2.6, same
    different = _contend(lab, tmp_path, (0, 1))  # DEV1 computes twice as fast: 0.5 s there
    assert 0.97 <= different <= 1.5, different


def test_memory_accounting_across_processes(lab: Lab) -> None:
    idle = lab.nvml()["devices"]
    assert [(d["used"], d["procs"], d["util"]) for d in idle] == [(0, {}, 0), (0, {}, 0)]
    holder = lab.start("alloc:1073741824", "managed:536870912", "sleep:1.5e9", "ready", "wait:/nonexistent/never")
    pid = holder.until("setup")["pid"]
    assert holder.until("alloc")["rc"] == 0
    assert holder.until("managed")["rc"] == 0
    launched = holder.until("sleep")
    holder.until("ready")
    time.sleep(max(0.0, launched["t"] + 1.1 - time.monotonic()))
    dev0, dev1 = lab.nvml()["devices"]
    expected = GiB + 512 * MiB + DEFAULT_CONTEXT_BYTES
    assert dev0["used"] == expected and dev0["free"] == DEV0.total_bytes - expected
    assert dev0["procs"] == {str(pid): expected}
    assert dev0["size_probe_rc"] == 7  # NVML_ERROR_INSUFFICIENT_SIZE for a 0-sized buffer
    assert dev0["util"] >= 95, "the last second was one busy kernel"
    assert dev1["used"] == 0 and dev1["util"] == 0
    # another process sees the holder's memory; cuMemAlloc_v2 beyond the total fails, managed does not
    lines = lab.run("meminfo", "alloc:3221225472", "alloc:1610612736", "managed:8589934592", "meminfo", "freeall",
                    "meminfo", SIMGPU_CONTEXT_BYTES="128Mi")
    info = lines[1]
    assert info["total"] == DEV0.total_bytes
    assert info["free"] == DEV0.total_bytes - expected - 128 * MiB
    assert [line["rc"] for line in lines[2:5]] == [2, 0, 0]  # 3 GiB: too much; 1.5 GiB fits; managed 8 GiB
    assert lines[5]["free"] == 0  # oversubscribed: floored at 0
    assert lines[7]["free"] == DEV0.total_bytes - expected - 128 * MiB
    # the holder crashes: its memory stops counting
    os.killpg(holder.pid, signal.SIGKILL)
    holder.proc.wait(timeout=10)
    after = lab.nvml()["devices"][0]
    assert after["used"] == 0 and after["procs"] == {}


def test_zombie_and_dead_processes_stop_counting(lab: Lab) -> None:
    holder = lab.start("alloc:1e9", "ready", "wait:/nonexistent/never")
    holder.until("ready")
    assert lab.nvml()["devices"][0]["used"] == 1_000_000_000 + DEFAULT_CONTEXT_BYTES
    os.killpg(holder.pid, signal.SIGKILL)
    time.sleep(0.2)  # killed but not reaped (no wait yet): a zombie holds no GPU memory
    assert lab.nvml()["devices"][0]["used"] == 0


def test_state_files_live_beside_the_config(lab: Lab) -> None:
    lab.run("alloc:1e6")
    files = sorted(p.name for p in state_dir(lab.config).iterdir())
    assert files == [f"{DEV0.uuid}.state"]


# ---- nvidia-smi look-alike ----


def test_nvidia_smi_forms(lab: Lab) -> None:
    holder = lab.start("alloc:1073741824", "ready", "wait:/nonexistent/never")
    pid = holder.until("setup")["pid"]
    holder.until("ready")
    listing = lab.smi("-L")
    assert listing.returncode == 0
    assert listing.stdout.splitlines() == [f"GPU 0: {DEV0.name} (UUID: {DEV0.uuid})",
                                           f"GPU 1: {DEV1.name} (UUID: {DEV1.uuid})"]
    query = lab.smi("--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,driver_version",
                    "--format=csv")
    used_mib = (GiB + DEFAULT_CONTEXT_BYTES) // MiB
    assert query.stdout.splitlines() == [
        "index, uuid, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%], driver_version",
        f"0, {DEV0.uuid}, {DEV0.name}, 4096 MiB, {used_mib} MiB, 0 %, 550.54.15",
        f"1, {DEV1.uuid}, {DEV1.name}, 8192 MiB, 0 MiB, 0 %, 550.54.15"]
    bare = lab.smi("--query-gpu=index,uuid", "--format=csv,noheader,nounits", NVIDIA_VISIBLE_DEVICES=DEV1.uuid)
    assert bare.stdout == f"0, {DEV1.uuid}\n"
    apps = lab.smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv")
    assert apps.stdout.splitlines() == ["pid, process_name, used_gpu_memory [MiB], gpu_uuid",
                                        f"{pid}, {Path(sys.executable).name[:15]}, {used_mib} MiB, {DEV0.uuid}"]
    assert lab.smi("--query-gpu=bogus", "--format=csv").returncode == 2
    dmon = lab.smi("dmon", "-s", "u", "-d", "1", "-c", "1")
    assert dmon.stdout.splitlines() == ["# gpu     sm    mem    enc    dec    jpg    ofa ",
                                        "# Idx      %      %      %      %      %      % ",
                                        "    0      0      0      0      0      0      0 ",
                                        "    1      0      0      0      0      0      0 "]
    table = lab.smi()
    assert table.returncode == 0
    assert re.search(r"CUDA Version:\s*12\.4", table.stdout)
    assert f" {used_mib}MiB / 4096MiB |" in table.stdout
    assert str(pid) in table.stdout
    assert {len(line) for line in table.stdout.splitlines()[1:] if line} == {91}
    topo = lab.smi("topo", "-m")
    assert "GPU0\t X \tSYS" in topo.stdout
    failed = lab.smi(SIMGPU_CONFIG="/nonexistent/devices")
    assert failed.returncode == 9 and "couldn't communicate with the NVIDIA driver" in failed.stdout


def test_nvidia_smi_parsed_by_the_tool(lab: Lab) -> None:
    from xpushare.parsers import dmon, nvidia_smi

    gpus = nvidia_smi.parse_query_gpu(lab.smi(*nvidia_smi.query_gpu_command()[1:]).stdout)
    assert [(g.uuid, g.memory_total_bytes) for g in gpus] == [(DEV0.uuid, DEV0.total_bytes),
                                                              (DEV1.uuid, DEV1.total_bytes)]
    listed = nvidia_smi.parse_list(lab.smi(*nvidia_smi.list_command()[1:]).stdout)
    assert [g.uuid for g in listed] == [DEV0.uuid, DEV1.uuid]
    data = dmon.parse(lab.smi(*dmon.command(count=1)[1:]).stdout)
    assert data.series("sm", 0) == [0.0] and data.malformed_count == 0


# ---- under the real SUT ----


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _namespace_tools() -> str | None:
    """Why the SUT tests cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (private mount namespace with a tmpfs over /run)"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run"], capture_output=True,
                           text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"unshare -m / mount failed: {(probe.stderr or probe.stdout).strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def sut() -> Any:
    """The real SUT, built from ../shared/sut/xpushare/src (skips/fails like the other lab fixtures)."""
    reason = _namespace_tools()
    if reason is not None:
        _lab_required(f"SUT under the simulated GPU: {reason}")
    from tests.lab.sut import build_sut

    try:
        return build_sut()
    except BuildError as exc:
        _lab_required(f"cannot build the SUT: {exc}")


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def _wait_for(what: str, check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError:
            last = None
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_real_sut_under_simulated_gpu(lab: Lab, sut: Any, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        ["unshare", "-m", "sh", "-c",
         "mount -t tmpfs tmpfs /run && mkdir -p /run/xpushare && echo ready && exec sleep 600"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    lab.procs.append(holder)  # killed (with everything else) by the lab fixture
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    enter = ("nsenter", "-t", str(holder.pid), "-m", "--")
    port = _free_port()
    log = tmp_path / "scheduler.log"
    with log.open("w") as out:
        scheduler = subprocess.Popen([*enter, str(sut.scheduler)], stdout=out, stderr=subprocess.STDOUT, text=True,
                                     env=lab.env(XPUSHARE_METRICS_ENABLE="1",
                                                 XPUSHARE_METRICS_ADDR=f"127.0.0.1:{port}",
                                                 XPUSHARE_METRICS_NVML_INTERVAL_MS="200"),
                                     start_new_session=True)
    lab.procs.append(scheduler)
    _wait_for("the scheduler's /metrics", lambda: "xpushare_nvml_up 1" in _metrics(port))
    client = lab.start("alloc:536870912", "alloc:268435456", "alloc:536870912", "work:3e11:0", "sync", "ready",
                       "wait:/nonexistent/never",
                       prefix=enter, LD_PRELOAD=str(sut.library), NVIDIA_VISIBLE_DEVICES=DEV0.uuid,
                       XPUSHARE_GPU_MEMORY_LIMIT="1Gi")
    pid = client.until("setup")["pid"]
    rcs = [client.until("alloc")["rc"] for _ in range(3)]
    assert rcs == [0, 0, 2]  # 512 + 256 MiB allowed, the next 512 MiB: CUDA_ERROR_OUT_OF_MEMORY
    launched, synced = client.until("work"), client.until("sync")
    assert launched["rc"] == 0 and synced["rc"] == 0
    assert 0.29 <= synced["t"] - launched["t"] <= 0.6  # 0.3 s of work, launched through the library
    client.until("ready")

    info = re.compile(r'xpushare_client_info\{[^}]*pod="none"[^}]*host_pid="(\d+)"[^}]*\} 1')
    text = _wait_for("the client in /metrics", lambda: (lambda t: t if info.search(t) else None)(_metrics(port)))
    assert int(info.search(text).group(1)) == pid  # type: ignore[union-attr]
    assert f'gpu_uuid="{DEV0.uuid}"' in text
    assert "xpushare_nvml_up 1" in text
    assert f'xpushare_gpu_info{{gpu_uuid="{DEV0.uuid}",gpu_index="0",gpu_name="{DEV0.name}"}} 1' in text
    assert f'xpushare_gpu_info{{gpu_uuid="{DEV1.uuid}",gpu_index="1",gpu_name="{DEV1.name}"}} 1' in text
    # the library's managed allocations reach NVML, hence the scheduler's GPU metrics
    used = 768 * MiB + DEFAULT_CONTEXT_BYTES
    _wait_for("NVML memory in /metrics", lambda: f'xpushare_gpu_memory_used_bytes{{gpu_uuid="{DEV0.uuid}",'
              f'gpu_index="0"}} {used}' in _metrics(port))

    err = client.stderr_text()
    assert re.search(r"\[XPUSHARE\]\[WARN\]: cuMemAlloc rejected: 805306368 \+ 536870912 = 1342177280 would exceed "
                     r"limit 1073741824 bytes", err), err
    assert re.search(rf"Registered client \w+ on GPU {DEV0.uuid} with Pod name = none", log.read_text())
    assert scheduler.poll() is None, log.read_text()
