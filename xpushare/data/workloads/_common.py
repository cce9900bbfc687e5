"""What the workload scripts and the node sampler share: defaults table, argument types, devices, output.

The scripts in this folder are copied to GPU nodes (or baked into pods) as one folder and run as
``python <script>.py ...``; they must not import the ``xpushare`` package. The folder's layout:

* ``_common.py`` (this module): the defaults per GPU model (:data:`MODEL_DEFAULTS`), the argument types,
  the devices (:func:`select_device`: PyTorch, or ``cudadrv``) and the output formats (progress, INFO,
  runtime and probe lines).
* ``_driver.py``: how a workload script runs - the common flags, the size flags several scripts share, the
  add and matmul loops, and ``main`` (INFO line, ``PASS``, runtime line, exit status).
* ``w1_large_add.py`` ... ``w7_fixed_matmul.py``, ``oversub.py``: one workload each - its docstring (its
  ``--help``), its size flags and, where its loop is its own (W3, W4, W5, W7, oversub), its body.
* ``node_sampler.py``: the node sampler (uses only this module's argument types).

``torch`` is imported lazily (inside :func:`select_device`) so that argument errors and a missing
``torch_npu`` fail fast, before the ~2 s torch import; the ``cudadrv`` device (the CUDA driver API through
ctypes, for the lab's simulated GPU, :class:`CudaDrvDevice`) never imports it. Workload bodies use only the
operations of :class:`Device`, so each runs on every device.

Specs implemented here (paths relative to the shared reference folder):

* ``sut-interfaces.md`` §8.1 - output contract of the image scripts: progress on stderr as a
  ``[XPUSHARE][INFO][YYYY-MM-DD HH:MM:SS] <pct>%|<bar>| <n>/<total> [<elapsed><<remaining>, <rate>it/s]``
  line, refreshes separated by ``\\r``; stdout ``PASS`` then ``--- <float seconds> seconds ---`` (Python
  float repr) flushed at exit; exit code 0 on success, 1 on any exception (e.g. CUDA OOM).
* ``sut-interfaces.md`` §8.3 - workloads W1..W7 and the NPU (``torch_npu``, ``npu:0``) variants;
  ``NPU not available`` means exit 1.
* seed 000 §3 - W4 (allocate/free loop) and W5 (periodic throughput probe).
"""

from __future__ import annotations

import argparse
import array
import ctypes
import datetime
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

GIB = 1 << 30
MIB = 1 << 20
FP32_BYTES = 4

PASS_MARKER = "PASS"
"""Printed alone on a stdout line after a successful run (spec §8.1)."""

PROGRESS_PREFIX = "[XPUSHARE][INFO]"
QUOTA_PROBE_PREFIX = "[XPUSHARE][QUOTA_PROBE]"
ALLOC_FREE_PREFIX = "[XPUSHARE][ALLOC_FREE]"
OVERSUB_PREFIX = "[XPUSHARE][OVERSUB]"

DEVICE_CHOICES = ("auto", "cpu", "cuda", "npu", "cudadrv")

# ---------------------------------------------------------------------------------------------------------
# Defaults per GPU model.
#
# Intent (memory figures are what the workload keeps allocated on the device, fp32 = 4 bytes/element):
#   w1      : 4 n x n tensors (x, y and two alternating z from `z = x + y`) ~= 73 % of the model's memory.
#             T4 16 GiB -> n = 28000 -> 4 * 28000^2 * 4 B = 12.54e9 B = 11.7 GiB (spec §8.1 pytorch-add.py).
#             n = sqrt(0.73 * memory / 16) rounded to a multiple of 1000.
#   w2/w3/w5/w6 : n = 14000 on every model -> 4 tensors of 784,000,000 B ~= 2.92 GiB (spec §8.1/§8.3),
#             a fixed absolute footprint so that several of them can share one GPU of any size.
#   w5      : sync_every = 100 bounds the work queued ahead of the GPU to 100 adds (~0.7 s on a T4), so that
#             probe lines and the end of the run are not late by the driver's whole launch queue (measured
#             on an H100 with sync_every = 0: the first 1 s probe came at 1.8 s). 0 = legacy behaviour.
#   w7      : n = 6144 -> 3 tensors of 151 MB ~= 0.45 GB (spec §8.3), compute-bound matmul.
#   w4      : one block of `mib` MiB ~= 12.5 % of the model's memory per allocate/free round.
#   oversub : `factor` x the device's total memory, allocated in `chunk_mib` MiB chunks (spec §8.3 W4:
#             3 x 10.8 GB = 32.4 GB on a 16 GiB T4, ~2x); the total comes from the device at run time.
# Iteration counts are the legacy T4 values on every GPU model (spec §8.1/§8.3 "_C1" values); faster GPUs
# simply finish sooner. "cpu" holds tiny sizes so that each workload runs for about 1 s on a 2-core CPU.
# Every size flag on the command line overrides the table.
# ---------------------------------------------------------------------------------------------------------

MODEL_MEMORY_BYTES: dict[str, int | None] = {
    "Tesla T4": 16 * GIB,
    "A800": 40 * GIB,
    "H100": 80 * GIB,
    "H200": 141 * GIB,
    "cpu": None,
}
"""Nominal device memory per model key, in bytes (None: not a GPU). Seed 000 §2 (T4 16 GiB, A800 40 GiB)."""


def _gpu_row(w1_n: int, w4_mib: int) -> dict[str, dict[str, float]]:
    return {
        "w1": {"n": w1_n, "iters": 4000},
        "w2": {"n": 14000, "iters": 40000},
        "w3": {"n": 14000, "steps": 4000, "sleep_s": 0.1},
        "w4": {"rounds": 500, "mib": w4_mib, "report_every": 50},
        "oversub": {"factor": 2.0, "chunk_mib": 1024},
        "w5": {"n": 14000, "duration_s": 300.0, "interval_s": 10.0, "sync_every": 100},
        "w6": {"n": 14000, "iters": 60000, "sync_every": 1000},
        "w7": {"n": 6144, "iters": 2400, "sync_every": 10},
    }


