"""Typed results of the statistics: a mean with its interval, a speedup with its verdict.

:class:`Estimate` and :class:`Ratio` are what the aggregation and the comparison compute; they
become dicts (``comparison.json``, ``result.json``) or flat CSV columns (``summary.csv``) only
when written, through :meth:`Estimate.to_dict` / :meth:`Estimate.columns` and
:meth:`Ratio.to_dict` / :meth:`Ratio.columns`, and come back from a CSV row through
``from_columns``. The column names are made here and nowhere else:

- a metric ``m``: ``m_mean``, ``m_ci95_lo``, ``m_ci95_hi``;
- a speedup entry ``k`` (:func:`lab.catalog.speedup_key`: ``speedup_m``, ``paired_speedup_m``):
  ``k``, ``k_ci95_lo``, ``k_ci95_hi``, its verdict ``verdict_m`` / ``paired_verdict_m`` and what
  its interval spans, ``k_scope`` (:data:`WITHIN_ONE_LAUNCH`, :func:`across_launches`,
  :func:`borrowed_from`).

Every interval says what it spans (its *scope*): the repeats of one engine launch per mode, the
launch means of ``bench.launches >= 2`` launches, or one launch with the launch-to-launch spread
borrowed from earlier launches of the same configuration (:mod:`lab.analysis.launches`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping

from lab.analysis import stats
from lab.catalog import interval_kind

__all__ = ["NO_LAUNCH_SPREAD", "no_verdict_note", "finite_or_none", "Estimate", "Ratio", "verdict_column", "WITHIN_ONE_LAUNCH",
           "across_launches", "borrowed_from", "Scope", "PointColumns", "launch_means", "mean_over_launches", "group_estimates"]

#: The scope of an interval over the repeats of one engine launch per mode: it carries no
#: launch-to-launch variation (clocks, memory layout, graph capture, NCCL rings).
WITHIN_ONE_LAUNCH = "within one launch"


#: Why a one-launch ratio has no verdict word (issue 32; :func:`lab.analysis.launches.withhold`).
NO_LAUNCH_SPREAD = ("no verdict: one launch per mode and no launch-to-launch spread measured for this "
                    "configuration (run `lab launches 3`)")


def across_launches(n: int) -> str:
    """The scope of an interval whose units are ``n`` launch means per mode: ``"across 3 launches"``."""
    return WITHIN_ONE_LAUNCH if n <= 1 else f"across {n} launches"


def borrowed_from(*earlier: int) -> str:
    """The scope of a one-launch interval whose launch-to-launch spread comes from earlier launches
    of the same configuration, ``earlier`` per mode compared: ``"launch spread borrowed from 5
    earlier launches"`` (each mode had 5), ``"... from 5 and 3 earlier launches"``."""
    ks = list(dict.fromkeys(earlier))
    return f"launch spread borrowed from {' and '.join(str(k) for k in ks)} earlier launches"


@dataclass(frozen=True)
class Scope:
    """What an interval spans, as data: its kind, the launches per mode it stands on, and the label
    printed for it (``text``, the ``scope`` string of comparison.json and summary.csv).

    :ivar kind: ``"within"`` (the repeats of one launch, :data:`WITHIN_ONE_LAUNCH`), ``"across"``
        (launch means, :func:`across_launches`), ``"borrowed"`` (one launch, the spread of earlier
        ones: :func:`borrowed_from`) or ``"assumed"`` (one launch, a documented spread:
        :func:`lab.analysis.launches.assumed_from`).
    :ivar launches: launches per mode whose values the interval stands on (the smaller count of
        the two modes of a ratio); 1 for every kind but ``"across"``.
    :ivar text: the label, e.g. ``"across 3 launches"``.
    """

    kind: Literal["within", "across", "borrowed", "assumed"]
    launches: int
    text: str

    @classmethod
    def across(cls, n: int) -> "Scope":
        """Launch means of ``n`` launches per mode (``n <= 1``: within one launch)."""
        return cls("across", n, across_launches(n)) if n > 1 else cls("within", 1, WITHIN_ONE_LAUNCH)

    def short(self) -> str:
        """Two words for narrow columns (``dvc exp show``): ``"1 launch"`` (within one launch, or one
        launch with an assumed spread), ``"3 launches"``; a borrowed spread keeps its label."""
        if self.kind == "across":
            return f"{self.launches} launches"
        return self.text if self.kind == "borrowed" else "1 launch"


