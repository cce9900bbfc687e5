#!/usr/bin/env python3
"""W7 - fixed-iteration matmul, compute-bound perf baseline (spec: docs/sut/workloads.md §inline W7).

fp32 n x n tensors x, y, z; `torch.matmul(x, y, out=z)` --iters times, synchronising every --sync-every
iterations and at the end. n = 6144 -> 3 x 151 MB ~= 0.45 GB. 2400 iterations on a T4 (the `_C1` value).

Output (stdout): PASS, then `--- <seconds> seconds ---` (whole run after imports, allocation included).
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _common as c
import _driver as d

ITERS = d.SizeFlag("--iters", c.positive_int, "number of `torch.matmul(x, y, out=z)`.")


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """W7: ``args.iters`` x ``matmul(x, y, out=z)`` with x = y = 1 (so z = n), sync every ``args.sync_every``."""
    d.matmul_loop(dev, args.n, args.iters, sync_every=args.sync_every, progress=args.progress)


build_parser, main = d.script(__doc__, "w7", d.N_MATMUL, ITERS, d.SYNC_EVERY, body=body)

if __name__ == "__main__":
    sys.exit(main())
