"""Lab stand-in for the client library's memory quota (sut-interfaces.md §7), inside Python workloads.

The lab kubelet puts a generated ``sitecustomize.py`` on ``PYTHONPATH`` of every container that
requests the SUT's extended resource; it loads this file by path and calls :func:`install`. When the
workload imports ``torch``, the tensor factories (``empty``, ``zeros``, ``ones``, ``full``, ``rand``,
``randn``, ``randint``, ``tensor`` and the ``*_like`` forms) are wrapped so that every new tensor's bytes
count as a "GPU allocation" of this client:

* quota: the env limit ``<PREFIX>GPU_MEMORY_LIMIT`` (the library's own parser: ``Gi``/``G``/``Mi``/
  ``M``/``Ki``/``K``, bare bytes), or the limit the lab scheduler last wrote to ``<id16>.limit`` from
  the pod's memory annotation, whichever was applied last. Over it: the library's WARN line
  ``cuMemAlloc rejected: <sum> + <req> = <total> would exceed limit <limit> bytes (<f2> MiB)`` on stderr
  and ``torch.OutOfMemoryError`` (a ``RuntimeError``) ``CUDA out of memory. Tried to allocate …``;
* physical: without a limit, allocations beyond the fake GPU's memory − 1536 MiB are rejected with
  ``cuMemAlloc rejected: <sum> + <req> exceeds physical allocatable <n> bytes`` unless
  ``<PREFIX>ENABLE_SINGLE_OVERSUB`` is set (presence-based, like the library);
* reports: the current total is written to ``<id16>.mem`` (the lab's MEM_UPDATE), which the lab
  scheduler exports as ``*_client_managed_allocated_bytes``.

Standard library only; does nothing unless ``XPUSHARE_LAB_CLIENT_ID`` is set.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import math
import os
import re
import sys
import threading
import weakref
from typing import Any

MIB = 2**20
GIB = 2**30


def parse_env_limit(text: str | None) -> int:
    """The client library's parser for ``<PREFIX>GPU_MEMORY_LIMIT`` (§3.1); garbage → 0 (no limit)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text or "")
    if not m:
        return 0
    scale = {"": 1, "b": 1, "gi": GIB, "gib": GIB, "g": 10**9, "gb": 10**9, "mi": MIB, "mib": MIB, "m": 10**6,
             "mb": 10**6, "ki": 2**10, "kib": 2**10, "k": 10**3, "kb": 10**3}
    factor = scale.get(m.group(2).lower())
    return int(float(m.group(1)) * factor) if factor else int(float(m.group(1)))


class _State:
    def __init__(self) -> None:
        env = os.environ
        self.cid = env["XPUSHARE_LAB_CLIENT_ID"]
        self.dir = env.get("XPUSHARE_LAB_CLIENT_DIR", ".")
        self.prefix = env.get("XPUSHARE_LAB_ENV_PREFIX", "XPUSHARE_")
        self.log_prefix = env.get("XPUSHARE_LAB_LOG_PREFIX", "[XPUSHARE]")
        self.physical = int(env.get("XPUSHARE_LAB_GPU_MEMORY_BYTES", str(16 * GIB))) - 1536 * MIB
        self.oversub = f"{self.prefix}ENABLE_SINGLE_OVERSUB" in env
        self.limit = parse_env_limit(env.get(f"{self.prefix}GPU_MEMORY_LIMIT"))
        self.limit_file = os.path.join(self.dir, f"{self.cid}.limit")
        self.core_file = os.path.join(self.dir, f"{self.cid}.core")
        self.core: int | None = None
        self.mem_file = os.path.join(self.dir, f"{self.cid}.mem")
        self.limit_mtime = 0.0
        self.allocated = 0
        self.warned_oversub = False
        self.lock = threading.Lock()

    def log(self, level: str, msg: str) -> None:
        sys.stderr.write(f"{self.log_prefix}[{level}]: {msg}\n")
        sys.stderr.flush()

    def refresh_limit(self) -> None:
        try:
            mtime = os.stat(self.limit_file).st_mtime
        except OSError:
            return
        if mtime == self.limit_mtime:
            return
        self.limit_mtime = mtime
        try:
            with open(self.limit_file) as fh:
                new = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            return
        if new > 0 and new != self.limit:
            self.log("INFO", f"Memory limit updated: {self.limit} -> {new} bytes ({new / GIB:.2f} GiB)")
            self.limit = new

    def refresh_core(self) -> None:
        """The library's core-limit lines: ``Core limit = N%`` first, then ``... updated dynamically``."""
        try:
            with open(self.core_file) as fh:
                core = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            return
        if core == self.core or not 1 <= core <= 100:
            return
        if self.core is None:
            self.log("INFO", f"Core limit = {core}%")
        else:
            self.log("INFO", f"Core limit updated dynamically to {core}%")
        self.core = core

    def poll_forever(self) -> None:
        """Like the library's receiver thread: apply UPDATE_LIMIT / UPDATE_CORE_LIMIT as they arrive."""
        while True:
            with self.lock:
                self.refresh_limit()
                self.refresh_core()
            threading.Event().wait(0.5)

    def report(self) -> None:
        tmp = self.mem_file + ".tmp"
        try:
            with open(tmp, "w") as fh:
                fh.write(f"{self.allocated}\n")
            os.replace(tmp, self.mem_file)
        except OSError:
            pass

    def admit(self, req: int) -> str | None:
        """None when ``req`` more bytes fit, else the rejection text (already logged)."""
        self.refresh_limit()
        total = self.allocated + req
        if self.limit > 0:
            if total > self.limit:
                self.log("WARN", f"cuMemAlloc rejected: {self.allocated} + {req} = {total} would exceed limit "
                                 f"{self.limit} bytes ({self.limit / MIB:.2f} MiB)")
                return "limit"
            return None
        if total > self.physical:
            if self.oversub:
                if not self.warned_oversub:
                    self.log("WARN", "cuMemAlloc exceeds physical GPU memory; oversub mode enabled")
                    self.warned_oversub = True
                return None
            self.log("WARN", f"cuMemAlloc rejected: {self.allocated} + {req} exceeds physical allocatable "
                             f"{self.physical} bytes")
            return "physical"
        return None


