"""Tests for lab.stats on known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.stats import mean_ci, ratio_ci, verdict


def test_mean_ci_known_values():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    # t_{0.975, 2} = 4.302653; s = 1; half = 4.302653 / sqrt(3)
    assert m == 2.0
    assert hi - m == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert m - lo == pytest.approx(hi - m)


def test_mean_ci_edge_cases():
    m, lo, hi = mean_ci([5.0])
    assert m == 5.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in mean_ci([]))
    assert mean_ci([1.0, None, 3.0])[0] == 2.0
    with pytest.raises(ValueError):
        mean_ci([1.0, 2.0], confidence=1.5)


def test_mean_ci_coverage_close_to_95_percent():
    rng = np.random.default_rng(123)
    true_mean, trials, hits = 10.0, 4000, 0
    samples = rng.normal(true_mean, 2.0, size=(trials, 3))  # n=3, like 3 repeats
    for s in samples:
        _, lo, hi = mean_ci(s)
        hits += lo <= true_mean <= hi
    coverage = hits / trials
    assert 0.93 <= coverage <= 0.97


def test_ratio_ci_contains_true_ratio():
    rng = np.random.default_rng(5)
    base = rng.normal(82.0, 1.0, size=10)
    other = rng.normal(60.0, 1.0, size=10)
    r, lo, hi = ratio_ci(base, other, n_boot=2000, seed=0)
    assert lo < 60.0 / 82.0 < hi
    assert lo < r < hi
    assert hi < 1.0
    assert verdict(r, lo, hi) == "slower"
    assert verdict(r, lo, hi, higher_is_better=False) == "faster"
    assert ratio_ci(base, other, seed=0) == ratio_ci(base, other, seed=0)


def test_ratio_ci_coverage_reasonable():
    rng = np.random.default_rng(9)
    hits, trials = 0, 200
    for k in range(trials):
        b = rng.normal(100.0, 5.0, size=8)
        o = rng.normal(120.0, 5.0, size=8)
        _, lo, hi = ratio_ci(b, o, n_boot=500, seed=k)
        hits += lo <= 1.2 <= hi
    assert hits / trials >= 0.85  # percentile bootstrap at n=8 under-covers slightly


def test_ratio_ci_degenerate():
    r, lo, hi = ratio_ci([80.0], [100.0])
    assert r == pytest.approx(1.25) and math.isnan(lo) and math.isnan(hi)
    assert verdict(r, lo, hi) == "not distinguishable"
    assert all(math.isnan(v) for v in ratio_ci([], [1.0, 2.0]))
    assert all(math.isnan(v) for v in ratio_ci([0.0, 0.0], [1.0, 2.0]))


def test_verdict():
    assert verdict(1.2, 1.1, 1.3) == "faster"
    assert verdict(0.8, 0.7, 0.9) == "slower"
    assert verdict(1.02, 0.95, 1.1) == "not distinguishable"
    assert verdict(1.2, float("nan"), float("nan")) == "not distinguishable"


def test_format_speedup():
    from lab.stats import format_speedup

    assert format_speedup(1.1747, 1.161, 1.182, "faster") == "1.17x [1.16, 1.18] faster"
    assert format_speedup(0.9, None, None, None) == "0.90x"
    assert format_speedup(None, 1.0, 1.1, "faster") is None