def _num(x: Any) -> float | None:
    """A CSV cell or a number as a float; empty, missing, unparsable or NaN -> None."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def finite_or_none(x: float | None) -> float | None:
    """``x`` when it is a finite number, else None (NaN or inf: an undefined bound)."""
    return x if x is not None and math.isfinite(x) else None


def verdict_column(key: str) -> str:
    """The verdict column of a speedup entry: ``speedup_m`` -> ``verdict_m``,
    ``paired_speedup_m`` -> ``paired_verdict_m``."""
    return key.replace("speedup_", "verdict_", 1)


def no_verdict_note(base: Any, other: Any, unit: str = "repeat") -> str | None:
    """Why a ratio ``mean(other) / mean(base)`` has no interval and so no verdict word (the one
    rule of :mod:`lab.analysis.stats`): ``"baseline mean 0: a zero denominator, no ratio, no
    verdict"``, ``"one repeat per mode: no spread, no interval, no verdict"``; None when both
    sides have two or more positive-mean values (the ratio then has an interval)."""
    b, o = stats.finite(base), stats.finite(other)
    if b.size == 0 or o.size == 0:
        return "no value in a mode: no ratio, no verdict"
    if not b.mean() > 0:
        return "baseline mean 0: a zero denominator, no ratio, no verdict"
    if not o.mean() > 0:
        return "mean 0 in the compared mode: no ratio on the log scale, no verdict"
    if min(b.size, o.size) < 2:
        return f"one {unit} in a mode: no spread, no interval, no verdict"
    return None


@dataclass(frozen=True)
class Estimate:
    """A metric's mean over repeats with its 95 % interval (:func:`lab.analysis.stats.metric_ci`).

    :ivar mean, ci95_lo, ci95_hi: in the metric's unit (bounds NaN with one unit, or when every
        unit gave the same value: no spread is no interval, :func:`lab.analysis.stats.mean_ci`).
    :ivar values: the per-repeat values (kept in result.json's ``levels``; None elsewhere).
    :ivar scope: what the interval spans (module docstring; None: not said, e.g. result.json's
        per-launch levels).
    """

    mean: float
    ci95_lo: float
    ci95_hi: float
    values: list[float] | None = None
    scope: str | None = None

    @classmethod
    def of(cls, name: str, values: list[float], *, keep_values: bool = False) -> "Estimate":
        """The interval :mod:`lab.catalog` declares for ``name`` over ``values`` (one per repeat)."""
        mean, lo, hi = stats.metric_ci(name, values)
        return cls(mean, lo, hi, list(values) if keep_values else None)

    def to_dict(self) -> dict[str, Any]:
        """``{"mean", "ci95_lo", "ci95_hi"}`` (and ``"values"``, ``"scope"`` when set)."""
        d: dict[str, Any] = {"mean": self.mean, "ci95_lo": self.ci95_lo, "ci95_hi": self.ci95_hi}
        if self.values is not None:
            d["values"] = self.values
        if self.scope is not None:
            d["scope"] = self.scope
        return d

    def columns(self, name: str) -> dict[str, float]:
        """The flat columns of metric ``name``: ``<name>_mean``, ``<name>_ci95_lo``, ``<name>_ci95_hi``."""
        return {f"{name}_mean": self.mean, f"{name}_ci95_lo": self.ci95_lo, f"{name}_ci95_hi": self.ci95_hi}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Estimate | None":
        """From :meth:`to_dict`'s shape (None, or no finite mean: None)."""
        if not d or _num(d.get("mean")) is None:
            return None
        lo, hi = _num(d.get("ci95_lo")), _num(d.get("ci95_hi"))
        return cls(float(d["mean"]), math.nan if lo is None else lo, math.nan if hi is None else hi, d.get("values"),
                   d.get("scope"))

    @classmethod
    def from_columns(cls, row: Mapping[str, Any], name: str) -> "Estimate | None":
        """From a flat row (a ``summary.csv`` row: strings, empty cells) of metric ``name``."""
        mean = _num(row.get(f"{name}_mean"))
        if mean is None:
            return None
        lo, hi = _num(row.get(f"{name}_ci95_lo")), _num(row.get(f"{name}_ci95_hi"))
        return cls(mean, math.nan if lo is None else lo, math.nan if hi is None else hi)

    def text(self, digits: int = 1, *, interval: bool = True) -> str:
        """``"82.1 [81.9, 82.3]"`` (the interval when asked for and both bounds are finite), or ``"82.1"``."""
        out = f"{self.mean:.{digits}f}"
        if interval and math.isfinite(self.ci95_lo) and math.isfinite(self.ci95_hi):
            out += f" [{self.ci95_lo:.{digits}f}, {self.ci95_hi:.{digits}f}]"
        return out


@dataclass(frozen=True)
class Ratio:
    """A speedup over the baseline: ``ratio`` with its 95 % interval and verdict.

    :ivar ratio: mode / baseline (None: undefined). :ivar ci95_lo, ci95_hi: None when undefined.
    :ivar verdict: :func:`lab.analysis.stats.verdict`'s word (None: not judged).
    :ivar scope: what the interval spans (module docstring; None: not said).
    :ivar note: why there is no interval when there is a ratio (e.g. every repeat gave the same
        goodput: a ceiling, not precision); None otherwise.
    :ivar extra: what its estimator adds (``paired``, ``n_prompts``, ``n_pairs``, ``unit``,
        ``n_units``, ``method``...), kept in :meth:`to_dict`.
    """

    ratio: float | None
    ci95_lo: float | None
    ci95_hi: float | None
    verdict: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    note: str | None = None

    @classmethod
    def welch(cls, base: list[float], other: list[float], *, higher_is_better: bool = True,
              scope: str | None = None, unit: str = "repeat") -> "Ratio":
        """``mean(other) / mean(base)`` over units (repeats, or launch means: ``unit``) with
        :func:`lab.analysis.stats.ratio_ci` and its verdict; bounds None when undefined. Without
        an interval there is no verdict word and :attr:`note` says why (:func:`no_verdict_note`)."""
        r, lo, hi = stats.ratio_ci(base, other)
        ok = math.isfinite(lo) and math.isfinite(hi)
        note = None if ok else no_verdict_note(base, other, unit)
        return cls(finite_or_none(r), finite_or_none(lo), finite_or_none(hi), stats.verdict(r, lo, hi, higher_is_better=higher_is_better),
                   scope=scope, note=note)

    def to_dict(self) -> dict[str, Any]:
        """``{"ratio", "ci95_lo", "ci95_hi", "verdict", "scope", "note", **extra}`` (comparison.json's
        entry; ``scope`` and ``note`` when set)."""
        d = {"ratio": self.ratio, "ci95_lo": self.ci95_lo, "ci95_hi": self.ci95_hi, "verdict": self.verdict}
        d.update({k: v for k, v in (("scope", self.scope), ("note", self.note)) if v is not None})
        return {**d, **self.extra}

    def columns(self, key: str) -> dict[str, Any]:
        """The flat columns of speedup entry ``key``: ``key``, ``key_ci95_lo``, ``key_ci95_hi``, its
        :func:`verdict_column` and ``key_scope``."""
        return {key: self.ratio, f"{key}_ci95_lo": self.ci95_lo, f"{key}_ci95_hi": self.ci95_hi,
                verdict_column(key): self.verdict, f"{key}_scope": self.scope}

    def flat(self, prefix: str) -> dict[str, float]:
        """MLflow / summary.json numbers: ``<prefix>``, ``<prefix>_ci95_lo``, ``<prefix>_ci95_hi``,
        the finite ones only."""
        out = {prefix: finite_or_none(self.ratio), f"{prefix}_ci95_lo": finite_or_none(self.ci95_lo),
               f"{prefix}_ci95_hi": finite_or_none(self.ci95_hi)}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Ratio | None":
        """From :meth:`to_dict`'s shape (comparison.json); None when absent."""
        if not d:
            return None
        extra = {k: v for k, v in d.items() if k not in ("ratio", "ci95_lo", "ci95_hi", "verdict", "scope", "note")}
        return cls(_num(d.get("ratio")), _num(d.get("ci95_lo")), _num(d.get("ci95_hi")), d.get("verdict"), extra,
                   d.get("scope"), d.get("note"))

    @classmethod
    def from_columns(cls, row: Mapping[str, Any], key: str) -> "Ratio | None":
        """From a flat row (``summary.csv``) of speedup entry ``key``; None without a ratio."""
        ratio = _num(row.get(key))
        if ratio is None:
            return None
        return cls(ratio, _num(row.get(f"{key}_ci95_lo")), _num(row.get(f"{key}_ci95_hi")),
                   row.get(verdict_column(key)) or None, scope=row.get(f"{key}_scope") or None)

    def scope_data(self) -> Scope | None:
        """:attr:`scope` as a :class:`Scope`, its launch count from the estimator's own fields
        (``extra["unit"] == "launch"`` with ``extra["n_units"]``: launch means; ``earlier_launches``:
        borrowed; ``assumed_launch_cv``: assumed; otherwise within one launch); None without a scope."""
        if self.scope is None:
            return None
        if self.extra.get("unit") == "launch" and self.extra.get("n_units") is not None:
            n = self.extra["n_units"]
            return Scope("across", int(min(n) if isinstance(n, (list, tuple)) else n), self.scope)
        if "earlier_launches" in self.extra:
            return Scope("borrowed", 1, self.scope)
        if "assumed_launch_cv" in self.extra:
            return Scope("assumed", 1, self.scope)
        return Scope("within", 1, self.scope)

    def text(self, *, scope: bool = True) -> str | None:
        """``"1.17x [1.16, 1.18] faster (within one launch)"`` (:func:`lab.analysis.stats.format_speedup`;
        the scope when asked for and known); None without a ratio."""
        if self.ratio is None or math.isnan(self.ratio):
            return None
        return stats.format_speedup(self.ratio, finite_or_none(self.ci95_lo), finite_or_none(self.ci95_hi), self.verdict,
                                    scope=self.scope if scope else None, note=self.note)


def launch_means(groups: Sequence[Sequence[float | None]]) -> list[float]:
    """The mean of each launch's finite values (``groups[k]``: the repeats of launch k; launches
    without any are dropped)."""
    out = []
    for g in groups:
        v = stats.finite(g)
        if v.size:
            out.append(float(v.mean()))
    return out


def mean_over_launches(name: str, groups: Sequence[Sequence[float | None]]) -> Estimate:
    """Metric ``name`` of one mode at one point, from its per-launch values (``groups[k]``: the
    repeats of launch k).

    Two or more launches: :func:`lab.analysis.stats.metric_ci` over the launch means (counts:
    the exact Poisson interval over every repeat), scope :func:`across_launches`. One launch:
    over its repeats, scope :data:`WITHIN_ONE_LAUNCH`.
    """
    n = len(launch_means(groups))
    if n >= 2:
        units = [v for g in groups for v in g] if interval_kind(name) == "count" else launch_means(groups)
    else:
        units = [v for g in groups for v in g]
    m, lo, hi = stats.metric_ci(name, units)
    return Estimate(m, lo, hi, scope=across_launches(n))


@dataclass
class PointColumns:
    """What a part of the comparison adds at one (mode, point): keys of its entry
    (:attr:`lab.analysis.comparison.Comparison.modes` ``[mode][point]``) and columns of its flat row (``summary.csv``), in the order
    they come (:meth:`lab.analysis.comparison.Comparison.merge`)."""

    entry: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] = field(default_factory=dict)


