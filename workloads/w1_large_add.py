#!/usr/bin/env python3
"""W1 - large-memory add (spec: sut-interfaces.md §8.1 `pytorch-add.py`, §8.3 W1; seed 000 §3 W1).

Allocates fp32 n x n tensors x and y, then runs `z = x + y` --iters times without synchronising, then
synchronises once. Because the new z is allocated while the previous one is still referenced, 4 tensors
are live (x, y, two alternating z): 4 * n^2 * 4 bytes, ~11.7 GiB for n = 28000 on a 16 GiB Tesla T4
(~73 % of the model's memory on every model of the defaults table).

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

WORKLOAD = "w1"


def build_parser() -> argparse.ArgumentParser:
    """Flags of W1: common flags plus --n (matrix side) and --iters; sizes default to the model table."""
    parser = c.make_parser(__doc__ or "", WORKLOAD)
    parser.add_argument(
        "--n",
        type=c.positive_int,
        default=None,
        help="matrix side length; 4 fp32 n x n tensors are live. " + c.defaults_help(WORKLOAD, "n"),
    )
    parser.add_argument(
        "--iters",
        type=c.positive_int,
        default=None,
        help="number of `z = x + y`. " + c.defaults_help(WORKLOAD, "iters"),
    )
    return parser


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Run W1 on ``dev``: ``args.iters`` x ``z = x + y`` on (n, n) fp32 buffers, one sync at the end.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z[0, 0] and z[-1, -1] must be 3.0) fails.
    """
    c.add_loop(dev, args.n, args.iters, progress=args.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 PASS, 1 failure). ``argv`` excludes the program name."""
    return c.run_workload(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