MODEL_DEFAULTS: dict[str, dict[str, dict[str, float]]] = {
    "Tesla T4": _gpu_row(w1_n=28000, w4_mib=2048),
    "A800": _gpu_row(w1_n=44000, w4_mib=5120),
    "H100": _gpu_row(w1_n=63000, w4_mib=10240),
    "H200": _gpu_row(w1_n=83000, w4_mib=18048),
    "cpu": {
        "w1": {"n": 1024, "iters": 4000},
        "w2": {"n": 512, "iters": 10000},
        "w3": {"n": 512, "steps": 10, "sleep_s": 0.1},
        "w4": {"rounds": 200, "mib": 16, "report_every": 50},
        "oversub": {"factor": 2.0, "chunk_mib": 8, "total_bytes": 64 * MIB},
        "w5": {"n": 512, "duration_s": 2.0, "interval_s": 0.5, "sync_every": 100},
        "w6": {"n": 512, "iters": 10000, "sync_every": 1000},
        "w7": {"n": 256, "iters": 1200, "sync_every": 10},
    },
}
"""Default sizes: ``MODEL_DEFAULTS[model][workload][flag_dest]``. See the comment block above for intent."""


def match_model(name: str) -> str | None:
    """Map a device name (or a ``--gpu-model`` value) to a :data:`MODEL_DEFAULTS` key.

    Args:
        name: e.g. ``torch.cuda.get_device_name()`` such as ``"NVIDIA H100 80GB HBM3"`` or ``"Tesla T4"``.

    Returns:
        The longest key whose text occurs in ``name`` (case-insensitive); else the only key that contains
        ``name`` (so ``"t4"`` selects ``"Tesla T4"``); None when nothing or more than one key matches.
        Raises nothing.
    """
    low = name.strip().lower()
    if not low:
        return None
    hits = [key for key in MODEL_DEFAULTS if key.lower() in low]
    if hits:
        return max(hits, key=len)
    partial = [key for key in MODEL_DEFAULTS if low in key.lower()]
    return partial[0] if len(partial) == 1 else None


def model_by_memory(total_bytes: int) -> str:
    """Fallback model for an unknown GPU: the GPU key with the largest nominal memory <= ``total_bytes``.

    Args:
        total_bytes: the device's total memory in bytes.

    Returns:
        A GPU key of :data:`MODEL_DEFAULTS`; the smallest GPU model when the device is smaller than all.
    """
    gpus = sorted(((mem, key) for key, mem in MODEL_MEMORY_BYTES.items() if mem is not None), key=lambda t: t[0])
    chosen = gpus[0][1]
    for mem, key in gpus:
        if mem <= total_bytes:
            chosen = key
    return chosen


def defaults_help(workload: str, dest: str, unit: str = "") -> str:
    """Text ``"defaults: Tesla T4=28000, ..., cpu=1024"`` for a flag's ``--help``.

    Args:
        workload: workload key in :data:`MODEL_DEFAULTS` rows (``"w1"``, ``"oversub"``...).
        dest: argparse destination of the flag (``"n"``, ``"iters"``...).
        unit: appended to each value (e.g. ``" s"``).

    Raises:
        KeyError: no model row has this workload/flag (a programming error).
    """
    parts = [
        f"{model}={_fmt_num(row[workload][dest])}{unit}"
        for model, row in MODEL_DEFAULTS.items()
        if dest in row[workload]
    ]
    if not parts:
        raise KeyError(f"{workload}.{dest}")
    return "defaults per model: " + ", ".join(parts)


def _fmt_num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# ---------------------------------------------------------------------------------------------------------
# Argument types (also used by node_sampler.py)
# ---------------------------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """argparse type: an integer > 0 (``"1_000"`` accepted). Raises argparse.ArgumentTypeError otherwise."""
    return _int_at_least(text, 1, "> 0")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0. Raises argparse.ArgumentTypeError otherwise."""
    return _int_at_least(text, 0, ">= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0. Raises argparse.ArgumentTypeError otherwise."""
    return _finite_float(text, zero_ok=False)


def non_negative_float(text: str) -> float:
    """argparse type: a finite float >= 0. Raises argparse.ArgumentTypeError otherwise."""
    return _finite_float(text, zero_ok=True)


