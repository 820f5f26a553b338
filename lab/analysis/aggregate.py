"""One mode's repeats turned into its numbers: per-point means with 95 % intervals, the flat
headline, GPU telemetry per point, and the emulator's ground truth aggregated the same way.

Input: the per-(point, repeat) summaries that :func:`lab.measure.point.measure_point` returns
(``runs.json``) and the request records (``requests.jsonl``). Output: the ``levels``,
``headline`` and ``ground_truth`` sections of ``result.json``. Pure functions, no I/O except
reading the emulator's ground-truth file; :func:`lab.pipeline.bench.run_mode` calls them once
the engine has stopped (and on failure, for ``levels_partial``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab import catalog
from lab.analysis.estimates import group_estimates
from lab.measure.point import level_key
from lab.measure.request_record import RequestRecord, as_records

__all__ = ["headline_metrics", "levels_table", "aggregate_point", "aggregate_levels", "telemetry_level", "headline",
           "ground_truth"]


def headline_metrics() -> list[str]:
    """The per-run metrics aggregated over repeats (mean and 95 % interval) into result.json's
    ``levels`` and shown as headlines: those :mod:`lab.catalog` shows in ``result``."""
    return [m.name for m in catalog.shown_in(catalog.RESULT)]


def aggregate_point(runs: list[dict[str, Any]], level: int, point: str | None = None) -> dict[str, Any]:
    """Mean and 95 % interval over the repeats of one level (and point key), per headline metric
    (:func:`lab.analysis.estimates.group_estimates`, the rule :mod:`lab.catalog` declares:
    Student-t; exact Poisson for counts).

    :param runs: per-repeat summaries (``runs.json`` rows) of any points.
    :param level: concurrency; :param point: point key (default: the primary ``c<level>``).
    :returns: ``{"concurrency", "repeats", <metric>: {"mean", "ci95_lo", "ci95_hi", "values"},
        "token_accounting_ok", "crosscheck_flags", "gpu_telemetry", "requests", "errors",
        "degenerate_output"}`` (``context_tokens``/``max_new_tokens`` when the rows have them).
    """
    out: dict[str, Any] = {"concurrency": level, "repeats": 0}
    rows = [r for r in runs if r["concurrency"] == level and r.get("point", level_key(level)) == (point or level_key(level))]
    if rows and "context_tokens" in rows[0]:
        out.update(context_tokens=rows[0]["context_tokens"], max_new_tokens=rows[0]["max_new_tokens"])
    out["repeats"] = len(rows)
    ests = group_estimates(rows, by=(), metrics=headline_metrics(), launch=None, keep_values=True)  # t; Poisson for counts
    out.update({key: est.to_dict() for key, est in ests.get((), {}).items()})
    out["token_accounting_ok"] = all(r.get("token_accounting_ok", True) for r in rows)
    out["crosscheck_flags"] = [f"repeat {r.get('repeat')}: {f}" for r in rows
                               for f in (r.get("crosscheck") or {}).get("flags", [])]
    out["gpu_telemetry"] = telemetry_level([r.get("gpu_telemetry") for r in rows])
    # Errored requests are counted, never dropped: totals over the level's repeats.
    out["requests"] = sum(r.get("requests", 0) for r in rows)
    out["errors"] = sum(r.get("errors", 0) for r in rows)
    out["degenerate_output"] = any((r.get("hygiene") or {}).get("degenerate", {}).get("degenerate") for r in rows)
    return out


def aggregate_levels(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``point key -> aggregate_point(...)`` for every point in ``runs``, in measurement order
    (the first is the headline's point). Empty when ``runs`` is."""
    return {p: aggregate_point(runs, c, p) for p, c in dict.fromkeys((r["point"], r["concurrency"]) for r in runs)}


