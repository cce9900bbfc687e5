#!/usr/bin/env python3
"""Memory probe: how much device memory one allocation path can really hold (issue 26, docs/isolation.md).

Through one allocation path (--path) it allocates --step-mib blocks one after the other and keeps them, until
the next block would pass the cap or the path refuses a block; then it frees everything and prints one line,
flushed, to stdout:

    [XPUSHARE][MEM_PROBE] path=<path> round=<int> phase=<label> elapsed_s=<f3> status=ok|unavailable|error
        step_bytes=<int> cap_bytes=<int> accepted_bytes=<int> refused_bytes=<int> mem_free_bytes=<int>
        mem_total_bytes=<int> detail=<token> error=<text to the end of the line>

(one line; ``elapsed_s``: seconds since the script started, when the round began; ``refused_bytes`` 0 and
``error=none`` when the cap was reached without a refusal; ``mem_*`` is
what ``cuMemGetInfo`` (``torch.cuda.mem_get_info`` on the PyTorch paths) said while the blocks were held, -1
when it could not be asked; ``status=unavailable`` when the path's prerequisite is missing on the node (no
torch, no CUDA, a driver without the entry point), ``error`` when the path failed otherwise.)

Paths (one per process, so that PyTorch's allocator settings take effect before CUDA starts):

==================  ==========================================================================================
``cuMemAlloc``       ``cuMemAlloc_v2`` / ``cuMemFree_v2`` (ctypes, driver API)
``cuMemAllocManaged`` ``cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)``
``cuMemAllocPitch``  ``cuMemAllocPitch_v2`` (rows of 1 MiB, element size 4)
``cuMemAllocAsync``  ``cuMemAllocAsync`` / ``cuMemFreeAsync`` on the legacy stream (the device's default pool)
``cuMemPool``        an explicit pool: ``cuMemPoolCreate`` + ``cuMemAllocFromPoolAsync`` / ``cuMemFreeAsync``
``cuMemCreate``      virtual memory management: ``cuMemCreate`` + ``cuMemAddressReserve`` + ``cuMemMap`` +
                     ``cuMemSetAccess``; freed by ``cuMemUnmap``, ``cuMemAddressFree``, ``cuMemRelease``
``torch-default``    ``torch.empty`` with PyTorch's default caching allocator
``torch-expandable`` the same with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
``torch-async``      the same with ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``
``child-process``    this process holds what ``cuMemAlloc`` accepts, then a child process (this script,
                     path ``cuMemAlloc``, same environment) probes beside it; accepted = both together,
                     ``detail=parent:<bytes>,child:<bytes>``
==================  ==========================================================================================

The cap: the smallest of --cap-factor x --quota-bytes (when a quota is given), --max-bytes (when given) and
the device's real free memory (NVML; read by a child process without LD_PRELOAD when a library is preloaded, since
a sharing system may virtualise NVML too, as HAMi-core does) less --free-margin-mib, so
the probe never asks for more than the card has: managed memory asked beyond the card can hang a shared GPU,
and xpushare's library turns cuMemAlloc into managed allocations. Without NVML, --max-bytes is required.

--rounds/--interval-s repeat the measurement in the same process (round r starts --interval-s x r seconds
after the first, which starts --start-delay-s after the CUDA set-up), so a quota changed while the probe
runs is measured by the rounds after the change.
--touch writes every block (``cuMemsetD8_v2``, ``fill_``) so that managed pages are really placed on the
device; ``auto`` touches on a real GPU and not on the lab's simulated one (whose memory is host memory).

Output (stdout): the probe lines, PASS, then ``--- <seconds> seconds ---``. Exit 0 when every line has
``status=ok`` (refusals are the measurement, not a failure), 1 otherwise or on a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common.py sits next to it
import _common as c
import _output as o

MEM_PROBE_PREFIX = "[XPUSHARE][MEM_PROBE]"
DRIVER_PATHS = ("cuMemAlloc", "cuMemAllocManaged", "cuMemAllocPitch", "cuMemAllocAsync", "cuMemPool", "cuMemCreate")
TORCH_PATHS = {
    "torch-default": None,
    "torch-expandable": "expandable_segments:True",
    "torch-async": "backend:cudaMallocAsync",
}
CHILD_PATH = "child-process"
PATHS = (*DRIVER_PATHS, *TORCH_PATHS, CHILD_PATH)

_U64 = ctypes.c_uint64
_PTR_U64 = ctypes.POINTER(_U64)
_PTR_SIZE = ctypes.POINTER(ctypes.c_size_t)
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDeviceGetUuid": (ctypes.c_char_p, ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int),
    "cuCtxSetCurrent": (ctypes.c_void_p,),
    "cuCtxSynchronize": (),
    "cuMemGetInfo_v2": (_PTR_SIZE, _PTR_SIZE),
    "cuMemAlloc_v2": (_PTR_U64, ctypes.c_size_t),
    "cuMemFree_v2": (_U64,),
    "cuMemAllocManaged": (_PTR_U64, ctypes.c_size_t, ctypes.c_uint),
    "cuMemAllocPitch_v2": (_PTR_U64, _PTR_SIZE, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint),
    "cuMemAllocAsync": (_PTR_U64, ctypes.c_size_t, ctypes.c_void_p),
    "cuMemFreeAsync": (_U64, ctypes.c_void_p),
    "cuStreamSynchronize": (ctypes.c_void_p,),
    "cuMemPoolCreate": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p),
    "cuMemPoolDestroy": (ctypes.c_void_p,),
    "cuMemAllocFromPoolAsync": (_PTR_U64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p),
    "cuMemGetAllocationGranularity": (_PTR_SIZE, ctypes.c_void_p, ctypes.c_int),
    "cuMemCreate": (ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong),
    "cuMemRelease": (ctypes.c_ulonglong,),
    "cuMemAddressReserve": (_PTR_U64, ctypes.c_size_t, ctypes.c_size_t, _U64, ctypes.c_ulonglong),
    "cuMemAddressFree": (_U64, ctypes.c_size_t),
    "cuMemMap": (_U64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_ulonglong, ctypes.c_ulonglong),
    "cuMemUnmap": (_U64, ctypes.c_size_t),
    "cuMemSetAccess": (_U64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t),
    "cuMemsetD8_v2": (_U64, ctypes.c_ubyte, ctypes.c_size_t),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
}
CUDA_ERROR_OUT_OF_MEMORY = 2
_PITCH_ROW_BYTES = 1 << 20


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    """``CUmemAllocationProp``: pinned device memory on one device."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _MemLocation),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _PoolProps(ctypes.Structure):
    """``CUmemPoolProps``: a pool of pinned memory on one device."""

    _fields_ = [
        ("allocType", ctypes.c_int),
        ("handleTypes", ctypes.c_int),
        ("location", _MemLocation),
        ("win32SecurityAttributes", ctypes.c_void_p),
        ("maxSize", ctypes.c_size_t),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 54),
    ]