def _int_at_least(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def _finite_float(text: str, zero_ok: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise argparse.ArgumentTypeError(f"must be a finite number {'>=' if zero_ok else '>'} 0, got {text}")
    return value


# ---------------------------------------------------------------------------------------------------------
# Devices
#
# A workload body talks to its device only through the operations of :class:`Device`: allocate an fp32
# buffer (``full``, ``empty``), ``add``, ``matmul``, read one element back (``item``), ``free``, ``sync``,
# ``mem_info`` and ``empty_cache``. :class:`TorchDevice` maps them onto PyTorch (``cuda``, ``npu``, ``cpu``);
# :class:`CudaDrvDevice` onto the CUDA driver API through ctypes (``cudadrv``, no torch at all).
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Device:
    """The compute device a workload runs on, and the operations the workloads need.

    Buffers are fp32 and shaped like tensors; their type depends on the device (a ``torch.Tensor``, or a
    :class:`DrvBuffer` on ``cudadrv``). Every operation is asynchronous like a CUDA kernel launch until
    :meth:`sync` (or :meth:`item`, which synchronises first).

    Attributes:
        kind: ``"cuda"``, ``"npu"``, ``"cpu"`` or ``"cudadrv"``.
        device: device string printed in the INFO line (``"cuda:0"``, ``"npu:0"``, ``"cpu"``, ``"cudadrv:0"``).
        name: device name (``torch.cuda.get_device_name``, ``cuDeviceGetName``), ``"cpu"`` on CPU.
        total_bytes: total device memory in bytes (``get_device_properties().total_memory`` on CUDA,
            ``torch.npu.mem_get_info()[1]`` on NPU, ``cuDeviceTotalMem_v2`` on cudadrv), None on CPU.
        torch: the imported ``torch`` module (None on cudadrv).

    This base class only describes the device (``resolve_model`` needs no more); the operations are
    implemented by :class:`TorchDevice` and :class:`CudaDrvDevice`.
    """

    kind: str
    device: str
    name: str
    total_bytes: int | None
    torch: Any = None

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        """A new fp32 buffer of ``shape`` (elements per dimension) with every element = ``value``."""
        raise NotImplementedError

    def empty(self, shape: tuple[int, ...]) -> Any:
        """A new fp32 buffer of ``shape`` (elements per dimension), contents undefined."""
        raise NotImplementedError

    def add(self, x: Any, y: Any, out: Any = None) -> Any:
        """Elementwise ``x + y``: a new buffer (like ``z = x + y``) when ``out`` is None, else written into
        ``out`` (``out`` may be ``x``: in place) and returned. ``y`` may hold more elements than ``x``:
        its first ``numel(x)`` elements (flat order) are used."""
        raise NotImplementedError

    def matmul(self, x: Any, y: Any, out: Any) -> Any:
        """Matrix product of two (n, n) buffers into the (n, n) buffer ``out`` (``torch.matmul(x, y,
        out=out)``); returns ``out``."""
        raise NotImplementedError

    def item(self, buf: Any, index: int) -> float:
        """Synchronise, then read element ``index`` (flat, row-major; negative counts from the end)."""
        raise NotImplementedError

    def numel(self, buf: Any) -> int:
        """Number of elements of ``buf``."""
        return int(buf.numel())

    def free(self, buf: Any) -> None:
        """Give ``buf``'s memory back to the caching allocator (not to the driver: see
        :meth:`empty_cache`). The caller must not use ``buf`` afterwards, and should drop its references."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for all queued work of this process on the device."""
        raise NotImplementedError

    def mem_info(self) -> tuple[int, int] | None:
        """``(free_bytes, total_bytes)`` as the driver reports them (under xpushare with a memory limit
        the hooked cuMemGetInfo reports ``total = limit``, spec §7 item 4); None when unknown."""
        raise NotImplementedError

    def empty_cache(self) -> None:
        """Return the caching allocator's free blocks to the driver (PyTorch's ``empty_cache()``)."""
        raise NotImplementedError


class TorchDevice(Device):
    """A PyTorch device: ``cuda`` (``cuda:0``), ``npu`` (``npu:0`` through ``torch_npu``) or ``cpu``."""

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        """``torch.full(shape, value, dtype=float32)`` on the device (one fill kernel)."""
        return self.torch.full(shape, value, dtype=self.torch.float32, device=self.device)

    def empty(self, shape: tuple[int, ...]) -> Any:
        """``torch.empty(shape, dtype=float32)`` on the device."""
        return self.torch.empty(shape, dtype=self.torch.float32, device=self.device)

    def add(self, x: Any, y: Any, out: Any = None) -> Any:
        """``x + y`` (new tensor), ``x.add_(y)`` when ``out is x``, else ``torch.add(x, y, out=out)``."""
        if y.numel() != x.numel():
            y = y.reshape(-1)[: x.numel()].view(x.shape)
        if out is None:
            return x + y
        if out is x:
            return x.add_(y)
        return self.torch.add(x, y, out=out)

    def matmul(self, x: Any, y: Any, out: Any) -> Any:
        """``torch.matmul(x, y, out=out)``."""
        return self.torch.matmul(x, y, out=out)

    def item(self, buf: Any, index: int) -> float:
        """``buf.reshape(-1)[index].item()`` (``.item()`` synchronises)."""
        return float(buf.reshape(-1)[index].item())

    def free(self, buf: Any) -> None:
        """Nothing to do: the block returns to PyTorch's cache when the last reference is dropped."""

    def sync(self) -> None:
        """``torch.cuda/npu.synchronize()``; no-op on CPU."""
        if self.kind == "cuda":
            self.torch.cuda.synchronize()
        elif self.kind == "npu":
            self.torch.npu.synchronize()

    def mem_info(self) -> tuple[int, int] | None:
        """``torch.cuda/npu.mem_get_info()`` in bytes; None on CPU and on PyTorch builds without
        ``torch.cuda.mem_get_info`` (older than 1.10)."""
        if self.kind == "cuda":
            if not hasattr(self.torch.cuda, "mem_get_info"):
                return None
            free, total = self.torch.cuda.mem_get_info()
            return int(free), int(total)
        if self.kind == "npu":
            free, total = self.torch.npu.mem_get_info()
            return int(free), int(total)
        return None

    def empty_cache(self) -> None:
        """``torch.cuda/npu.empty_cache()``; no-op on CPU."""
        if self.kind == "cuda":
            self.torch.cuda.empty_cache()
        elif self.kind == "npu":
            self.torch.npu.empty_cache()


# ---------------------------------------------------------------------------------------------------------
# cudadrv: the CUDA driver API through ctypes, on the lab's simulated GPU
#
# The lab's CPU-only nodes have a simulated GPU as libcuda.so.1 (tests/lab/simgpu/, marker export
# ``simgpuVersion``); xpushare's client library is LD_PRELOADed in front of it and hooks dlsym, so this
# path looks symbols up by name (ctypes attribute lookup = dlsym, with the ``_v2`` names a CUDA program's
# look-ups use) and calls them like a CUDA program does. The simulator's one kernel, ``simgpu_work``, takes
# two ``unsigned long long`` parameters (FLOPs and bytes moved) and occupies the device for
# max(flops / flops_per_s, bytes / bytes_per_s) seconds of its configuration; it computes nothing.
# ---------------------------------------------------------------------------------------------------------

CUDA_LIBRARY = "libcuda.so.1"
SIMGPU_MARKER = "simgpuVersion"
"""Export of the simulated GPU's libcuda.so.1 (``int simgpuVersion(void)``) that tells it from a real driver."""
SIMGPU_MODULE_IMAGE = b"simgpu\0"
SIMGPU_KERNEL = b"simgpu_work"
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

_CU_DEVICEPTR = ctypes.c_uint64
# Driver functions used here and their argument types (CUresult = int return; CUdevice = int; contexts,
# modules, functions and streams are pointers; CUdeviceptr is a 64-bit integer).
_CU_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    "cuDeviceTotalMem_v2": (ctypes.POINTER(ctypes.c_size_t), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int),
    "cuCtxSetCurrent": (ctypes.c_void_p,),
    "cuCtxCreate_v2": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int),
    "cuModuleLoadData": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p),
    "cuModuleGetFunction": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p),
    "cuMemAlloc_v2": (ctypes.POINTER(_CU_DEVICEPTR), ctypes.c_size_t),
    "cuMemFree_v2": (_CU_DEVICEPTR,),
    "cuMemGetInfo_v2": (ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)),
    "cuLaunchKernel": (
        ctypes.c_void_p,  # CUfunction
        *(ctypes.c_uint,) * 7,  # grid x/y/z, block x/y/z, shared memory bytes
        ctypes.c_void_p,  # CUstream (None: the legacy default stream)
        ctypes.POINTER(ctypes.c_void_p),  # kernelParams
        ctypes.POINTER(ctypes.c_void_p),  # extra
    ),
    "cuCtxSynchronize": (),
    "cuMemcpyHtoD_v2": (_CU_DEVICEPTR, ctypes.c_void_p, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (ctypes.c_void_p, _CU_DEVICEPTR, ctypes.c_size_t),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
}

