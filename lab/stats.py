"""Statistics over repeats: confidence intervals and the speedup verdict.

Repeats (default 3) of one (mode, concurrency) give a small sample of a run metric. The
lab reports a mean with a Student-t 95 % interval (:func:`mean_ci`) and a speedup
``mean(other) / mean(base)`` with a bootstrap percentile interval (:func:`ratio_ci`),
then calls it "faster", "slower" or "not distinguishable" (:func:`verdict`) by whether
the interval excludes 1 (DESIGN.md, "Measurement definitions": "a speedup is reported
with its interval").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import numpy as np

__all__ = ["mean_ci", "ratio_ci", "verdict", "format_speedup"]

Verdict = Literal["faster", "slower", "not distinguishable"]


def _clean(values: Iterable[float | None]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def mean_ci(values: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval.

    ``mean ± t_{(1+confidence)/2, n-1} * s / sqrt(n)`` with ``s`` the sample standard
    deviation (ddof=1), ``scipy.stats.t``.

    :param values: sample (None and non-finite values are dropped).
    :param confidence: coverage in (0, 1).
    :returns: ``(mean, lo, hi)``; n=1 gives ``(x, nan, nan)``, n=0 ``(nan, nan, nan)``.
    :raises ValueError: confidence outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    x = _clean(values)
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n == 1:
        return (mean, math.nan, math.nan)
    from scipy import stats as _st  # imported here: `lab summary` must start fast

    half = float(_st.t.ppf((1.0 + confidence) / 2.0, df=n - 1) * x.std(ddof=1) / math.sqrt(n))
    return (mean, mean - half, mean + half)


def ratio_ci(
    base: Iterable[float | None],
    other: Iterable[float | None],
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Ratio of means ``mean(other) / mean(base)`` with a bootstrap percentile interval.

    Each bootstrap replicate resamples ``base`` and ``other`` independently with
    replacement (``numpy.random.default_rng(seed)``) and takes the ratio of their means;
    the interval is the ``(1 ± confidence) / 2`` percentiles of the replicates
    (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13).

    :param base: reference sample, e.g. baseline ``output_tok_s`` per repeat.
    :param other: compared sample.
    :param n_boot: replicates (>= 100).
    :param seed: RNG seed (deterministic result).
    :param confidence: coverage in (0, 1).
    :returns: ``(ratio, lo, hi)``; lo/hi are nan if either sample has fewer than 2
        values, all three nan if either is empty or ``mean(base)`` is 0.
    :raises ValueError: ``n_boot < 100`` or confidence outside (0, 1).
    """
    if n_boot < 100:
        raise ValueError(f"n_boot={n_boot}: use at least 100 bootstrap replicates")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    b, o = _clean(base), _clean(other)
    if b.size == 0 or o.size == 0 or b.mean() == 0:
        return (math.nan, math.nan, math.nan)
    ratio = float(o.mean() / b.mean())
    if b.size < 2 or o.size < 2:
        return (ratio, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    bm = b[rng.integers(0, b.size, size=(n_boot, b.size))].mean(axis=1)
    om = o[rng.integers(0, o.size, size=(n_boot, o.size))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = om / bm
    reps = reps[np.isfinite(reps)]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return (ratio, float(lo), float(hi))


def verdict(ratio: float, lo: float, hi: float, *, higher_is_better: bool = True) -> Verdict:
    """Classify a ratio ``other / base`` by whether its interval excludes 1.

    :param ratio, lo, hi: output of :func:`ratio_ci`.
    :param higher_is_better: True for throughputs (``*_tok_s``), False for latencies
        (``*_ms``), where a ratio above 1 means slower.
    :returns: "faster" if the whole interval is on the better side of 1, "slower" if on
        the worse side, otherwise (or with a nan bound) "not distinguishable".
    """
    if any(v is None or not math.isfinite(v) for v in (ratio, lo, hi)):
        return "not distinguishable"
    if lo > 1.0:
        return "faster" if higher_is_better else "slower"
    if hi < 1.0:
        return "slower" if higher_is_better else "faster"
    return "not distinguishable"


def format_speedup(ratio: float | None, lo: float | None, hi: float | None, verdict_: str | None) -> str | None:
    """``"1.17x [1.16, 1.18] faster"`` (the interval only when both bounds exist); None
    when there is no ratio. Shared by the report, ``reports/summary.md`` and ``lab summary``."""
    if ratio is None:
        return None
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    return f"{ratio:.2f}x{ci} {verdict_ or ''}".rstrip()
