#!/usr/bin/env python3
"""W2 - medium-memory sustained add (spec: docs/sut/workloads.md §images `pytorch-add-small.py`, §inline W2).

fp32 n x n tensors x and y, `z = x + y` --iters times without synchronising, one synchronise at the end.
4 tensors live (x, y, two alternating z): n = 14000 -> 4 * 784,000,000 B ~= 2.92 GiB on every GPU model.

Output (stdout): PASS, then `--- <seconds> seconds ---` (whole run after imports, allocation included).
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _driver as d

build_parser, main = d.script(__doc__, "w2", d.N_ADD, d.ITERS_ADD)

if __name__ == "__main__":
    sys.exit(main())
