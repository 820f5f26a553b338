"""Paired per-prompt speedup: each prompt's speed ratio between a mode and the baseline.

Every mode streams the same requests: for a (point, repeat) the prompt order comes from
``lab.workload.dataset.workload(prompts, n, seed + repeat)`` and the output lengths from
``lab.workload.dataset.output_lengths(..., seed + repeat)``, so request ``i`` of repeat ``r`` at
point ``p`` is the same prompt with the same length in every mode (its ``rid`` ends in
``-r<r>-<i>``, its record carries ``prompt_index`` and ``repeat``). This module matches
those requests across two modes and compares them prompt by prompt.

Method (per point, for the per-request ``decode_tok_s`` of :func:`lab.measure.records.request_metrics`):

1. For every matched request pair (same launch, point, repeat, slot ``i`` and ``prompt_index``,
   both ok): ``d = log(decode_tok_s_other / decode_tok_s_base)``.
2. The unit of the interval, by what the pairs share (:data:`UNITS`):

   - ``launch`` (both modes measured in two or more launches, ``bench.launches``): every request
     of one launch shares that launch's conditions (clocks, memory layout, graph capture, on
     the emulator the machine's load), so launch k of the mode against launch k of the baseline
     is one unit: its mean over prompts of each prompt's mean ``d``, and the interval is
     Student-t across launches (:func:`lab.analysis.stats.cluster_log_ratio_ci`, ``launches - 1``
     degrees of freedom). Scope "across N launches".
   - ``repeat`` (one launch, concurrency above 1 or a rate point): the requests of one repeat
     share batch iterations, so their ratios move together; the unit is the repeat (mean ``d``
     of its requests), ``repeats - 1`` degrees of freedom, not ``prompts - 1``. Scope "within one
     launch".
   - ``prompt`` (one launch, concurrency 1: one request at a time): per prompt the mean of its
     ``d`` over the repeats it appeared in (the log of the geometric mean of its ratios), then a
     one-sample Student-t interval across prompts (:func:`lab.analysis.stats.log_ratio_ci`).
     Scope "within one launch".

3. The ratio is the exponentiated mean over units: a geometric-mean speedup with its 95 % interval.

What pairing buys: a prompt that is slow to decode (long, hard to draft) is slow in both
modes, so prompt-to-prompt variation cancels in ``d``; the interval is about the modes, not
the prompt mix. What it does not cover within one launch: a shift shared by every request of
that launch. Neither does the per-repeat speedup of :func:`lab.analysis.stats.ratio_ci` over one
launch's repeats; only launches do (``bench.launches >= 2``), or, with one launch, the spread of
earlier launches of the same configuration that the regression sentinel found
(:func:`lab.analysis.launches.borrow`, scope "launch spread borrowed from N earlier launches").
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from lab.analysis import stats
from lab.analysis.estimates import WITHIN_ONE_LAUNCH, PointColumns, Ratio, across_launches
from lab.catalog import speedup_key
from lab.measure.records import request_metrics
from lab.measure.request_record import RequestRecord

__all__ = ["load_request_speeds", "paired_speedup", "paired_part", "request_slot", "pair_unit", "PAIRED_METRIC",
           "METHOD", "UNITS"]

#: The per-request metric compared (``output_tok_s`` exists only per run, not per request).
PAIRED_METRIC = "decode_tok_s"
#: What the interval's unit is, by ``unit`` (module docstring, step 2).
UNITS = {
    "prompt": "per prompt: geometric mean over repeats of decode_tok_s ratios (same prompt, repeat, slot and output "
              "length in both modes); Student-t 95 % interval across prompts",
    "repeat": "per repeat: mean log ratio of its matched requests (they share batch iterations); Student-t 95 % "
              "interval across repeats",
    "launch": "per launch round: mean over prompts of each prompt's mean log ratio in that launch; Student-t 95 % "
              "interval across launches",
}
METHOD = UNITS["prompt"]

_SLOT = re.compile(r"-r(\d+)-(\d+)$")


def request_slot(rid: Any) -> int | None:
    """A measured request's position in its (point, repeat) list: ``<slot>`` of the rid
    suffix ``-r<repeat>-<slot>`` (:func:`lab.pipeline.bench.run_mode` names them so), or None."""
    m = _SLOT.search(str(rid or ""))
    return int(m.group(2)) if m else None


def load_request_speeds(path: str | Path, launch: int = 1) -> list[dict[str, Any]]:
    """Per measured request of ``requests.jsonl``: ``{"launch", "point", "repeat", "slot",
    "prompt_index", "ok", "request_rate", "decode_tok_s"}`` (``request_rate`` None at a
    closed-loop point); warm-up requests (no ``point``) are skipped.
    ``launch`` is the launch the file belongs to (``bench.launches``; recorded on each row).

    ``slot`` is the request's position in its (point, repeat) list, parsed from the
    ``rid`` suffix ``-r<repeat>-<slot>`` (:func:`lab.measure.point.measure_point` names them so).

    :returns: ``[]`` when the file is missing.
    """
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = RequestRecord.from_json(json.loads(line))
            if rec.point is None:
                continue
            speed = getattr(request_metrics(rec), PAIRED_METRIC) if rec.ok else None
            out.append({"launch": launch, "point": rec.point, "repeat": rec.repeat,
                        "slot": request_slot(rec.rid),
                        "prompt_index": rec.prompt_index, "ok": bool(rec.ok),
                        "request_rate": rec.request_rate, PAIRED_METRIC: speed})
    return out


def pair_unit(concurrency: int | None, rate_point: bool, launches: int) -> str:
    """The unit of :func:`paired_speedup`'s interval (module docstring, step 2): ``"launch"`` with
    two or more launches, else ``"prompt"`` at closed-loop concurrency 1, else ``"repeat"``."""
    if launches >= 2:
        return "launch"
    return "prompt" if concurrency == 1 and not rate_point else "repeat"


def paired_speedup(base: Iterable[Mapping[str, Any]], other: Iterable[Mapping[str, Any]], point: str,
                   confidence: float = 0.95, prompts: Collection[Any] | None = None, *,
                   unit: str = "prompt") -> dict[str, Any]:
    """The paired per-prompt speedup ``other / base`` at one point.

    :param base, other: rows of :func:`load_request_speeds` (any points and launches; ``point`` selects).
    :param point: e.g. ``"c1"``.
    :param prompts: only these ``prompt_index`` values (e.g. one task category's prompts,
        :mod:`lab.analysis.taskmix`); None: every prompt.
    :param unit: a key of :data:`UNITS` (:func:`pair_unit` picks it for a point): what one
        independent unit of the interval is; ``"launch"`` falls back to ``"repeat"`` when the
        matched pairs come from fewer than two launches.
    :returns: ``{"ratio", "ci95_lo", "ci95_hi", "verdict", "scope", "unit", "n_units", "n_prompts",
        "n_pairs", "unmatched", "method"}``; ``ratio`` is None when no request pair matched, the
        bounds None with fewer than 2 units (or no spread between them). ``unmatched`` counts
        requests of either mode without a partner (failed, or a different prompt in that slot:
        the workloads differ, and the paired figure then covers only the matched part).
    :raises ValueError: an unknown ``unit``.
    """
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: use one of {sorted(UNITS)}")

    def index(rows):
        return {(r.get("launch", 1), r["repeat"], r["slot"]): r for r in rows
                if r["point"] == point and r["slot"] is not None and (prompts is None or r["prompt_index"] in prompts)}

    b, o = index(base), index(other)
    pairs: list[tuple[int, Any, Any, float]] = []  # (launch, repeat, prompt, d)
    unmatched = 0
    for key in b.keys() | o.keys():
        rb, ro = b.get(key), o.get(key)
        vb, vo = (rb or {}).get(PAIRED_METRIC), (ro or {}).get(PAIRED_METRIC)
        if (rb is None or ro is None or rb["prompt_index"] != ro["prompt_index"]
                or not vb or not vo or vb <= 0 or vo <= 0):
            unmatched += 1
            continue
        pairs.append((key[0], key[1], rb["prompt_index"], math.log(vo / vb)))
    launches = sorted({p[0] for p in pairs})
    if unit == "launch" and len(launches) < 2:
        unit = "repeat"
    clusters: dict[Any, list[float]] = defaultdict(list)
    if unit == "launch":  # per launch: the mean over prompts of each prompt's mean log ratio
        per: dict[tuple[int, Any], list[float]] = defaultdict(list)
        for la, _, pr, d in pairs:
            per[(la, pr)].append(d)
        for (la, _), ds in per.items():
            clusters[la].append(sum(ds) / len(ds))
    else:
        for la, rep, pr, d in pairs:
            clusters[(la, rep) if unit == "repeat" else pr].append(d)
    out: dict[str, Any] = {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": None,
                           "scope": across_launches(len(launches)) if unit == "launch" else WITHIN_ONE_LAUNCH,
                           "unit": unit, "n_units": len(clusters), "n_prompts": len({p[2] for p in pairs}),
                           "n_pairs": len(pairs), "unmatched": unmatched, "method": UNITS[unit]}
    if not pairs:
        return out
    ratio, lo, hi = stats.cluster_log_ratio_ci(clusters, confidence)
    finite = math.isfinite(lo) and math.isfinite(hi)
    out.update(ratio=ratio, ci95_lo=lo if finite else None, ci95_hi=hi if finite else None,
               verdict=stats.verdict(ratio, lo, hi))
    if not finite:
        out["note"] = f"one {unit} only: no spread, no interval, no verdict"
    return out


def paired_part(modes: Mapping[str, Mapping[str, Mapping[str, Any]]], results_dir: str | Path, baseline: str | None, *,
                launches: int = 1, results: Mapping[str, Mapping[str, Any]] | None = None,
                launch_prior: Any = None) -> dict[tuple[str, str], Any]:
    """The paired per-prompt speedup of every non-baseline ``(mode, point)`` of ``modes`` (the
    comparison's ``mode -> point -> entry``), as :class:`lab.analysis.comparison.PointColumns`:
    ``paired_speedup_decode_tok_s`` for the entry and its flat columns (``paired_speedup_decode_tok_s``,
    ``..._ci95_lo``, ``..._ci95_hi``, ``paired_verdict_decode_tok_s``, ``..._scope``,
    ``paired_n_prompts``) for the row (:meth:`lab.analysis.comparison.Comparison.merge`); reads every launch's
    ``requests.jsonl`` (:func:`lab.analysis.launches.launch_dirs`). The unit is
    :func:`pair_unit`'s for the point; with one launch and the sentinel's spread of earlier
    launches for both modes in ``results`` (mode -> launch 1's ``result.json``), the interval is
    :func:`lab.analysis.launches.borrow`'s; without it the verdict word is withheld
    (:func:`lab.analysis.launches.withhold`, widened with ``launch_prior`` when given). Empty
    without a baseline or without its requests."""
    from lab.analysis.launches import borrow, launch_dirs, spreads_for, withhold

    out: dict[tuple[str, str], Any] = {}
    if not baseline:
        return out
    results_dir = Path(results_dir)

    def speeds(mode: str) -> list[dict[str, Any]]:
        return [row for n, d in launch_dirs(results_dir, mode, launches)
                for row in load_request_speeds(d / "requests.jsonl", launch=n)]

    base = speeds(baseline)
    if not base:
        return out
    name = speedup_key(PAIRED_METRIC, "per_prompt")
    for mode, levels in modes.items():
        if mode == baseline:
            continue
        other = speeds(mode)
        for point, entry in levels.items():
            rate_point = any(r.get("request_rate") for r in base if r["point"] == point)
            unit = pair_unit(entry.get("concurrency"), rate_point, int(entry.get("launches") or 1))
            p = paired_speedup(base, other, point, unit=unit)
            if p["ratio"] is None:
                continue
            r = Ratio.from_dict(p)
            if unit != "launch":
                r = borrow(r, spreads_for(results or {}, baseline, mode, point, PAIRED_METRIC))
                if r.scope == WITHIN_ONE_LAUNCH:
                    r = withhold(r, launch_prior)
            out[(mode, point)] = PointColumns({name: r.to_dict()}, {**r.columns(name), "paired_n_prompts": p["n_prompts"]})
    return out
