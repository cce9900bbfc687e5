"""The workloads' output contract: the progress line, the INFO, runtime and quota-probe lines, value checks.

Part of the workload scripts' folder (see ``_common.py``, which holds the line prefixes and markers);
spec docs/sut/workloads.md §output gives the formats.
"""

from __future__ import annotations

import datetime
import math
import sys
import time
from typing import TextIO

from _common import FP32_BYTES, PASS_MARKER, PROGRESS_PREFIX, QUOTA_PROBE_PREFIX, Device, format_num

# ---------------------------------------------------------------------------------------------------------
# Output contract
# ---------------------------------------------------------------------------------------------------------


def format_interval(seconds: float) -> str:
    """tqdm's interval format: ``MM:SS`` below an hour, ``H:MM:SS`` above. ``seconds`` >= 0, in seconds."""
    total = int(max(seconds, 0.0))
    minutes, sec = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours:d}:{minutes:02d}:{sec:02d}"
    return f"{minutes:02d}:{sec:02d}"


def format_progress(n: int, total: int, elapsed_s: float, now: datetime.datetime, width: int = 10) -> str:
    """One progress refresh (spec docs/sut/workloads.md §output):
    ``[XPUSHARE][INFO][YYYY-MM-DD HH:MM:SS] <pct>%|<bar>| n/total
    [<elapsed><<remaining>, <rate>it/s]``.

    Args:
        n: iterations done (0 <= n); total: iterations planned (> 0).
        elapsed_s: seconds since the loop started.
        now: wall-clock time printed in the prefix.
        width: bar width in characters (``#`` filled, space empty).

    Returns:
        The segment without the ``\\r`` separator. Rate is ``n / elapsed`` with two decimals (``?`` before
        any progress), remaining is ``(total - n) / rate`` (``?`` when unknown).
    """
    total = max(total, 1)
    frac = min(max(n / total, 0.0), 1.0)
    filled = int(frac * width)
    bar = "#" * filled + " " * (width - filled)
    if n > 0 and elapsed_s > 0:
        rate = n / elapsed_s
        rate_txt = f"{rate:.2f}"
        remaining = format_interval((total - n) / rate) if n <= total else "00:00"
    else:
        rate_txt = "?"
        remaining = "?"
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"{PROGRESS_PREFIX}[{stamp}] {frac * 100:3.0f}%|{bar}| {n}/{total} "
        f"[{format_interval(elapsed_s)}<{remaining}, {rate_txt}it/s]"
    )


class Progress:
    """tqdm-like progress on a stream: refreshes of :func:`format_progress` separated by ``\\r``.

    Args:
        total: planned iterations (> 0).
        enabled: False makes every method a no-op.
        stream: where to write (stderr by default, spec docs/sut/workloads.md §output).
        mininterval_s: minimum seconds between two refreshes.
    """

    def __init__(
        self, total: int, enabled: bool = True, stream: TextIO | None = None, mininterval_s: float = 1.0
    ) -> None:
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.mininterval_s = mininterval_s
        self.n = 0
        self._start = time.perf_counter()
        self._last = -math.inf
        if enabled:
            self._render(self._start)

    def update(self, k: int = 1) -> None:
        """Count ``k`` more iterations; refresh when ``mininterval_s`` has passed since the last refresh."""
        self.n += k
        if self.enabled:
            now = time.perf_counter()
            if now - self._last >= self.mininterval_s:
                self._render(now)

    def close(self) -> None:
        """Write the final refresh followed by a newline."""
        if self.enabled:
            self._render(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False

    def _render(self, now: float) -> None:
        seg = format_progress(self.n, self.total, now - self._start, datetime.datetime.now())
        self.stream.write(("\r" if self._last != -math.inf else "") + seg)
        self.stream.flush()
        self._last = now


def format_runtime(seconds: float) -> str:
    """The runtime line ``--- <seconds> seconds ---`` with Python's float repr (spec docs/sut/workloads.md §output),
    e.g.
    ``--- 95.28371238708496 seconds ---``. ``seconds`` is a float in seconds."""
    return f"--- {float(seconds)!r} seconds ---"


def format_info(workload: str, dev: Device, model: str, effective: dict[str, float]) -> str:
    """The INFO line written once to stderr before the work: ``[XPUSHARE][INFO] workload=<key>
    device=<device> name=<repr> model=<repr> <flag>=<value> ...`` (``effective``: the sizes in use)."""
    sizes = " ".join(f"{k}={format_num(v)}" for k, v in effective.items())
    return f"{PROGRESS_PREFIX} workload={workload} device={dev.device} name={dev.name!r} model={model!r} {sizes}"


def finish(ok: bool, start: float) -> int:
    """A probe's end (spec docs/sut/workloads.md §output): with ``ok``, ``PASS`` and the runtime line since
    ``start`` (``time.perf_counter()`` seconds) on stdout, exit status 0; else nothing more, 1."""
    if not ok:
        return 1
    print(PASS_MARKER, flush=True)
    print(format_runtime(time.perf_counter() - start), flush=True)
    return 0


def format_quota_probe(elapsed_s: float, iterations: int) -> str:
    """W5 probe line (spec docs/sut/workloads.md §inline):
    ``[XPUSHARE][QUOTA_PROBE] elapsed=<f1>s it=<int> it_per_sec=<f2>``.

    Args:
        elapsed_s: seconds since the loop started (> 0 for a meaningful rate).
        iterations: iterations done since the loop started.

    Returns:
        The line; ``it_per_sec`` is the cumulative average ``iterations / elapsed_s`` (0.00 at elapsed 0).
    """
    rate = iterations / elapsed_s if elapsed_s > 0 else 0.0
    return f"{QUOTA_PROBE_PREFIX} elapsed={elapsed_s:.1f}s it={iterations:d} it_per_sec={rate:.2f}"


def check_value(what: str, actual: float, expected: float) -> None:
    """Result check after a workload's loop (catches silent corruption, e.g. under UVM oversubscription).

    Raises:
        RuntimeError: ``actual != expected`` (both element values, exact comparison).
    """
    if actual != expected:
        raise RuntimeError(f"result check failed: {what} = {actual!r}, expected {expected!r}")


def tensor_bytes(n: int, count: int = 1) -> int:
    """Bytes of ``count`` fp32 tensors of shape (n, n): ``count * n * n * 4``."""
    return count * n * n * FP32_BYTES