_state: _State | None = None
_SIZED = ("empty", "zeros", "ones", "rand", "randn")
_OTHERS = ("full", "randint", "tensor", "empty_like", "zeros_like", "ones_like", "rand_like", "randn_like",
           "full_like")


def _size_from_args(torch: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Requested bytes of a sized factory call, None when it cannot tell before allocating."""
    if name == "full":
        dims: Any = kwargs.get("size", args[0] if args else ())
    elif name in _SIZED:
        dims = kwargs.get("size", args[0] if len(args) == 1 and not isinstance(args[0], int) else args)
    else:
        return None
    try:
        numel = math.prod(int(d) for d in dims)
    except (TypeError, ValueError):
        return None
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    try:
        itemsize = dtype.itemsize
    except AttributeError:
        return None
    return numel * itemsize


def _oom(torch: Any, req: int, st: _State) -> BaseException:
    cap = st.limit or st.physical

    def size(n: int) -> str:  # PyTorch's style: GiB from 1 GiB up, else MiB
        return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.2f} MiB"

    msg = (f"CUDA out of memory. Tried to allocate {size(req)} (GPU 0; {size(cap)} total capacity; "
           f"{size(st.allocated)} already allocated)")
    err = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return err(msg) if isinstance(err, type) else RuntimeError(msg)


def _free(nbytes: int) -> None:
    st = _state
    if st is None:
        return
    with st.lock:
        st.allocated = max(0, st.allocated - nbytes)
        st.report()


def _wrap(torch: Any, name: str, fn: Any) -> Any:
    def factory(*args: Any, **kwargs: Any) -> Any:
        st = _state
        if st is None:
            return fn(*args, **kwargs)
        req = _size_from_args(torch, name, args, kwargs)
        if req is not None:
            with st.lock:
                if st.admit(req) is not None:
                    raise _oom(torch, req, st)
        out = fn(*args, **kwargs)
        try:
            nbytes = int(out.untyped_storage().nbytes())
        except (AttributeError, RuntimeError):
            return out
        with st.lock:
            if req is None and st.admit(nbytes) is not None:
                del out
                raise _oom(torch, nbytes, st)
            st.allocated += nbytes
            st.report()
        weakref.finalize(out, _free, nbytes)
        return out

    factory.__name__ = name
    factory.__doc__ = fn.__doc__
    return factory


def patch_torch(torch: Any) -> None:
    """Wrap the tensor factories of an imported ``torch`` module."""
    for name in _SIZED + _OTHERS:
        fn = getattr(torch, name, None)
        if fn is not None and not getattr(fn, "_xpushare_lab", False):
            wrapped = _wrap(torch, name, fn)
            wrapped._xpushare_lab = True
            setattr(torch, name, wrapped)


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Patches ``torch`` right after its first import."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            patch_torch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Activate the hook in this process (a no-op outside a lab GPU container)."""
    global _state
    if "XPUSHARE_LAB_CLIENT_ID" not in os.environ or _state is not None:
        return
    _state = _State()
    if _state.oversub:
        _state.log("WARN", "Enabling GPU memory oversubscription for this application")
    if _state.limit > 0:
        _state.log("INFO", f"GPU memory limit set to {_state.limit} bytes ({_state.limit / GIB:.2f} GiB)")
    threading.Thread(target=_state.poll_forever, name="xpushare-lab-client", daemon=True).start()
    if "torch" in sys.modules:
        patch_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


SITECUSTOMIZE = '''"""Generated by the xpushare test lab: load the lab memory hook (tests/lab/memhook.py)."""
import importlib.util as _util

_spec = _util.spec_from_file_location("xpushare_lab_memhook", {path!r})
_mod = _util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
_mod.install()
'''


def sitecustomize_source() -> str:
    """Text of the ``sitecustomize.py`` the lab puts on the GPU containers' ``PYTHONPATH``."""
    return SITECUSTOMIZE.format(path=os.path.abspath(__file__))