_STAGING_ELEMENTS = 1 << 20
"""fp32 elements (4 MiB) of the host buffer that :meth:`CudaDrvDevice.full` copies from, repeatedly."""


class CudaDriverError(RuntimeError):
    """A driver call failed: ``<function> returned <CUDA_ERROR_NAME> (<code>)``.

    Attributes:
        function: the driver function's symbol name; code: its CUresult; error_name: cuGetErrorName's text.
    """

    def __init__(self, function: str, code: int, error_name: str) -> None:
        super().__init__(f"{function} returned {error_name} ({code})")
        self.function = function
        self.code = code
        self.error_name = error_name


class OutOfMemoryError(RuntimeError):
    """``CUDA out of memory. Tried to allocate ...``: cuMemAlloc_v2 refused a block on cudadrv (the device
    is full, or the xpushare memory quota). The message starts like ``torch.OutOfMemoryError``'s, so logs
    are recognised the same way (``xpushare.collect.pod_log.oom_markers``)."""


def format_bytes(nbytes: int) -> str:
    """PyTorch's size style in OOM messages: ``"2.92 GiB"`` from 1 GiB up, else ``"748.00 MiB"``."""
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB else f"{nbytes / MIB:.2f} MiB"


def load_cuda_library(require_simulator: bool = True) -> ctypes.CDLL:
    """Load ``libcuda.so.1`` through the dynamic loader (``LD_LIBRARY_PATH``, ld.so.cache).

    Args:
        require_simulator: also require the simulated GPU's marker export ``simgpuVersion``.

    Raises:
        RuntimeError: ``"CUDA driver not available: ..."`` when the library does not load or (with
            ``require_simulator``) is not the simulated GPU: on a real driver the ``simgpu_work`` kernel
            that cudadrv launches does not exist.
    """
    try:
        lib = ctypes.CDLL(CUDA_LIBRARY)
    except OSError as exc:
        raise RuntimeError(f"CUDA driver not available: cannot load {CUDA_LIBRARY} ({exc})") from exc
    if require_simulator and not hasattr(lib, SIMGPU_MARKER):
        raise RuntimeError(
            f"CUDA driver not available for cudadrv: {CUDA_LIBRARY} is not the simulated GPU (no "
            f"{SIMGPU_MARKER} export); its kernel simgpu_work exists only there (use --device cuda on a GPU)"
        )
    return lib


def simulator_library() -> ctypes.CDLL | None:
    """``libcuda.so.1`` when it loads and is the simulated GPU, else None (cheap: no torch). Never raises."""
    try:
        return load_cuda_library(require_simulator=True)
    except RuntimeError:
        return None


class CudaDriver:
    """Symbols of ``libcuda.so.1`` looked up by name (dlsym, as xpushare expects) and called checked.

    Args:
        lib: the loaded library (:func:`load_cuda_library`).
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self._fns: dict[str, Any] = {}

    def fn(self, name: str) -> Any:
        """The ctypes function ``name`` with its argument types and an ``int`` (CUresult) return.

        Raises:
            AttributeError: the library does not export ``name``.
        """
        func = self._fns.get(name)
        if func is None:
            func = getattr(self.lib, name)
            func.restype = ctypes.c_int
            func.argtypes = list(_CU_SIGNATURES[name])
            self._fns[name] = func
        return func

    def error_name(self, code: int) -> str:
        """``cuGetErrorName(code)`` (e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``), or ``"CUresult <code>"``."""
        text = ctypes.c_char_p()
        try:
            rc = self.fn("cuGetErrorName")(code, ctypes.byref(text))
        except AttributeError:
            rc = -1
        if rc == CUDA_SUCCESS and text.value:
            return text.value.decode(errors="replace")
        return "CUDA_ERROR_OUT_OF_MEMORY" if code == CUDA_ERROR_OUT_OF_MEMORY else f"CUresult {code}"

    def check(self, name: str, code: int) -> None:
        """Raise :class:`CudaDriverError` when the CUresult ``code`` of ``name`` is not CUDA_SUCCESS."""
        if code != CUDA_SUCCESS:
            raise CudaDriverError(name, code, self.error_name(code))

    def call(self, name: str, *args: Any) -> None:
        """Call driver function ``name`` with ``args``. Raises :class:`CudaDriverError` on failure."""
        self.check(name, self.fn(name)(*args))


class DrvBuffer:
    """An fp32 buffer in the device memory of a :class:`CudaDrvDevice`, shaped like a tensor.

    Attributes:
        ptr: CUdeviceptr (0 once freed); shape: elements per dimension; nbytes: size in bytes (4 per element).

    Like a PyTorch tensor, dropping the last reference gives the block back to the device's caching
    allocator (CPython frees it at once), so ``z = dev.add(x, y)`` in a loop reuses two alternating blocks.
    """

    __slots__ = ("_owner", "nbytes", "ptr", "shape")

    def __init__(self, owner: CudaDrvDevice, ptr: int, shape: tuple[int, ...]) -> None:
        self._owner = owner
        self.ptr = ptr
        self.shape = shape
        self.nbytes = math.prod(shape) * FP32_BYTES

    def numel(self) -> int:
        """Number of fp32 elements."""
        return self.nbytes // FP32_BYTES

    def release(self) -> None:
        """Give the block back to the owner's cache (idempotent)."""
        if self.ptr:
            self._owner._cache_block(self.ptr, self.nbytes)
            self.ptr = 0

    def __del__(self) -> None:
        self.release()  # list operations only: safe at any time, even at interpreter shutdown

    def __repr__(self) -> str:
        return f"DrvBuffer(ptr={self.ptr:#x}, shape={self.shape})"


