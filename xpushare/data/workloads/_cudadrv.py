"""The ``cudadrv`` device: the CUDA driver API through ctypes, for the lab's simulated GPU (no torch at all).

Part of the workload scripts' folder (see ``_common.py``); :func:`_common.select_device` imports it only
for ``--device cudadrv`` or ``auto``, so the node sampler and the defaults table never load ctypes' driver.
Its out-of-memory error is ``_common.OutOfMemoryError`` (the name a failed workload's traceback shows).
"""

from __future__ import annotations

import array
import ctypes
import math
from typing import Any

from _common import FP32_BYTES, Device, OutOfMemoryError, format_bytes

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
    # launch paths and timing of the compute probe (workloads/compute_probe.py)
    "cuDeviceGetAttribute": (ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int),
    "cuStreamCreate": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint),
    "cuStreamSynchronize": (ctypes.c_void_p,),
    "cuEventCreate": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint),
    "cuEventRecord": (ctypes.c_void_p, ctypes.c_void_p),
    "cuEventSynchronize": (ctypes.c_void_p,),
    "cuEventElapsedTime": (ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p),
    "cuLaunchKernelEx": (
        ctypes.c_void_p,  # const CUlaunchConfig*
        ctypes.c_void_p,  # CUfunction
        ctypes.POINTER(ctypes.c_void_p),  # kernelParams
        ctypes.POINTER(ctypes.c_void_p),  # extra
    ),
    "cuGraphCreate": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint),
    "cuGraphAddKernelNode_v2": (
        ctypes.POINTER(ctypes.c_void_p),  # CUgraphNode* (out)
        ctypes.c_void_p,  # CUgraph
        ctypes.POINTER(ctypes.c_void_p),  # dependencies
        ctypes.c_size_t,  # number of dependencies
        ctypes.c_void_p,  # const CUDA_KERNEL_NODE_PARAMS_v2*
    ),
    "cuGraphAddKernelNode": (
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
        ctypes.c_void_p,  # const CUDA_KERNEL_NODE_PARAMS* (v1: the v2 structure's prefix)
    ),
    "cuGraphInstantiateWithFlags": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong),
    "cuGraphLaunch": (ctypes.c_void_p, ctypes.c_void_p),
    "cuGraphExecDestroy": (ctypes.c_void_p,),
    "cuGraphDestroy": (ctypes.c_void_p,),
}


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h, CUDA 12): grid and block sizes, shared memory bytes, stream, attributes."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


class KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (cuda.h, CUDA 12): a kernel node's function, sizes and arguments
    (``kern``/``ctx`` NULL: the function's own context)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]

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


def primary_context(drv: CudaDriver, ordinal: int = 0) -> tuple[int, ctypes.c_void_p]:
    """Device ``ordinal`` (``cuDeviceGet``) and its primary context made current, as the CUDA runtime does
    (``cuDevicePrimaryCtxRetain`` + ``cuCtxSetCurrent``), else a ``cuCtxCreate_v2`` context.

    Requires ``cuInit`` called. Raises :class:`CudaDriverError` when the device or every context call fails.
    """
    cu_dev = ctypes.c_int()
    drv.call("cuDeviceGet", ctypes.byref(cu_dev), ordinal)
    ctx = ctypes.c_void_p()
    try:
        primary_rc = drv.fn("cuDevicePrimaryCtxRetain")(ctypes.byref(ctx), cu_dev)
    except AttributeError:
        primary_rc = -1
    if primary_rc == CUDA_SUCCESS and ctx.value:
        drv.call("cuCtxSetCurrent", ctx)
        return int(cu_dev.value), ctx
    drv.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, cu_dev)
    return int(cu_dev.value), ctx


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
        _, self._ctx = primary_context(drv, int(cu_dev.value))
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
