#!/usr/bin/env python3
"""Compute probe: the share of the GPU's time one kernel launch path really gets (issue 26, docs/isolation.md).

Through one launch path (--path) it makes batches of --batch launches of kernels of --kernel-ms each on a stream
of its own, back to back, for --intervals intervals of --interval-s seconds, and prints one line per interval, flushed,
to stdout:

    [XPUSHARE][COMPUTE_PROBE] path=<path> interval=<int> phase=<label> elapsed_s=<f3> status=ok|unavailable|error
        kernels=<int> batches=<int> wall_s=<f4> kernels_per_s=<f3> kernel_ms_events=<f4> kernel_ms_wall=<f4>
        busy_events=<f4> busy_wall=<f4> device=sim|gpu error=<text to the end of the line>

(one line; ``elapsed_s``: seconds since the script started, when the interval began.) Two independent clocks:

* **events** (the GPU's own clock): ``cuEventRecord`` before each launch and after the last, ``cuEventElapsedTime``
  between consecutive events; ``kernel_ms_events`` = the shortest such gap of the interval per kernel: one
  kernel's time when it followed the one before without a wait (a launch delayed by a held lock or a
  neighbour's kernels shows a longer gap, never a shorter one);
* **wall** (this process's clock): ``time.perf_counter`` around each batch's launches and its final
  ``cuEventSynchronize``; ``kernel_ms_wall`` = the shortest batch of the interval per kernel, launch overheads
  and any wait inside the batch included: an upper bound of the kernel's time, equal to it when a batch ran
  without a wait.

``kernels_per_s`` = kernels / ``wall_s``; ``busy_events`` = kernels x ``kernel_ms_events`` / ``wall_s`` and
``busy_wall`` = kernels x ``kernel_ms_wall`` / ``wall_s``: the fraction of the interval the GPU spent on this
process's kernels (1.0 alone without a quota; a core quota of q % caps it at about q / 100).

Paths (one per process):

==================  ==========================================================================================
``cuLaunchKernel``   ``cuLaunchKernel`` per kernel (PyTorch eager, cuBLAS/cuDNN, most CUDA programs)
``cuLaunchKernelEx`` ``cuLaunchKernelEx`` with a ``CUlaunchConfig`` per kernel (CUDA 12: CUTLASS cluster
                     launches on Hopper, Triton 3)
``cuGraphLaunch``    one CUDA graph of --graph-nodes kernel nodes (default 2, a chain) built with ``cuGraphCreate``
                     + ``cuGraphAddKernelNode``, ``cuGraphInstantiateWithFlags``; one ``cuGraphLaunch`` per launch
                     (torch.compile mode="reduce-overhead", TensorRT, vLLM/SGLang decode)
==================  ==========================================================================================

The kernel: on the lab's simulated GPU (``libcuda.so.1`` with ``simgpuVersion``) ``simgpu_sleep`` (argument: ns);
on a real GPU a one-thread kernel of fixed work (dependent integer steps) loaded from inline PTX (sm_80 target,
JIT-compiled for sm_80/sm_90 and later; argument: steps, calibrated so that one kernel alone lasts --kernel-ms).

Output (stdout): the probe lines, PASS, then ``--- <seconds> seconds ---``. Exit 0 when every line has
``status=ok``, 1 otherwise or on a usage error. ``status=unavailable``: no CUDA driver, or a driver without the
path's entry point (e.g. ``cuLaunchKernelEx`` before CUDA 12); ``error``: a driver call failed.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common.py sits next to it
import _common as c
import _output as o
from _cudadrv import (
    SIMGPU_MARKER,
    SIMGPU_MODULE_IMAGE,
    CudaDriver,
    CudaDriverError,
    KernelNodeParams,
    LaunchConfig,
    load_cuda_library,
    primary_context,
)

COMPUTE_PROBE_PREFIX = "[XPUSHARE][COMPUTE_PROBE]"
PATHS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch")
SIM_KERNEL = b"simgpu_sleep"
GPU_KERNEL = b"xpushare_busy"
#: One thread runs a fixed number of dependent integer steps (an LCG) and stores the result (PTX ISA 7.0, sm_80
#: and later). Fixed work, not a spin on ``%clock64``: a kernel that spins until a clock value has passed lasts the
#: same wall time whether or not another context's kernels time-slice the GPU with it, so its duration says nothing
#: about the GPU time it got (on a real H200 two such probes under the SUT "got" 0.82 + 0.71 of one GPU); fixed
#: work takes longer when the GPU is shared, and the shortest kernel (an uncontended one) is its true cost.
BUSY_PTX = b"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry xpushare_busy(
    .param .u64 xpushare_busy_param_0,
    .param .u64 xpushare_busy_param_1
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [xpushare_busy_param_0];
    ld.param.u64 %rd2, [xpushare_busy_param_1];
    cvta.to.global.u64 %rd2, %rd2;
    mov.u64 %rd3, 0;
    mov.u64 %rd4, 88172645463325252;
$L_step:
    setp.ge.u64 %p1, %rd3, %rd1;
    @%p1 bra $L_done;
    mul.lo.u64 %rd4, %rd4, 6364136223846793005;
    add.u64 %rd4, %rd4, 1442695040888963407;
    add.u64 %rd3, %rd3, 1;
    bra $L_step;
$L_done:
    st.global.u64 [%rd2], %rd4;
    ret;
}
\0"""
#: Steps of the calibration kernel (a few ms on an A100/H100/H200).
CALIBRATION_STEPS = 1 << 18


