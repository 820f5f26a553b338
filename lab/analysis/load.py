"""Load and SLOs: goodput per run, goodput speedups, the Pareto frontier, "beats up to N req/s".

Definitions (one place; the bench stage and the comparison both call these):

- A request is **good** when it succeeded and meets every limit of ``bench.slo``: its
  ``ttft_ms`` <= ``slo.ttft_ms`` and its ``tpot_ms`` <= ``slo.tpot_ms`` (per request, as
  :func:`lab.measure.records.request_metrics` defines them; a 1-token request has TPOT 0).
  This is vLLM's goodput rule (``vllm/benchmarks/serve.py`` ``calculate_metrics``:
  ``is_good_req = all(s >= r ...)`` over the SLO'd per-request metrics, TPOT 0 when
  ``output_len <= 1``), also AIPerf's ``goodput`` (requests meeting every ``--goodput``
  constraint per second).
- ``goodput_req_s`` = good requests / a duration; ``goodput_tok_s`` = output tokens of the
  good requests / the same duration (the token form). At a closed-loop point the duration is
  the run's measured window (vLLM: ``request_goodput = good_completed / dur_s``). At an
  open-loop rate point it is the offered duration ``n / rate`` (so goodput = rate x SLO
  attainment, the rate the system serves within the SLO at that offered load, as DistServe
  (Zhong et al., OSDI 2024) reads goodput). Why not vLLM's measured duration there: with a
  long run it is the arrival span, but with the few requests of a repeat the drain after the
  last arrival dominates it, and a mode that drains faster "beats" the baseline while both
  meet the SLO for every request (measured on the emulator with the default params: 1.20x
  [1.18, 1.22] at r12, both at 100 % attainment).
- ``slo_attainment`` = good / requests sent (errors count as not good);
  ``request_throughput_req_s`` = ok requests / measured window.
- ``output_tok_s_per_user``: mean over ok requests of completion_tokens / e2e seconds (the
  tokens per second one user sees, TTFT included): the x axis of the Pareto figure, whose y
  is the run's total ``output_tok_s`` (tokens/s per user against total tokens/s: the
  throughput-interactivity trade-off inference teams plot for each configuration).
- ``p99_schedule_lag_ms`` (rate points): p99 of ``t_send - t_scheduled``: how far behind
  the arrival schedule requests left the client (a concurrency cap's queueing included;
  the client's own share is ``dispatch_delay_ms``, flagged by :mod:`lab.measure.hygiene`).

Comparison: per rate point, goodput over repeats with a Student-t interval and the speedup
``goodput(mode) / goodput(baseline)`` **paired by repeat**: repeat k of every mode replays the
same seeded arrivals (``bench.seed + k``), so the repeat is the matched unit, as the prompt is
in :mod:`lab.analysis.paired`; the geometric mean of the per-repeat ratios gets a one-sample
t-interval (:func:`lab.analysis.stats.log_ratio_ci`), which removes the schedule-to-schedule
spread that both modes share (Welch's unpaired :func:`lab.analysis.stats.ratio_ci` when the
repeats do not match), and :func:`lab.analysis.stats.verdict` reads it. A mode **beats** the baseline at a rate when that
interval lies above 1 ("faster"), is **worse** when it lies below 1, and is **not distinguishable** otherwise.
"Beats up to N req/s": N is the highest measured rate where it beats the baseline with no
worse rate at or below it (:func:`beats_up_to`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lab.analysis import stats
from lab.analysis.estimates import Ratio
from lab.catalog import speedup_key
from lab.measure.records import request_metrics

__all__ = ["LOAD_METRICS", "load_settings", "is_good", "run_load_metrics", "pareto_front", "goodput_speedup", "beats_up_to",
           "beats_sentence", "slo_text", "add_load"]

#: Per-run metrics this module adds (aggregated over repeats like the other headline metrics).
LOAD_METRICS = ("goodput_req_s", "goodput_tok_s", "slo_attainment", "request_throughput_req_s",
                "output_tok_s_per_user", "p99_schedule_lag_ms")


def load_settings(bench: Any) -> dict[str, Any]:
    """What ``result.json`` records of a mode's open-loop settings (``bench`` is
    :class:`lab.config.BenchParams`): ``{"slo": {"ttft_ms", "tpot_ms"}, "burstiness",
    "rate_max_concurrency", "request_rates"}`` (ms, gamma shape, requests, req/s); the compare
    stage judges goodput by this ``slo``."""
    return {"slo": bench.slo.model_dump(), "burstiness": bench.burstiness,
            "rate_max_concurrency": bench.rate_max_concurrency, "request_rates": list(bench.request_rates)}


def is_good(ttft_ms: float | None, tpot_ms: float | None, slo: Any) -> bool:
    """Whether one request meets every set limit of ``slo`` (``ttft_ms``, ``tpot_ms`` attributes or
    keys, ms; None = no limit). A missing measurement under a set limit is not good.
    ``tpot_ms`` None for a 1-token request counts as 0 (vLLM)."""
    get = (lambda k: slo.get(k)) if isinstance(slo, Mapping) else (lambda k: getattr(slo, k))
    lim_ttft, lim_tpot = get("ttft_ms"), get("tpot_ms")
    if lim_ttft is not None and (ttft_ms is None or ttft_ms > lim_ttft):
        return False
    if lim_tpot is not None and (tpot_ms if tpot_ms is not None else 0.0) > lim_tpot:
        return False
    return True


def run_load_metrics(records: Sequence[Mapping[str, Any]], wall_s: float, slo: Any,
                     rate_req_s: float | None = None) -> dict[str, Any]:
    """:data:`LOAD_METRICS` of one run (module docstring for the definitions).

    :param records: client records of the run (:mod:`lab.measure.client`).
    :param wall_s: the run's measured window, seconds (> 0; :func:`lab.measure.records.measured_window_s`).
    :param slo: ``bench.slo`` (or a mapping with ``ttft_ms``/``tpot_ms``).
    :param rate_req_s: the offered rate of an open-loop point (None: a closed-loop point);
        goodput then divides by ``len(records) / rate_req_s`` instead of ``wall_s``.
    :returns: ``{metric: value}``; ``p99_schedule_lag_ms`` None without ``t_scheduled``,
        ``output_tok_s_per_user`` None without an ok request.
    :raises ValueError: ``wall_s`` not positive.
    """
    if not wall_s or wall_s <= 0:
        raise ValueError(f"wall_s={wall_s}: must be a positive duration in seconds")
    if rate_req_s is not None and not rate_req_s > 0:
        raise ValueError(f"rate_req_s={rate_req_s}: must be > 0 requests/s")
    window = wall_s
    good = good_tok = ok = 0
    per_user: list[float] = []
    for r in records:
        m = request_metrics(r)
        if not m["ok"]:
            continue
        ok += 1
        n = m["completion_tokens"] or 0
        if m["e2e_ms"]:
            per_user.append(n / (m["e2e_ms"] / 1e3))
        tpot = m["tpot_ms"] if n > 1 else 0.0
        if m["ttft_ms"] is not None and is_good(m["ttft_ms"], tpot, slo):
            good += 1
            good_tok += n
    if rate_req_s is not None and records:
        wall_s = len(records) / rate_req_s  # the offered duration (module docstring)
    lags = [(r["t_send"] - r["t_scheduled"]) * 1e3 for r in records
            if r.get("t_scheduled") is not None and r.get("t_send") is not None]
    return {"goodput_req_s": good / wall_s, "goodput_tok_s": good_tok / wall_s,
            "slo_attainment": good / len(records) if records else None,
            "request_throughput_req_s": ok / window,
            "output_tok_s_per_user": float(np.mean(per_user)) if per_user else None,
            "p99_schedule_lag_ms": float(np.percentile(lags, 99)) if lags else None}


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


def goodput_speedup(base: Sequence[float], other: Sequence[float], *, paired: bool = False) -> dict[str, Any]:
    """Goodput ratio of ``other`` over ``base`` across repeats with its 95 % interval and verdict.

    ``paired=True`` (the two lists are the same repeats, in the same order, every goodput > 0):
    geometric mean of the per-repeat ratios with :func:`lab.analysis.stats.log_ratio_ci`
    (``"paired": True`` in the result). Otherwise ``mean(other) / mean(base)`` with Welch's
    :func:`lab.analysis.stats.ratio_ci`.

    :func:`lab.analysis.stats.ratio_ci` needs positive means; goodput can be 0 (no request met
    the SLO). Then: both 0 -> a tie (``ratio`` None, verdict "not distinguishable": neither
    meets the SLO); only the baseline 0 -> "faster" when the other's t-interval lower bound is
    above 0, only the other 0 -> "slower" when the baseline's is (``ratio`` inf / 0).

    :returns: ``{"ratio", "ci95_lo", "ci95_hi", "verdict", "paired"}`` (bounds None when undefined).
    """
    fin = lambda v: v if v is not None and math.isfinite(v) else None  # noqa: E731
    if paired and len(base) == len(other) >= 2 and all(v is not None and v > 0 for v in (*base, *other)):
        r, lo, hi = stats.log_ratio_ci([math.log(o / b) for b, o in zip(base, other)])
        return {"ratio": r, "ci95_lo": fin(lo), "ci95_hi": fin(hi), "verdict": stats.verdict(r, lo, hi), "paired": True}
    return {**_unpaired(base, other), "paired": False}


def _unpaired(base: Sequence[float], other: Sequence[float]) -> dict[str, Any]:
    """:func:`goodput_speedup` without pairing (Welch; the zero cases)."""
    b, o = stats.finite(base), stats.finite(other)
    bm = float(b.mean()) if b.size else math.nan
    om = float(o.mean()) if o.size else math.nan
    if not (math.isfinite(bm) and math.isfinite(om)):
        return {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": "not distinguishable"}
    if bm > 0 and om > 0:
        r, lo, hi = stats.ratio_ci(b, o)
        fin = lambda v: v if math.isfinite(v) else None  # noqa: E731
        return {"ratio": r, "ci95_lo": fin(lo), "ci95_hi": fin(hi), "verdict": stats.verdict(r, lo, hi)}
    if bm == 0 and om == 0:
        return {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": "not distinguishable"}
    pos, lo_pos = (o, om) if bm == 0 else (b, bm)
    _, lo, _ = stats.mean_ci(pos)
    sure = math.isfinite(lo) and lo > 0
    if bm == 0:
        return {"ratio": math.inf, "ci95_lo": None, "ci95_hi": None,
                "verdict": "faster" if sure else "not distinguishable"}
    return {"ratio": 0.0, "ci95_lo": None, "ci95_hi": None, "verdict": "slower" if sure else "not distinguishable"}


def beats_up_to(verdicts: Mapping[float, str]) -> dict[str, Any]:
    """Summarise goodput verdicts per rate (req/s -> "faster" / "slower" / "not distinguishable").

    :returns: ``{"up_to_req_s": N or None, "beats": [rates], "worse": [rates], "ties": [rates]}``:
        N is the highest rate with "faster" such that no rate at or below it is "slower";
        None when there is none.
    """
    rates = sorted(verdicts)
    up_to = None
    for r in rates:
        if verdicts[r] == "slower":
            break
        if verdicts[r] == "faster":
            up_to = r
    return {"up_to_req_s": up_to, "beats": [r for r in rates if verdicts[r] == "faster"],
            "worse": [r for r in rates if verdicts[r] == "slower"],
            "ties": [r for r in rates if verdicts[r] == "not distinguishable"]}


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
        if text and s.get("ci95_lo") == s.get("ci95_hi") == s.get("ratio") == 1.0:
            text += ", the same goodput in every repeat"  # e.g. both met the SLO for every request
        return f"{r:g} req/s" + (f" ({text})" if text else "")
    return ", ".join(one(r) for r in rates)


def beats_sentence(mode: str, baseline: str, verdicts: Mapping[float, Any], slo: Mapping[str, Any]) -> str:
    """The answer's sentence for one speculative mode at the measured rates (module docstring).

    :param verdicts: rate (req/s) -> goodput-speedup verdict, or the whole
        :func:`goodput_speedup` result (then each rate also shows its ratio and interval).
    :param slo: ``{"ttft_ms", "tpot_ms"}``.
    :returns: e.g. ``"eagle3_decode beats baseline up to 4 req/s at this SLO (TTFT <= 500 ms,
        TPOT <= 20 ms): goodput speedup's 95 % interval above 1 at 4 req/s (1.30x [1.10, 1.52]); not
        distinguishable (interval includes 1) at 12 req/s (1.05x [0.90, 1.22])."``
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
    if b["up_to_req_s"] is not None:
        head = f"{mode} beats {baseline} up to {b['up_to_req_s']:g} req/s {at}"
    elif b["beats"]:  # beats only above a rate where it is worse: no "up to"
        head = f"{mode} beats {baseline} only above a rate where it is worse {at}"
    elif b["worse"]:
        head = f"{mode} does not beat {baseline} at any measured rate {at}"
    else:
        head = f"{mode} is not distinguishable from {baseline} at any measured rate {at}"
    return f"{head}: {'; '.join(detail)}."


