#!/usr/bin/env python3
"""Context probe: how long a process waits for its first usable CUDA context, step by step (PERF-013, issue 38).

A sharing system does its work at a process's first CUDA calls: xpushare's client library registers with the
scheduler in ``cuInit``, HAMi-core sets up its shared region, an MPS client connects to the server when its
context is made. This probe times, with the process's own clock (``time.perf_counter``), each step a CUDA program
takes before its first result, once per process (a context is made once per process), and prints one line,
flushed, to stdout:

    [XPUSHARE][CTX_PROBE] status=ok|unavailable|error init_ms=<f3> context_ms=<f3> alloc_ms=<f3>
        launch_ms=<f3> total_ms=<f3> device=sim|gpu error=<text to the end of the line>

(one line.) ``init_ms``: loading the driver library and ``cuInit``; ``context_ms``: the device's primary context
made current (``cuDevicePrimaryCtxRetain`` + ``cuCtxSetCurrent``, as the CUDA runtime does); ``alloc_ms``: the
first ``cuMemAlloc`` (1 MiB) and its ``cuMemFree``; ``launch_ms``: loading the kernel's module, the first
``cuLaunchKernel`` (one thread, a few steps of the compute probe's fixed-work kernel; on the lab's simulated GPU
``simgpu_sleep`` of 1 µs) and ``cuCtxSynchronize``; ``total_ms``: their sum, from before the library is loaded
to the first kernel's end. ``status=unavailable``: no CUDA driver; ``error``: a driver call failed (its name and
code in ``error``).

Output (stdout): the probe line, PASS, then ``--- <seconds> seconds ---``. Exit 0 when ``status=ok``, 1
otherwise or on a usage error.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common.py sits next to it
import _output as o
from _cudadrv import (
    SIMGPU_MARKER,
    SIMGPU_MODULE_IMAGE,
    CudaDriver,
    CudaDriverError,
    load_cuda_library,
    primary_context,
)
from compute_probe import BUSY_PTX, GPU_KERNEL, SIM_KERNEL

CTX_PROBE_PREFIX = "[XPUSHARE][CTX_PROBE]"
STEPS = ("init_ms", "context_ms", "alloc_ms", "launch_ms")


def format_line(status: str, steps: dict[str, float], device: str, error: str = "none") -> str:
    """The probe's one line (see the module docstring); a step not reached is ``nan``."""
    values = " ".join(f"{k}={steps.get(k, float('nan')):.3f}" for k in STEPS)
    total = sum(steps.get(k, float("nan")) for k in STEPS)
    return f"{CTX_PROBE_PREFIX} status={status} {values} total_ms={total:.3f} device={device} error={error}"


def measure() -> tuple[str, dict[str, float], str, str]:
    """Time each step (ms). Returns ``(status, steps, device, error)``: ``ok`` with every step; ``unavailable``
    without a driver library; ``error`` with the steps reached before the failing call (named in ``error``)."""
    steps: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name] = (now - t) * 1000.0
        t = now

    try:
        lib = load_cuda_library(require_simulator=False)
    except RuntimeError as exc:  # no driver library: a node's missing prerequisite, not a verdict
        return "unavailable", steps, "-", str(exc)
    simulated = hasattr(lib, SIMGPU_MARKER)
    device = "sim" if simulated else "gpu"
    drv = CudaDriver(lib)
    try:
        drv.call("cuInit", 0)
        lap("init_ms")
        primary_context(drv)
        lap("context_ms")
        ptr = ctypes.c_uint64()
        drv.call("cuMemAlloc_v2", ctypes.byref(ptr), 1 << 20)
        drv.call("cuMemFree_v2", ptr)
        lap("alloc_ms")
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        drv.call("cuModuleLoadData", ctypes.byref(module), SIMGPU_MODULE_IMAGE if simulated else BUSY_PTX)
        drv.call("cuModuleGetFunction", ctypes.byref(func), module, SIM_KERNEL if simulated else GPU_KERNEL)
        arg = ctypes.c_ulonglong(1000 if simulated else 16)  # simulated: ns; real: steps of the fixed-work kernel
        out = ctypes.c_uint64()
        if simulated:
            params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        else:
            drv.call("cuMemAlloc_v2", ctypes.byref(out), 8)
            params = (ctypes.c_void_p * 2)(ctypes.addressof(arg), ctypes.addressof(out))
        drv.call("cuLaunchKernel", func, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        drv.call("cuCtxSynchronize")
        lap("launch_ms")
    except (CudaDriverError, AttributeError) as exc:  # a failed call, or a driver without the entry point
        return "error", steps, device, f"{type(exc).__name__}: {exc}"
    return "ok", steps, device, "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 1
    start = time.perf_counter()
    status, steps, device, error = measure()
    print(format_line(status, steps, device, error), flush=True)
    return o.finish(status == "ok", start)


if __name__ == "__main__":
    sys.exit(main())