class Unavailable(RuntimeError):
    """The path's prerequisite is missing on this node (no CUDA driver, no such entry point)."""


@dataclass
class Interval:
    """One interval's measurement (times in seconds unless named ``_ms``)."""

    path: str
    status: str = "ok"
    kernels: int = 0
    batches: int = 0
    wall_s: float = 0.0
    kernel_ms_events: float = 0.0
    kernel_ms_wall: float = 0.0
    device: str = "-"
    error: str = "none"

    @property
    def kernels_per_s(self) -> float:
        return self.kernels / self.wall_s if self.wall_s > 0 else 0.0

    def busy(self, kernel_ms: float) -> float:
        """kernels x ``kernel_ms`` / wall: the fraction of the interval spent on these kernels."""
        return self.kernels * kernel_ms / 1000.0 / self.wall_s if self.wall_s > 0 else 0.0


def format_line(iv: Interval, index: int, phase: str, elapsed_s: float) -> str:
    """The probe line of one interval (format in the module docstring); ``error`` last, one line."""
    error = " ".join(iv.error.split())[:240] or "none"
    return (
        f"{COMPUTE_PROBE_PREFIX} path={iv.path} interval={index:d} phase={phase} elapsed_s={elapsed_s:.3f} "
        f"status={iv.status} kernels={iv.kernels:d} batches={iv.batches:d} wall_s={iv.wall_s:.4f} "
        f"kernels_per_s={iv.kernels_per_s:.3f} kernel_ms_events={iv.kernel_ms_events:.4f} "
        f"kernel_ms_wall={iv.kernel_ms_wall:.4f} busy_events={iv.busy(iv.kernel_ms_events):.4f} "
        f"busy_wall={iv.busy(iv.kernel_ms_wall):.4f} device={iv.device} error={error}"
    )