def add_load(summary: dict[str, Any], runs: Any, results: Mapping[str, Mapping[str, Any]],
             baseline: str | None) -> tuple[dict[str, float], list[dict[str, Any]] | None]:
    """The comparison stage's load section: goodput speedups per point, the Pareto points and
    frontier, and one sentence per speculative mode (the goodput means and intervals are the
    comparison's, :func:`lab.analysis.compare.summarize`, as :mod:`lab.catalog` declares them).

    Adds to every non-baseline ``summary["modes"][mode][point]`` entry
    ``speedup_goodput_req_s`` (:func:`goodput_speedup`) and ``request_rate`` at rate points; the
    same numbers to the matching ``summary["rows"]``; and ``summary["load"] = {"slo", "burstiness", "rates",
    "sentences": {mode: text}, "beats": {mode: beats_up_to(...)}}``. Writes nothing: the
    compare stage (:mod:`lab.pipeline.compare`) writes the Pareto rows to ``reports/pareto.csv``
    and draws them (:func:`lab.report.load_figures.pareto_figures`).

    :param runs: :func:`lab.analysis.compare.runs_frame` (one row per mode x point x repeat).
    :param results: ``mode -> result.json`` (each holds ``load.slo`` written by the bench stage).
    :returns: ``(flat, pareto)``: the flat MLflow/DVC metrics ``<mode>.beats_up_to_req_s`` (0 when
        it beats at no rate); the Pareto rows (one dict
        per mode x point: ``mode, point, kind`` (``concurrency``/``rate``),
        ``output_tok_s_per_user``, ``output_tok_s`` (tok/s, means over repeats), ``on_frontier``
        within its mode), None when the results predate open-loop load (``summary["load"]`` None).
    """
    slo = next((r["load"]["slo"] for r in results.values() if (r.get("load") or {}).get("slo")), None)
    burst = next((r["load"].get("burstiness") for r in results.values() if r.get("load")), None)
    flat: dict[str, float] = {}
    if slo is None or "goodput_req_s" not in runs:  # results from before open-loop load
        summary["load"] = None
        return flat, None
    rows_by = {(r["mode"], r["point"]): r for r in summary["rows"]}
    verdicts: dict[str, dict[float, dict[str, Any]]] = {}  # mode -> rate -> goodput_speedup()
    pareto_rows = []
    for mode, points in summary["modes"].items():
        for key, entry in points.items():
            sub = runs[(runs["mode"] == mode) & (runs["point"] == key)]
            row = rows_by.get((mode, key), {})
            rate = sub["request_rate"].dropna().iloc[0] if "request_rate" in sub and sub["request_rate"].notna().any() else None
            if rate is not None:
                entry["request_rate"] = row["request_rate"] = float(rate)
            if baseline and mode != baseline:
                base = runs[(runs["mode"] == baseline) & (runs["point"] == key)].sort_values("repeat")
                if len(base) and "goodput_req_s" in sub:
                    mine = sub.sort_values("repeat")
                    same = base["repeat"].tolist() == mine["repeat"].tolist()  # same seeded arrivals per repeat
                    s = goodput_speedup(base["goodput_req_s"].tolist(), mine["goodput_req_s"].tolist(),
                                        paired=same)
                    k = speedup_key("goodput_req_s", "per_repeat")
                    entry[k] = s
                    row.update(Ratio.from_dict(s).columns(k))
                    if rate is not None:
                        verdicts.setdefault(mode, {})[float(rate)] = s
            x, y = entry.get("output_tok_s_per_user", {}).get("mean"), entry.get("output_tok_s", {}).get("mean")
            if x is not None and y is not None:
                pareto_rows.append({"mode": mode, "point": key, "kind": "rate" if rate is not None else "concurrency",
                                    "output_tok_s_per_user": x, "output_tok_s": y})
    for mode in summary["modes"]:
        mine = [p for p in pareto_rows if p["mode"] == mode]
        for p, on in zip(mine, pareto_front([p["output_tok_s_per_user"] for p in mine],
                                            [p["output_tok_s"] for p in mine])):
            p["on_frontier"] = on
    sentences, beats = {}, {}
    measured_rates = "request_rate" in runs and runs["request_rate"].notna().any()
    for mode in summary["modes"]:
        if baseline is None or mode == baseline or not measured_rates:  # no rate point: no sentence
            continue
        v = verdicts.get(mode, {})
        sentences[mode] = beats_sentence(mode, baseline, v, slo)
        beats[mode] = beats_up_to({r: s["verdict"] for r, s in v.items()})
        flat[f"{mode}.beats_up_to_req_s"] = float(beats[mode]["up_to_req_s"] or 0.0)
    summary["load"] = {"slo": slo, "burstiness": burst, "rates": sorted({r for v in verdicts.values() for r in v}),
                       "sentences": sentences, "beats": beats}
    return flat, pareto_rows