def telemetry_level(summaries: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Per GPU over the level's repeats: mean SM clock (MHz), lowest clock/max ratio, mean
    utilization (%), mean power (W), peak memory (GiB); or the "no GPU telemetry" note.

    :param summaries: :meth:`lab.engine.telemetry.GpuSampler.summary` of each repeat (or None).
    """
    got = [s for s in summaries if s and s.get("available")]
    if not got:
        notes = {s.get("note") for s in summaries if s}
        return {"available": False, "note": "; ".join(sorted(n for n in notes if n)) or "no GPU telemetry"}
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    for s in got:
        for g in s["gpus"]:
            per_gpu.setdefault(g["gpu"], []).append(g)

    def agg(rows, key, fn):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return fn(vals) if vals else None

    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"available": True, "gpus": [
        {"gpu": i, "name": rows[0].get("name"), "sm_clock_mhz_mean": agg(rows, "sm_clock_mhz_mean", mean),
         "sm_clock_frac_of_max_min": agg(rows, "sm_clock_frac_of_max", min),
         "gpu_util_pct_mean": agg(rows, "gpu_util_pct_mean", mean), "power_w_mean": agg(rows, "power_w_mean", mean),
         "mem_used_gib_max": agg(rows, "mem_used_gib_max", max)} for i, rows in sorted(per_gpu.items())]}


def headline(levels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Flat DVC/MLflow headline: each metric's mean at the first point (the lowest
    concurrency), and ``<point>.<metric>`` per point.

    :param levels: :func:`aggregate_levels` output. :returns: ``{name: float}``.
    """
    head: dict[str, Any] = {}
    first = True
    names = headline_metrics()
    for key, agg in levels.items():
        for m in names:
            if m in agg:
                head[f"{key}.{m}"] = agg[m]["mean"]
                if first:
                    head[m] = agg[m]["mean"]
        first = False
    return head


def ground_truth(truth_path: Path, records: Sequence[RequestRecord | Mapping[str, Any]]) -> dict[str, Any]:
    """What the emulator actually delivered, aggregated exactly like the client's figures.

    Per (point, repeat): the ground-truth counterpart of every metric :mod:`lab.catalog` gives
    one (:meth:`lab.emulator.truth.Truth.run_metrics` over the repeat's requests, phase means
    over its window, first send to last end); then the mean over repeats. Read from the
    emulator's side file (:mod:`lab.emulator.truth`) after the run; the client never reads it.

    :param truth_path: the emulator's ``ground_truth.jsonl``.
    :param records: the run's request records (:class:`lab.measure.request_record.RequestRecord`,
        or ``requests.jsonl`` rows).
    :returns: ``{<point>: {"decode_tok_s", "accept_length", "verify_ms"...}, "fidelity": {...}}``.
    """
    import statistics

    from lab.emulator.truth import load_truth

    truth = load_truth(truth_path)
    records = as_records(records)
    out: dict[str, Any] = {}
    points = list(dict.fromkeys(r.point or level_key(r.concurrency) for r in records))
    for point in points:
        per_repeat: list[dict[str, float | None]] = []
        mine = [r for r in records if (r.point or level_key(r.concurrency)) == point]
        for rep in sorted({r.repeat for r in mine}):
            recs = [r for r in mine if r.repeat == rep and r.ok and r.rid in truth.requests]
            if not recs:
                continue
            per_repeat.append(truth.run_metrics([r.rid for r in recs], t0=min(r.t_send for r in recs),
                                                t1=max(r.t_end for r in recs)))
        if per_repeat:
            out[point] = {
                k: (statistics.fmean(vals) if (vals := [p[k] for p in per_repeat if p[k] is not None]) else None)
                for k in per_repeat[0]
            }
    out["fidelity"] = {k: vars(f) for k, f in truth.fidelity().items()}
    return out


def levels_table(result: dict[str, Any]):
    """A pandas table of one mode's results: one column per point, one row per metric, each
    cell ``mean [lo, hi]`` (the 95 % interval; the mean alone with one repeat).

    Emulator runs get ``truth_*`` rows: what the emulator actually delivered, for the
    headline metrics with a ground-truth counterpart (:mod:`lab.catalog`).

    :param result: ``result.json`` content (:meth:`lab.measure.result.ModeResult.to_dict`); shown by ``bench.ipynb``.
    :returns: ``pandas.DataFrame`` indexed by metric name, one column per point key.
    """
    import pandas as pd

    rows = []
    names = headline_metrics()
    for key, agg in result.get("levels", {}).items():
        row: dict[str, Any] = {"point": key, "repeats": agg["repeats"]}
        for m in names:
            if m in agg:
                v = agg[m]
                row[m] = (f"{v['mean']:.2f} [{v['ci95_lo']:.2f}, {v['ci95_hi']:.2f}]"
                          if v["ci95_lo"] == v["ci95_lo"] else f"{v['mean']:.2f}")
        row["token_accounting_ok"] = agg.get("token_accounting_ok")
        row["degenerate_output"] = agg.get("degenerate_output")
        truth = result.get("ground_truth", {}).get(key, {})
        for m in names:
            if truth.get(m) is not None:
                row[f"truth_{m}"] = round(truth[m], 2)
        rows.append(row)
    return pd.DataFrame(rows).set_index("point").T
