"""What the workload scripts and the node sampler share: defaults table, argument types, devices, markers.

The scripts in this folder are copied to GPU nodes (or baked into pods) as one folder (every ``*.py`` of
it) and run as ``python <script>.py ...``; they must not import the ``xpushare`` package. The folder's
layout:

* ``_common.py`` (this module): the line prefixes and markers, the defaults per GPU model
  (:data:`MODEL_DEFAULTS`), the argument types and the devices (:func:`select_device`: PyTorch, or
  ``cudadrv``). It imports no sibling at load time, so the node sampler and ``xpushare.cases.sizing`` can
  load it alone.
* ``_cudadrv.py``: the ``cudadrv`` device (the CUDA driver API through ctypes, for the lab's simulated GPU),
  imported by :func:`select_device` only when asked for.
* ``_output.py``: the output formats (progress, INFO, runtime and probe lines) and value checks.
* ``_driver.py``: how a workload script runs - the common flags, the size flags several scripts share, the
  add and matmul loops, and ``main`` (INFO line, ``PASS``, runtime line, exit status).
* ``w1_large_add.py`` ... ``w7_fixed_matmul.py``, ``oversub.py``: one workload each - its docstring (its
  ``--help``), its size flags and, where its loop is its own (W3, W4, W5, W7, oversub), its body.
* ``node_sampler.py``: the node sampler (uses only this module's argument types), with its sources in
  ``_sampler_sources.py`` (NVML, nvidia-smi).

``torch`` is imported lazily (inside :func:`select_device`) so that argument errors and a missing
``torch_npu`` fail fast, before the ~2 s torch import; the ``cudadrv`` device never imports it. Workload
bodies use only the operations of :class:`Device`, so each runs on every device.

Specs implemented here (paths relative to the shared reference folder):

* docs/sut/workloads.md §output - output contract of the image scripts: progress on stderr as a
  ``[XPUSHARE][INFO][YYYY-MM-DD HH:MM:SS] <pct>%|<bar>| <n>/<total> [<elapsed><<remaining>, <rate>it/s]``
  line, refreshes separated by ``\\r``; stdout ``PASS`` then ``--- <float seconds> seconds ---`` (Python
  float repr) flushed at exit; exit code 0 on success, 1 on any exception (e.g. CUDA OOM).
* docs/sut/workloads.md §inline - workloads W1..W7 and the NPU (``torch_npu``, ``npu:0``) variants;
  ``NPU not available`` means exit 1.
* seed 000 §3 - W4 (allocate/free loop) and W5 (periodic throughput probe).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
FP32_BYTES = 4

PASS_MARKER = "PASS"
"""Printed alone on a stdout line after a successful run (spec docs/sut/workloads.md §output)."""

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
#             T4 16 GiB -> n = 28000 -> 4 * 28000^2 * 4 B = 12.54e9 B = 11.7 GiB (spec docs/sut/workloads.md §images).
#             n = sqrt(0.73 * memory / 16) rounded to a multiple of 1000.
#   w2/w3/w5/w6 : n = 14000 on every model -> 4 tensors of 784,000,000 B ~= 2.92 GiB (spec
# docs/sut/workloads.md §output/§inline),
#             a fixed absolute footprint so that several of them can share one GPU of any size.
#   w5      : sync_every = 100 bounds the work queued ahead of the GPU to 100 adds (~0.7 s on a T4), so that
#             probe lines and the end of the run are not late by the driver's whole launch queue (measured
#             on an H100 with sync_every = 0: the first 1 s probe came at 1.8 s). 0 = legacy behaviour.
#   w7      : n = 6144 -> 3 tensors of 151 MB ~= 0.45 GB (spec docs/sut/workloads.md §inline), compute-bound matmul.
#   w4      : one block of `mib` MiB ~= 12.5 % of the model's memory per allocate/free round.
#   oversub : `factor` x the device's total memory, allocated in `chunk_mib` MiB chunks (spec
# docs/sut/workloads.md §inline W4:
#             3 x 10.8 GB = 32.4 GB on a 16 GiB T4, ~2x); the total comes from the device at run time.
# Iteration counts are the legacy T4 values on every GPU model (spec docs/sut/workloads.md §output/§inline "_C1"
# values); faster GPUs
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
        f"{model}={format_num(row[workload][dest])}{unit}"
        for model, row in MODEL_DEFAULTS.items()
        if dest in row[workload]
    ]
    if not parts:
        raise KeyError(f"{workload}.{dest}")
    return "defaults per model: " + ", ".join(parts)


def format_num(value: float) -> str:
    """A size as the INFO line and ``--help`` print it: ``14000`` for a whole number, else ``0.5``."""
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
        the hooked cuMemGetInfo reports ``total = limit``, spec docs/sut/client.md §hooks); None when unknown."""
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


class OutOfMemoryError(RuntimeError):
    """``CUDA out of memory. Tried to allocate ...``: cuMemAlloc_v2 refused a block on cudadrv (the device
    is full, or the xpushare memory quota). The message starts like ``torch.OutOfMemoryError``'s, so logs
    are recognised the same way (``xpushare.parsers.pod_log.oom_markers``)."""


def format_bytes(nbytes: int) -> str:
    """PyTorch's size style in OOM messages: ``"2.92 GiB"`` from 1 GiB up, else ``"748.00 MiB"``."""
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB else f"{nbytes / MIB:.2f} MiB"

def select_device(requested: str) -> Device:
    """Pick the device; import torch (and torch_npu when asked) only for the PyTorch devices.

    Args:
        requested: one of :data:`DEVICE_CHOICES`. ``auto`` = CUDA when torch imports and
            ``torch.cuda.is_available()``, else cudadrv when ``libcuda.so.1`` is the simulated GPU, else
            CPU. The simulator's marker is checked first, before importing torch (~2 s): a process whose
            ``libcuda.so.1`` is the simulator has no real CUDA driver for torch, so the order is the same
            without paying the import on the lab's pods. NPU only when asked explicitly (spec
            docs/sut/workloads.md §inline NPU
            variants use ``npu:0``).

    Returns:
        A :class:`TorchDevice` or a ``_cudadrv.CudaDrvDevice``.

    Raises:
        RuntimeError: ``"NPU not available: ..."`` (no torch_npu or no NPU), ``"CUDA not available"``,
            ``"CUDA driver not available..."`` (cudadrv without the simulated GPU's libcuda.so.1).
        CudaDriverError: the simulated GPU's set-up failed (cudadrv).
        ValueError: an unknown ``requested`` value.
    """
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {requested!r}; expected one of {DEVICE_CHOICES}")
    if requested in ("cudadrv", "auto"):
        import _cudadrv  # here, not at the top: the node sampler and cases.sizing load this module alone

        if requested == "cudadrv":
            return _cudadrv.CudaDrvDevice(_cudadrv.load_cuda_library())
        lib = _cudadrv.simulator_library()
        if lib is not None:
            return _cudadrv.CudaDrvDevice(lib)
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


