#!/usr/bin/env python3
"""W3 - medium-memory, low duty cycle (spec: sut-interfaces.md §8.1 `pytorch-add-idle-small.py`, §8.3 W3).

fp32 n x n tensors x and y; each of --steps steps runs `z = x + y`, synchronises and sleeps --sleep-s
seconds, so the GPU is mostly idle (4000 x 0.1 s >= 400 s of wall time on a GPU). Memory as W2: n = 14000
-> ~2.92 GiB. Useful for dynamic quota changes and lock hand-over while a client is idle.

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

WORKLOAD = "w3"


def build_parser() -> argparse.ArgumentParser:
    """Flags of W3: common flags plus --n, --steps and --sleep-s; sizes default to the model table."""
    parser = c.make_parser(__doc__ or "", WORKLOAD)
    parser.add_argument(
        "--n",
        type=c.positive_int,
        default=None,
        help="matrix side length; 4 fp32 n x n tensors are live. " + c.defaults_help(WORKLOAD, "n"),
    )
    parser.add_argument(
        "--steps",
        type=c.positive_int,
        default=None,
        help="number of (add, synchronize, sleep) steps. " + c.defaults_help(WORKLOAD, "steps"),
    )
    parser.add_argument(
        "--sleep-s",
        type=c.non_negative_float,
        default=None,
        help="seconds slept after each step. " + c.defaults_help(WORKLOAD, "sleep_s", " s"),
    )
    return parser


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Run W3 on ``dev``: ``args.steps`` x (``z = x + y``, synchronize, ``sleep(args.sleep_s)`` seconds).

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z must be 3.0) fails.
    """
    c.add_loop(dev, args.n, args.steps, sync_every=1, sleep_s=args.sleep_s, progress=args.progress)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 PASS, 1 failure). ``argv`` excludes the program name."""
    return c.run_workload(build_parser(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
