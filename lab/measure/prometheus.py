"""Prometheus ``/metrics`` scrapes: parsing, and server-side GPU time per decode iteration.

Input: SGLang 0.5.23's ``/metrics`` text scraped before and after a measured window (names:
``sglang/srt/observability/metrics_collector.py``; per-category GPU time needs
``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``, set by :mod:`lab.engine.command`). Definitions
follow DESIGN.md, "Measurement definitions". Nothing here does I/O; see
:mod:`lab.measure.client` for scraping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["FORWARD_SECONDS", "CUDA_GRAPH_PASSES", "SERVER_TIMING_KEYS", "PromSnapshot", "parse_prometheus",
           "server_timing"]

#: Counter of GPU time per forward category (needs SGLANG_ENABLE_METRICS_DEVICE_TIMER=1).
FORWARD_SECONDS = "sglang:forward_execution_seconds_total"
#: Counter of decode passes split by ``mode`` = decode_cuda_graph | decode_none (and prefill_*).
CUDA_GRAPH_PASSES = "sglang:cuda_graph_passes_total"

#: Scalar keys of :func:`server_timing` copied to the top level of :func:`summarize_run`.
SERVER_TIMING_KEYS = (
    "verify_ms",
    "draft_ms",
    "decode_ms",
    "gpu_cycle_ms",
    "verify_share",
    "verify_graph_fraction",
    "decode_iterations",
)


class PromSnapshot:
    """One parsed ``/metrics`` scrape: sample values indexed by sample name.

    :meth:`value` sums a sample over every label set that matches the given labels, so
    extra labels (``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``,
    ``moe_ep_rank``...) never break a lookup; with several TP ranks reporting, both
    numerator and denominator of a per-iteration ratio scale alike.
    """

    def __init__(self, samples: dict[str, list[tuple[dict[str, str], float]]]):
        self._samples = samples

    def __contains__(self, name: object) -> bool:
        return name in self._samples

    def names(self) -> list[str]:
        """Sample names present (counters keep their ``_total`` suffix)."""
        return sorted(self._samples)

    def value(self, name: str, **labels: Any) -> float | None:
        """Sum of sample ``name`` over label sets containing all ``labels``.

        :returns: the sum, or None when no sample matches (metric absent).
        """
        rows = self._samples.get(name)
        if not rows:
            return None
        want = {k: str(v) for k, v in labels.items()}
        total, found = 0.0, False
        for lab, val in rows:
            if all(lab.get(k) == v for k, v in want.items()):
                total += val
                found = True
        return total if found else None

    def label_values(self, name: str, label: str) -> list[str]:
        """Distinct values of ``label`` among samples of ``name`` (e.g. categories)."""
        return sorted({lab[label] for lab, _ in self._samples.get(name, []) if label in lab})

    def __getitem__(self, name: str) -> float:
        v = self.value(name)
        if v is None:
            raise KeyError(name)
        return v


#: SGLang 0.5.16's gauge of the active ``speculative_num_steps`` (absent in builds without it).
SPEC_NUM_STEPS = "sglang:spec_num_steps"


def parse_prometheus(text: str) -> PromSnapshot:
    """Parse Prometheus exposition text (SGLang ``/metrics``) with prometheus_client's parser.

    :param text: the scraped body (HELP/TYPE lines, labels, ``_created`` samples allowed).
    :returns: a :class:`PromSnapshot`; ``snap.value("sglang:cuda_graph_passes_total",
        mode="decode_cuda_graph")`` sums over all other labels.
    :raises ValueError: text that is not valid exposition format.
    """
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return PromSnapshot(samples)


def _as_snapshot(x: str | PromSnapshot) -> PromSnapshot:
    return x if isinstance(x, PromSnapshot) else parse_prometheus(x)


def _delta(before: PromSnapshot, after: PromSnapshot, name: str, **labels: Any) -> float | None:
    """after - before; None if absent after (a series created lazily counts 0 before)."""
    a = after.value(name, **labels)
    if a is None:
        return None
    return a - (before.value(name, **labels) or 0.0)


def _rank_selectors(before: PromSnapshot, after: PromSnapshot) -> list[dict[str, str]]:
    """Label selectors that count each scheduler iteration once.

    Every TP rank's scheduler exports its own series (SGLang 0.5.23
    ``observability/metrics_collector.py`` ~1383-1391: labels ``model_name``, ``engine_type``,
    ``tp_rank``, ``pp_rank``, ``moe_ep_rank``, plus ``dp_rank`` with data-parallel ranks), so a
    sum over ranks counts each decode iteration ``tp_size`` times. Without ``dp_rank``: the
    lowest ``tp_rank``'s series. With ``dp_rank`` (each DP group runs its own batches): the
    lowest ``tp_rank`` of each DP group, summed over groups. No ``tp_rank`` label: ``[{}]``.
    """
    def num(r: str) -> tuple:
        return (not r.isdigit(), int(r) if r.isdigit() else 0, r)

    by_dp: dict[str | None, set[str]] = {}
    for snap in (before, after):
        for name in (CUDA_GRAPH_PASSES, FORWARD_SECONDS):
            for lab, _ in snap._samples.get(name, []):
                if "tp_rank" in lab:
                    by_dp.setdefault(lab.get("dp_rank"), set()).add(lab["tp_rank"])
    if not by_dp:
        return [{}]
    out = []
    for dp, ranks in sorted(by_dp.items(), key=lambda kv: num(kv[0] or "")):
        sel = {"tp_rank": min(ranks, key=num)}
        if dp is not None:
            sel["dp_rank"] = dp
        out.append(sel)
    return out


def _delta_ranks(before: PromSnapshot, after: PromSnapshot, name: str, selectors: list[dict[str, str]],
                 **labels: Any) -> float | None:
    """:func:`_delta` summed over ``selectors`` (None when absent for all)."""
    vals = [_delta(before, after, name, **labels, **sel) for sel in selectors]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


def _draft_incomplete(forward_s: Mapping[str, float | None], iters: float | None) -> bool:
    """Under speculation: some draft time is hidden in ``extend`` (see :func:`server_timing`)."""
    if not iters:
        return False
    eager_draft = (forward_s.get("decode") or 0.0) > 0
    no_graph_extend = (forward_s.get("eagle_draft_extend") or 0.0) <= 0 and (forward_s.get("extend") or 0.0) > 0
    return eager_draft or no_graph_extend


def server_timing(before: str | PromSnapshot, after: str | PromSnapshot, *,
                  speculative: bool | None = None) -> dict[str, Any]:
    """Server-side GPU time per decode iteration over a measured window (DESIGN.md).

    With ``Δ`` the difference of two ``/metrics`` scrapes and
    ``iters = Δ cuda_graph_passes_total{mode="decode_cuda_graph"} + Δ {mode="decode_none"}``
    (one pass per decode batch: a speculative cycle or a plain decode step,
    ``metrics_collector.increment_decode_cuda_graph_pass``):

    - ``verify_ms`` = Δ forward_execution_seconds_total{category="target_verify"} * 1e3 / iters
    - ``draft_ms`` = Δ (category eagle_draft + eagle_draft_extend) * 1e3 / iters; under
      speculation Δ category "decode" is draft time too: an eager draft (graphs off, a batch
      above the captured size, ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``, an ungraphable draft
      backend) is timed as ``decode`` and its draft-extend as ``extend``
      (``speculative/eagle_worker_v2.py`` ~693-715, ~1182-1213;
      ``model_executor/runner/eager_runner.py`` ~261, ~342-350). Eager draft-extend time is
      mixed into ``extend`` with prefill and cannot be separated: ``draft_incomplete`` is True
      when the window shows an eager draft (time booked as ``decode``) or decode iterations
      without any ``eagle_draft_extend`` time (draft-extend ran eagerly, e.g.
      ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``). An eager *verify* (``decode_none``
      passes, as in the seeds' older build) does not by itself make the draft eager.
    - ``decode_ms`` = Δ category "decode" * 1e3 / iters (without speculation)
    - ``gpu_cycle_ms`` = sum of the available three; ``verify_share`` = verify_ms / gpu_cycle_ms
    - ``verify_graph_fraction`` = Δ decode_cuda_graph / iters

    A value whose counter is absent (device timer off, category never run, no decode
    iterations) is None, never 0. Categories: SGLang 0.5.23 ``device_timer_ctx`` callers
    (``decode_cuda_graph_runner.py`` uses ``forward_mode.name.lower()``, ``eager_runner.py``
    "target_verify"/"extend"/"decode", ``eagle_draft*_cuda_graph_runner.py``).

    Counts and times are one TP rank's (the lowest ``tp_rank`` present, see
    :func:`_rank_selectors`): summing every rank's series would count each iteration ``tp_size``
    times.

    :param before, after: ``/metrics`` texts (or parsed snapshots).
    :param speculative: whether the server ran speculation; None infers it from the presence
        of a ``target_verify`` category.
    :returns: the keys above, ``decode_iterations``, ``draft_incomplete`` and ``deltas`` (raw:
        ``forward_s`` by category, ``decode_cuda_graph_passes``, ``decode_none_passes``,
        ``prefill_cuda_graph_passes``, ``prefill_none_passes``, ``tp_rank``).
    """
    b, a = _as_snapshot(before), _as_snapshot(after)
    ranks = _rank_selectors(b, a)
    categories = sorted(set(a.label_values(FORWARD_SECONDS, "category")))
    forward_s = {c: _delta_ranks(b, a, FORWARD_SECONDS, ranks, category=c) for c in categories}
    graph = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="decode_cuda_graph")
    eager = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="decode_none")
    # prefill passes (metrics_collector.py increment_prefill_cuda_graph_pass): what a prefill
    # costs per pass is fitted from them (lab/calibrate/fit.py)
    prefill_graph = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="prefill_cuda_graph")
    prefill_eager = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="prefill_none")
    if speculative is None:
        speculative = "target_verify" in forward_s
    iters = None if graph is None and eager is None else (graph or 0.0) + (eager or 0.0)

    def per_iter_ms(*cats: str) -> float | None:
        vals = [forward_s[c] for c in cats if forward_s.get(c) is not None]
        if not vals or not iters:
            return None
        return sum(vals) * 1e3 / iters

    verify_ms = per_iter_ms("target_verify")
    if speculative:
        draft_ms = per_iter_ms("eagle_draft", "eagle_draft_extend", "decode")
        decode_ms = None
    else:
        draft_ms = per_iter_ms("eagle_draft", "eagle_draft_extend")
        decode_ms = per_iter_ms("decode")
    parts = [v for v in (verify_ms, draft_ms, decode_ms) if v is not None]
    cycle = sum(parts) if parts else None
    return {
        "verify_ms": verify_ms,
        "draft_ms": draft_ms,
        "decode_ms": decode_ms,
        "gpu_cycle_ms": cycle,
        "verify_share": verify_ms / cycle if verify_ms is not None and cycle else None,
        "verify_graph_fraction": (graph or 0.0) / iters if iters else None,
        "decode_iterations": iters,
        "draft_incomplete": _draft_incomplete(forward_s, iters) if speculative else False,
        "deltas": {
            "forward_s": forward_s,
            "decode_cuda_graph_passes": graph,
            "decode_none_passes": eager,
            "prefill_cuda_graph_passes": prefill_graph,
            "prefill_none_passes": prefill_eager,
            "tp_rank": ranks[0].get("tp_rank"),
            "rank_selectors": ranks,
            # SGLang 0.5.16's active speculative tier (gauge, metrics_collector.py ~440; with
            # --speculative-adaptive the tier serving at the scrape), before and after the window
            "spec_num_steps": {"before": b.value(SPEC_NUM_STEPS, **ranks[0]), "after": a.value(SPEC_NUM_STEPS, **ranks[0])},
        },
    }