class _AccessDesc(ctypes.Structure):
    """``CUmemAccessDesc``: read/write access for one device."""

    _fields_ = [("location", _MemLocation), ("flags", ctypes.c_int)]


class Unavailable(RuntimeError):
    """The path's prerequisite is missing on this node (no torch, no CUDA, no such driver entry point)."""


class Refused(Exception):
    """The path refused a block: ``error`` is the driver's error name or the exception's first line."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


@dataclass
class Attempt:
    """One measurement: what was accepted before the first refusal (or the cap) and the device's view."""

    path: str
    cap_bytes: int
    step_bytes: int
    accepted_bytes: int = 0
    refused_bytes: int = 0
    error: str = "none"
    status: str = "ok"
    mem_free: int = -1
    mem_total: int = -1
    detail: str = "-"


def format_line(a: Attempt, round_no: int, phase: str, elapsed_s: float) -> str:
    """The probe line of one attempt (format in the module docstring); ``error`` last, one line."""
    error = " ".join(a.error.split())[:240] or "none"
    return (
        f"{MEM_PROBE_PREFIX} path={a.path} round={round_no:d} phase={phase} elapsed_s={elapsed_s:.3f} "
        f"status={a.status} step_bytes={a.step_bytes:d} cap_bytes={a.cap_bytes:d} "
        f"accepted_bytes={a.accepted_bytes:d} refused_bytes={a.refused_bytes:d} mem_free_bytes={a.mem_free:d} "
        f"mem_total_bytes={a.mem_total:d} detail={a.detail} error={error}"
    )


# ---- the driver API through ctypes ----------------------------------------------------------------------


