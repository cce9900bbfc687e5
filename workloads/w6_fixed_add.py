#!/usr/bin/env python3
"""W6 - fixed-iteration add, bandwidth-bound perf baseline (spec: sut-interfaces.md §8.3 W6).

fp32 n x n tensors x and y, `z = x + y` --iters times, synchronising every --sync-every iterations and at
the end. n = 14000 -> ~2.92 GiB (x, y, two alternating z). 60000 iterations on a T4 (the `_C1` value).

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

WORKLOAD = "w6"


def build_parser() -> argparse.ArgumentParser:
    """Flags of W6: common flags plus --n, --iters, --sync-every."""
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
    parser.add_argument(
        "--sync-every",
        type=c.positive_int,
        default=None,
        help="synchronise every this many iterations. " + c.defaults_help(WORKLOAD, "sync_every"),
    )
    return parser


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Run W6 on ``dev``: ``args.iters`` x ``z = x + y``, sync every ``args.sync_every`` and at the end.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z must be 3.0) fails.
    """
    c.add_loop(dev, args.n, args.iters, sync_every=args.sync_every, progress=args.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 PASS, 1 failure). ``argv`` excludes the program name."""
    return c.run_workload(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