class Prober:
    """The driver set up for one path: context, stream, two events, the kernel and its batch launcher.

    Raises:
        Unavailable: no driver or no entry point for the path; CudaDriverError: a set-up call failed.
    """

    def __init__(self, path: str, kernel_ms: float, batch: int, graph_nodes: int = 2) -> None:
        try:
            lib = load_cuda_library(require_simulator=False)
        except RuntimeError as exc:
            raise Unavailable(str(exc)) from exc
        self.path = path
        self.batch = batch
        self.per_launch = graph_nodes if path == "cuGraphLaunch" else 1
        self.simulated = hasattr(lib, SIMGPU_MARKER)
        self.drv = drv = CudaDriver(lib)
        try:
            drv.call("cuInit", 0)
            _dev, self.ctx = primary_context(drv)
            for name in {"cuLaunchKernel": ("cuLaunchKernel",), "cuLaunchKernelEx": ("cuLaunchKernelEx",),
                         "cuGraphLaunch": ("cuGraphCreate", "cuGraphInstantiateWithFlags", "cuGraphLaunch")}[path]:
                drv.fn(name)
        except AttributeError as exc:
            raise Unavailable(f"the CUDA driver has no {exc.args[0] if exc.args else path}") from exc
        module = ctypes.c_void_p()
        drv.call("cuModuleLoadData", ctypes.byref(module), SIMGPU_MODULE_IMAGE if self.simulated else BUSY_PTX)
        self.func = ctypes.c_void_p()
        drv.call("cuModuleGetFunction", ctypes.byref(self.func), module,
                 SIM_KERNEL if self.simulated else GPU_KERNEL)
        self.stream = ctypes.c_void_p()
        drv.call("cuStreamCreate", ctypes.byref(self.stream), 0)
        self.events = [ctypes.c_void_p() for _ in range(batch + 1)]  # one before each launch, one after the last
        for event in self.events:
            drv.call("cuEventCreate", ctypes.byref(event), 0)
        self._config = LaunchConfig(1, 1, 1, 1, 1, 1, 0, self.stream, None, 0)
        self._arg = ctypes.c_ulonglong(int(kernel_ms * 1e6))  # simulated: ns; real: steps, calibrated below
        if self.simulated:
            self._params = (ctypes.c_void_p * 1)(ctypes.addressof(self._arg))
        else:
            self._out = ctypes.c_uint64()
            drv.call("cuMemAlloc_v2", ctypes.byref(self._out), 8)
            self._params = (ctypes.c_void_p * 2)(ctypes.addressof(self._arg), ctypes.addressof(self._out))
            self._arg.value = self._calibrate(kernel_ms)
        self._graph_exec = ctypes.c_void_p()
        if path == "cuGraphLaunch":
            self._build_graph()

    def _calibrate(self, kernel_ms: float) -> int:
        """Steps of the busy kernel that last ``kernel_ms`` (ms) on this GPU: the shortest of three calibration
        kernels (``CALIBRATION_STEPS`` each, timed by events) scaled. Launched through ``cuLaunchKernel`` whatever
        the path (a graph's node parameters are fixed when it is built), before the first interval."""
        drv = self.drv
        self._arg.value = CALIBRATION_STEPS
        ms = ctypes.c_float()
        best = math.inf
        for _ in range(3):
            drv.call("cuEventRecord", self.events[0], self.stream)
            drv.call("cuLaunchKernel", self.func, 1, 1, 1, 1, 1, 1, 0, self.stream, self._params, None)
            drv.call("cuEventRecord", self.events[1], self.stream)
            drv.call("cuEventSynchronize", self.events[1])
            drv.call("cuEventElapsedTime", ctypes.byref(ms), self.events[0], self.events[1])
            best = min(best, float(ms.value))
        return max(1, int(CALIBRATION_STEPS * kernel_ms / max(best, 1e-3)))

    def _build_graph(self) -> None:
        """A graph of ``per_launch`` kernel nodes, each depending on the one before, instantiated."""
        drv = self.drv
        graph = ctypes.c_void_p()
        drv.call("cuGraphCreate", ctypes.byref(graph), 0)
        node_params = KernelNodeParams(self.func, 1, 1, 1, 1, 1, 1, 0, self._params, None, None, None)
        try:
            add_name = "cuGraphAddKernelNode_v2"
            add = drv.fn(add_name)
        except AttributeError:  # CUDA 11: the v1 parameters are the v2's prefix
            add_name = "cuGraphAddKernelNode"
            add = drv.fn(add_name)
        previous = ctypes.c_void_p()
        for i in range(self.per_launch):
            node = ctypes.c_void_p()
            deps = (ctypes.c_void_p * 1)(previous) if i else None
            drv.check(add_name, add(ctypes.byref(node), graph, deps, 1 if i else 0, ctypes.byref(node_params)))
            previous = node
        drv.call("cuGraphInstantiateWithFlags", ctypes.byref(self._graph_exec), graph, 0)
        drv.call("cuGraphDestroy", graph)  # the executable graph keeps its own copy

    def _launch_once(self) -> None:
        """One launch through the path: one kernel, or one graph of ``per_launch`` kernels."""
        drv = self.drv
        if self.path == "cuLaunchKernel":
            rc = drv.fn("cuLaunchKernel")(self.func, 1, 1, 1, 1, 1, 1, 0, self.stream, self._params, None)
            drv.check("cuLaunchKernel", rc)
        elif self.path == "cuLaunchKernelEx":
            rc = drv.fn("cuLaunchKernelEx")(ctypes.byref(self._config), self.func, self._params, None)
            drv.check("cuLaunchKernelEx", rc)
        else:
            drv.call("cuGraphLaunch", self._graph_exec, self.stream)

    def one_batch(self) -> tuple[float, float]:
        """``batch`` launches with an event before each and after the last, then wait for the last event.

        Returns (event ms, wall ms) per kernel: the shortest gap between consecutive events (one launch that
        followed the one before without a wait) and the batch's wall time, each over the kernels they cover.
        """
        drv = self.drv
        record = drv.fn("cuEventRecord")
        t0 = time.perf_counter()
        drv.check("cuEventRecord", record(self.events[0], self.stream))
        for event in self.events[1:]:
            self._launch_once()
            drv.check("cuEventRecord", record(event, self.stream))
        drv.call("cuEventSynchronize", self.events[-1])
        wall_ms = (time.perf_counter() - t0) * 1000.0
        ms = ctypes.c_float()
        gaps = []
        for a, b in itertools.pairwise(self.events):
            drv.call("cuEventElapsedTime", ctypes.byref(ms), a, b)
            gaps.append(float(ms.value))
        return min(gaps) / self.per_launch, wall_ms / (self.batch * self.per_launch)

    def measure(self, interval_s: float) -> Interval:
        """Batches back to back for ``interval_s`` seconds (at least one)."""
        iv = Interval(self.path, device="sim" if self.simulated else "gpu")
        best_ev = best_wall = math.inf
        t0 = time.perf_counter()
        while True:
            ev_ms, wall_ms = self.one_batch()
            iv.batches += 1
            iv.kernels += self.batch * self.per_launch
            best_ev = min(best_ev, ev_ms)
            best_wall = min(best_wall, wall_ms)
            if time.perf_counter() - t0 >= interval_s:
                break
        iv.wall_s = time.perf_counter() - t0
        iv.kernel_ms_events, iv.kernel_ms_wall = best_ev, best_wall
        return iv


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", choices=PATHS, required=True, help="the launch path to probe")
    p.add_argument("--kernel-ms", type=c.positive_float, default=4.0, help="one kernel's duration (ms, default 4)")
    p.add_argument("--batch", type=c.positive_int, default=8, help="launches per batch (default 8)")
    p.add_argument("--graph-nodes", type=c.positive_int, default=2,
                   help="kernel nodes of the graph (path cuGraphLaunch; default 2)")
    p.add_argument("--interval-s", type=c.positive_float, default=4.0, help="seconds per line (default 4)")
    p.add_argument("--intervals", type=c.positive_int, default=5, help="lines to print (default 5)")
    p.add_argument("--start-delay-s", type=c.non_negative_float, default=0.0,
                   help="seconds between the CUDA set-up (the client's registration) and the first interval")
    p.add_argument("--phase", default="run", help="label printed on every line")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 1
    began = time.perf_counter()
    prober: Prober | None = None
    failed: Interval | None = None
    try:
        prober = Prober(args.path, args.kernel_ms, args.batch, args.graph_nodes)
    except Unavailable as exc:
        failed = Interval(args.path, status="unavailable", error=str(exc))
    except (CudaDriverError, RuntimeError) as exc:
        failed = Interval(args.path, status="error", error=f"{type(exc).__name__}: {exc}")
    if prober is not None:
        time.sleep(args.start_delay_s)
    start = time.perf_counter()
    ok = True
    for index in range(args.intervals if prober is not None else 1):
        elapsed = time.perf_counter() - began
        iv: Interval
        if prober is None:
            assert failed is not None
            iv = failed
        else:
            try:
                iv = prober.measure(args.interval_s)
            except Exception as exc:  # every failure becomes a line, never a silent pass
                iv = Interval(args.path, status="error", error=f"{type(exc).__name__}: {exc}")
        ok = ok and iv.status == "ok"
        print(format_line(iv, index, args.phase, elapsed), flush=True)
        if iv.status != "ok":
            break
    return o.finish(ok, start)


if __name__ == "__main__":
    sys.exit(main())
