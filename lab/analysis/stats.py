"""Statistics of the comparison: confidence intervals and the speedup verdict.

Repeats (default 3) of one (mode, concurrency), or with ``bench.launches`` >= 2 the launch means
(:mod:`lab.analysis.launches`), give a small sample of a run metric. The lab reports a mean with
a Student-t 95 % interval (:func:`mean_ci`, :func:`metric_ci`; counts get an exact Poisson
interval, :func:`count_ci`) and a speedup ``mean(other) / mean(base)`` with a Welch log-ratio
interval (:func:`ratio_ci`; from earlier launches' spread: :func:`spread_ratio_ci`; paired and
clustered: :func:`cluster_log_ratio_ci`), then calls it "faster", "slower" or "not
distinguishable" (:func:`verdict`) by whether the interval excludes 1 (DESIGN.md, "Measurement
definitions": "a speedup is reported with its interval").

**One rule for every ratio** (docs/measurement.md, "Statistics"): a ratio needs a positive
denominator and at least two units per side; without them there is no interval and
:func:`verdict` gives no word (None; the caller says why). Near-zero spread is treated
continuously: every ratio interval adds to each unit's variance the variance of the
measurement's resolution, ``(REL_RESOLUTION * mean)^2 / 12`` (Sheppard's correction: a value
known to a step ``h`` carries a rounding error uniform on ``h``, variance ``h^2 / 12``), so a
spread of exactly 0 and one of 1e-9 give the same, non-zero interval instead of "no interval"
and "a confident verdict".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np

from lab.catalog import interval_kind

__all__ = ["REL_RESOLUTION", "resolution_var", "finite", "mean_ci", "ratio_ci", "spread_ratio_ci", "log_ratio_ci", "cluster_log_ratio_ci", "count_ci",
           "metric_ci", "verdict", "format_speedup", "t_quantile", "t_sf", "chi2_quantile"]


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile ``t_{p, df}``: what ``scipy.stats.t.ppf(p, df)`` returns (its
    ``_ppf`` is ``scipy.special.stdtrit(df, p)``, scipy/stats/_continuous_distns.py ``t_gen``),
    without the distribution object's per-call argument handling: ~20 us instead of ~800 us,
    which the coverage simulations and a comparison's many intervals pay thousands of times.
    nan for ``df <= 0`` or ``p`` outside [0, 1]; -inf / inf at 0 / 1, as ``t.ppf``."""
    if not (df > 0 and 0.0 <= p <= 1.0):
        return math.nan
    if p == 0.0 or p == 1.0:
        return -math.inf if p == 0.0 else math.inf
    from scipy import special  # imported here: `lab summary` must start fast

    return float(special.stdtrit(df, p))


def t_sf(x: float, df: float) -> float:
    """Student's t survival function ``P(T > x)``: what ``scipy.stats.t.sf(x, df)`` returns
    (``scipy.special.stdtr(df, -x)``, ``t_gen._sf``) without the per-call argument handling;
    nan for ``df <= 0`` or a nan ``x``."""
    if not df > 0 or math.isnan(x):
        return math.nan
    from scipy import special  # imported here: `lab summary` must start fast

    return float(special.stdtr(df, -x))


def chi2_quantile(p: float, df: float) -> float:
    """Chi-square quantile: what ``scipy.stats.chi2.ppf(p, df)`` returns (``2 *
    scipy.special.gammaincinv(df / 2, p)``, ``chi2_gen._ppf``), without the per-call argument
    handling. nan for ``df <= 0`` or ``p`` outside [0, 1]; 0 / inf at 0 / 1."""
    if not (df > 0 and 0.0 <= p <= 1.0):
        return math.nan
    if p == 0.0 or p == 1.0:
        return 0.0 if p == 0.0 else math.inf
    from scipy import special  # imported here: `lab summary` must start fast

    return float(2.0 * special.gammaincinv(df / 2.0, p))

Verdict = Literal["faster", "slower", "not distinguishable"]

#: Relative resolution of one unit's value (a repeat's or a launch's mean throughput, goodput,
#: latency): one step in 512, i.e. one token of the 512 a repeat of the default workload
#: decodes (params.yaml ``bench``: 8 prompts x 64 new tokens). The timer (``time.perf_counter``,
#: sub-microsecond over windows of seconds) resolves far finer, so the token count is the
#: coarsest step of a throughput; a larger workload resolves finer, so this floor errs wide.
#: Goodput, counted in whole requests, passes its own (:func:`lab.analysis.load.goodput_speedup`).
REL_RESOLUTION = 1.0 / 512


