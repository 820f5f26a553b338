"""Load and SLOs across modes: goodput speedups, the Pareto frontier, "beats up to N req/s".

What goodput, SLO attainment and the other load metrics of one run are (and the SLO rule a
request is judged by) is :mod:`lab.measure.goodput`, where the bench stage computes them; this
module compares them across modes in the compare stage.

Comparison: per rate point, goodput over repeats with a Student-t interval and the speedup
``goodput(mode) / goodput(baseline)`` **paired by repeat**: repeat k of every mode replays the
same seeded arrivals (``bench.seed + k``), so the repeat is the matched unit, as the prompt is
in :mod:`lab.analysis.paired`; the geometric mean of the per-repeat ratios gets a one-sample
t-interval (:func:`lab.analysis.stats.log_ratio_ci`), which removes the schedule-to-schedule
spread that both modes share (Welch's unpaired :func:`lab.analysis.stats.ratio_ci` when the
repeats do not match), and :func:`lab.analysis.stats.verdict` reads it. With two or more launches
per mode (``bench.launches``) the unit is the launch round instead (the per-repeat log ratios
averaged within launch k of both modes, a t-interval across rounds:
:func:`lab.analysis.stats.cluster_log_ratio_ci`), scope "across N launches"; with one, "within one
launch" (:mod:`lab.analysis.launches`). Goodput is counted in whole requests, so each value's
resolution is one request of a repeat's requests (``1 / requests``, the floor of
:mod:`lab.analysis.stats`' one rule): a ratio that is the same in every unit gets the
resolution's interval, not a zero-width one, and every request meeting the SLO in every repeat
of both modes is said to be a ceiling (``note``), not a tie measured to three decimals. A zero
goodput in the baseline is a zero denominator: no ratio, no verdict word, a ``note``. A mode **beats** the baseline at a
rate when that interval lies above 1 ("faster"), is **worse** when it lies below 1, and is
**not distinguishable** otherwise. "Beats up to N req/s": the mode beats the baseline at every
measured rate up to and including N (:func:`beats_up_to`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


from lab.analysis import stats
from lab.analysis.estimates import NO_LAUNCH_SPREAD, PointColumns, Ratio, across_launches, finite_or_none, no_verdict_note
from lab.catalog import speedup_key

__all__ = ["load_settings", "pareto_front", "goodput_speedup", "goodput_speedup_launches", "beats_up_to",
           "beats_sentence", "slo_text", "LoadPart", "load_part"]

def load_settings(bench: Any) -> dict[str, Any]:
    """What ``result.json`` records of a mode's open-loop settings (``bench`` is
    :class:`lab.config.BenchParams`): ``{"slo": {"ttft_ms", "tpot_ms"}, "burstiness",
    "rate_max_concurrency", "request_rates"}`` (ms, gamma shape, requests, req/s); the compare
    stage judges goodput by this ``slo``. The bench stage adds ``goodput_definition``
    (:data:`lab.measure.goodput.DEFINITION_VERSION`)."""
    return {"slo": bench.slo.model_dump(), "burstiness": bench.burstiness,
            "rate_max_concurrency": bench.rate_max_concurrency, "request_rates": list(bench.request_rates)}


def pareto_front(x: Sequence[float], y: Sequence[float]) -> list[bool]:
    """Which points are on the Pareto frontier when both ``x`` and ``y`` are better higher.

    A point is on the frontier when no other point is at least as good in both and strictly
    better in one. Non-finite points are never on it.

    :param x, y: same length (e.g. tokens/s per user, total output tokens/s).
    :returns: one bool per point.
    :raises ValueError: different lengths.
    """
    if len(x) != len(y):
        raise ValueError(f"pareto_front: {len(x)} x values for {len(y)} y values. Fix: one (x, y) per point")
    pts = [(float(a), float(b)) for a, b in zip(x, y)]
    out = []
    for i, (a, b) in enumerate(pts):
        if not (math.isfinite(a) and math.isfinite(b)):
            out.append(False)
            continue
        dominated = any(j != i and math.isfinite(c) and math.isfinite(d) and c >= a and d >= b and (c > a or d > b)
                        for j, (c, d) in enumerate(pts))
        out.append(not dominated)
    return out


def goodput_speedup_launches(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]], *,
                             paired: bool = False, rel_resolution: float = stats.REL_RESOLUTION) -> dict[str, Any]:
    """:func:`goodput_speedup` from each mode's per-launch goodputs (``base[k]``: the repeats of
    launch k, in repeat order), with ``scope`` (:mod:`lab.analysis.launches`).

    Both modes with two or more launches: ``paired`` (the same repeats in every launch and mode,
    every goodput > 0) gives the per-repeat log ratios averaged per launch round and a t-interval
    across rounds (:func:`lab.analysis.stats.cluster_log_ratio_ci`); otherwise Welch over the
    launch means (:func:`goodput_speedup` on them). Scope "across N launches". One launch:
    :func:`goodput_speedup` over the repeats, scope "within one launch", and no verdict word
    (:data:`lab.analysis.launches.NO_LAUNCH_SPREAD`: no launch-to-launch spread in it).

    :param rel_resolution: as :func:`goodput_speedup`.
    :returns: :func:`goodput_speedup`'s dict plus ``scope`` and ``unit`` (``launch``/``repeat``).
    """
    def launch_means(groups: Sequence[Sequence[float]]) -> list[float]:  # (lab.analysis.launches is no bench dep)
        return [float(v.mean()) for v in map(stats.finite, groups) if v.size]

    nb, no = len(launch_means(base)), len(launch_means(other))
    if nb >= 2 and no >= 2:
        flat = [v for g in (*base, *other) for v in g]
        same = len(base) == len(other) and all(len(b) == len(o) for b, o in zip(base, other))
        if paired and same and all(v is not None and v > 0 for v in flat):
            clusters = {k: [math.log(o / b) for b, o in zip(bs, os_)] for k, (bs, os_) in enumerate(zip(base, other))}
            r, lo, hi = stats.cluster_log_ratio_ci(clusters, rel_resolution=rel_resolution)
            out = {"ratio": r, "ci95_lo": finite_or_none(lo), "ci95_hi": finite_or_none(hi), "verdict": stats.verdict(r, lo, hi),
                   "paired": True}
        else:
            out = goodput_speedup(launch_means(base), launch_means(other), rel_resolution=rel_resolution)
        return {**_noted(out, launch_means(base), launch_means(other), "launch"), "scope": across_launches(min(nb, no)),
                "unit": "launch"}
    out = goodput_speedup([v for g in base for v in g], [v for g in other for v in g], paired=paired,
                          rel_resolution=rel_resolution)
    if out.get("ratio") is not None:  # one launch: no launch spread, no verdict word (issue 32)
        out = {**out, "verdict": None, "note": f"{out['note']}; {NO_LAUNCH_SPREAD}" if out.get("note") else NO_LAUNCH_SPREAD}
    return {**out, "scope": across_launches(1), "unit": "repeat"}


def _noted(s: dict[str, Any], base: Sequence[float], other: Sequence[float], unit: str) -> dict[str, Any]:
    """``s`` with a ``note`` saying why it has no interval (so no verdict word:
    :func:`lab.analysis.estimates.no_verdict_note`), when it has none."""
    if s.get("ci95_lo") is None and "note" not in s:
        why = no_verdict_note(base, other, unit)
        if why:
            s = {**s, "note": why.replace("mean 0", "goodput 0")}
    return s


def goodput_speedup(base: Sequence[float], other: Sequence[float], *, paired: bool = False,
                    rel_resolution: float = stats.REL_RESOLUTION) -> dict[str, Any]:
    """Goodput ratio of ``other`` over ``base`` across repeats with its 95 % interval and verdict.

    ``paired=True`` (the two lists are the same repeats, in the same order, every goodput > 0):
    geometric mean of the per-repeat ratios with :func:`lab.analysis.stats.log_ratio_ci`
    (``"paired": True`` in the result). Otherwise ``mean(other) / mean(base)`` with Welch's
    :func:`lab.analysis.stats.ratio_ci`.

    The one rule of :mod:`lab.analysis.stats`: a baseline goodput of 0 is a zero denominator
    (``ratio`` None, verdict None, a ``note`` with the other mode's goodput), a single repeat per
    mode gives no interval and no verdict word; no spread gives the resolution's interval:
    ``goodput_speedup([4, 4, 4], [3.5, 3.5, 3.5], rel_resolution=1/8)`` is 0.875x with an
    interval of about +-5 % (one request in 8).

    :param rel_resolution: one value's relative resolution: ``1 / requests`` of a repeat for
        goodput counted in whole requests (:func:`lab.analysis.stats.resolution_var`).
    :returns: ``{"ratio", "ci95_lo", "ci95_hi", "verdict", "paired"}`` (bounds None when
        undefined) and ``note`` when there is no interval, saying why.
    """
    if paired and len(base) == len(other) >= 2 and all(v is not None and v > 0 for v in (*base, *other)):
        r, lo, hi = stats.log_ratio_ci([math.log(o / b) for b, o in zip(base, other)], rel_resolution=rel_resolution)
        return _noted({"ratio": r, "ci95_lo": finite_or_none(lo), "ci95_hi": finite_or_none(hi), "verdict": stats.verdict(r, lo, hi),
                       "paired": True}, base, other, "repeat")
    return _noted({**_unpaired(base, other, rel_resolution), "paired": False}, base, other, "repeat")


def _unpaired(base: Sequence[float], other: Sequence[float], rel_resolution: float) -> dict[str, Any]:
    """:func:`goodput_speedup` without pairing (Welch; a zero denominator has no ratio)."""
    b, o = stats.finite(base), stats.finite(other)
    bm = float(b.mean()) if b.size else math.nan
    om = float(o.mean()) if o.size else math.nan
    none = {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": None}
    if not (math.isfinite(bm) and math.isfinite(om)):
        return none
    if bm > 0 and om > 0:
        r, lo, hi = stats.ratio_ci(b, o, rel_resolution=rel_resolution)
        return {"ratio": r, "ci95_lo": finite_or_none(lo), "ci95_hi": finite_or_none(hi), "verdict": stats.verdict(r, lo, hi)}
    if bm == 0 and om == 0:
        return {**none, "note": "goodput 0 in both modes (no request met the SLO): no ratio, no verdict"}
    if bm == 0:
        return {**none, "note": f"baseline goodput 0 (a zero denominator): no ratio, no verdict; the mode's is {om:.3g} req/s"}
    return {**none, "ratio": 0.0, "note": "goodput 0 in the compared mode: no interval on the log scale, no verdict"}


def beats_up_to(verdicts: Mapping[float, str]) -> dict[str, Any]:
    """Summarise goodput verdicts per rate (req/s -> "faster" / "slower" / "not distinguishable").

    :returns: ``{"up_to_req_s": N or None, "beats": [rates], "worse": [rates], "ties": [rates],
        "unjudged": [rates without a verdict word]}``:
        N is the highest rate such that the verdict is "faster" at every measured rate up to and
        including N (so "beats up to N req/s" holds at each of them); None when the lowest rate
        is not "faster".
    """
    rates = sorted(verdicts)
    up_to = None
    for r in rates:
        if verdicts[r] != "faster":
            break
        up_to = r
    return {"up_to_req_s": up_to, "beats": [r for r in rates if verdicts[r] == "faster"],
            "worse": [r for r in rates if verdicts[r] == "slower"],
            "ties": [r for r in rates if verdicts[r] == "not distinguishable"],
            "unjudged": [r for r in rates if not verdicts[r]]}


def slo_text(slo: Mapping[str, Any]) -> str:
    """``"TTFT <= 500 ms, TPOT <= 20 ms"`` (the limits that are set)."""
    parts = [f"{name} <= {slo[k]:g} ms" for k, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))
             if slo.get(k) is not None]
    return ", ".join(parts)


def _rates(rates: Sequence[float], speedups: Mapping[float, Any]) -> str:
    def one(r: float) -> str:
        s = speedups[r]
        text = stats.format_speedup(s.get("ratio"), s.get("ci95_lo"), s.get("ci95_hi"), None) \
            if isinstance(s, Mapping) and s.get("ratio") is not None and math.isfinite(s["ratio"]) else None
        note = s.get("note") if isinstance(s, Mapping) else None
        if note:  # e.g. every request met the SLO in both modes: a ceiling; a zero denominator
            text = f"{text}, {note}" if text else note
        return f"{r:g} req/s" + (f" ({text})" if text else "")
    return ", ".join(one(r) for r in rates)


def beats_sentence(mode: str, baseline: str, verdicts: Mapping[float, Any], slo: Mapping[str, Any]) -> str:
    """The answer's sentence for one speculative mode at the measured rates (module docstring).

    :param verdicts: rate (req/s) -> goodput-speedup verdict, or the whole
        :func:`goodput_speedup` result (then each rate also shows its ratio and interval).
    :param slo: ``{"ttft_ms", "tpot_ms"}``.
    :returns: e.g. ``"eagle3_decode beats baseline up to 4 req/s at this SLO (TTFT <= 500 ms,
        TPOT <= 20 ms) [within one launch]: goodput speedup's 95 % interval above 1 at 4 req/s
        (1.30x [1.10, 1.52]); not distinguishable (interval includes 1) at 12 req/s (1.05x [0.90,
        1.22])."`` (the bracket: the speedups' common ``scope``, when they carry one)
    """
    if not verdicts:
        return f"{mode}: no request rate measured (set bench.request_rates)."
    speedups = verdicts
    b = beats_up_to({r: (v["verdict"] if isinstance(v, Mapping) else v) for r, v in verdicts.items()})
    at = f"at this SLO ({slo_text(slo)})"
    detail = []
    if b["beats"]:
        detail.append(f"goodput speedup's 95 % interval above 1 at {_rates(b['beats'], speedups)}")
    if b["ties"]:
        detail.append(f"not distinguishable (interval includes 1) at {_rates(b['ties'], speedups)}")
    if b["worse"]:
        detail.append(f"worse (interval below 1) at {_rates(b['worse'], speedups)}")
    if b["unjudged"]:  # no verdict word (issue 32): each rate's note says why
        detail.append(f"no verdict at {_rates(b['unjudged'], speedups)}")
    scopes = {v.get("scope") for v in verdicts.values() if isinstance(v, Mapping)} - {None}
    if len(scopes) == 1:  # what the goodput intervals span, e.g. "within one launch"
        at += f" [{scopes.pop()}]"
    if b["up_to_req_s"] is not None:
        head = f"{mode} beats {baseline} up to {b['up_to_req_s']:g} req/s {at}"
    elif b["beats"]:  # beats, but not at every rate below: no "up to"
        head = (f"{mode} beats {baseline} at {', '.join(f'{r:g}' for r in b['beats'])} req/s but not at every "
                f"lower rate {at}")
    elif b["worse"]:
        head = f"{mode} does not beat {baseline} at any measured rate {at}"
    elif b["unjudged"] and not b["ties"]:
        head = f"{mode} against {baseline}: no goodput verdict at any measured rate {at}"
    else:
        head = f"{mode} is not distinguishable from {baseline} at any measured rate {at}"
    return f"{head}: {'; '.join(detail)}."


def _by_launch(sub: Any) -> list[Any]:
    """One mode's rows at one point, per launch (launch order), each sorted by repeat; a frame
    without ``launch`` is one launch."""
    if "launch" not in sub:
        return [sub.sort_values("repeat")]
    return [g.sort_values("repeat") for _, g in sub.groupby("launch", sort=True)]


def _all_good(sub: Any) -> bool:
    """Every repeat's SLO attainment is 1 (every request met the SLO)."""
    return "slo_attainment" in sub and len(sub) > 0 and bool((sub["slo_attainment"] == 1.0).all())


