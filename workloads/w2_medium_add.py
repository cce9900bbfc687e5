#!/usr/bin/env python3
"""W2 - medium-memory sustained add (spec: sut-interfaces.md §8.1 `pytorch-add-small.py`, §8.3 W2).

fp32 n x n tensors x and y, `z = x + y` --iters times without synchronising, one synchronise at the end.
4 tensors live (x, y, two alternating z): n = 14000 -> 4 * 784,000,000 B ~= 2.92 GiB on every GPU model.

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

WORKLOAD = "w2"


def build_parser() -> argparse.ArgumentParser:
    """Flags of W2: common flags plus --n and --iters; sizes default to the model table."""
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
    """Run W2 on ``dev``: ``args.iters`` x ``z = x + y`` on (n, n) fp32 buffers, one sync at the end.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z must be 3.0) fails.
    """
    c.add_loop(dev, args.n, args.iters, progress=args.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 PASS, 1 failure). ``argv`` excludes the program name."""
    return c.run_workload(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