# A replayed operation: (kind, output pointer, output elements, input pointers, matrix side n or 0).
_Op = tuple[str, int, int, tuple[int, ...], int]


class CudaDrvDevice(Device):
    """Device ``cudadrv``: the CUDA driver API through ctypes, on the lab's simulated GPU (no torch).

    Each operation is what a CUDA program (or PyTorch) would do, through the driver's own entry points:

    * memory: ``cuMemAlloc_v2`` / ``cuMemFree_v2`` behind a caching allocator like PyTorch's (a dropped
      buffer's block is kept for the next buffer of the same size; :meth:`empty_cache` frees the cached
      blocks after a sync; an allocation the driver refuses frees the cache and retries once, then raises
      :class:`OutOfMemoryError`);
    * work: one ``cuLaunchKernel`` of ``simgpu_work`` per operation, asynchronous, with the FLOPs and bytes
      of the real operation on fp32: fill of k elements 0 FLOPs / 4k bytes; add of k elements k FLOPs /
      3·4·k bytes (two reads, one write); n×n matmul 2n³ FLOPs / 3·4·n² bytes;
    * data: :meth:`full` writes the fill value into every element with ``cuMemcpyHtoD_v2`` (the simulator's
      fill kernel stores nothing) and :meth:`item` reads with ``cuMemcpyDtoH_v2``: real copies into the
      simulated GPU's memory;
    * ``sync`` = ``cuCtxSynchronize``; ``mem_info`` = ``cuMemGetInfo_v2``.

    Simulator limit and how results stay honest: the simulated kernels take time but compute nothing, so
    this device computes the elements that are read on the host, from the data in device memory:

    * after each synchronise it replays the operations launched since the last one, in launch order, for
      the first and the last element of each output: it reads the inputs' elements from device memory
      (``cuMemcpyDtoH_v2``; a matmul element reads a row of x and a column of y), computes the element and
      writes it into the output (``cuMemcpyHtoD_v2``). A replay is skipped when the same operation was
      replayed last into the same output and neither its inputs nor the output were written since (so
      repeating ``z = x + y`` costs no copies); in-place operations are always replayed;
    * :meth:`item` on an operation's output whose inputs were not written since recomputes the requested
      element (any element) from the inputs' current device memory before reading it.

    So the checked values come from what the fills put into device memory and what survived there until
    the check: a lost, freed-and-reused or corrupted input shows. Not covered: elements other than the
    first and last of an output whose inputs were overwritten later (or of an in-place output) hold no
    result, and memory written behind the device's back after the last replay of a chain of operations is
    seen only where an input is recomputed.

    Args:
        lib: ``libcuda.so.1`` (:func:`load_cuda_library`).

    Raises:
        CudaDriverError: cuInit, device, context or module set-up failed.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        drv = CudaDriver(lib)
        drv.call("cuInit", 0)
        cu_dev = ctypes.c_int()
        drv.call("cuDeviceGet", ctypes.byref(cu_dev), 0)
        name = ctypes.create_string_buffer(256)
        drv.call("cuDeviceGetName", name, len(name), cu_dev)
        total = ctypes.c_size_t()
        drv.call("cuDeviceTotalMem_v2", ctypes.byref(total), cu_dev)
        super().__init__(
            kind="cudadrv",
            device="cudadrv:0",
            name=name.value.decode(errors="replace"),
            total_bytes=int(total.value),
        )
        self._drv = drv
        self._ctx = self._make_context(cu_dev)
        module = ctypes.c_void_p()
        drv.call("cuModuleLoadData", ctypes.byref(module), SIMGPU_MODULE_IMAGE)
        func = ctypes.c_void_p()
        drv.call("cuModuleGetFunction", ctypes.byref(func), module, SIMGPU_KERNEL)
        self._module = module
        self._func = func
        self._launch_fn = drv.fn("cuLaunchKernel")
        self._flops = ctypes.c_ulonglong()
        self._bytes = ctypes.c_ulonglong()
        self._params = (ctypes.c_void_p * 2)(ctypes.addressof(self._flops), ctypes.addressof(self._bytes))
        self._cache: dict[int, list[int]] = {}  # bytes -> cached CUdeviceptrs of that size
        self._allocated = 0  # bytes held from the driver (live buffers + cache)
        self._pending: list[_Op] = []  # launched since the last sync, replayed by sync()
        self._generation: dict[int, int] = {}  # CUdeviceptr -> count of host-visible writes into it
        # output pointer -> (last operation replayed into it, its inputs' generations, its own generation)
        self._replayed: dict[int, tuple[Any, ...]] = {}

    def _make_context(self, cu_dev: ctypes.c_int) -> ctypes.c_void_p:
        """The device's primary context made current (as the CUDA runtime does), else ``cuCtxCreate_v2``."""
        ctx = ctypes.c_void_p()
        try:
            primary_rc = self._drv.fn("cuDevicePrimaryCtxRetain")(ctypes.byref(ctx), cu_dev)
        except AttributeError:
            primary_rc = -1
        if primary_rc == CUDA_SUCCESS and ctx.value:
            self._drv.call("cuCtxSetCurrent", ctx)
            return ctx
        self._drv.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, cu_dev)
        return ctx

    # -- memory ------------------------------------------------------------------------------------------

    def _cache_block(self, ptr: int, nbytes: int) -> None:
        self._cache.setdefault(nbytes, []).append(ptr)

    def _alloc(self, shape: tuple[int, ...]) -> DrvBuffer:
        nbytes = math.prod(shape) * FP32_BYTES
        if nbytes <= 0:
            raise ValueError(f"empty buffer shape {shape}")
        cached = self._cache.get(nbytes)
        if cached:
            return DrvBuffer(self, cached.pop(), shape)
        ptr = _CU_DEVICEPTR()
        alloc = self._drv.fn("cuMemAlloc_v2")
        rc = alloc(ctypes.byref(ptr), nbytes)
        if rc == CUDA_ERROR_OUT_OF_MEMORY and any(self._cache.values()):
            self.empty_cache()  # as PyTorch's allocator: free the cached blocks and retry once
            rc = alloc(ctypes.byref(ptr), nbytes)
        if rc == CUDA_ERROR_OUT_OF_MEMORY:
            raise self._out_of_memory(nbytes)  # (a traceback line naming the error would be one more OOM marker)
        self._drv.check("cuMemAlloc_v2", rc)
        self._allocated += nbytes
        self._generation.pop(ptr.value, None)
        self._replayed.pop(ptr.value, None)
        return DrvBuffer(self, int(ptr.value), shape)

    def _out_of_memory(self, nbytes: int) -> OutOfMemoryError:
        """The error for a refused allocation of ``nbytes`` bytes, worded like PyTorch's."""
        try:
            mem = self.mem_info()
        except CudaDriverError:
            mem = None
        capacity = (
            f"GPU 0 has a total capacity of {format_bytes(mem[1])} of which {format_bytes(mem[0])} is free. "
            if mem is not None
            else ""
        )
        return OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {format_bytes(nbytes)}. {capacity}Of the allocated memory "
            f"{format_bytes(self._allocated)} is allocated by this process "
            f"(cudadrv: cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY)"
        )

    def empty(self, shape: tuple[int, ...]) -> DrvBuffer:
        """A buffer from the cache or ``cuMemAlloc_v2``; nothing written. Raises :class:`OutOfMemoryError`."""
        return self._alloc(shape)

    def full(self, shape: tuple[int, ...], value: float) -> DrvBuffer:
        """Allocate, launch a fill kernel (0 FLOPs, 4 bytes per element), and write ``value`` into every
        element with ``cuMemcpyHtoD_v2`` (4 MiB host copies). Raises :class:`OutOfMemoryError`."""
        buf = self._alloc(shape)
        count = buf.numel()
        self._launch(0, buf.nbytes)
        self._replay_pending()  # the copies below come after every launched operation, as on a GPU
        staging = array.array("f", [value]) * min(count, _STAGING_ELEMENTS)
        src, _ = staging.buffer_info()
        htod = self._drv.fn("cuMemcpyHtoD_v2")
        for first in range(0, count, len(staging)):
            chunk = min(len(staging), count - first) * FP32_BYTES
            self._drv.check("cuMemcpyHtoD_v2", htod(buf.ptr + first * FP32_BYTES, src, chunk))
        self._generation[buf.ptr] = self._generation.get(buf.ptr, 0) + 1
        self._replayed.pop(buf.ptr, None)
        return buf

    def free(self, buf: Any) -> None:
        """Give ``buf``'s block to the cache now (what dropping its last reference does)."""
        buf.release()

    def empty_cache(self) -> None:
        """Synchronise, then ``cuMemFree_v2`` every cached block."""
        self.sync()
        free = self._drv.fn("cuMemFree_v2")
        for nbytes, ptrs in self._cache.items():
            while ptrs:
                ptr = ptrs.pop()
                self._drv.check("cuMemFree_v2", free(ptr))
                self._allocated -= nbytes
                self._generation.pop(ptr, None)
                self._replayed.pop(ptr, None)

    def mem_info(self) -> tuple[int, int]:
        """``cuMemGetInfo_v2``: ``(free_bytes, total_bytes)``."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._drv.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return int(free.value), int(total.value)

    # -- work --------------------------------------------------------------------------------------------

    def _launch(self, flops: int, nbytes: int) -> None:
        """One asynchronous ``simgpu_work`` launch (grid 1x1x1, block 1x1x1) of ``flops`` FLOPs and
        ``nbytes`` bytes moved."""
        self._flops.value = flops
        self._bytes.value = nbytes
        rc = self._launch_fn(self._func, 1, 1, 1, 1, 1, 1, 0, None, self._params, None)
        self._drv.check("cuLaunchKernel", rc)

    def add(self, x: Any, y: Any, out: Any = None) -> DrvBuffer:
        """Launch an add of ``numel(x)`` elements: ``numel`` FLOPs, 3·4·``numel`` bytes."""
        count = x.numel()
        if y.numel() < count:
            raise ValueError(f"add: y has {y.numel()} elements, x {count}")
        if out is None:
            out = self._alloc(x.shape)
        self._launch(count, 3 * count * FP32_BYTES)
        self._pending.append(("add", out.ptr, count, (x.ptr, y.ptr), 0))
        return out

    def matmul(self, x: Any, y: Any, out: Any) -> DrvBuffer:
        """Launch an (n, n) x (n, n) matmul into ``out``: 2n³ FLOPs, 3·4·n² bytes."""
        n = x.shape[0]
        if not (x.shape == y.shape == out.shape == (n, n)):
            raise ValueError(f"matmul needs three (n, n) buffers, got {x.shape}, {y.shape}, {out.shape}")
        self._launch(2 * n**3, 3 * n * n * FP32_BYTES)
        self._pending.append(("matmul", out.ptr, n * n, (x.ptr, y.ptr), n))
        return out

    def sync(self) -> None:
        """``cuCtxSynchronize``, then replay the first/last output elements of the operations launched since
        the last synchronise (see the class docstring)."""
        self._drv.call("cuCtxSynchronize")
        self._replay_pending()

    def item(self, buf: Any, index: int) -> float:
        """Synchronise, then ``cuMemcpyDtoH_v2`` element ``index`` (flat; negative from the end).

        When ``buf`` was last written by an operation whose inputs have not been written since, the element
        is first recomputed from the inputs' current device memory (any element, not only the first and
        last), so a corrupted input shows in the value read.
        """
        count = buf.numel()
        if not -count <= index < count:
            raise IndexError(f"index {index} out of range for {count} elements")
        index %= count
        self.sync()
        writer = self._replayed.get(buf.ptr)
        if writer is not None and writer[1:] == self._generations(writer[0]):
            self._write(buf.ptr, index, self._compute(writer[0], index))
        return self._read(buf.ptr, index, 1)[0]

    # -- host-side replay of the operations' results -------------------------------------------------------

    def _read(self, ptr: int, first: int, count: int) -> list[float]:
        """``count`` fp32 elements from element ``first`` of ``ptr`` (cuMemcpyDtoH_v2)."""
        host = (ctypes.c_float * count)()
        rc = self._drv.fn("cuMemcpyDtoH_v2")(ctypes.addressof(host), ptr + first * FP32_BYTES, count * FP32_BYTES)
        self._drv.check("cuMemcpyDtoH_v2", rc)
        return list(host)

    def _write(self, ptr: int, index: int, value: float) -> None:
        """Element ``index`` of ``ptr`` = ``value`` rounded to fp32 (cuMemcpyHtoD_v2)."""
        host = ctypes.c_float(value)  # rounds to fp32 like the device's store
        rc = self._drv.fn("cuMemcpyHtoD_v2")(ptr + index * FP32_BYTES, ctypes.addressof(host), FP32_BYTES)
        self._drv.check("cuMemcpyHtoD_v2", rc)

    def _replay_pending(self) -> None:
        """Replay the operations launched since the last replay, in launch order. Their reads and writes are
        synchronous copies, which wait for the launched kernels (as ``cuMemcpy*`` does on a GPU)."""
        pending, self._pending = self._pending, []
        for op in pending:
            self._replay(op)

    def _generations(self, op: _Op) -> tuple[tuple[int, ...], int]:
        """(write counts of the op's inputs, write count of its output): equal values = unchanged memory."""
        gen = self._generation
        return tuple(gen.get(p, 0) for p in op[3]), gen.get(op[1], 0)

    def _compute(self, op: _Op, index: int) -> float:
        """Element ``index`` of ``op``'s output from its inputs' device memory (add: 2 reads; matmul: row i of
        x in one read, column j of y in n reads)."""
        kind, _out, _count, inputs, n = op
        if kind == "add":
            return math.fsum(self._read(p, index, 1)[0] for p in inputs)
        i, j = divmod(index, n)
        row = self._read(inputs[0], i * n, n)
        col = [self._read(inputs[1], k * n + j, 1)[0] for k in range(n)]
        return math.fsum(a * b for a, b in zip(row, col, strict=True))

    def _replay(self, op: _Op) -> None:
        """Write ``op``'s first and last output elements, unless the same operation was replayed last into
        this output and no input or the output was written since (its elements are still there)."""
        out, count, inputs = op[1], op[2], op[3]
        if out not in inputs and self._replayed.get(out) == (op, *self._generations(op)):
            return
        values = [(index, self._compute(op, index)) for index in sorted({0, count - 1})]
        for index, value in values:
            self._write(out, index, value)
        self._generation[out] = self._generation.get(out, 0) + 1
        if out in inputs:  # in place: the inputs it read are gone, nothing to recompute from later
            self._replayed.pop(out, None)
        else:
            self._replayed[out] = (op, *self._generations(op))


def select_device(requested: str) -> Device:
    """Pick the device; import torch (and torch_npu when asked) only for the PyTorch devices.

    Args:
        requested: one of :data:`DEVICE_CHOICES`. ``auto`` = CUDA when torch imports and
            ``torch.cuda.is_available()``, else cudadrv when ``libcuda.so.1`` is the simulated GPU, else
            CPU. The simulator's marker is checked first, before importing torch (~2 s): a process whose
            ``libcuda.so.1`` is the simulator has no real CUDA driver for torch, so the order is the same
            without paying the import on the lab's pods. NPU only when asked explicitly (spec §8.3 NPU
            variants use ``npu:0``).

    Returns:
        A :class:`TorchDevice` or a :class:`CudaDrvDevice`.

    Raises:
        RuntimeError: ``"NPU not available: ..."`` (no torch_npu or no NPU), ``"CUDA not available"``,
            ``"CUDA driver not available..."`` (cudadrv without the simulated GPU's libcuda.so.1).
        CudaDriverError: the simulated GPU's set-up failed (cudadrv).
        ValueError: an unknown ``requested`` value.
    """
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {requested!r}; expected one of {DEVICE_CHOICES}")
    if requested == "cudadrv":
        return CudaDrvDevice(load_cuda_library())
    if requested == "auto":
        lib = simulator_library()
        if lib is not None:
            return CudaDrvDevice(lib)
    if requested == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the torch.npu backend)
        except ImportError as exc:
            raise RuntimeError(f"NPU not available: cannot import torch_npu ({exc})") from exc
        import torch

        npu: Any = torch.npu  # type: ignore[attr-defined]  # added by torch_npu
        if not npu.is_available():
            raise RuntimeError("NPU not available: torch.npu.is_available() is False")
        npu.set_device("npu:0")
        _, total = npu.mem_get_info()
        return TorchDevice("npu", "npu:0", str(npu.get_device_name(0)), int(total), torch)

    import torch

    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA not available: torch.cuda.is_available() is False")
        props = torch.cuda.get_device_properties(0)
        return TorchDevice("cuda", "cuda:0", str(torch.cuda.get_device_name(0)), int(props.total_memory), torch)
    return TorchDevice("cpu", "cpu", "cpu", None, torch)