def _missing(x: Any) -> bool:
    """No value: None, or NaN (a frame's empty cell)."""
    return x is None or (isinstance(x, float) and x != x)


def group_estimates(rows: Iterable[Mapping[str, Any]] | Any, by: Sequence[str], metrics: Iterable[str], *,
                    launch: str | None = "launch", keep_values: bool = False
                    ) -> dict[tuple[Hashable, ...], dict[str, Estimate]]:
    """Group per-repeat rows and estimate each metric of each group: the one computation behind
    result.json's ``levels`` (:func:`lab.analysis.aggregate.aggregate_point`), the comparison's
    entries and summary tables (:func:`lab.analysis.comparison.summarize`) and the figures' bars
    and error bars (:mod:`lab.report.figures`, :mod:`lab.report.sweep_figures`), so a metric has
    the same interval wherever it is shown.

    Each estimate is the interval :mod:`lab.catalog` declares for the metric
    (:func:`lab.analysis.stats.metric_ci`). With ``launch`` set, a group's rows are split by that
    field (missing: launch 1) and :func:`mean_over_launches` estimates over the
    launch means when there are two or more launches (scope ``"across N launches"``), else over the
    repeats (scope :data:`WITHIN_ONE_LAUNCH`); with ``launch=None`` every row is one unit and the
    estimate has no scope (result.json's per-launch levels).

    :param rows: one mapping per (point, repeat) (``runs.json`` rows), or a pandas DataFrame of them
        (:func:`lab.analysis.comparison.runs_frame`).
    :param by: the fields whose values make a group's key, e.g. ``("mode", "point")``; ``()``: one
        group, key ``()``.
    :param metrics: metric names (:mod:`lab.catalog`); a row's None, NaN or missing value is no value.
    :param keep_values: keep each group's values (one per row with a value, in row order, as given:
        an int stays an int) on the estimate.
    :returns: ``{key tuple: {metric: Estimate}}``, groups in the order their first row comes,
        metrics in ``metrics`` order; a metric without any value in a group is absent from it.
    """
    if hasattr(rows, "to_dict") and not isinstance(rows, Mapping):  # a DataFrame
        rows = rows.to_dict("records")
    names = list(metrics)
    groups: dict[tuple[Hashable, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in by), []).append(r)
    out: dict[tuple[Hashable, ...], dict[str, Estimate]] = {}
    for key, members in groups.items():
        ests: dict[str, Estimate] = {}
        for name in names:
            vals = [(r.get(launch, 1) if launch else 1, r[name]) for r in members if not _missing(r.get(name))]
            if not vals:
                continue
            values = [v for _, v in vals]
            if launch is None:
                ests[name] = Estimate.of(name, values, keep_values=keep_values)
                continue
            per_launch: dict[Any, list[float]] = {}
            for n, v in sorted(vals, key=lambda nv: nv[0]):
                per_launch.setdefault(n, []).append(v)
            est = mean_over_launches(name, list(per_launch.values()))
            ests[name] = replace(est, values=values) if keep_values else est
        out[key] = ests
    return out
