#!/usr/bin/env python3
"""W5 - quota probe (spec: docs/sut/workloads.md §inline W5; seed 000 §3 W5 `pytorch-quota-probe.py`).

fp32 n x n tensors x and y (n = 14000 -> ~2.92 GiB with the two alternating z); repeats `z = x + y` until
--duration-s seconds have elapsed since the loop started. No per-iteration synchronise: only every
--sync-every iterations (default 100, which keeps the work queued ahead of the GPU short; 0 = never, as
the legacy inline W5, which makes probe lines late by the driver's launch queue). At least every
--interval-s seconds it synchronises and prints, flushed, to stdout:
    [XPUSHARE][QUOTA_PROBE] elapsed=<f1>s it=<int> it_per_sec=<f2>
where it_per_sec is the cumulative average since the loop started (it / elapsed). One more probe line is
printed after the final synchronise unless the last one already counts every iteration. A change of the
compute quota shows up as a change of slope of `it` over `elapsed` between consecutive lines.

Output (stdout): probe lines, PASS, then `--- <seconds> seconds ---` measured from the loop start
(spec docs/sut/workloads.md §inline W5). Exit 0 on success, 1 on any error (the traceback goes to stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _common as c
import _driver as d
import _output as o

DURATION_S = d.SizeFlag("--duration-s", c.positive_float, "seconds to run the add loop.", " s")
INTERVAL_S = d.SizeFlag("--interval-s", c.positive_float, "maximum seconds between two probe lines.", " s")
SYNC_EVERY = d.SizeFlag(
    "--sync-every",
    c.non_negative_int,
    "synchronise every this many iterations (0: only at probe lines and at the end).",
)


def body(args: argparse.Namespace, dev: c.Device, start: float) -> float:
    """Run the W5 loop on ``dev`` for ``args.duration_s`` seconds, printing probe lines.

    On cudadrv each ``z = x + y`` launches n² FLOPs and 3·4·n² bytes, so ``it_per_sec`` follows the
    simulated GPU's bandwidth (and the xpushare compute quota in front of it).

    Returns:
        Seconds from the loop start to the end (after the final synchronise): the runtime line's value.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: the result check (z must be 3.0) fails.
    """
    x, y = d.add_inputs(dev, args.n)
    z = None
    sync_every = args.sync_every
    interval = args.interval_s
    iterations = 0
    printed_at = -1  # iteration count of the last probe line
    loop_start = time.perf_counter()
    next_probe = loop_start + interval
    while True:
        z = dev.add(x, y)
        iterations += 1
        if sync_every and iterations % sync_every == 0:
            dev.sync()
        now = time.perf_counter()
        if now >= next_probe:
            dev.sync()
            now = time.perf_counter()
            print(o.format_quota_probe(now - loop_start, iterations), flush=True)
            printed_at = iterations
            while next_probe <= now:
                next_probe += interval
        if now - loop_start >= args.duration_s:
            break
    dev.sync()
    elapsed = time.perf_counter() - loop_start
    if printed_at != iterations:
        print(o.format_quota_probe(elapsed, iterations), flush=True)
    o.check_value("z[0, 0]", dev.item(z, 0), 3.0)
    return elapsed


build_parser, main = d.script(__doc__, "w5", d.N_ADD, DURATION_S, INTERVAL_S, SYNC_EVERY, body=body)

if __name__ == "__main__":
    sys.exit(main())