def resolve_model(gpu_model: str | None, dev: Device) -> str:
    """Choose the :data:`MODEL_DEFAULTS` row.

    Args:
        gpu_model: the ``--gpu-model`` value or None.
        dev: the selected device.

    Returns:
        ``--gpu-model``'s match; else ``"cpu"`` on CPU; else the match of ``dev.name``; else (unknown GPU)
        :func:`model_by_memory` of ``dev.total_bytes`` with a warning on stderr.

    Raises:
        ValueError: ``gpu_model`` matches no key.
    """
    if gpu_model is not None:
        key = match_model(gpu_model)
        if key is None:
            raise ValueError(f"unknown --gpu-model {gpu_model!r}; known: {', '.join(MODEL_DEFAULTS)}")
        return key
    if dev.kind == "cpu":
        return "cpu"
    key = match_model(dev.name)
    if key is not None and key != "cpu":
        return key
    fallback = model_by_memory(dev.total_bytes or 0)
    sys.stderr.write(
        f"[XPUSHARE][WARN] unknown device model {dev.name!r} ({dev.total_bytes} bytes); "
        f"using the defaults of {fallback!r}\n"
    )
    return fallback


def apply_model_defaults(args: argparse.Namespace, model: str, workload: str) -> dict[str, float]:
    """Fill every size flag left at None from ``MODEL_DEFAULTS[model][workload]`` (flags override the table).

    Args:
        args: parsed arguments; modified in place. Integer-valued table entries are stored as int.
        model: a :data:`MODEL_DEFAULTS` key.
        workload: workload key of the row.

    Returns:
        The effective values of the table's flags, ``{dest: value}`` (for logging).

    Raises:
        KeyError: unknown model or workload.
    """
    effective: dict[str, float] = {}
    for dest, value in MODEL_DEFAULTS[model][workload].items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
        effective[dest] = getattr(args, dest)
    return effective


