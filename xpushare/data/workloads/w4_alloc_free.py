#!/usr/bin/env python3
"""W4 - allocate/free loop for leak and reclaim checks (spec: seed 000 §3 W4 `pytorch-alloc-free-loop.py`).

Each of --rounds rounds allocates one fp32 block of --mib MiB, fills it (so the pages are really touched,
which matters for xpushare's managed/UVM allocations), synchronises, checks two elements, frees it,
returns the allocator cache to the driver (`torch.cuda.empty_cache()`, so every round reaches the hooked
cuMemAlloc/cuMemFree; --no-empty-cache keeps PyTorch's cache) and synchronises again.

Every --report-every rounds (and before round 1 and after the last round) it prints to stdout, flushed:
    [XPUSHARE][ALLOC_FREE] round=<int> free_bytes=<int> total_bytes=<int>
from torch.cuda.mem_get_info() (cuMemGetInfo_v2 on cudadrv; under an xpushare memory limit: free = limit -
allocated, total = limit; spec docs/sut/client.md §hooks), -1 on CPU. A free_bytes that keeps shrinking
between reports points at a leak in the accounting. Round 0 is the baseline before any allocation.

With --hold-s > 0 each allocated block is kept that many seconds before it is freed, and the freed state
that many seconds before the next round, so that a sampler slower than the loop (a /metrics scrape every second)
sees both states; each change is announced first, flushed (the workload's own account of its allocation):
    [XPUSHARE][ALLOC_HOLD] round=<int> allocated_bytes=<int>
(the block's bytes while it is held, 0 once it is freed).

Output (stdout): the report lines, PASS, then `--- <seconds> seconds ---`.
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
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

ROUNDS = d.SizeFlag("--rounds", c.positive_int, "allocate/free rounds.")
MIB = d.SizeFlag("--mib", c.positive_int, "MiB allocated per round (one fp32 block).", " MiB")
REPORT_EVERY = d.SizeFlag(
    "--report-every",
    c.non_negative_int,
    "print an ALLOC_FREE line every this many rounds (0: only baseline and last).",
)
HOLD_S = d.Option(
    "--hold-s",
    type=c.non_negative_float,
    default=0.0,
    help="keep each block, and then the freed state, this many seconds (default 0: no pause)",
)
HOLD_PREFIX = "[XPUSHARE][ALLOC_HOLD]"
EMPTY_CACHE = d.Option(
    "--empty-cache",
    action=argparse.BooleanOptionalAction,
    default=True,
    help="call empty_cache() after each free so the driver sees every free (default: on)",
)


def format_report(round_no: int, mem: tuple[int, int] | None) -> str:
    """``[XPUSHARE][ALLOC_FREE] round=<int> free_bytes=<int> total_bytes=<int>``.

    Args:
        round_no: rounds completed (0 = baseline before the first allocation).
        mem: ``(free_bytes, total_bytes)`` from the device, or None (CPU) which prints -1 for both.
    """
    free, total = mem if mem is not None else (-1, -1)
    return f"{c.ALLOC_FREE_PREFIX} round={round_no:d} free_bytes={free:d} total_bytes={total:d}"


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Run W4 on ``dev``: ``args.rounds`` x (allocate ``args.mib`` MiB, fill, sync, check, free, sync).

    On cudadrv each round is cuMemAlloc_v2 (unless the block is cached), a fill kernel (0 FLOPs, the
    block's bytes) plus the fill values written with cuMemcpyHtoD_v2, two cuMemcpyDtoH_v2 reads, and
    cuMemFree_v2 through ``empty_cache()``.

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: allocation failure
            (``CUDA out of memory``).
        RuntimeError: a filled block does not read back its fill value.
    """
    elements = max(1, args.mib * c.MIB // c.FP32_BYTES)
    print(format_report(0, dev.mem_info()), flush=True)
    progress = o.Progress(args.rounds, enabled=args.progress)
    for round_no in range(1, args.rounds + 1):
        value = float(round_no % 251)
        block = dev.full((elements,), value)
        dev.sync()
        o.check_value(f"round {round_no} block[0]", dev.item(block, 0), value)
        o.check_value(f"round {round_no} block[-1]", dev.item(block, -1), value)
        if args.hold_s > 0:
            print(f"{HOLD_PREFIX} round={round_no:d} allocated_bytes={elements * c.FP32_BYTES:d}", flush=True)
            time.sleep(args.hold_s)
        dev.free(block)
        del block
        if args.empty_cache:
            dev.empty_cache()
        dev.sync()
        if args.hold_s > 0:
            print(f"{HOLD_PREFIX} round={round_no:d} allocated_bytes=0", flush=True)
            time.sleep(args.hold_s)
        progress.update()
        if round_no == args.rounds or (args.report_every and round_no % args.report_every == 0):
            print(format_report(round_no, dev.mem_info()), flush=True)
    progress.close()


build_parser, main = d.script(__doc__, "w4", ROUNDS, MIB, REPORT_EVERY, HOLD_S, EMPTY_CACHE, body=body)

if __name__ == "__main__":
    sys.exit(main())