@dataclass
class LoadPart:
    """The comparison's load part (:func:`load_part`).

    :ivar load: ``{"goodput_definition", "slo", "burstiness", "rates", "sentences": {mode: text},
        "beats": {mode: beats_up_to(...)}}``, or None when the results predate open-loop load.
    :ivar points: ``(mode, point) -> PointColumns`` (``request_rate`` and ``speedup_goodput_req_s``
        for the entry; the same and ``goodput_definition`` for the row: :meth:`lab.analysis.comparison.Comparison.merge`).
    :ivar flat: the flat MLflow/DVC metrics ``<mode>.beats_up_to_req_s`` (0 when it beats at no rate).
    :ivar pareto: the Pareto rows, one dict per mode x point: ``mode, point, kind``
        (``concurrency``/``rate``), ``output_tok_s_per_user``, ``output_tok_s`` (tok/s, means over
        repeats), ``on_frontier`` within its mode; None when ``load`` is.
    """

    load: dict[str, Any] | None
    points: dict[tuple[str, str], Any] = field(default_factory=dict)
    flat: dict[str, float] = field(default_factory=dict)
    pareto: list[dict[str, Any]] | None = None


def load_part(comparison: Mapping[str, Any], runs: Any, results: Mapping[str, Mapping[str, Any]],
              baseline: str | None) -> LoadPart:
    """The comparison stage's load section: goodput speedups per point, the Pareto points and
    frontier, and one sentence per speculative mode (the goodput means and intervals are the
    comparison's, :func:`lab.analysis.comparison.summarize`, as :mod:`lab.catalog` declares them).

    For every non-baseline entry of ``comparison["modes"][mode][point]``: ``speedup_goodput_req_s``
    (:func:`goodput_speedup`), and ``request_rate`` at rate points; the same numbers for the
    matching row of ``comparison["rows"]``; the ``load`` section (:class:`LoadPart`). Edits nothing and writes nothing: the
    compare stage (:mod:`lab.pipeline.compare`) writes the Pareto rows to ``reports/pareto.csv``
    and draws them (:func:`lab.report.load_figures.pareto_figures`).

    :param runs: :func:`lab.analysis.comparison.runs_frame` (one row per mode x point x repeat).
    :param comparison: :func:`lab.analysis.comparison.summarize`'s (read: ``modes``, ``rows``).
    :param results: ``mode -> result.json`` (each holds ``load.slo`` written by the bench stage).
    :returns: a :class:`LoadPart` (``load`` None, nothing else, when the results predate open-loop load).
    """

    slo = next((r["load"]["slo"] for r in results.values() if (r.get("load") or {}).get("slo")), None)
    burst = next((r["load"].get("burstiness") for r in results.values() if r.get("load")), None)
    flat: dict[str, float] = {}
    if slo is None or "goodput_req_s" not in runs:  # results from before open-loop load
        return LoadPart(None)
    rows_by = {(r["mode"], r["point"]) for r in comparison["rows"]}
    points: dict[tuple[str, str], PointColumns] = {}
    verdicts: dict[str, dict[float, dict[str, Any]]] = {}  # mode -> rate -> goodput_speedup()
    pareto_rows = []
    for mode, levels in comparison["modes"].items():
        for key, entry in levels.items():
            sub = runs[(runs["mode"] == mode) & (runs["point"] == key)]
            cols = points.setdefault((mode, key), PointColumns())
            rate = sub["request_rate"].dropna().iloc[0] if "request_rate" in sub and sub["request_rate"].notna().any() else None
            if rate is not None:
                cols.entry["request_rate"] = cols.row["request_rate"] = float(rate)
            if baseline and mode != baseline:
                base = runs[(runs["mode"] == baseline) & (runs["point"] == key)]
                if len(base) and "goodput_req_s" in sub:
                    bl, ml = _by_launch(base), _by_launch(sub)
                    # the same seeded arrivals per repeat, launch by launch
                    same = [g["repeat"].tolist() for g in bl] == [g["repeat"].tolist() for g in ml]
                    n_req = max([float(v) for v in (*base.get("requests", []), *sub.get("requests", []))
                                 if v == v and v > 0] or [1.0 / stats.REL_RESOLUTION])
                    s = goodput_speedup_launches([g["goodput_req_s"].tolist() for g in bl],
                                                 [g["goodput_req_s"].tolist() for g in ml], paired=same,
                                                 rel_resolution=1.0 / n_req)  # one request of a repeat's
                    if s.get("ratio") is not None and _all_good(base) and _all_good(sub):
                        ceiling = "every request met the SLO in every repeat of both modes: a ceiling, not a measured tie"
                        s["note"] = f"{ceiling}; {s['note']}" if s.get("note") else ceiling
                    k = speedup_key("goodput_req_s", "per_repeat")
                    cols.entry[k] = s
                    cols.row.update(Ratio.from_dict(s).columns(k))
                    if rate is not None:
                        verdicts.setdefault(mode, {})[float(rate)] = s
            x, y = entry.get("output_tok_s_per_user", {}).get("mean"), entry.get("output_tok_s", {}).get("mean")
            if x is not None and y is not None:
                pareto_rows.append({"mode": mode, "point": key, "kind": "rate" if rate is not None else "concurrency",
                                    "output_tok_s_per_user": x, "output_tok_s": y})
    for mode in comparison["modes"]:
        mine = [p for p in pareto_rows if p["mode"] == mode]
        for p, on in zip(mine, pareto_front([p["output_tok_s_per_user"] for p in mine],
                                            [p["output_tok_s"] for p in mine])):
            p["on_frontier"] = on
    sentences, beats = {}, {}
    measured_rates = "request_rate" in runs and runs["request_rate"].notna().any()
    for mode in comparison["modes"]:
        if baseline is None or mode == baseline or not measured_rates:  # no rate point: no sentence
            continue
        v = verdicts.get(mode, {})
        sentences[mode] = beats_sentence(mode, baseline, v, slo)
        beats[mode] = beats_up_to({r: s["verdict"] for r, s in v.items()})
        flat[f"{mode}.beats_up_to_req_s"] = float(beats[mode]["up_to_req_s"] or 0.0)
    # the definition the bench stage computed goodput with (result.json load.goodput_definition;
    # None: results from before it was recorded), carried into the comparison's files
    versions = {(r.get("load") or {}).get("goodput_definition") for r in results.values()}
    version = versions.pop() if len(versions) == 1 else None
    for row in comparison["rows"]:
        points.setdefault((row["mode"], row["point"]), PointColumns()).row["goodput_definition"] = version
    load = {"goodput_definition": version, "slo": slo, "burstiness": burst, "rates": sorted({r for v in verdicts.values() for r in v}),
            "sentences": sentences, "beats": beats}
    return LoadPart(load, {k: c for k, c in points.items() if k in rows_by or c.entry}, flat, pareto_rows)
