"""Modes compared across engine launches: repeats within a launch, launches across.

Every server-side configuration is its own engine launch, and a launch has conditions of its
own that its repeats share: GPU clocks, memory layout, NCCL rings, CUDA-graph capture, the
process's warm state (on the emulator: how busy the machine was). The lab measured 2.2 %
launch-to-launch CV of decode tok/s for the default profile (docs/measurement.md), many times
the spread of repeats inside one launch, and the seeds' "regression" (89 vs 82 tok/s) was two
launches. An interval over the repeats of one launch per mode therefore says nothing about the
next launch. ``bench.launches`` (default 1) runs each mode that many times, each a fresh engine
start, interleaved by DVC (launch 1 of every mode, then launch 2 of every mode...: A B C A B C)
so that drift over the session hits every mode alike; launch ``n`` of a mode writes to
:func:`lab.config.launch_results_dir` and its request workload is the same as in every other
launch and mode (seeded by ``bench.seed + repeat``).

The comparison's units, per mode, point and metric (docs/measurement.md, "Launches"):

- **two or more launches**: the launch means (the mean over one launch's repeats), a
  hierarchical view in which the repeats only make a launch's mean precise. Means get
  :func:`lab.analysis.stats.metric_ci` over the launch means (``launches - 1`` degrees of
  freedom), speedups Welch's log-ratio interval over the two modes' launch means
  (:func:`lab.analysis.stats.ratio_ci`), the paired estimators (per prompt, per repeat) the
  cluster interval with the launch round as the cluster
  (:func:`lab.analysis.stats.cluster_log_ratio_ci`). Scope: :func:`across_launches`.
- **one launch**: the repeats of that launch, scope :data:`WITHIN_ONE_LAUNCH`, said wherever
  the interval is shown. Where the regression sentinel found at least two earlier launches of
  the same configuration for both modes (its MLflow history by ``config_hash``,
  :mod:`lab.analysis.sentinel`; recorded in each ``result.json`` as ``sentinel.comparison``),
  the speedups of the metrics it watches take their interval from that launch spread instead
  (:func:`lab.analysis.stats.spread_ratio_ci`), scope :func:`borrowed_from`. The earlier
  launches give the spread only; the estimate is this launch's.

**Where a verdict word is said** (issue 32): only where the interval carries launch-to-launch
noise *measured for this configuration*: two or more launches, or one launch with the spread
borrowed from its own earlier launches. A one-launch ratio without either keeps its point
estimate but gets no verdict word (:func:`withhold`, ``note`` :data:`NO_LAUNCH_SPREAD`); where
the lab documents the launch spread of the engine and cost profile (:attr:`lab.engine.registry.Engine.launch_spread_priors`,
:func:`prior_spread`), its interval is widened with it (scope :func:`assumed_from`) so that
it covers at its level, and still no word is said: an assumed spread is not this machine's.
``python benchmarks/verdict_simulation.py`` measures the default's wrong verdicts and coverage.

Pure functions over values already loaded; :mod:`lab.analysis.comparison`, :mod:`lab.analysis.paired`
and :mod:`lab.analysis.load` call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.analysis import estimates as _est
from lab.analysis import stats
from lab.analysis.estimates import NO_LAUNCH_SPREAD, WITHIN_ONE_LAUNCH, Estimate, Ratio, across_launches, borrowed_from
from lab.config.paths import launch_results_dir

__all__ = ["NO_LAUNCH_SPREAD", "prior_spread", "assumed_from", "withhold", "Spread", "launch_dirs", "launch_means", "mean_estimate", "welch_speedup", "borrow", "spreads_for", "WITHIN_ONE_LAUNCH",
           "across_launches", "borrowed_from"]


def launch_dirs(results_dir: Path, mode: str, launches: int = 1) -> list[tuple[int, Path]]:
    """``[(1, results/<mode>), (2, results/launches/2/<mode>), ...]`` for ``launches`` launches
    (:func:`lab.config.launch_results_dir`, with ``results_dir`` in place of ``results``)."""
    return [(n, Path(results_dir) / Path(launch_results_dir(mode, n)).relative_to("results"))
            for n in range(1, launches + 1)]


@dataclass(frozen=True)
class Spread:
    """Launch-to-launch spread of one metric's launch mean, from earlier launches of the same
    configuration.

    :ivar cv: standard deviation / mean of the earlier launches' means (dimensionless).
    :ivar n: how many earlier launches (>= 2 for a spread).
    """

    cv: float
    n: int

    @classmethod
    def from_sentinel(cls, result: Mapping[str, Any] | None, point: str, metric: str) -> "Spread | None":
        """The spread the sentinel read for ``point`` / ``metric`` from MLflow (``result["sentinel"]
        ["comparison"][point][metric]``: ``history_mean``, ``history_sd``, ``n_history``), or None
        when it had fewer than two earlier launches (or none: no history, an MLflow error)."""
        d = (((result or {}).get("sentinel") or {}).get("comparison") or {}).get(point, {}).get(metric) or {}
        mean, sd, n = d.get("history_mean"), d.get("history_sd"), d.get("n_history") or 0
        if mean is None or sd is None or n < 2 or not mean > 0 or not math.isfinite(sd):
            return None
        return cls(float(sd) / float(mean), int(n))


def prior_spread(engine: str | None, profile: str | None) -> "Spread | None":
    """The documented launch spread of ``engine`` with cost profile ``profile`` (the engine's own
    :attr:`lab.engine.registry.Engine.launch_spread_priors`; only the emulator's are known, a real
    GPU's must be measured there) as a :class:`Spread`, or None where none is documented (every
    real engine, an unregistered one, an unlisted or edited profile path)."""
    from lab.engine.registry import find_engine

    eng = find_engine(engine) if engine else None
    if eng is None or not profile:
        return None
    priors = eng.launch_spread_priors
    hit = priors.get(Path(str(profile)).stem if str(profile).endswith(".json") else str(profile))
    return Spread(hit[0], hit[1]) if hit else None


def assumed_from(prior: "Spread") -> str:
    """The scope of a one-launch interval widened with a documented launch spread:
    ``"launch spread assumed: 2.2 % CV (documented, 14 launches)"``."""
    return f"launch spread assumed: {prior.cv:.1%} CV (documented, {prior.n} launches)"


def withhold(r: Ratio, prior: "Spread | None" = None) -> Ratio:
    """A one-launch ratio without launch spread measured for its configuration: the point estimate
    stays, the verdict word goes (``note`` :data:`NO_LAUNCH_SPREAD`). With ``prior`` (the
    documented spread of its engine and profile, :func:`prior_spread`) the interval is widened to
    :func:`lab.analysis.stats.spread_ratio_ci` with it on both sides (scope :func:`assumed_from`;
    ``extra["within_launch_ci95"]`` keeps the one it replaces). Ratios already across launches or
    borrowed, or without a ratio, come back unchanged."""
    if r.ratio is None or not r.ratio > 0 or (r.scope and r.scope != WITHIN_ONE_LAUNCH):
        return r
    note = NO_LAUNCH_SPREAD if r.note is None else f"{r.note}; {NO_LAUNCH_SPREAD}"
    if prior is None:
        return Ratio(r.ratio, r.ci95_lo, r.ci95_hi, None, dict(r.extra), scope=r.scope, note=note)
    ratio, lo, hi = stats.spread_ratio_ci(r.ratio, [(prior.cv, prior.n), (prior.cv, prior.n)])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Ratio(r.ratio, r.ci95_lo, r.ci95_hi, None, dict(r.extra), scope=r.scope, note=note)
    extra = {**r.extra, "within_launch_ci95": [r.ci95_lo, r.ci95_hi], "assumed_launch_cv": prior.cv}
    return Ratio(ratio, lo, hi, None, extra, scope=assumed_from(prior), note=note)


def launch_means(groups: Sequence[Sequence[float | None]]) -> list[float]:
    """The mean of each launch's finite values (launches without any are dropped):
    :func:`lab.analysis.estimates.launch_means`."""
    return _est.launch_means(groups)


def _launches(groups: Sequence[Sequence[float | None]]) -> int:
    return len(launch_means(groups))


def mean_estimate(name: str, groups: Sequence[Sequence[float | None]]) -> Estimate:
    """Metric ``name`` of one mode at one point, from its per-launch values (``groups[k]``: the
    repeats of launch k): :func:`lab.analysis.estimates.mean_over_launches` (the rule of
    :func:`lab.analysis.estimates.group_estimates`)."""
    return _est.mean_over_launches(name, groups)


def welch_speedup(base: Sequence[Sequence[float | None]], other: Sequence[Sequence[float | None]], *,
                  higher_is_better: bool = True,
                  spreads: tuple[Spread | None, Spread | None] | None = None,
                  prior: Spread | None = None) -> Ratio:
    """``mean(other) / mean(base)`` at one point, from each mode's per-launch values.

    Both modes with two or more launches: Welch's log-ratio interval over the launch means,
    scope :func:`across_launches` (the smaller count). Otherwise over the repeats, scope
    :data:`WITHIN_ONE_LAUNCH`; then, when both ``spreads`` (earlier launches of each mode's
    configuration, :meth:`Spread.from_sentinel`) are given, :func:`borrow` replaces the interval;
    without them the verdict word is withheld (:func:`withhold`, widened with ``prior``, the
    documented launch spread of the engine and profile, when given).

    :param base, other: ``[[repeat values of launch 1], [... launch 2], ...]``.
    :returns: a :class:`lab.analysis.estimates.Ratio` with ``scope`` and ``extra["unit"]``
        (``"launch"`` or ``"repeat"``), ``extra["n_units"]`` ([base, other]).
    """
    nb, no = _launches(base), _launches(other)
    if nb >= 2 and no >= 2:
        r = Ratio.welch(launch_means(base), launch_means(other), higher_is_better=higher_is_better,
                        scope=across_launches(min(nb, no)), unit="launch")
        r.extra.update(unit="launch", n_units=[nb, no])
        return r
    flat_b, flat_o = [v for g in base for v in g], [v for g in other for v in g]
    r = Ratio.welch(flat_b, flat_o, higher_is_better=higher_is_better, scope=WITHIN_ONE_LAUNCH)
    r.extra.update(unit="repeat", n_units=[len(stats.finite(flat_b)), len(stats.finite(flat_o))])
    b = borrow(r, spreads, higher_is_better=higher_is_better) if spreads else r
    return withhold(b, prior) if b.scope == WITHIN_ONE_LAUNCH else b


def borrow(r: Ratio, spreads: tuple[Spread | None, Spread | None] | None, *, higher_is_better: bool = True) -> Ratio:
    """A one-launch ratio with its interval from earlier launches' spread
    (:func:`lab.analysis.stats.spread_ratio_ci`): the point estimate stays, the interval,
    verdict and scope (:func:`borrowed_from`) change, ``extra["within_launch_ci95"]`` keeps the
    one it replaces. Unchanged (scope :data:`WITHIN_ONE_LAUNCH`) when either side has no spread."""
    if not spreads or any(s is None for s in spreads) or r.ratio is None or not r.ratio > 0:
        return r
    sb, so = spreads
    ratio, lo, hi = stats.spread_ratio_ci(r.ratio, [(sb.cv, sb.n), (so.cv, so.n)])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return r
    extra = {**r.extra, "within_launch_ci95": [r.ci95_lo, r.ci95_hi], "earlier_launches": [sb.n, so.n],
             "launch_cv": [sb.cv, so.cv]}
    return Ratio(ratio, lo, hi, stats.verdict(ratio, lo, hi, higher_is_better=higher_is_better), extra,
                 scope=borrowed_from(sb.n, so.n))


def spreads_for(results: Mapping[str, Mapping[str, Any]], base: str, mode: str, point: str,
                metric: str) -> tuple[Spread | None, Spread | None] | None:
    """``(baseline's, mode's)`` :meth:`Spread.from_sentinel` at ``point`` for ``metric``, or None
    unless both exist (``results``: mode -> launch 1's ``result.json``)."""
    sb = Spread.from_sentinel(results.get(base), point, metric)
    so = Spread.from_sentinel(results.get(mode), point, metric)
    return (sb, so) if sb and so else None
