"""Trend of a time series: least-squares slope with a one-sided significance test (leak judgments).

Seed 000 §6 P2 and §14.4 ask to judge leaks by the trend line, never by first-vs-last points or a
single spike. :func:`fit` fits ``y = a + b·t`` by ordinary least squares and tests
``H0: b <= margin`` against ``H1: b > margin`` with Student's t:

* the slope and intercept come from the standard library (:func:`statistics.linear_regression`);
  the slope's standard error is ``sqrt(SSR / (n - 2) / Sxx)`` (SSR: sum of squared residuals,
  ``Sxx = Σ (t - mean t)²``);
* successive samples of RSS or FD counts are autocorrelated, which makes the plain OLS standard error
  too small (too many "significant" slopes). With ``autocorr=True`` (default) the lag-1
  autocorrelation ``r1`` of the residuals shrinks the sample size to ``n_eff = n (1 - r1) / (1 + r1)``
  (for ``r1 > 0``; a common first-order correction, e.g. Santer et al. 2000, J. Geophys. Res. 105,
  7337) and the error is scaled by ``sqrt((n - 2) / (n_eff - 2))``, with ``n_eff - 2`` degrees of
  freedom (``n_eff`` is kept ``>= 3``);
* the one-sided p-value is the survival function of Student's t, computed here from the regularized
  incomplete beta function (continued fraction, Numerical Recipes §6.4), so neither numpy nor scipy
  is needed (numpy is only a transitive dependency of torch, scipy none at all).

A perfectly flat or perfectly linear series has a zero standard error: the test is then decided by
the sign of ``slope - margin`` (``t = ±inf``, ``p`` 0 or 1).

Units: ``t`` in seconds (any origin; it is shifted to the first sample), ``y`` in the series' unit
(bytes, descriptors, series); the slope is per second, :attr:`Trend.per_hour` per hour.

:class:`OnlineRegression` keeps the same fit in constant memory for live progress (no residuals,
hence no autocorrelation correction); the verdicts use :func:`fit` on the stored series.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["OnlineRegression", "Trend", "betainc", "fit", "student_t_sf"]


def _betacf(a: float, b: float, x: float, *, eps: float = 1e-14, max_iter: int = 400) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes ``betacf``)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, max_iter + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0`` and ``0 <= x <= 1``.

    Raises:
        ValueError: a parameter is out of range.
    """
    if a <= 0 or b <= 0:
        raise ValueError("a and b must be positive")
    if not 0.0 <= x <= 1.0:
        raise ValueError("x must be in [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df > 0`` degrees of freedom (non-integer ``df`` allowed).

    ``t = +inf`` gives 0, ``-inf`` gives 1. Raises ``ValueError`` for ``df <= 0`` or a NaN ``t``.
    """
    if df <= 0:
        raise ValueError("df must be positive")
    if math.isnan(t):
        raise ValueError("t is NaN")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@dataclass(frozen=True)
class Trend:
    """A least-squares fit of one series and its one-sided slope test.

    ``n``: points; ``span_s``: seconds from the first to the last point; ``slope``: units per second;
    ``intercept``: value at the first point's time; ``slope_se``: standard error of the slope
    (autocorrelation-adjusted when ``r1 > 0`` and the correction is on); ``margin``: the slope of
    ``H0`` (units per second); ``t``: ``(slope - margin) / slope_se``; ``df``: degrees of freedom
    (``n_eff - 2``); ``p_value``: one-sided ``P(T > t)``; ``r1``: lag-1 autocorrelation of the
    residuals; ``n_eff``: effective sample size; ``growth``: ``slope * span_s``, the growth the trend
    line shows over the window; ``first``/``last``/``minimum``/``maximum``: raw values.
    """

    n: int
    span_s: float
    slope: float
    intercept: float
    slope_se: float
    margin: float
    t: float
    df: float
    p_value: float
    r1: float
    n_eff: float
    growth: float
    first: float
    last: float
    minimum: float
    maximum: float

    @property
    def per_hour(self) -> float:
        """The slope in units per hour."""
        return self.slope * 3600.0

    def significant(self, alpha: float) -> bool:
        """True when ``H0: slope <= margin`` is rejected at level ``alpha`` (``p_value < alpha``)."""
        return self.p_value < alpha

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (infinite ``t`` as a string)."""
        d = asdict(self)
        d["per_hour"] = self.per_hour
        if math.isinf(self.t):
            d["t"] = "inf" if self.t > 0 else "-inf"
        return d


def _lag1_autocorrelation(residuals: Sequence[float]) -> float:
    n = len(residuals)
    mean = math.fsum(residuals) / n
    dev = [r - mean for r in residuals]
    denom = math.fsum(d * d for d in dev)
    if denom <= 0 or n < 3:
        return 0.0
    return math.fsum(dev[i] * dev[i + 1] for i in range(n - 1)) / denom


def fit(
    times: Sequence[float], values: Sequence[float], *, margin: float = 0.0, autocorr: bool = True
) -> Trend:
    """Fit ``values ~ a + b·times`` and test ``b > margin`` (one-sided Student t).

    Args:
        times: sample times in seconds (unix or relative), same length as ``values``.
        values: the series (bytes, counts ...).
        margin: slope of the null hypothesis in units per second (0: "is it growing at all").
        autocorr: correct the slope's error for lag-1 autocorrelation of the residuals.

    Raises:
        ValueError: fewer than 3 points, different lengths, non-finite values, or all times equal.
    """
    n = len(times)
    if n != len(values):
        raise ValueError("times and values differ in length")
    if n < 3:
        raise ValueError(f"a trend needs at least 3 points, got {n}")
    t0 = float(times[0])
    xs = [float(t) - t0 for t in times]
    ys = [float(v) for v in values]
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError("non-finite time or value")
    xbar = math.fsum(xs) / n
    sxx = math.fsum((x - xbar) ** 2 for x in xs)
    if sxx <= 0:
        raise ValueError("all sample times are equal")
    slope, intercept = statistics.linear_regression(xs, ys)
    residuals = [y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True)]
    ssr = math.fsum(r * r for r in residuals)
    scale = max(1.0, max(abs(y) for y in ys))
    if ssr <= (1e-12 * scale) ** 2 * n:
        ssr = 0.0
    se = math.sqrt(ssr / (n - 2) / sxx)
    r1 = _lag1_autocorrelation(residuals) if ssr > 0 else 0.0
    n_eff = float(n)
    if autocorr and r1 > 0:
        n_eff = max(3.0, n * (1.0 - r1) / (1.0 + r1))
        se *= math.sqrt((n - 2) / (n_eff - 2))
    df = n_eff - 2.0
    diff = slope - margin
    if se == 0.0:
        t = math.inf if diff > 0 else (-math.inf if diff < 0 else 0.0)
        p = 0.0 if diff > 0 else (1.0 if diff < 0 else 0.5)
    else:
        t = diff / se
        p = student_t_sf(t, df)
    span = xs[-1] - xs[0]
    return Trend(
        n=n,
        span_s=span,
        slope=slope,
        intercept=intercept,
        slope_se=se,
        margin=margin,
        t=t,
        df=df,
        p_value=p,
        r1=r1,
        n_eff=n_eff,
        growth=slope * span,
        first=ys[0],
        last=ys[-1],
        minimum=min(ys),
        maximum=max(ys),
    )