class Driver:
    """``libcuda.so.1`` looked up by name (dlsym, which the client library hooks), with the primary context
    of device 0 current."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise Unavailable(f"CUDA driver not available: {exc}") from exc
        self._fns: dict[str, Any] = {}
        self.simulated = hasattr(self.lib, "simgpuVersion")
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        self.device = dev.value
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.call("cuCtxSetCurrent", ctx)

    def fn(self, name: str) -> Any:
        """The entry point ``name``; raises :class:`Unavailable` when the driver does not export it."""
        func = self._fns.get(name)
        if func is None:
            try:
                func = getattr(self.lib, name)
            except AttributeError as exc:
                raise Unavailable(f"the CUDA driver has no {name}") from exc
            func.restype = ctypes.c_int
            func.argtypes = list(_SIGNATURES[name])
            self._fns[name] = func
        return func

    def error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        try:
            rc = self.fn("cuGetErrorName")(code, ctypes.byref(text))
        except Unavailable:
            rc = -1
        name = text.value.decode(errors="replace") if rc == 0 and text.value else "CUresult"
        return f"{name}({code})"

    def call(self, name: str, *args: Any) -> None:
        """Call ``name``; a non-zero CUresult raises RuntimeError naming it."""
        rc = self.fn(name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned {self.error_name(rc)}")

    def alloc_call(self, name: str, *args: Any) -> None:
        """An allocating call: a non-zero CUresult is a refusal (:class:`Refused`)."""
        rc = self.fn(name)(*args)
        if rc != 0:
            raise Refused(f"{name} returned {self.error_name(rc)}")

    def mem_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return int(free.value), int(total.value)

    def uuid(self) -> str:
        raw = ctypes.create_string_buffer(16)
        self.call("cuDeviceGetUuid", raw, self.device)
        h = raw.raw.hex()
        return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def nvml_free_bytes(uuid: str) -> int | None:
    """The device's free memory from NVML (``nvmlDeviceGetMemoryInfo``), None when NVML cannot tell.

    The device is found by ``uuid`` (``cuDeviceGetUuid``), else by the first token of ``NVIDIA_VISIBLE_DEVICES``
    (what a device plugin gives a container), else it is NVML's only device.
    """

    class _Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")[0].strip()
        count = ctypes.c_uint()
        found = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) == 0
        if not found and visible.startswith(("GPU-", "MIG-")):
            found = nvml.nvmlDeviceGetHandleByUUID(visible.encode(), ctypes.byref(handle)) == 0
        if not found and nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value == 1:
            found = nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        if not found:
            return None
        mem = _Memory()
        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) != 0:
            return None
        return int(mem.free)
    except (OSError, AttributeError):
        return None


def card_free_bytes(uuid: str) -> int | None:
    """The device's free memory as the card has it: NVML read by a child process without ``LD_PRELOAD`` when a
    library is preloaded into this one, else by this process (:func:`nvml_free_bytes`); None when NVML cannot tell.

    A sharing system preloaded into the workload may virtualise NVML as well as the driver: HAMi-core answers
    ``nvmlDeviceGetMemoryInfo`` with its quota as the total and the quota less what it counts as used as the free
    memory (docs/findings.md, HAMi-core), so a bound read inside the probe would be the quota under test, not the
    card. xpushare's and NVIDIA MPS's clients leave NVML alone; the child process reads the same NVML either way.
    """
    if not os.environ.get("LD_PRELOAD"):
        return nvml_free_bytes(uuid)
    return _CARD_READER.free_bytes(uuid)


class _CardReader:
    """One child process without ``LD_PRELOAD`` that answers a UUID per line with NVML's free bytes (-1: unknown).

    Started at the first question and kept: the probe asks once per measurement, and a Python start per question
    cost more CPU than the measurement (0.15 s a question on two cores, a share of the card's host the workloads
    beside the probe would otherwise have)."""

    CODE = ("import sys; sys.path.insert(0, sys.argv[1]); import mem_probe as m\n"
            "for line in sys.stdin:\n"
            "    r = m.nvml_free_bytes(line.strip()); print(-1 if r is None else r, flush=True)\n")
    TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def free_bytes(self, uuid: str) -> int | None:
        proc = self.proc or self._start()
        if proc is None or proc.stdin is None or proc.stdout is None:
            return None
        try:
            proc.stdin.write(uuid.replace("\n", " ") + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], self.TIMEOUT_S)
            text = proc.stdout.readline().strip() if ready else ""
        except (OSError, ValueError):
            text = ""
        if not text:  # hung or died: the next question starts a new reader
            self.stop()
        return int(text) if text.isdigit() else None

    def _start(self) -> subprocess.Popen[str] | None:
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, os.path.dirname(os.path.abspath(__file__))],
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        return self.proc

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.wait(timeout=5)


_CARD_READER = _CardReader()


Block = tuple[Any, ...]


class DriverPath:
    """One driver-API allocation path: ``alloc(n)`` returns a block or raises :class:`Refused`."""

    def __init__(self, drv: Driver, path: str, touch: bool) -> None:
        self.drv = drv
        self.path = path
        self.touch = touch
        self._stream = ctypes.c_void_p(None)
        if path == "cuMemPool":
            props = _PoolProps()
            props.allocType = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
            props.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = drv.device
            self._pool = ctypes.c_void_p()
            drv.call("cuMemPoolCreate", ctypes.byref(self._pool), ctypes.byref(props))
        if path == "cuMemCreate":
            self._prop = _AllocationProp()
            self._prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
            self._prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
            self._prop.location.id = drv.device
            gran = ctypes.c_size_t()
            drv.call("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(self._prop), 0)
            self.granularity = int(gran.value)
            self._access = _AccessDesc()
            self._access.location.type = 1
            self._access.location.id = drv.device
            self._access.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE

    def alloc(self, nbytes: int) -> Block:
        d = self.drv
        ptr = _U64()
        if self.path == "cuMemAlloc":
            d.alloc_call("cuMemAlloc_v2", ctypes.byref(ptr), nbytes)
            block: Block = ("free", int(ptr.value), nbytes)
        elif self.path == "cuMemAllocManaged":
            d.alloc_call("cuMemAllocManaged", ctypes.byref(ptr), nbytes, 1)  # CU_MEM_ATTACH_GLOBAL
            block = ("free", int(ptr.value), nbytes)
        elif self.path == "cuMemAllocPitch":
            pitch = ctypes.c_size_t()
            rows = max(1, nbytes // _PITCH_ROW_BYTES)
            d.alloc_call("cuMemAllocPitch_v2", ctypes.byref(ptr), ctypes.byref(pitch), _PITCH_ROW_BYTES, rows, 4)
            block = ("free", int(ptr.value), int(pitch.value) * rows)
        elif self.path == "cuMemAllocAsync":
            d.alloc_call("cuMemAllocAsync", ctypes.byref(ptr), nbytes, self._stream)
            d.call("cuStreamSynchronize", self._stream)
            block = ("free_async", int(ptr.value), nbytes)
        elif self.path == "cuMemPool":
            d.alloc_call("cuMemAllocFromPoolAsync", ctypes.byref(ptr), nbytes, self._pool, self._stream)
            d.call("cuStreamSynchronize", self._stream)
            block = ("free_async", int(ptr.value), nbytes)
        else:  # cuMemCreate
            if nbytes % self.granularity:
                raise RuntimeError(f"step {nbytes} is no multiple of the VMM granularity {self.granularity}")
            handle = ctypes.c_ulonglong()
            d.alloc_call("cuMemCreate", ctypes.byref(handle), nbytes, ctypes.byref(self._prop), 0)
            try:
                d.call("cuMemAddressReserve", ctypes.byref(ptr), nbytes, 0, 0, 0)
                d.call("cuMemMap", ptr, nbytes, 0, handle, 0)
                d.call("cuMemSetAccess", ptr, nbytes, ctypes.byref(self._access), 1)
            except RuntimeError:
                d.call("cuMemRelease", handle)
                raise
            block = ("vmm", int(ptr.value), nbytes, int(handle.value))
        if self.touch:
            d.call("cuMemsetD8_v2", block[1], 1, block[2])
            d.call("cuCtxSynchronize")
        return block

    def free(self, block: Block) -> None:
        d = self.drv
        kind, ptr, nbytes = block[0], block[1], block[2]
        if kind == "free":
            d.call("cuMemFree_v2", ptr)
        elif kind == "free_async":
            d.call("cuMemFreeAsync", ptr, self._stream)
            d.call("cuStreamSynchronize", self._stream)
        else:
            d.call("cuMemUnmap", ptr, nbytes)
            d.call("cuMemAddressFree", ptr, nbytes)
            d.call("cuMemRelease", block[3])

    def mem_info(self) -> tuple[int, int]:
        return self.drv.mem_info()


class TorchPath:
    """``torch.empty(n, dtype=uint8, device="cuda")`` under the allocator setting of the path."""

    def __init__(self, path: str, touch: bool) -> None:
        conf = TORCH_PATHS[path]
        if conf is None:
            os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        else:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf  # read when CUDA starts, after this
        try:
            import torch
        except ImportError as exc:
            raise Unavailable(f"torch not importable: {exc}") from exc
        if not torch.cuda.is_available():
            raise Unavailable("CUDA not available: torch.cuda.is_available() is False")
        self.torch = torch
        self.path = path
        self.touch = touch
        torch.cuda.init()

    def alloc(self, nbytes: int) -> Block:
        torch = self.torch
        try:
            t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            if self.touch:
                t.fill_(1)
            torch.cuda.synchronize()
        except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
            raise Refused(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        return (t,)

    def free(self, block: Block) -> None:
        del block

    def release_all(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def mem_info(self) -> tuple[int, int]:
        free, total = self.torch.cuda.mem_get_info()
        return int(free), int(total)


def fill(alloc: Callable[[int], Block], attempt: Attempt, held: list[Block]) -> None:
    """Allocate ``attempt.step_bytes`` blocks into ``held`` until the cap or a refusal."""
    step = attempt.step_bytes
    while attempt.accepted_bytes + step <= attempt.cap_bytes:
        try:
            held.append(alloc(step))
        except Refused as exc:
            attempt.refused_bytes = step
            attempt.error = exc.error
            return
        attempt.accepted_bytes += step


def measure(probe: DriverPath | TorchPath, attempt: Attempt) -> None:
    """Fill, read the memory info with the blocks held, free everything."""
    held: list[Block] = []
    try:
        fill(probe.alloc, attempt, held)
        with contextlib.suppress(RuntimeError):
            attempt.mem_free, attempt.mem_total = probe.mem_info()
    finally:
        while held:
            probe.free(held.pop())
        if isinstance(probe, TorchPath):
            probe.release_all()


_CHILD_ACCEPTED = re.compile(r"\bstatus=(\S+) .*\baccepted_bytes=(\d+) refused_bytes=(\d+) .* error=(.*)$")


def run_child(args: argparse.Namespace) -> tuple[str, int, int, str]:
    """This script as a child process on path cuMemAlloc, one round, with the same start delay (so the quota of
    its own registration is in force): (status, accepted, refused, error)."""
    argv = [sys.executable, os.path.abspath(__file__), "--path", "cuMemAlloc", "--rounds", "1",
            "--step-mib", str(args.step_mib), "--cap-factor", str(args.cap_factor),
            "--quota-bytes", str(args.quota_bytes), "--free-margin-mib", str(args.free_margin_mib),
            "--touch", args.touch, "--phase", "child", "--start-delay-s", str(args.start_delay_s)]
    if args.max_bytes:
        argv += ["--max-bytes", str(args.max_bytes)]
    sys.stderr.flush()
    # stderr (the client library's lines) goes to this process's: the child's evidence stays in the log
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=600, check=False)
    for line in proc.stdout.splitlines():
        m = _CHILD_ACCEPTED.search(line) if line.startswith(MEM_PROBE_PREFIX) else None
        if m:
            return m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    return "error", 0, 0, f"child exited {proc.returncode} without a probe line (its output is above)"


def cap_for(args: argparse.Namespace, real_free: int | None) -> int:
    """The probe's cap in bytes (module docstring); raises :class:`Unavailable` without any bound on the card."""
    bounds = []
    if args.quota_bytes:
        bounds.append(int(args.cap_factor * args.quota_bytes))
    if args.max_bytes:
        bounds.append(args.max_bytes)
    if real_free is not None:
        bounds.append(max(0, real_free - args.free_margin_mib * c.MIB))
    elif not args.max_bytes:
        raise Unavailable("NVML cannot tell the device's free memory: give --max-bytes")
    return min(bounds)


