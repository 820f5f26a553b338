"""Acceptance by draft position: P(draft token k accepted | tokens 1..k-1 accepted), with intervals.

Read from SGLang's own per-request counts: ``meta_info["spec_correct_drafts_histogram"]``, the
number of verify cycles of the request that accepted 0, 1, 2... drafts (bonus token not counted).
Both supported builds fill it the same way: ``Req.update_spec_correct_drafts_histogram``
(0.5.16 ``managers/schedule_batch.py:1123``, called per verify from
``scheduler_components/batch_result_processor.py:596``; 0.5.23 ``batch_result_processor.py:836``)
and ``TokenizerManager`` copies it into ``meta_info`` under that name (0.5.16
``managers/tokenizer_manager.py:2452``, 0.5.23 ``:3199``; 0.5.16 also writes the alias
``spec_accept_histogram``, "remove in next release"). SGLang leaves the key out when the
histogram is empty (no verify). Tests read both builds' sources (``tests/unit/test_position_acceptance.py``).

Estimate (chain drafts, ``eagle_topk`` 1, so positions ``k = 1..num_draft_tokens - 1``): the
per-position counts of :func:`add_histogram`, which is also the calibration's histogram
counting (:mod:`lab.calibrate.observe` calls it; kept here so the bench stage does not depend on
the calibration's modules), pooled over every cycle of the point's window(s):
``trials_k`` = cycles that reached position k (accepted k - 1 drafts or more), ``successes_k``
= cycles that accepted k drafts or more, ``alpha_k = successes_k / trials_k``. Interval: Wilson
score (``scipy.stats.binomtest(...).proportion_ci(method="wilson")``; Brown, Cai & DasGupta 2001,
Statist. Sci. 16). Cycles of one request are not independent (a hard prompt is hard at every
cycle), so the interval is a within-window, cycles-as-trials interval: optimistic when prompts
differ (the per-category split shows that spread) and when cycles share one draw (SGLang's
``SGLANG_SIMULATE_ACC_LEN`` simulator draws once per batch, ``speculative/spec_utils.py`` ~505-559:
on the real 0.5.16 captures at concurrency 4 the interval misses the simulator's 0.85, at
concurrency 1 it covers it; ``tests/unit/test_position_acceptance.py``).

Agreement with the accept length the lab reports: with uncensored counts,
``prod_{j<=k} alpha_j`` is the share of cycles that accepted at least k drafts, so
``1 + sum_k prod_{j<=k} alpha_j = 1 + sum correct / sum verify_ct`` (the mean tokens per cycle
SGLang counted) exactly. The lab's ``accept_length`` is ``sum completion_tokens / sum verify_ct``
(:mod:`lab.measure.records`, SGLang's own ``spec_accept_length`` definition,
``tokenizer_manager.py:2415``): per request ``completion_tokens = 1 + verify_ct + correct -
overshoot``, where 1 is the prefill's token and ``overshoot`` in ``[0, num_steps]`` the accepted
tokens cut at ``max_new_tokens``. So the two differ by ``sum (1 - overshoot) / sum verify_ct``,
at most ``requests * max(1, num_steps - 1) / sum verify_ct`` (:func:`accept_length_gap_bound`).

Simulated acceptance (``SGLANG_SIMULATE_ACC_LEN``) still fills the histogram; the section then
says ``simulated: true`` (the rates describe SGLang's simulator, not the draft model).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

from lab.measure.request_record import RequestRecord, as_records

__all__ = ["HISTOGRAM_KEY", "add_histogram", "METHOD", "position_rates", "implied_accept_length", "accept_length_gap_bound",
           "point_acceptance", "acceptance_by_position", "acceptance_metrics", "chain_depth", "acceptance_rows"]

#: The ``meta_info`` key both SGLang builds write (module docstring).
HISTOGRAM_KEY = "spec_correct_drafts_histogram"
METHOD = ("per draft position k: cycles that accepted >= k drafts / cycles that reached k, from SGLang's per-request "
          "spec_correct_drafts_histogram pooled over the point's cycles; Wilson 95 % interval (cycles as trials)")
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def add_histogram(successes: list[int], trials: list[int], histogram: Sequence[int]) -> int:
    """Add one request's ``spec_correct_drafts_histogram`` (``histogram[k]`` = its cycles that
    accepted k drafts) to the per-position counts in place: a cycle with ``k`` correct drafts is a
    success at positions ``1..k`` and, when ``k < len(trials)``, a trial without success at ``k + 1``
    (deeper counts are clipped to ``len(trials)``). :returns: the cycles added.

    :raises ValueError: a negative count.
    """
    depth, cycles = len(trials), 0
    for k, count in enumerate(histogram):
        if count < 0:
            raise ValueError(f"histogram entry {k} is {count}: not a count")
        acc = min(k, depth)
        cycles += count
        for j in range(acc):
            successes[j] += count
            trials[j] += count
        if acc < depth:
            trials[acc] += count
    return cycles


def position_rates(successes: Sequence[int], trials: Sequence[int], confidence: float = 0.95) -> list[dict[str, Any]]:
    """One row per draft position ``k = 1..len(trials)``: ``position``, ``accept_rate`` (None when
    no trial), ``ci95_lo``, ``ci95_hi`` (Wilson), ``successes``, ``trials``.

    :raises ValueError: lengths differ, or a count is negative or ``successes > trials``.
    """
    if len(successes) != len(trials):
        raise ValueError(f"successes ({len(successes)}) and trials ({len(trials)}) differ in length")
    rows = []
    for k, (s, t) in enumerate(zip(successes, trials), start=1):
        if s < 0 or t < 0 or s > t:
            raise ValueError(f"position {k}: {s} successes of {t} trials is not a count")
        row: dict[str, Any] = {"position": k, "accept_rate": None, "ci95_lo": None, "ci95_hi": None,
                               "successes": int(s), "trials": int(t)}
        if t:
            ci = stats.binomtest(int(s), int(t)).proportion_ci(confidence_level=confidence, method="wilson")
            row.update(accept_rate=s / t, ci95_lo=float(ci.low), ci95_hi=float(ci.high))
        rows.append(row)
    return rows


def implied_accept_length(rates: Sequence[float | None]) -> float | None:
    """``1 + sum_k prod_{j<=k} alpha_j`` (tokens per cycle, bonus included); positions after an
    unmeasured one add nothing (no cycle reached them). None for an empty list."""
    if not rates:
        return None
    out, prod = 1.0, 1.0
    for a in rates:
        if a is None:
            break
        prod *= a
        out += prod
    return out


def accept_length_gap_bound(requests: int, verify_ct: int, num_steps: int) -> float:
    """Largest ``|implied - lab accept_length|`` the module docstring allows: ``requests *
    max(1, num_steps - 1) / verify_ct`` (tokens per cycle). :raises ValueError: ``verify_ct <= 0``."""
    if verify_ct <= 0:
        raise ValueError("no verify cycle: the accept length is undefined")
    return requests * max(1, num_steps - 1) / verify_ct


def chain_depth(effective_config: Mapping[str, Any] | None) -> int | None:
    """Draft positions of a chain configuration (``speculative_num_draft_tokens - 1``, which is
    ``speculative_num_steps`` at topk 1); None when not speculative or ``eagle_topk`` > 1 (tree
    drafts: positions are not a chain), or under ``--speculative-adaptive`` (tiers of several
    depths in one histogram cannot be told apart)."""
    eff = effective_config or {}
    if not eff.get("speculative_algorithm") and not eff.get("speculative_num_steps"):
        return None
    if eff.get("speculative_adaptive"):  # tiers of different depths share one histogram: a cycle that
        return None  # accepted all its tier's drafts would read as a rejection one position deeper
    if int(eff.get("speculative_eagle_topk") or 1) != 1:
        return None
    nd, steps = eff.get("speculative_num_draft_tokens"), eff.get("speculative_num_steps")
    depth = int(nd) - 1 if nd else (int(steps) if steps else None)
    return depth if depth and depth > 0 else None


def point_acceptance(records: Sequence[RequestRecord | Mapping[str, Any]], num_steps: int, confidence: float = 0.95) -> dict[str, Any] | None:
    """Pooled acceptance by position of ``records`` (ok requests of one group).

    :returns: ``{"positions": position_rates rows, "implied_accept_length", "accept_length"
        (the lab's: sum completion_tokens / sum verify_ct), "gap_bound"
        (:func:`accept_length_gap_bound`), "cycles", "requests"}``, or None when no record has a
        histogram.
    """
    recs = [r for r in as_records(records) if r.ok and (r.meta_info or {}).get(HISTOGRAM_KEY)]
    if not recs:
        return None
    succ, trials = [0] * num_steps, [0] * num_steps
    cycles = sum(add_histogram(succ, trials, r.meta_info[HISTOGRAM_KEY]) for r in recs)
    rows = position_rates(succ, trials, confidence)
    vct = sum(int(r.meta_info.get("spec_verify_ct") or sum(r.meta_info[HISTOGRAM_KEY])) for r in recs)
    ct = sum(int(r.completion_tokens or 0) for r in recs)
    return {"positions": rows, "implied_accept_length": implied_accept_length([r["accept_rate"] for r in rows]),
            "accept_length": ct / vct if vct else None,
            "gap_bound": accept_length_gap_bound(len(recs), vct, num_steps) if vct else None,
            "cycles": cycles, "requests": len(recs)}


def acceptance_by_position(records: Sequence[RequestRecord | Mapping[str, Any]], effective_config: Mapping[str, Any] | None,
                           categories: Sequence[str] | None = None, *, simulated: bool = False,
                           confidence: float = 0.95) -> dict[str, Any] | None:
    """The ``result.json`` section ``acceptance_by_position`` of one mode.

    :param records: the mode's request records (:class:`lab.measure.request_record.RequestRecord`,
        or ``requests.jsonl`` rows: ``point``, ``prompt_index``, ``context_tokens``, ``meta_info``).
    :param effective_config: the resolved server arguments (:func:`chain_depth`).
    :param categories: the category of each prompt index (``result.json`` ``dataset.categories``), or None.
    :param simulated: the launch set ``SGLANG_SIMULATE_ACC_LEN``.
    :returns: ``{"method", "num_positions", "simulated", "points": {point: point_acceptance +
        "by_category": {cat: ...}, "by_context": {context_tokens: ...}}}``, or None when the mode
        is not a chain-draft speculative one or no request carried a histogram.
    """
    depth = chain_depth(effective_config)
    if depth is None:
        return None
    points: dict[str, Any] = {}
    by_point: dict[str, list[RequestRecord]] = {}
    for r in as_records(records):
        if r.ok:
            by_point.setdefault(str(r.point or f"c{r.concurrency}"), []).append(r)
    for point, recs in by_point.items():
        pooled = point_acceptance(recs, depth, confidence)
        if pooled is None:
            continue
        if categories:
            groups: dict[str, list[RequestRecord]] = {}
            for r in recs:
                i = r.prompt_index
                if isinstance(i, int) and 0 <= i < len(categories):
                    groups.setdefault(str(categories[i]), []).append(r)
            pooled["by_category"] = {c: a for c, g in groups.items() if (a := point_acceptance(g, depth, confidence))}
        ctx: dict[str, list[RequestRecord]] = {}
        for r in recs:
            ctx.setdefault(str(int(r.context_tokens or 0)), []).append(r)
        pooled["by_context"] = {c: a for c, g in ctx.items() if (a := point_acceptance(g, depth, confidence))}
        points[point] = pooled
    if not points:
        return None
    return {"method": METHOD, "num_positions": depth, "simulated": bool(simulated), "points": points}


def acceptance_metrics(section: Mapping[str, Any] | None) -> dict[str, float]:
    """Flat MLflow metrics of a mode run: ``<point>.accept_rate_pos<k>`` (a probability, no unit),
    its ``_ci95_lo`` / ``_ci95_hi``, ``<point>.accept_length_implied`` (tokens per cycle), and per
    category ``<point>.category.<cat>.accept_rate_pos<k>`` (names made MLflow-safe). Empty for None."""
    flat: dict[str, float] = {}

    def put(prefix: str, acc: Mapping[str, Any]) -> None:
        for row in acc["positions"]:
            for name, key in (("", "accept_rate"), ("_ci95_lo", "ci95_lo"), ("_ci95_hi", "ci95_hi")):
                v = row.get(key)
                if v is not None and math.isfinite(v):
                    flat[f"{prefix}accept_rate_pos{row['position']}{name}"] = float(v)
        if acc.get("implied_accept_length") is not None:
            flat[f"{prefix}accept_length_implied"] = float(acc["implied_accept_length"])

    for point, acc in ((section or {}).get("points") or {}).items():
        put(f"{point}.", acc)
        for cat, a in (acc.get("by_category") or {}).items():
            put(f"{point}.category.{_SAFE.sub('_', cat)}.", a)
    return flat


def acceptance_rows(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Long table over modes: one row per (mode, point, group, position) with ``mode``, ``point``,
    ``group`` (``all``, ``category:<c>``, ``context:<t>``), ``position``, ``accept_rate``,
    ``ci95_lo``, ``ci95_hi``, ``trials``, ``simulated``; from each ``result.json``'s
    ``acceptance_by_position`` (modes without one are skipped)."""
    rows: list[dict[str, Any]] = []
    for mode, res in results.items():
        sec = res.get("acceptance_by_position")
        if not sec:
            continue
        for point, acc in sec["points"].items():
            groups = [("all", acc)] + [(f"category:{c}", a) for c, a in (acc.get("by_category") or {}).items()] + \
                     [(f"context:{c}", a) for c, a in (acc.get("by_context") or {}).items()]
            for group, a in groups:
                for r in a["positions"]:
                    rows.append({"mode": mode, "point": point, "group": group, "position": r["position"],
                                 "accept_rate": r["accept_rate"], "ci95_lo": r["ci95_lo"], "ci95_hi": r["ci95_hi"],
                                 "trials": r["trials"], "simulated": sec.get("simulated", False)})
    return rows
