"""Other work on the lab's machine: CPU-bound processes that compete with the lab for the cores.

A CI machine or a developer's laptop is rarely idle. :func:`busy_cpus` starts ``count`` processes that spin at the
default priority for as long as the ``with`` block lasts, so a lab test can show its verdicts do not depend on
the machine's load (tests/e2e/test_under_load.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["busy_cpus"]

_SPIN = "while True:\n    pass\n"


@contextmanager
def busy_cpus(count: int = 2) -> Iterator[list[int]]:
    """Spin ``count`` CPU-bound processes (their pids) until the block ends; they are killed and reaped then,
    also when the block raises."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