def one_round(args: argparse.Namespace, probe: DriverPath | TorchPath | None, drv: Driver | None) -> Attempt:
    step = args.step_mib * c.MIB
    real_free = card_free_bytes(drv.uuid()) if drv is not None else None
    attempt = Attempt(args.path, cap_for(args, real_free), step)
    if args.path == CHILD_PATH:
        assert isinstance(probe, DriverPath)
        held: list[Block] = []
        try:
            fill(probe.alloc, attempt, held)
            parent = attempt.accepted_bytes
            status, child, refused, error = run_child(args)
            attempt.status = status
            attempt.accepted_bytes = parent + child
            attempt.refused_bytes = refused
            attempt.error = error
            attempt.detail = f"parent:{parent},child:{child}"
            attempt.mem_free, attempt.mem_total = probe.mem_info()
        finally:
            while held:
                probe.free(held.pop())
        return attempt
    assert probe is not None
    measure(probe, attempt)
    return attempt


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", choices=PATHS, required=True, help="the allocation path to probe")
    p.add_argument("--step-mib", type=c.positive_int, default=64, help="block size in MiB (default 64)")
    p.add_argument("--quota-bytes", type=c.non_negative_int, default=0, help="the memory quota under test (0: none)")
    p.add_argument("--cap-factor", type=c.positive_float, default=3.0, help="cap = this x the quota (default 3)")
    p.add_argument("--max-bytes", type=c.non_negative_int, default=0, help="an explicit cap in bytes (0: none)")
    p.add_argument("--free-margin-mib", type=c.non_negative_int, default=512,
                   help="MiB of the card's free memory never asked for (default 512)")
    p.add_argument("--touch", choices=("auto", "on", "off"), default="auto", help="write every block")
    p.add_argument("--rounds", type=c.positive_int, default=1, help="measurements in this process (default 1)")
    p.add_argument("--interval-s", type=c.non_negative_float, default=10.0, help="seconds between round starts")
    p.add_argument("--start-delay-s", type=c.non_negative_float, default=0.0,
                   help="seconds between the CUDA set-up (the client's registration) and round 0")
    p.add_argument("--phase", default="start", help="label printed on the first round's line")
    p.add_argument("--phase-labels", default="", help="comma-separated labels of rounds 0, 1, ... (else --phase)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 1
    labels = [s for s in args.phase_labels.split(",") if s] if args.phase_labels else []
    began = time.perf_counter()  # elapsed_s counts from here (the process start, near enough)
    ok = True
    probe: DriverPath | TorchPath | None = None
    drv: Driver | None = None
    setup_error: Attempt | None = None
    try:
        if args.path in TORCH_PATHS:
            probe = TorchPath(args.path, args.touch != "off")  # torch with CUDA: a real GPU
            try:
                drv = Driver()  # the card's UUID for NVML; same process, same client of the library
            except (Unavailable, RuntimeError):
                drv = None
        else:
            drv = Driver()
            touch = args.touch == "on" or (args.touch == "auto" and not drv.simulated)
            probe = DriverPath(drv, "cuMemAlloc" if args.path == CHILD_PATH else args.path, touch)
    except Unavailable as exc:
        setup_error = Attempt(args.path, 0, args.step_mib * c.MIB, status="unavailable", error=str(exc))
    except RuntimeError as exc:
        setup_error = Attempt(args.path, 0, args.step_mib * c.MIB, status="error", error=str(exc))
    if setup_error is None:
        time.sleep(args.start_delay_s)
    start = time.perf_counter()
    for round_no in range(args.rounds if setup_error is None else 1):
        target = start + round_no * args.interval_s
        while time.perf_counter() < target:
            time.sleep(min(0.2, target - time.perf_counter()))
        phase = labels[round_no] if round_no < len(labels) else (args.phase if round_no == 0 else f"round{round_no}")
        elapsed = time.perf_counter() - began
        if setup_error is not None:
            attempt = setup_error
        else:
            try:
                attempt = one_round(args, probe, drv)
            except Unavailable as exc:
                attempt = Attempt(args.path, 0, args.step_mib * c.MIB, status="unavailable", error=str(exc))
            except Exception as exc:  # every failure becomes a line, never a silent pass
                error = f"{type(exc).__name__}: {exc}"
                attempt = Attempt(args.path, 0, args.step_mib * c.MIB, status="error", error=error)
        ok = ok and attempt.status == "ok"
        print(format_line(attempt, round_no, phase, elapsed), flush=True)
    return o.finish(ok, start)


if __name__ == "__main__":
    sys.exit(main())
