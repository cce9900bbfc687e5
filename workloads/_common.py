"""Shared helpers for the xpushare test workloads.

The workload scripts in this folder are copied to GPU nodes (or baked into pods) as one folder and run as
``python <script>.py ...``; they must not import the ``xpushare`` package.  They import this module from
their own directory.  ``torch`` is imported lazily (inside :func:`select_device`) so that argument errors
and a missing ``torch_npu`` fail fast, before the ~2 s torch import.

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
import datetime
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

GIB = 1 << 30
MIB = 1 << 20
FP32_BYTES = 4

PASS_MARKER = "PASS"
"""Printed alone on a stdout line after a successful run (spec §8.1)."""

PROGRESS_PREFIX = "[XPUSHARE][INFO]"
QUOTA_PROBE_PREFIX = "[XPUSHARE][QUOTA_PROBE]"
ALLOC_FREE_PREFIX = "[XPUSHARE][ALLOC_FREE]"
OVERSUB_PREFIX = "[XPUSHARE][OVERSUB]"

DEVICE_CHOICES = ("auto", "cpu", "cuda", "npu")

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
# Argument parsing
# ---------------------------------------------------------------------------------------------------------


class WorkloadArgumentParser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors exit with status 1 (the workloads' failure code, spec §8.1)."""

    def error(self, message: str) -> NoReturn:
        """Print usage and ``<prog>: error: <message>`` to stderr, then exit 1 (argparse would use 2)."""
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(1)


def positive_int(text: str) -> int:
    """argparse type: an integer > 0 (``"1_000"`` accepted). Raises argparse.ArgumentTypeError otherwise."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0. Raises argparse.ArgumentTypeError otherwise."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0. Raises argparse.ArgumentTypeError otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite float >= 0. Raises argparse.ArgumentTypeError otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def make_parser(prog_doc: str, workload: str) -> WorkloadArgumentParser:
    """Parser with the flags every workload shares: ``--device``, ``--gpu-model``, ``--progress``.

    Args:
        prog_doc: description shown by ``--help`` (the script's docstring).
        workload: its key in :data:`MODEL_DEFAULTS` rows, stored as the parser default ``_workload``.

    Returns:
        A :class:`WorkloadArgumentParser`; the caller adds its size flags with ``default=None`` so that
        :func:`apply_model_defaults` can fill them from the table.
    """
    parser = WorkloadArgumentParser(description=prog_doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(_workload=workload)
    parser.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="where to run: auto = CUDA when torch.cuda.is_available() else CPU; npu needs torch_npu "
        "and uses npu:0; cuda/npu fail (exit 1) when unavailable (default: auto)",
    )
    parser.add_argument(
        "--gpu-model",
        default=None,
        help="row of the defaults table: " + ", ".join(repr(k) for k in MODEL_DEFAULTS) + " (case-"
        "insensitive substring). Default: detected from the device name; unknown GPUs use the largest "
        "model whose memory fits; CPU uses 'cpu'",
    )
    # two plain flags rather than argparse.BooleanOptionalAction (Python >= 3.9): the scripts also run on
    # the legacy images' Python 3.7
    parser.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=True,
        help="tqdm-like progress line on stderr, refreshes separated by \\r (default: on)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress line")
    return parser


# ---------------------------------------------------------------------------------------------------------
# Device selection
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Device:
    """The compute device a workload runs on.

    Attributes:
        torch: the imported ``torch`` module.
        kind: ``"cuda"``, ``"npu"`` or ``"cpu"``.
        device: torch device string (``"cuda:0"``, ``"npu:0"``, ``"cpu"``).
        name: device name (``torch.cuda.get_device_name``), ``"cpu"`` on CPU.
        total_bytes: total device memory in bytes (``get_device_properties().total_memory`` on CUDA,
            ``torch.npu.mem_get_info()[1]`` on NPU), None on CPU.
    """

    torch: Any
    kind: str
    device: str
    name: str
    total_bytes: int | None

    def sync(self) -> None:
        """Wait for all queued work on the device (``torch.cuda/npu.synchronize``; no-op on CPU)."""
        if self.kind == "cuda":
            self.torch.cuda.synchronize()
        elif self.kind == "npu":
            self.torch.npu.synchronize()

    def mem_info(self) -> tuple[int, int] | None:
        """``(free_bytes, total_bytes)`` as the runtime reports them (under xpushare with a memory limit
        the hooked cuMemGetInfo reports ``total = limit``, spec §7 item 4); None on CPU and on PyTorch
        builds without ``torch.cuda.mem_get_info`` (older than 1.10)."""
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
        """Return cached allocator blocks to the driver (``torch.cuda/npu.empty_cache``; no-op on CPU)."""
        if self.kind == "cuda":
            self.torch.cuda.empty_cache()
        elif self.kind == "npu":
            self.torch.npu.empty_cache()


def select_device(requested: str) -> Device:
    """Import torch (and torch_npu when asked) and pick the device.

    Args:
        requested: one of :data:`DEVICE_CHOICES`. ``auto`` = CUDA when ``torch.cuda.is_available()``,
            else CPU (NPU only when asked explicitly; spec §8.3 NPU variants use ``npu:0``).

    Returns:
        A :class:`Device`.

    Raises:
        RuntimeError: ``"NPU not available: ..."`` (no torch_npu or no NPU), ``"CUDA not available"``.
        ValueError: an unknown ``requested`` value.
    """
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
        return Device(torch, "npu", "npu:0", str(npu.get_device_name(0)), int(total))

    import torch

    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA not available: torch.cuda.is_available() is False")
        props = torch.cuda.get_device_properties(0)
        return Device(torch, "cuda", "cuda:0", str(torch.cuda.get_device_name(0)), int(props.total_memory))
    if requested in ("auto", "cpu"):
        return Device(torch, "cpu", "cpu", "cpu", None)
    raise ValueError(f"unknown device {requested!r}; expected one of {DEVICE_CHOICES}")


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


def run_workload(
    parser: argparse.ArgumentParser,
    body: Callable[[argparse.Namespace, Device, float], float | None],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse flags, pick the device and the defaults row, run ``body``, and honour the output contract.

    Args:
        parser: from :func:`make_parser` plus the workload's size flags (default None).
        body: ``body(args, device, start)`` does the work; ``start`` is the ``time.perf_counter()`` value
            taken after the imports and device selection. It returns the runtime to print in seconds, or
            None for ``perf_counter() - start`` (whole script after imports, including allocation).
        argv: command line without the program name (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 after printing ``PASS`` and ``--- <s> seconds ---`` to stdout (flushed); 1 when
        anything raised (the traceback, with the original message such as ``CUDA out of memory``, goes to
        stderr and ``PASS`` is not printed). Usage errors exit 1 through :class:`WorkloadArgumentParser`.
    """
    args = parser.parse_args(argv)
    try:
        dev = select_device(args.device)
        model = resolve_model(args.gpu_model, dev)
        args._model = model
        effective = apply_model_defaults(args, model, args._workload)
        sys.stderr.write(
            f"[XPUSHARE][INFO] workload={args._workload} device={dev.device} name={dev.name!r} "
            f"model={model!r} " + " ".join(f"{k}={_fmt_num(v)}" for k, v in effective.items()) + "\n"
        )
        sys.stderr.flush()
        start = time.perf_counter()
        runtime = body(args, dev, start)
        if runtime is None:
            runtime = time.perf_counter() - start
    except BaseException:
        sys.stdout.flush()
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        return 1
    sys.stdout.write(PASS_MARKER + "\n" + format_runtime(runtime) + "\n")
    sys.stdout.flush()
    return 0


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