# ---------------------------------------------------------------------------------------------------------
# Output contract
# ---------------------------------------------------------------------------------------------------------


def format_interval(seconds: float) -> str:
    """tqdm's interval format: ``MM:SS`` below an hour, ``H:MM:SS`` above. ``seconds`` >= 0, in seconds."""
    total = int(max(seconds, 0.0))
    minutes, sec = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours:d}:{minutes:02d}:{sec:02d}"
    return f"{minutes:02d}:{sec:02d}"


def format_progress(n: int, total: int, elapsed_s: float, now: datetime.datetime, width: int = 10) -> str:
    """One progress refresh (spec §8.1): ``[XPUSHARE][INFO][YYYY-MM-DD HH:MM:SS] <pct>%|<bar>| n/total
    [<elapsed><<remaining>, <rate>it/s]``.

    Args:
        n: iterations done (0 <= n); total: iterations planned (> 0).
        elapsed_s: seconds since the loop started.
        now: wall-clock time printed in the prefix.
        width: bar width in characters (``#`` filled, space empty).

    Returns:
        The segment without the ``\\r`` separator. Rate is ``n / elapsed`` with two decimals (``?`` before
        any progress), remaining is ``(total - n) / rate`` (``?`` when unknown).
    """
    total = max(total, 1)
    frac = min(max(n / total, 0.0), 1.0)
    filled = int(frac * width)
    bar = "#" * filled + " " * (width - filled)
    if n > 0 and elapsed_s > 0:
        rate = n / elapsed_s
        rate_txt = f"{rate:.2f}"
        remaining = format_interval((total - n) / rate) if n <= total else "00:00"
    else:
        rate_txt = "?"
        remaining = "?"
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"{PROGRESS_PREFIX}[{stamp}] {frac * 100:3.0f}%|{bar}| {n}/{total} "
        f"[{format_interval(elapsed_s)}<{remaining}, {rate_txt}it/s]"
    )


