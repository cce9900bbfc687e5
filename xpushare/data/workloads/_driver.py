"""How a workload script runs: the common flags, the size flags, the add/matmul loops and ``main``.

A workload script is its docstring (its ``--help``), its size flags and, where its loop is its own, a
``body``; :func:`script` makes its ``build_parser`` and ``main`` from them. ``main`` (:func:`run_workload`)
parses the flags, picks the device and the defaults row (``_common``), writes the INFO line, runs the body,
and prints ``PASS`` and the runtime line (spec docs/sut/workloads.md §output). Like ``_common.py`` this module
uses only the standard library; the scripts import it from their own directory.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import _common as c
import _output as o

Body = Callable[[argparse.Namespace, c.Device, float], float | None]
"""``body(args, device, start)``: the workload; returns the runtime in seconds, or None (see run_workload)."""


class Main(Protocol):
    """A script's entry point: ``main(argv)`` returns the exit status; ``argv`` excludes the program name."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


# ---------------------------------------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------------------------------------


class WorkloadArgumentParser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors exit with status 1 (the workloads' failure code, spec
    docs/sut/workloads.md §output)."""

    def error(self, message: str) -> NoReturn:
        """Print usage and ``<prog>: error: <message>`` to stderr, then exit 1 (argparse would use 2)."""
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(1)


@dataclass(frozen=True)
class SizeFlag:
    """A flag whose default comes from the defaults table (``MODEL_DEFAULTS[model][workload][dest]``).

    Attributes:
        name: the option, e.g. ``"--sync-every"``; its destination (``sync_every``) is the table key.
        type: argparse type (one of ``_common``'s argument types).
        help: what the flag means; ``--help`` appends the table's defaults per model.
        unit: appended to each default in the help text (e.g. ``" s"``).
    """

    name: str
    type: Callable[[str], Any]
    help: str
    unit: str = ""

    def add_to(self, parser: argparse.ArgumentParser, workload: str) -> None:
        """Add the flag with ``default=None``, so that :func:`_common.apply_model_defaults` fills it."""
        dest = self.name.lstrip("-").replace("-", "_")
        help_text = f"{self.help} {c.defaults_help(workload, dest, self.unit)}"
        parser.add_argument(self.name, type=self.type, default=None, help=help_text)


class Option:
    """A flag of one script that the defaults table does not hold: ``parser.add_argument(name, **kwargs)``."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self.kwargs = kwargs

    def add_to(self, parser: argparse.ArgumentParser, workload: str) -> None:
        """Add the flag as given."""
        parser.add_argument(self.name, **self.kwargs)


Flag = SizeFlag | Option

# Flags of several scripts.
N_ADD = SizeFlag("--n", c.positive_int, "matrix side length; 4 fp32 n x n tensors are live.")
N_MATMUL = SizeFlag("--n", c.positive_int, "matrix side length; 3 fp32 n x n tensors are live.")
ITERS_ADD = SizeFlag("--iters", c.positive_int, "number of `z = x + y`.")
SYNC_EVERY = SizeFlag("--sync-every", c.positive_int, "synchronise every this many iterations.")


def make_parser(prog_doc: str | None, workload: str, *flags: Flag) -> WorkloadArgumentParser:
    """Parser with the flags every workload shares (``--device``, ``--gpu-model``, ``--progress``), then
    ``flags``.

    Args:
        prog_doc: description shown by ``--help`` (the script's docstring).
        workload: its key in :data:`_common.MODEL_DEFAULTS` rows, stored as the parser default ``_workload``.
        flags: the workload's own flags, in ``--help`` order.

    Returns:
        A :class:`WorkloadArgumentParser`.
    """
    parser = WorkloadArgumentParser(description=prog_doc or "", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(_workload=workload)
    parser.add_argument(
        "--device",
        choices=c.DEVICE_CHOICES,
        default="auto",
        help="where to run: auto = CUDA when torch.cuda.is_available(), else cudadrv when libcuda.so.1 is "
        "the lab's simulated GPU, else CPU; npu needs torch_npu and uses npu:0; cudadrv drives the CUDA "
        "driver API through ctypes (no torch) and needs the simulated GPU; cuda/npu/cudadrv fail (exit 1) "
        "when unavailable (default: auto)",
    )
    parser.add_argument(
        "--gpu-model",
        default=None,
        help="row of the defaults table: " + ", ".join(repr(k) for k in c.MODEL_DEFAULTS) + " (case-"
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
    for flag in flags:
        flag.add_to(parser, workload)
    return parser


# ---------------------------------------------------------------------------------------------------------
# Running a script
# ---------------------------------------------------------------------------------------------------------


def run_workload(parser: argparse.ArgumentParser, body: Body, argv: Sequence[str] | None = None) -> int:
    """Parse flags, pick the device and the defaults row, run ``body``, and honour the output contract.

    Args:
        parser: from :func:`make_parser` (size flags default to None).
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
        dev = c.select_device(args.device)
        model = c.resolve_model(args.gpu_model, dev)
        args._model = model
        effective = c.apply_model_defaults(args, model, args._workload)
        sys.stderr.write(o.format_info(args._workload, dev, model, effective) + "\n")
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
    sys.stdout.write(c.PASS_MARKER + "\n" + o.format_runtime(runtime) + "\n")
    sys.stdout.flush()
    return 0


def script(
    doc: str | None, workload: str, *flags: Flag, body: Body | None = None
) -> tuple[Callable[[], WorkloadArgumentParser], Main]:
    """A workload script's ``build_parser`` and ``main``.

    Args:
        doc: the script's docstring (``--help``); workload: its table key; flags: as :func:`make_parser`.
        body: the workload; default :func:`add_body`.

    Returns:
        ``build_parser()``, and ``main(argv=None)``, which returns the exit status (0 PASS, 1 failure);
        ``argv`` excludes the program name.
    """

    def build_parser() -> WorkloadArgumentParser:
        return make_parser(doc, workload, *flags)

    def main(argv: Sequence[str] | None = None) -> int:
        return run_workload(build_parser(), body or add_body, argv)

    return build_parser, main


# ---------------------------------------------------------------------------------------------------------
# Loops
# ---------------------------------------------------------------------------------------------------------


def run_steps(
    dev: c.Device,
    steps: int,
    step: Callable[[], None],
    *,
    sync_every: int = 0,
    sleep_s: float = 0.0,
    progress: bool = True,
) -> None:
    """Call ``step()`` ``steps`` times with a progress line, then synchronise once more.

    Args:
        dev: the device (for :meth:`Device.sync`).
        steps: iterations (> 0).
        step: one iteration (e.g. one launch).
        sync_every: synchronise after every this many iterations (0: only at the end).
        sleep_s: seconds to sleep after each iteration (after its progress update; 0: none).
        progress: show the progress line on stderr.
    """
    bar = o.Progress(steps, enabled=progress)
    for i in range(1, steps + 1):
        step()
        if sync_every and i % sync_every == 0:
            dev.sync()
        bar.update()
        if sleep_s > 0:
            time.sleep(sleep_s)
    dev.sync()
    bar.close()


def add_inputs(dev: c.Device, n: int) -> tuple[Any, Any]:
    """The add workloads' inputs: fp32 (n, n) buffers x = 1.0 and y = 2.0 (so ``x + y`` = 3.0 exactly)."""
    return dev.full((n, n), 1.0), dev.full((n, n), 2.0)


def add_loop(
    dev: c.Device, n: int, steps: int, *, sync_every: int = 0, sleep_s: float = 0.0, progress: bool = True
) -> None:
    """W1/W2/W3/W6: ``steps`` x ``z = x + y`` on fp32 (n, n) buffers, then check z's first and last element.

    Each ``z = x + y`` allocates its result while the previous z is still referenced, so 4 buffers are live
    (x, y, two alternating z): 4·4·n² bytes. On cudadrv each add launches n² FLOPs and 3·4·n² bytes.

    Args:
        dev: the device; n: matrix side (elements); steps: iterations.
        sync_every, sleep_s, progress: as :func:`run_steps` (W3: ``sync_every=1`` and a sleep in seconds).

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z = 3.0) fails.
    """
    x, y = add_inputs(dev, n)
    z: Any = None

    def step() -> None:
        nonlocal z
        z = dev.add(x, y)

    run_steps(dev, steps, step, sync_every=sync_every, sleep_s=sleep_s, progress=progress)
    o.check_value("z[0, 0]", dev.item(z, 0), 3.0)
    o.check_value("z[-1, -1]", dev.item(z, -1), 3.0)


def add_body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Body of W1, W2 and W6: :func:`add_loop` of ``args.iters`` adds on (n, n) buffers, synchronising every
    ``args.sync_every`` iterations where the script has that flag (W6), else once at the end."""
    add_loop(dev, args.n, args.iters, sync_every=getattr(args, "sync_every", 0), progress=args.progress)


def matmul_loop(dev: c.Device, n: int, steps: int, *, sync_every: int = 0, progress: bool = True) -> None:
    """W7: ``steps`` x ``matmul(x, y, out=z)`` on fp32 (n, n) buffers x = y = 1.0, so every z element = n.

    3 buffers live: 3·4·n² bytes. On cudadrv each matmul launches 2n³ FLOPs and 3·4·n² bytes.

    Args:
        dev: the device; n: matrix side (elements); steps: iterations; sync_every, progress: as
            :func:`run_steps`.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z = n) fails.
    """
    x = dev.full((n, n), 1.0)
    y = dev.full((n, n), 1.0)
    z = dev.empty((n, n))
    run_steps(dev, steps, lambda: dev.matmul(x, y, out=z), sync_every=sync_every, progress=progress)
    o.check_value("z[0, 0]", dev.item(z, 0), float(n))
    o.check_value("z[-1, -1]", dev.item(z, -1), float(n))