class OnlineRegression:
    """Least-squares slope of a stream in O(1) memory (co-moments updated per point, Welford style).

    For live progress and interim reports only: it has no residuals, so no autocorrelation correction
    and no p-value; the verdicts refit the stored series with :func:`fit`.
    """

    __slots__ = ("_cxy", "_sxx", "_syy", "first", "last", "mean_x", "mean_y", "n", "t0", "t_last")

    def __init__(self) -> None:
        self.n = 0
        self.t0 = 0.0
        self.t_last = 0.0
        self.mean_x = 0.0
        self.mean_y = 0.0
        self._sxx = 0.0
        self._syy = 0.0
        self._cxy = 0.0
        self.first = math.nan
        self.last = math.nan

    def add(self, t: float, y: float) -> None:
        """Add one point (``t`` in seconds, ``y`` in the series' unit)."""
        if self.n == 0:
            self.t0 = t
            self.first = y
        x = t - self.t0
        self.n += 1
        dx = x - self.mean_x
        self.mean_x += dx / self.n
        dy = y - self.mean_y
        self.mean_y += dy / self.n
        self._sxx += dx * (x - self.mean_x)
        self._syy += dy * (y - self.mean_y)
        self._cxy += dx * (y - self.mean_y)
        self.last = y
        self.t_last = t

    @property
    def slope(self) -> float | None:
        """Units per second, or None with fewer than 2 distinct times."""
        if self.n < 2 or self._sxx <= 0:
            return None
        return self._cxy / self._sxx

    @property
    def growth(self) -> float | None:
        """``slope × span`` (None when the slope is undefined)."""
        s = self.slope
        return None if s is None else s * (self.t_last - self.t0)