class Progress:
    """tqdm-like progress on a stream: refreshes of :func:`format_progress` separated by ``\\r``.

    Args:
        total: planned iterations (> 0).
        enabled: False makes every method a no-op.
        stream: where to write (stderr by default, spec §8.1).
        mininterval_s: minimum seconds between two refreshes.
    """

    def __init__(
        self, total: int, enabled: bool = True, stream: TextIO | None = None, mininterval_s: float = 1.0
    ) -> None:
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.mininterval_s = mininterval_s
        self.n = 0
        self._start = time.perf_counter()
        self._last = -math.inf
        if enabled:
            self._render(self._start)

    def update(self, k: int = 1) -> None:
        """Count ``k`` more iterations; refresh when ``mininterval_s`` has passed since the last refresh."""
        self.n += k
        if self.enabled:
            now = time.perf_counter()
            if now - self._last >= self.mininterval_s:
                self._render(now)

    def close(self) -> None:
        """Write the final refresh followed by a newline."""
        if self.enabled:
            self._render(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False

    def _render(self, now: float) -> None:
        seg = format_progress(self.n, self.total, now - self._start, datetime.datetime.now())
        self.stream.write(("\r" if self._last != -math.inf else "") + seg)
        self.stream.flush()
        self._last = now


def format_runtime(seconds: float) -> str:
    """The runtime line ``--- <seconds> seconds ---`` with Python's float repr (spec §8.1), e.g.
    ``--- 95.28371238708496 seconds ---``. ``seconds`` is a float in seconds."""
    return f"--- {float(seconds)!r} seconds ---"


def format_info(workload: str, dev: Device, model: str, effective: dict[str, float]) -> str:
    """The INFO line written once to stderr before the work: ``[XPUSHARE][INFO] workload=<key>
    device=<device> name=<repr> model=<repr> <flag>=<value> ...`` (``effective``: the sizes in use)."""
    sizes = " ".join(f"{k}={_fmt_num(v)}" for k, v in effective.items())
    return f"{PROGRESS_PREFIX} workload={workload} device={dev.device} name={dev.name!r} model={model!r} {sizes}"


def format_quota_probe(elapsed_s: float, iterations: int) -> str:
    """W5 probe line (spec §8.3): ``[XPUSHARE][QUOTA_PROBE] elapsed=<f1>s it=<int> it_per_sec=<f2>``.

    Args:
        elapsed_s: seconds since the loop started (> 0 for a meaningful rate).
        iterations: iterations done since the loop started.

    Returns:
        The line; ``it_per_sec`` is the cumulative average ``iterations / elapsed_s`` (0.00 at elapsed 0).
    """
    rate = iterations / elapsed_s if elapsed_s > 0 else 0.0
    return f"{QUOTA_PROBE_PREFIX} elapsed={elapsed_s:.1f}s it={iterations:d} it_per_sec={rate:.2f}"


def check_value(what: str, actual: float, expected: float) -> None:
    """Result check after a workload's loop (catches silent corruption, e.g. under UVM oversubscription).

    Raises:
        RuntimeError: ``actual != expected`` (both element values, exact comparison).
    """
    if actual != expected:
        raise RuntimeError(f"result check failed: {what} = {actual!r}, expected {expected!r}")


def tensor_bytes(n: int, count: int = 1) -> int:
    """Bytes of ``count`` fp32 tensors of shape (n, n): ``count * n * n * 4``."""
    return count * n * n * FP32_BYTES
