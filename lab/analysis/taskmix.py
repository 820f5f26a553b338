"""The task mix: accept length and speedup per prompt category, with honest intervals.

EAGLE-3's acceptance, and so its speedup, depends on the task (code and math accept more than
open-ended writing). Every prompt carries a category (``data/prompts.jsonl``, or the mapped
column of a Hugging Face set: :mod:`lab.workload.sources`); the bench stage records each
prompt's category by index in ``result.json`` ``dataset.categories``, and each request's
``prompt_index`` in ``requests.jsonl``. Per mode, primary point (``c1``, ``c8``...) and category:

- **Accept length**: per request ``completion_tokens / spec_verify_ct`` (the definition of
  :func:`lab.analysis.comparison.requests_frame` and of the emulator's ground truth); per prompt,
  the ratio of sums over its requests (its repeats); then the mean over the category's
  prompts with a Student-t 95 % interval across prompts (:func:`lab.analysis.stats.mean_ci`),
  its lower bound raised to 1 (an accept length is never below 1; intersecting with the
  feasible set never lowers coverage).
- **Speedup**: the paired per-prompt decode tok/s ratio of :func:`lab.analysis.paired.paired_speedup`
  restricted to the category's prompts: per prompt the geometric mean of its ratios over
  repeats, then a Student-t interval on the log ratios across prompts.

Why this interval: the unit of replication is the **prompt**, not the request. Repeats of one
prompt are not independent evidence about the category (at temperature 0 a real server
decodes the same tokens each time), so requests are first averaged per prompt, and the
interval has ``n_prompts - 1`` degrees of freedom. With the few prompts a category has here
(6-7 in ``data/prompts.jsonl``, often 2-4 in one point's 24-request sample) the t quantile widens the
interval as it should (4.30 at n = 3 against 1.96 for a normal); a percentile bootstrap would
be narrower than its nominal level at such n (see :func:`lab.analysis.stats.ratio_ci`).
Below :data:`MIN_PROMPTS` prompts no interval is given at all: the row says "too few prompts"
(with n = 2 the t quantile is 12.7 and the interval says nothing; with n = 1 it does not exist).
At concurrency above 1 the prompts of one batch share iterations, so their speeds are
correlated and the speedup interval is optimistic there (as for :mod:`lab.analysis.paired`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.analysis import stats
from lab.analysis.paired import PAIRED_METRIC, load_request_speeds, paired_speedup

__all__ = ["MIN_PROMPTS", "METHOD", "CSV_COLUMNS", "category_rows", "comparison_taskmix", "taskmix_metrics",
           "dataset_categories", "CategoryError"]

#: Fewest prompts of a category for which an interval is reported (module docstring).
MIN_PROMPTS = 3
METHOD = (f"per category: accept length = mean over prompts of each prompt's completion_tokens / spec_verify_ct "
          f"(ratio of sums over its repeats), Student-t 95 % interval across prompts; speedup = paired per-prompt "
          f"decode tok/s ratio (lab.analysis.paired) over the category's prompts, Student-t on log ratios; "
          f"no interval below {MIN_PROMPTS} prompts")


#: Columns of ``reports/categories.csv`` (``dvc plots``), one row per :func:`category_rows` row.
CSV_COLUMNS = ("mode", "point", "concurrency", "category", "accept_length", "accept_length_ci95_lo",
               "accept_length_ci95_hi", "accept_n_prompts", f"speedup_{PAIRED_METRIC}", f"speedup_{PAIRED_METRIC}_ci95_lo",
               f"speedup_{PAIRED_METRIC}_ci95_hi", f"verdict_{PAIRED_METRIC}", "speedup_n_prompts", "speedup_n_pairs",
               "too_few_prompts")


class CategoryError(RuntimeError):
    """The modes' results disagree on the prompts' categories; the message names the fix."""


def dataset_categories(results: Mapping[str, Mapping[str, Any]]) -> list[str] | None:
    """The category of each prompt index, from the modes' ``result.json`` ``dataset`` records
    (written by :mod:`lab.pipeline.bench`); None when no mode has one (results from before the
    record existed).

    :raises CategoryError: two modes loaded different prompt sets (different ``prompts_sha256``):
        their requests cannot be matched by prompt index.
    """
    recs = {m: r["dataset"] for m, r in results.items() if isinstance(r.get("dataset"), Mapping)
            and r["dataset"].get("categories")}
    if not recs:
        return None
    hashes = {m: d.get("prompts_sha256") for m, d in recs.items()}
    if len(set(hashes.values())) > 1:
        raise CategoryError(f"the modes loaded different prompt sets {hashes}. Fix: re-run every bench stage with "
                            "the same bench.dataset (dvc repro re-runs them when bench params change)")
    return list(next(iter(recs.values()))["categories"])


def _accept_by_prompt(requests: Any, mode: str, point: str, prompts: set[int]) -> list[float]:
    """Per prompt of ``prompts``: sum(completion_tokens) / sum(spec_verify_ct) over its ok requests."""
    sub = requests[(requests["mode"] == mode) & (requests["point"] == point)
                   & requests["prompt_index"].isin(prompts) & (requests["spec_verify_ct"].fillna(0) > 0)]
    sums = sub.groupby("prompt_index")[["completion_tokens", "spec_verify_ct"]].sum()
    return (sums["completion_tokens"] / sums["spec_verify_ct"]).tolist()


def category_rows(requests: Any, speeds: Mapping[str, list[dict[str, Any]]], categories: Sequence[str],
                  modes: Sequence[str], baseline: str | None, confidence: float = 0.95) -> list[dict[str, Any]]:
    """One row per (mode, primary point, category) with data.

    :param requests: :func:`lab.analysis.comparison.requests_frame` (columns mode, point,
        prompt_index, completion_tokens, spec_verify_ct; ok requests at primary points).
    :param speeds: ``mode -> lab.analysis.paired.load_request_speeds(...)`` rows.
    :param categories: the category of each prompt index.
    :param modes: modes in report order. :param baseline: the baseline mode, or None.
    :returns: rows with ``mode``, ``point``, ``concurrency``, ``category``; for speculative
        modes ``accept_length``, ``accept_length_ci95_lo/_hi``, ``accept_n_prompts``; for
        non-baseline modes with a baseline ``speedup_decode_tok_s``, its ``_ci95_lo/_hi``,
        ``verdict_decode_tok_s``, ``speedup_n_prompts``, ``speedup_n_pairs``; ``too_few_prompts``
        (True when a reported value has fewer than :data:`MIN_PROMPTS` prompts: its bounds are
        None).
    """
    by_cat: dict[str, set[int]] = {}
    for i, c in enumerate(categories):
        by_cat.setdefault(c, set()).add(i)
    name = f"speedup_{PAIRED_METRIC}"
    rows: list[dict[str, Any]] = []
    for mode in modes:
        mine = requests[requests["mode"] == mode] if len(requests) else requests
        points = list(dict.fromkeys(mine["point"])) if len(mine) else []
        if not points and speeds.get(mode):
            points = list(dict.fromkeys(r["point"] for r in speeds[mode] if r["point"].startswith("c")
                                        and r["point"][1:].isdigit()))
        for point in points:
            for cat, idx in by_cat.items():
                row: dict[str, Any] = {"mode": mode, "point": point, "concurrency": int(point[1:]), "category": cat,
                                       "too_few_prompts": False}
                acc = _accept_by_prompt(requests, mode, point, idx) if len(requests) else []
                if acc:
                    mean, lo, hi = stats.mean_ci(acc, confidence)
                    few = len(acc) < MIN_PROMPTS
                    row.update(accept_length=mean, accept_n_prompts=len(acc),
                               accept_length_ci95_lo=None if few or not math.isfinite(lo) else max(lo, 1.0),
                               accept_length_ci95_hi=None if few or not math.isfinite(hi) else hi)
                    row["too_few_prompts"] |= few
                if baseline and mode != baseline and speeds.get(baseline) and speeds.get(mode):
                    p = paired_speedup(speeds[baseline], speeds[mode], point, confidence, prompts=idx)
                    if p["ratio"] is not None:
                        few = p["n_prompts"] < MIN_PROMPTS
                        row.update({name: p["ratio"], f"{name}_ci95_lo": None if few else p["ci95_lo"],
                                    f"{name}_ci95_hi": None if few else p["ci95_hi"],
                                    f"verdict_{PAIRED_METRIC}": None if few else p["verdict"],
                                    "speedup_n_prompts": p["n_prompts"], "speedup_n_pairs": p["n_pairs"]})
                        row["too_few_prompts"] |= few
                if "accept_length" in row or name in row:
                    rows.append(row)
    return rows


def comparison_taskmix(baseline: str | None, results: Mapping[str, Mapping[str, Any]], results_dir: str | Path,
                       requests: Any) -> dict[str, Any] | None:
    """The comparison's ``taskmix`` part: ``{"method", "min_prompts", "categories", "rows"}``
    (:func:`category_rows`); None when the results carry no categories or the dataset has a single
    category (nothing to compare).

    :param results: ``mode -> result.json`` (:func:`lab.analysis.comparison.load_results`).
    :param results_dir: where ``<mode>/requests.jsonl`` are. :param requests: :func:`lab.analysis.comparison.requests_frame`.
    :raises CategoryError: as :func:`dataset_categories`.
    """
    categories = dataset_categories(results)
    if not categories or len(set(categories)) < 2:
        return None
    modes = list(results)
    speeds = {m: load_request_speeds(Path(results_dir) / m / "requests.jsonl") for m in modes}
    rows = category_rows(requests, speeds, categories, modes, baseline)
    return {"method": METHOD, "min_prompts": MIN_PROMPTS, "categories": list(dict.fromkeys(categories)), "rows": rows}


_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def taskmix_metrics(taskmix: Mapping[str, Any] | None) -> dict[str, float]:
    """Flat MLflow metrics of the comparison run: ``<mode>.<point>.category.<cat>.accept_length``
    and ``...speedup_decode_tok_s``, each with ``_ci95_lo`` / ``_ci95_hi`` where an interval
    exists, plus ``...n_prompts`` (the category name with characters MLflow rejects replaced
    by ``_``). Empty for None."""
    flat: dict[str, float] = {}
    for r in (taskmix or {}).get("rows", []):
        key = f"{r['mode']}.{r['point']}.category.{_SAFE.sub('_', str(r['category']))}"
        for m in ("accept_length", f"speedup_{PAIRED_METRIC}"):
            for sfx in ("", "_ci95_lo", "_ci95_hi"):
                v = r.get(m + sfx)
                if v is not None and math.isfinite(v):
                    flat[f"{key}.{m}{sfx}"] = float(v)
        n = r.get("accept_n_prompts", r.get("speedup_n_prompts"))
        if n is not None:
            flat[f"{key}.n_prompts"] = float(n)
    return flat

