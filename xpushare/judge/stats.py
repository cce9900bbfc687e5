"""Small statistics the judgments share: percentiles and the median.

(The least-squares trend and its t-test are :mod:`xpushare.judge.trend`.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float | None:
    """The 50th :func:`percentile`; None for no values."""
    return percentile(values, 50)


def rounded(value: float | None, nd: int = 4) -> float | None:
    """``value`` rounded to ``nd`` decimals for a report; None stays None."""
    return None if value is None else round(value, nd)
