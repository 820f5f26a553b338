"""Paired per-prompt speedup: each prompt's speed ratio between a mode and the baseline.

Every mode streams the same requests: for a (point, repeat) the prompt order comes from
``lab.workload.dataset.workload(prompts, n, seed + repeat)`` and the output lengths from
``lab.workload.dataset.output_lengths(..., seed + repeat)``, so request ``i`` of repeat ``r`` at
point ``p`` is the same prompt with the same length in every mode (its ``rid`` ends in
``-r<r>-<i>``, its record carries ``prompt_index`` and ``repeat``). This module matches
those requests across two modes and compares them prompt by prompt.

Method (per point, for the per-request ``decode_tok_s`` of :func:`lab.measure.records.request_metrics`):

1. For every matched request pair (same point, repeat, slot ``i`` and ``prompt_index``,
   both ok): ``d = log(decode_tok_s_other / decode_tok_s_base)``.
2. Per prompt (``prompt_index``): the mean of its ``d`` over the repeats it appeared in
   (the log of the geometric mean of its ratios).
3. Over prompts: one-sample Student-t interval on the per-prompt means, exponentiated
   (:func:`lab.analysis.stats.log_ratio_ci`): a geometric-mean speedup with its 95 % interval.

What pairing buys: a prompt that is slow to decode (long, hard to draft) is slow in both
modes, so prompt-to-prompt variation cancels in ``d``; the interval is about the modes, not
the prompt mix. What it does not cover: a shift shared by every request of one launch (a
server-level effect such as clock throttling). The per-repeat speedup of
:func:`lab.analysis.stats.ratio_ci` carries that; read both. At concurrency above 1 the requests of a
batch share iterations, so per-prompt ratios are correlated within a batch and the paired
interval is optimistic there; at c=1 (the seeds' setting) requests run one at a time.
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
from lab.analysis.estimates import Ratio
from lab.catalog import speedup_key
from lab.measure.records import request_metrics

__all__ = ["load_request_speeds", "paired_speedup", "add_paired", "request_slot", "PAIRED_METRIC", "METHOD"]

#: The per-request metric compared (``output_tok_s`` exists only per run, not per request).
PAIRED_METRIC = "decode_tok_s"
METHOD = ("per prompt: geometric mean over repeats of decode_tok_s ratios (same prompt, repeat, "
          "slot and output length in both modes); Student-t 95 % interval on the log ratios across prompts")

_SLOT = re.compile(r"-r(\d+)-(\d+)$")


def request_slot(rid: Any) -> int | None:
    """A measured request's position in its (point, repeat) list: ``<slot>`` of the rid
    suffix ``-r<repeat>-<slot>`` (:func:`lab.pipeline.bench.run_mode` names them so), or None."""
    m = _SLOT.search(str(rid or ""))
    return int(m.group(2)) if m else None


def load_request_speeds(path: str | Path) -> list[dict[str, Any]]:
    """Per measured request of ``requests.jsonl``: ``{"point", "repeat", "slot", "prompt_index",
    "ok", "decode_tok_s"}``; warm-up requests (no ``point``) are skipped.

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
            rec = json.loads(line)
            if rec.get("point") is None:
                continue
            speed = request_metrics(rec).get(PAIRED_METRIC) if rec.get("ok") else None
            out.append({"point": rec["point"], "repeat": rec.get("repeat"), "slot": request_slot(rec.get("rid")),
                        "prompt_index": rec.get("prompt_index"), "ok": bool(rec.get("ok")), PAIRED_METRIC: speed})
    return out


def paired_speedup(base: Iterable[Mapping[str, Any]], other: Iterable[Mapping[str, Any]], point: str,
                   confidence: float = 0.95, prompts: Collection[Any] | None = None) -> dict[str, Any]:
    """The paired per-prompt speedup ``other / base`` at one point.

    :param base, other: rows of :func:`load_request_speeds` (any points; ``point`` selects).
    :param point: e.g. ``"c1"``.
    :param prompts: only these ``prompt_index`` values (e.g. one task category's prompts,
        :mod:`lab.analysis.taskmix`); None: every prompt.
    :returns: ``{"ratio", "ci95_lo", "ci95_hi", "verdict", "n_prompts", "n_pairs", "unmatched",
        "method"}``; ``ratio`` is None when no request pair matched, the bounds None with fewer
        than 2 prompts. ``unmatched`` counts requests of either mode without a partner (failed,
        or a different prompt in that slot: the workloads differ, and the paired figure then
        covers only the matched part).
    """
    def index(rows):
        return {(r["repeat"], r["slot"]): r for r in rows if r["point"] == point and r["slot"] is not None
                and (prompts is None or r["prompt_index"] in prompts)}

    b, o = index(base), index(other)
    per_prompt: dict[Any, list[float]] = defaultdict(list)
    unmatched = 0
    for key in b.keys() | o.keys():
        rb, ro = b.get(key), o.get(key)
        vb, vo = (rb or {}).get(PAIRED_METRIC), (ro or {}).get(PAIRED_METRIC)
        if (rb is None or ro is None or rb["prompt_index"] != ro["prompt_index"]
                or not vb or not vo or vb <= 0 or vo <= 0):
            unmatched += 1
            continue
        per_prompt[rb["prompt_index"]].append(math.log(vo / vb))
    logs = [sum(d) / len(d) for d in per_prompt.values()]
    out: dict[str, Any] = {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": None,
                           "n_prompts": len(logs), "n_pairs": sum(len(d) for d in per_prompt.values()),
                           "unmatched": unmatched, "method": METHOD}
    if not logs:
        return out
    ratio, lo, hi = stats.log_ratio_ci(logs, confidence)
    finite = math.isfinite(lo) and math.isfinite(hi)
    out.update(ratio=ratio, ci95_lo=lo if finite else None, ci95_hi=hi if finite else None,
               verdict=stats.verdict(ratio, lo, hi))
    return out


def add_paired(summary: dict[str, Any], results_dir: str | Path, baseline: str | None) -> None:
    """Add ``paired_speedup_decode_tok_s`` to every non-baseline entry of
    ``summary["modes"][mode][point]`` and its flat columns (``paired_speedup_decode_tok_s``,
    ``..._ci95_lo``, ``..._ci95_hi``, ``paired_verdict_decode_tok_s``, ``paired_n_prompts``)
    to the matching ``summary["rows"]``; reads ``<results_dir>/<mode>/requests.jsonl``.
    Nothing is added without a baseline or without its requests."""
    if not baseline:
        return
    results_dir = Path(results_dir)
    base = load_request_speeds(results_dir / baseline / "requests.jsonl")
    if not base:
        return
    name = speedup_key(PAIRED_METRIC, "per_prompt")
    for mode, levels in summary["modes"].items():
        if mode == baseline:
            continue
        other = load_request_speeds(results_dir / mode / "requests.jsonl")
        for point, entry in levels.items():
            p = paired_speedup(base, other, point)
            if p["ratio"] is None:
                continue
            entry[name] = p
            for row in summary["rows"]:
                if row.get("mode") == mode and row.get("point") == point:
                    row.update({**Ratio.from_dict(p).columns(name), "paired_n_prompts": p["n_prompts"]})