def resolution_var(rel_resolution: float = REL_RESOLUTION) -> float:
    """Variance of the log of one value known to a relative step ``rel_resolution``:
    ``rel_resolution^2 / 12`` (Sheppard 1898, *Proc. London Math. Soc.* 29:353-380: a uniform
    rounding error of width ``h`` has variance ``h^2 / 12``). Dimensionless.

    :raises ValueError: a negative or non-finite resolution.
    """
    if not (math.isfinite(rel_resolution) and rel_resolution >= 0):
        raise ValueError(f"rel_resolution={rel_resolution}: must be a finite number >= 0, e.g. {REL_RESOLUTION:.4g}")
    return rel_resolution * rel_resolution / 12.0


def finite(values: Iterable[float | None]) -> np.ndarray:
    """The finite values of ``values`` as a float array (None, NaN and inf dropped); shape (k,)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def mean_ci(values: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval.

    ``mean ± t_{(1+confidence)/2, n-1} * s / sqrt(n)`` with ``s`` the sample standard
    deviation (ddof=1), ``scipy.stats.t``.

    :param values: sample (None and non-finite values are dropped).
    :param confidence: coverage in (0, 1).
    :returns: ``(mean, lo, hi)``; n=1 gives ``(x, nan, nan)``, n=0 ``(nan, nan, nan)``, and a
        sample with no spread (every value equal, e.g. goodput 4.0 in every repeat) ``(x, nan,
        nan)``: a zero-width interval would claim a precision that a few repeats of a discrete
        or saturated quantity cannot show.
    :raises ValueError: confidence outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    x = finite(values)
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    if n == 1 or sd <= 1e-12 * max(abs(mean), 1.0):  # no spread (up to rounding: 2.4/2 vs 4.8/4)
        return (mean, math.nan, math.nan)
    half = float(t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n))
    return (mean, mean - half, mean + half)


def ratio_ci(
    base: Iterable[float | None],
    other: Iterable[float | None],
    confidence: float = 0.95,
    rel_resolution: float = REL_RESOLUTION,
) -> tuple[float, float, float]:
    """Ratio of means ``mean(other) / mean(base)`` with a Welch log-ratio interval.

    On the log scale the ratio is ``log(mean(other)) - log(mean(base))``; by the delta
    method each term has variance ``s^2 / (n * mean^2)`` (the squared coefficient of
    variation of the mean). The interval is ``exp(log ratio ± t_{(1+confidence)/2, df} * se)``
    with ``se^2 = v_other + v_base`` and Welch-Satterthwaite degrees of freedom
    ``df = se^4 / (v_other^2 / (n_other - 1) + v_base^2 / (n_base - 1))`` (Welch 1947,
    *Biometrika* 34:28-35). Unlike a percentile bootstrap over 3 repeats, which covers
    the true ratio ~79 % of the time, this interval covers at its nominal level at n = 3
    on normal and log-normal data (``tests/unit/test_stats.py`` simulates it).

    :param base: reference sample, e.g. baseline ``output_tok_s`` per repeat (> 0).
    :param other: compared sample (> 0).
    :param confidence: coverage in (0, 1).
    :param rel_resolution: each value's relative resolution; its variance
        (:func:`resolution_var`) is added to each sample's squared coefficient of variation, so
        no spread gives an interval of about ``± t * sqrt(2 * resolution_var / n)``, not none.
    :returns: ``(ratio, lo, hi)``; lo/hi are nan if either sample has fewer than 2 values, all
        three nan if either is empty or a mean is not positive (a zero denominator).
    :raises ValueError: confidence outside (0, 1), a negative resolution.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    floor = resolution_var(rel_resolution)
    b, o = finite(base), finite(other)
    if b.size == 0 or o.size == 0 or b.mean() <= 0 or o.mean() <= 0:
        return (math.nan, math.nan, math.nan)
    ratio = float(o.mean() / b.mean())
    if b.size < 2 or o.size < 2:
        return (ratio, math.nan, math.nan)
    vb = (float(b.var(ddof=1)) / float(b.mean()) ** 2 + floor) / b.size
    vo = (float(o.var(ddof=1)) / float(o.mean()) ** 2 + floor) / o.size
    se = math.sqrt(vb + vo)
    if se == 0.0:  # only with rel_resolution=0 and no spread
        return (ratio, math.nan, math.nan)
    df = (vb + vo) ** 2 / ((vb ** 2 / (b.size - 1)) + (vo ** 2 / (o.size - 1)))
    half = float(t_quantile((1.0 + confidence) / 2.0, df) * se)
    return (ratio, ratio * math.exp(-half), ratio * math.exp(half))


