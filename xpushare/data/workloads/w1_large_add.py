#!/usr/bin/env python3
"""W1 - large-memory add (spec: docs/sut/workloads.md §images `pytorch-add.py`, §inline W1; seed 000 §3 W1).

Allocates fp32 n x n tensors x and y, then runs `z = x + y` --iters times without synchronising, then
synchronises once. Because the new z is allocated while the previous one is still referenced, 4 tensors
are live (x, y, two alternating z): 4 * n^2 * 4 bytes, ~11.7 GiB for n = 28000 on a 16 GiB Tesla T4
(~73 % of the model's memory on every model of the defaults table).

Output (stdout): PASS, then `--- <seconds> seconds ---` (whole run after imports, allocation included).
Exit 0 on success, 1 on any error (the traceback, e.g. `CUDA out of memory`, goes to stderr).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _driver as d

build_parser, main = d.script(__doc__, "w1", d.N_ADD, d.ITERS_ADD)

if __name__ == "__main__":
    sys.exit(main())
