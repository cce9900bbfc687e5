#!/usr/bin/env python3
"""W3 - medium-memory, low duty cycle (spec: docs/sut/workloads.md §images `pytorch-add-idle-small.py`, §inline W3).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _common as c
import _driver as d

STEPS = d.SizeFlag("--steps", c.positive_int, "number of (add, synchronize, sleep) steps.")
SLEEP_S = d.SizeFlag("--sleep-s", c.non_negative_float, "seconds slept after each step.", " s")


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """W3: ``args.steps`` x (``z = x + y``, synchronize, ``sleep(args.sleep_s)`` seconds)."""
    d.add_loop(dev, args.n, args.steps, sync_every=1, sleep_s=args.sleep_s, progress=args.progress)


build_parser, main = d.script(__doc__, "w3", d.N_ADD, STEPS, SLEEP_S, body=body)

if __name__ == "__main__":
    sys.exit(main())