def spread_ratio_ci(ratio: float, spreads: Iterable[tuple[float, int]],
                    confidence: float = 0.95, rel_resolution: float = REL_RESOLUTION) -> tuple[float, float, float]:
    """A ratio of two single launch means with an interval from launch spreads measured elsewhere.

    Each side is one launch; its launch mean's relative spread ``cv_i`` (sd / mean of ``n_i``
    earlier launch means of the same configuration: :mod:`lab.analysis.sentinel`'s history) gives
    the delta-method variance ``cv_i^2`` of its log. The interval is ``exp(log ratio ± t_df * se)``
    with ``se^2 = sum cv_i^2`` and Welch-Satterthwaite ``df = se^4 / sum(cv_i^4 / (n_i - 1))``
    (Welch 1947, as :func:`ratio_ci`, with the earlier launches as the sample of each side).

    :param ratio: the point estimate (> 0), e.g. ``mean(mode) / mean(baseline)`` of this launch.
    :param spreads: ``(cv, n)`` per side, ``n >= 2`` earlier launches each.
    :param rel_resolution: each side's resolution (:func:`resolution_var` is added to ``cv^2``),
        so a cv of 0 gives the resolution's interval rather than none.
    :returns: ``(ratio, lo, hi)``; nan bounds when a side has ``n < 2`` or the ratio is not
        positive.
    :raises ValueError: confidence outside (0, 1), a negative resolution.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    floor = resolution_var(rel_resolution)
    sp = [(float(cv), int(n)) for cv, n in spreads]
    if not (ratio is not None and math.isfinite(ratio) and ratio > 0) or not sp or any(
            n < 2 or not math.isfinite(cv) or cv < 0 for cv, n in sp):
        return (ratio, math.nan, math.nan)
    parts = [(cv * cv + floor, n) for cv, n in sp]
    var = sum(v for v, _ in parts)
    if var == 0.0:  # only with rel_resolution=0 and every cv 0
        return (ratio, math.nan, math.nan)
    df = var ** 2 / sum(v * v / (n - 1) for v, n in parts)
    half = float(t_quantile((1.0 + confidence) / 2.0, df) * math.sqrt(var))
    return (ratio, ratio * math.exp(-half), ratio * math.exp(half))


def log_ratio_ci(log_ratios: Iterable[float | None], confidence: float = 0.95,
                 rel_resolution: float = REL_RESOLUTION) -> tuple[float, float, float]:
    """Geometric-mean ratio of paired log ratios with a one-sample Student-t interval.

    ``exp(mean(d) ± t_{(1+confidence)/2, n-1} * sqrt(s_d^2 + 2 r) / sqrt(n))`` for ``d_i =
    log(other_i / base_i)``, one ``d_i`` per matched unit (a prompt): the paired design, where
    the unit-to-unit variation cancels (:mod:`lab.analysis.paired`). ``r`` is
    :func:`resolution_var` of each of the two values in a ``d_i`` (the module's one rule).

    :returns: ``(ratio, lo, hi)``; n=1 gives nan bounds, n=0 all nan.
    :raises ValueError: confidence outside (0, 1), a negative resolution.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    floor = 2.0 * resolution_var(rel_resolution)
    d = finite(log_ratios)
    if d.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(d.mean())
    var = (float(d.var(ddof=1)) if d.size > 1 else 0.0) + floor
    if d.size < 2 or var == 0.0:
        return (math.exp(m), math.nan, math.nan)
    half = float(t_quantile((1.0 + confidence) / 2.0, d.size - 1) * math.sqrt(var / d.size))
    return (math.exp(m), math.exp(m - half), math.exp(m + half))


def cluster_log_ratio_ci(clusters: Mapping[Any, Iterable[float]],
                         confidence: float = 0.95, rel_resolution: float = REL_RESOLUTION) -> tuple[float, float, float]:
    """Paired log ratios that are correlated within clusters, with the cluster as the unit.

    Requests of one repeat at concurrency above 1 share batch iterations, and every request of
    one engine launch shares its launch's speed, so their log ratios are not independent: a
    t-interval across requests (or prompts) would take prompts - 1 degrees of freedom where the
    data hold about clusters - 1. Each cluster's log ratios are averaged first; the interval is
    :func:`log_ratio_ci` over the cluster means (the analysis of cluster means, e.g. Donner &
    Klar, *Design and Analysis of Cluster Randomization Trials*, 2000, ch. 6).

    :param clusters: cluster key (a repeat, a launch) -> its log ratios ``log(other / base)``.
    :returns: ``(ratio, lo, hi)`` as :func:`log_ratio_ci` (its resolution floor included); nan
        bounds with fewer than 2 clusters.
    :raises ValueError: ``confidence`` outside (0, 1) (from :func:`log_ratio_ci`).
    """
    means = []
    for vals in clusters.values():
        v = finite(vals)
        if v.size:
            means.append(float(v.mean()))
    return log_ratio_ci(means, confidence, rel_resolution)


def count_ci(counts: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean count per repeat with an exact Poisson (Garwood) interval; never negative.

    For a total ``k`` over ``n`` repeats: ``lo = chi2.ppf(a/2, 2k) / (2n)``,
    ``hi = chi2.ppf(1 - a/2, 2k + 2) / (2n)`` with ``a = 1 - confidence`` (Garwood 1936,
    *Biometrika* 28:437-442); ``lo = 0`` when ``k = 0``. A t-interval on counts such as
    ``crosscheck_disagreements`` (often 0 or 1) goes below zero and is zero-width for all-zero
    samples; this one is not.

    :param counts: non-negative counts, one per repeat.
    :returns: ``(mean, lo, hi)``; all nan when empty.
    :raises ValueError: confidence outside (0, 1) or a negative count.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must be in (0, 1), e.g. 0.95")
    x = finite(counts)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    if (x < 0).any():
        raise ValueError(f"count_ci: negative count in {x.tolist()}. Fix: pass event counts (>= 0)")
    n, k = x.size, float(x.sum())
    a = 1.0 - confidence
    lo = 0.0 if k == 0 else float(chi2_quantile(a / 2.0, 2.0 * k)) / (2.0 * n)
    hi = float(chi2_quantile(1.0 - a / 2.0, 2.0 * k + 2.0)) / (2.0 * n)
    return (k / n, lo, hi)


def metric_ci(name: str, values: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """The interval the lab reports for metric ``name`` over repeats.

    The kind of interval is the metric's declaration in :mod:`lab.catalog`
    (:func:`lab.catalog.interval_kind`): counts get :func:`count_ci`; everything else the
    Student-t interval of :func:`mean_ci`, intersected with [0, 1] for fractions and with
    [0, inf) for the other metrics (times, rates and lengths are never negative); a name the
    catalog does not declare is treated as a plain mean. Intersecting an interval with the set the true value must
    lie in never lowers its coverage.

    :returns: ``(mean, lo, hi)`` as :func:`mean_ci`.
    """
    kind = interval_kind(name)
    if kind == "count":
        return count_ci(values, confidence)
    m, lo, hi = mean_ci(values, confidence)
    if math.isfinite(lo):
        lo = max(lo, 0.0)
    if kind == "fraction" and math.isfinite(hi):
        hi = min(hi, 1.0)
    return (m, lo, hi)


def verdict(ratio: float, lo: float, hi: float, *, higher_is_better: bool = True) -> Verdict | None:
    """Classify a ratio ``other / base`` by whether its interval excludes 1.

    :param ratio, lo, hi: output of :func:`ratio_ci`.
    :param higher_is_better: True for throughputs (``*_tok_s``), False for latencies
        (``*_ms``), where a ratio above 1 means slower.
    :returns: "faster" if the whole interval is on the better side of 1, "slower" if on
        the worse side, otherwise "not distinguishable"; None (no verdict word: the module's one
        rule) without a finite ratio and two finite bounds (a zero denominator, a single unit)
        or with a zero-width interval.
    """
    if any(v is None or not math.isfinite(v) for v in (ratio, lo, hi)) or not hi > lo:
        return None
    if lo > 1.0:
        return "faster" if higher_is_better else "slower"
    if hi < 1.0:
        return "slower" if higher_is_better else "faster"
    return "not distinguishable"


def format_speedup(ratio: float | None, lo: float | None, hi: float | None, verdict_: str | None, *,
                   scope: str | None = None, note: str | None = None) -> str | None:
    """``"1.17x [1.16, 1.18] faster (within one launch)"``: the interval only when both bounds
    exist, then the verdict, then what the interval spans (``scope``, when given); without an
    interval the ``note`` saying why (``"0.88x not distinguishable (the same value in every
    repeat of both modes: no spread, no interval)"``). None when there is no ratio. Shared by
    the report, ``reports/summary.md``, the answer and ``lab summary``."""
    if ratio is None:
        return None
    has_ci = lo is not None and hi is not None
    ci = f" [{lo:.2f}, {hi:.2f}]" if has_ci else ""
    why = [w for w in ((note if not has_ci else None), scope) if w]
    tail = f" ({'; '.join(why)})" if why else ""
    return f"{ratio:.2f}x{ci} {verdict_ or ''}".rstrip() + tail
