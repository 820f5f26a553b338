"""OLS with undetermined constants marked (lab/calibrate/linfit.py): what the data determine, the
estimability of a new row, and intervals that match Student t's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lab.calibrate.linfit import fit_linear


def _design(rng, n=12):
    b = rng.choice([1.0, 4.0, 8.0], n)
    return np.column_stack([np.ones(n), b - 1]), b


def test_recovers_coefficients_and_t_intervals_cover():
    rng = np.random.default_rng(1)
    X, _ = _design(rng)
    y = X @ np.array([12.0, 0.1]) + rng.normal(0, 0.05, len(X))
    fit = fit_linear(X, y, ["a", "s"])
    assert fit.determined == [True, True] and fit.dof == len(X) - 2
    assert fit.value("a") == pytest.approx(12.0, abs=0.1) and fit.value("s") == pytest.approx(0.1, abs=0.03)
    lo, hi = fit.ci95("s")
    t = stats.t.ppf(0.975, fit.dof)
    assert hi - fit.value("s") == pytest.approx(t * fit.stderr("s"))
    assert lo < 0.1 < hi


def test_zero_column_is_undetermined_and_blocks_rows_that_need_it():
    rng = np.random.default_rng(2)
    X, _ = _design(rng)
    X = np.column_stack([X, np.zeros(len(X))])  # e.g. eager verify: never exercised
    y = X[:, :2] @ np.array([12.0, 0.1])
    fit = fit_linear(X, y, ["a", "s", "eager"])
    assert fit.determined == [True, True, False]
    assert "no measured window exercises it" in fit.reasons["eager"]
    assert fit.value("eager") is None and fit.stderr("eager") is None
    assert fit.estimable(np.array([1.0, 3.0, 0.0]))[0]
    ok, bad = fit.estimable(np.array([0.0, 3.0, 1.0]))
    assert not ok and bad == ["eager"]


def test_collinear_column_is_aliased_and_estimable_only_along_the_data_pattern():
    rng = np.random.default_rng(3)
    X, b = _design(rng, 20)
    kv = 0.112 * b  # KV tokens grow with the batch: inseparable from the per-sequence slope
    X = np.column_stack([X, kv])
    y = X @ np.array([12.0, 0.1, 0.05]) + rng.normal(0, 0.01, len(X))
    fit = fit_linear(X, y, ["a", "s", "kv"])
    assert fit.determined == [True, True, False]
    assert "cannot be separated" in fit.reasons["kv"] and "VIF" in fit.reasons["kv"]
    # along the pattern (a batch of 16 with the same prompts): estimable, and the aliased fit is right
    x_on = np.array([1.0, 15.0, 0.112 * 16])
    assert fit.estimable(x_on)[0]
    assert fit.predict(x_on) == pytest.approx(x_on @ np.array([12.0, 0.1, 0.05]), abs=0.02)
    # an 8k-token context at batch 1: off the pattern, refused
    ok, bad = fit.estimable(np.array([1.0, 0.0, 8.2]))
    assert not ok and bad == ["kv"]


def test_no_residual_dof_gives_no_interval_not_a_zero_one():
    X = np.array([[1.0, 0.0], [1.0, 7.0]])
    fit = fit_linear(X, np.array([12.0, 12.7]), ["a", "s"])
    assert fit.determined == [True, True] and fit.s2 is None and fit.dof == 0
    assert fit.stderr("a") is None and fit.ci95("a") is None
    assert fit.prediction_interval(np.array([1.0, 3.0])) is None


def test_posterior_draws_reproduce_the_t_prediction_interval():
    """BDA3 14.2: beta | sigma normal, sigma^2 scaled inverse chi-square; plus a new observation's
    noise, the simulated interval of x0'beta equals the t prediction interval."""
    rng = np.random.default_rng(4)
    X, _ = _design(rng, 8)
    y = X @ np.array([12.0, 0.1]) + rng.normal(0, 0.2, len(X))
    fit = fit_linear(X, y, ["a", "s"])
    x0 = np.array([1.0, 15.0])
    betas, sig = fit.draw(np.random.default_rng(5), 200_000)
    sim = betas @ x0 + sig * np.random.default_rng(6).standard_normal(len(sig))
    lo, hi = np.percentile(sim, [2.5, 97.5])
    plo, phi = fit.prediction_interval(x0)
    assert lo == pytest.approx(plo, rel=0.01) and hi == pytest.approx(phi, rel=0.01)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="non-finite"):
        fit_linear(np.array([[1.0, math.nan]]), np.array([1.0]), ["a", "b"])
    empty = fit_linear(np.zeros((0, 2)), np.array([]), ["a", "b"])
    assert empty.determined == [False, False]


def test_an_outlying_window_is_excluded_and_named():
    """A first-use stall in one window: excluded by the Bonferroni outlier test, the fit recovers."""
    rng = np.random.default_rng(7)
    X, _ = _design(rng, 16)
    y = X @ np.array([12.0, 0.1]) + rng.normal(0, 0.02, len(X))
    y[3] += 5.0
    rows = [f"w{i}" for i in range(len(y))]
    fit = fit_linear(X, y, ["a", "s"], rows)
    assert list(fit.excluded) == ["w3"] and "studentized" in fit.excluded["w3"]
    assert fit.n == 15 and fit.value("a") == pytest.approx(12.0, abs=0.05)
    kept = fit_linear(X, y, ["a", "s"], rows, outliers=False)
    assert kept.n == 16 and not kept.excluded
    clean = fit_linear(X, y - np.where(np.arange(len(y)) == 3, 5.0, 0.0), ["a", "s"], rows)
    assert not clean.excluded  # nothing is excluded from well-behaved data
