#!/usr/bin/env python3
"""W6 - fixed-iteration add, bandwidth-bound perf baseline (spec: docs/sut/workloads.md §inline W6).

fp32 n x n tensors x and y, `z = x + y` --iters times, synchronising every --sync-every iterations and at
the end. n = 14000 -> ~2.92 GiB (x, y, two alternating z). 60000 iterations on a T4 (the `_C1` value).

Output (stdout): PASS, then `--- <seconds> seconds ---` (whole run after imports, allocation included).
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _driver as d

build_parser, main = d.script(__doc__, "w6", d.N_ADD, d.ITERS_ADD, d.SYNC_EVERY)

if __name__ == "__main__":
    sys.exit(main())
