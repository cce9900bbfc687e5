#!/usr/bin/env python3
"""W7 - fixed-iteration matmul, compute-bound perf baseline (spec: sut-interfaces.md §8.3 W7).

fp32 n x n tensors x, y, z; `torch.matmul(x, y, out=z)` --iters times, synchronising every --sync-every
iterations and at the end. n = 6144 -> 3 x 151 MB ~= 0.45 GB. 2400 iterations on a T4 (the `_C1` value).

Output (stdout): PASS, then `--- <seconds> seconds ---` (whole run after imports, allocation included).
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common.py sits next to this script
import _common as c

WORKLOAD = "w7"


def build_parser() -> argparse.ArgumentParser:
    """Flags of W7: common flags plus --n, --iters, --sync-every."""
    parser = c.make_parser(__doc__ or "", WORKLOAD)
    parser.add_argument(
        "--n",
        type=c.positive_int,
        default=None,
        help="matrix side length; 3 fp32 n x n tensors are live. " + c.defaults_help(WORKLOAD, "n"),
    )
    parser.add_argument(
        "--iters",
        type=c.positive_int,
        default=None,
        help="number of `torch.matmul(x, y, out=z)`. " + c.defaults_help(WORKLOAD, "iters"),
    )
    parser.add_argument(
        "--sync-every",
        type=c.positive_int,
        default=None,
        help="synchronise every this many iterations. " + c.defaults_help(WORKLOAD, "sync_every"),
    )
    return parser


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Run W7 on ``dev``: ``args.iters`` x ``matmul(x, y, out=z)`` with x = 1, y = 1 (so z = n exactly).

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z must be n) fails.
    """
    c.matmul_loop(dev, args.n, args.iters, sync_every=args.sync_every, progress=args.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 PASS, 1 failure). ``argv`` excludes the program name."""
    return c.run_workload(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
