"""Least-squares trend and its one-sided t-test (xpushare/judge/trend.py)."""

from __future__ import annotations

import math
import random

import pytest

from xpushare.judge.trend import OnlineRegression, betainc, fit, student_t_sf

# Reference values: one-sided upper-tail probabilities of Student's t (standard tables / scipy.stats.t.sf).
T_TABLE = [
    (2.0, 10, 0.036694017),
    (1.812461, 10, 0.05),
    (2.763769, 10, 0.01),
    (1.0, 5, 0.181608734),
    (3.182446, 3, 0.025),
    (1.959964, 1e7, 0.025),
    (0.0, 7, 0.5),
    (-1.0, 5, 0.818391266),
]


@pytest.mark.parametrize(("t", "df", "p"), T_TABLE)
def test_student_t_sf_matches_tables(t: float, df: float, p: float) -> None:
    assert student_t_sf(t, df) == pytest.approx(p, abs=2e-7)


def test_student_t_sf_limits_and_errors() -> None:
    assert student_t_sf(math.inf, 4) == 0.0
    assert student_t_sf(-math.inf, 4) == 1.0
    with pytest.raises(ValueError):
        student_t_sf(1.0, 0)
    with pytest.raises(ValueError):
        student_t_sf(math.nan, 3)


def test_betainc_known_values() -> None:
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-4)
    assert betainc(0.5, 0.5, 0.5) == pytest.approx(0.5)
    assert betainc(3, 2, 0.0) == 0.0 and betainc(3, 2, 1.0) == 1.0
    with pytest.raises(ValueError):
        betainc(-1, 1, 0.5)


def test_exact_line_has_zero_error_and_infinite_t() -> None:
    ts = [0, 10, 20, 30, 40]
    tr = fit(ts, [100 + 2 * t for t in ts])
    assert tr.slope == pytest.approx(2.0)
    assert tr.slope_se == 0.0
    assert tr.t == math.inf and tr.p_value == 0.0
    assert tr.growth == pytest.approx(80.0)
    assert tr.to_dict()["t"] == "inf"


def test_flat_series_is_not_significant() -> None:
    tr = fit([0, 1, 2, 3, 4, 5], [7, 7, 7, 7, 7, 7])
    assert tr.slope == 0.0 and tr.p_value == 0.5 and not tr.significant(0.01)


def test_noisy_flat_vs_leaking_series() -> None:
    rng = random.Random(7)
    ts = list(range(0, 3000, 30))
    flat = [50e6 + rng.gauss(0, 2e5) for _ in ts]
    leak = [50e6 + 500.0 * t + rng.gauss(0, 2e5) for t in ts]
    assert not fit(ts, flat).significant(0.01)
    tr = fit(ts, leak)
    assert tr.significant(0.01)
    assert tr.slope == pytest.approx(500.0, rel=0.1)
    assert tr.per_hour == pytest.approx(tr.slope * 3600)


def test_margin_moves_the_null_hypothesis() -> None:
    rng = random.Random(3)
    ts = list(range(100))
    ys = [10.0 * t + rng.gauss(0, 5) for t in ts]
    assert fit(ts, ys, margin=0.0).significant(0.01)
    assert not fit(ts, ys, margin=10.5).significant(0.01)


def test_autocorrelation_correction_widens_the_error() -> None:
    # A random walk: strongly autocorrelated residuals; plain OLS calls its drift significant far too often.
    rng = random.Random(11)
    y, ys = 0.0, []
    for _ in range(200):
        y += rng.gauss(0, 1)
        ys.append(y)
    ts = list(range(200))
    plain, corrected = fit(ts, ys, autocorr=False), fit(ts, ys)
    assert corrected.r1 > 0.5
    assert corrected.n_eff < plain.n_eff
    assert corrected.slope_se > plain.slope_se
    # Over many driftless walks, the corrected test raises far fewer false alarms than plain OLS.
    plain_hits = corrected_hits = 0
    for _ in range(100):
        y, ys = 0.0, []
        for _ in range(100):
            y += rng.gauss(0, 1)
            ys.append(y)
        plain_hits += fit(ts[:100], ys, autocorr=False).significant(0.05)
        corrected_hits += fit(ts[:100], ys).significant(0.05)
    assert plain_hits > 25
    assert corrected_hits < 0.6 * plain_hits  # first-order: better, not nominal (hence the noise floors)


def test_single_spike_at_the_end_is_not_a_trend() -> None:
    rng = random.Random(5)
    ts = list(range(30))
    ys = [1000 + rng.gauss(0, 3) for _ in ts]
    ys[-1] += 40  # one outlier: last - first is large, the trend is not significant
    tr = fit(ts, ys)
    assert ys[-1] - ys[0] > 30
    assert not tr.significant(0.01)


def test_fit_input_errors() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit([1, 2], [1, 2])
    with pytest.raises(ValueError, match="differ"):
        fit([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="equal"):
        fit([5, 5, 5], [1, 2, 3])
    with pytest.raises(ValueError, match="non-finite"):
        fit([1, 2, 3], [1, math.nan, 3])


def test_unix_times_keep_precision() -> None:
    t0 = 1.795e9
    ts = [t0 + 30 * i for i in range(50)]
    tr = fit(ts, [4.0 + 0.001 * (t - t0) for t in ts])
    assert tr.slope == pytest.approx(0.001, rel=1e-9)


def test_online_regression_matches_fit() -> None:
    rng = random.Random(2)
    ts = [1.7e9 + 10 * i for i in range(500)]
    ys = [3e7 + 12.5 * (t - ts[0]) + rng.gauss(0, 1e4) for t in ts]
    reg = OnlineRegression()
    assert reg.slope is None and reg.growth is None
    for t, y in zip(ts, ys, strict=True):
        reg.add(t, y)
    tr = fit(ts, ys)
    assert reg.n == 500
    assert reg.slope == pytest.approx(tr.slope, rel=1e-9)
    assert reg.growth == pytest.approx(tr.growth, rel=1e-9)
    assert reg.first == ys[0] and reg.last == ys[-1]
