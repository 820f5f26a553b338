"""Metrics: pure functions from client records and scraped server texts to numbers.

Every definition follows DESIGN.md, "Measurement definitions"; names carry units
(``_ms``, ``_s``, ``_tok_s``). Inputs are:

- client request records (``docs/contracts.md``, produced by :mod:`lab.measure.client`);
- ``/metrics`` Prometheus text scraped before and after a measured window (SGLang 0.5.23
  names: ``sglang/srt/observability/metrics_collector.py``);
- SGLang "Decode batch" log lines (``scheduler_components/metrics_reporter.py``);
- ``/server_info`` JSON before and after (``internal_states[0].step_time_dict``,
  ``scheduler_components/internal_state.py``).

Nothing here does I/O; see :mod:`lab.measure.client` for scraping.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "FORWARD_SECONDS",
    "CUDA_GRAPH_PASSES",
    "LATENCY_METRICS",
    "SERVER_TIMING_KEYS",
    "request_metrics",
    "PromSnapshot",
    "parse_prometheus",
    "server_timing",
    "parse_decode_log",
    "summarize_decode_log",
    "step_time_ms",
    "DECODE_LOG_FIELDS",
    "measured_window_s",
    "summarize_run",
]

#: Counter of GPU time per forward category (needs SGLANG_ENABLE_METRICS_DEVICE_TIMER=1).
FORWARD_SECONDS = "sglang:forward_execution_seconds_total"
#: Counter of decode passes split by ``mode`` = decode_cuda_graph | decode_none (and prefill_*).
CUDA_GRAPH_PASSES = "sglang:cuda_graph_passes_total"

#: Latency metrics summarized per run (percentiles p50/p90/p99 and mean).
LATENCY_METRICS = ("ttft_ms", "itl_ms", "icl_ms", "tpot_ms", "e2e_ms", "dispatch_delay_ms")

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


# --------------------------------------------------------------------------- per request


def request_metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per-request latency metrics from one client record (DESIGN.md, "Measurement definitions").

    Times in the record are ``perf_counter`` seconds; ``chunks`` is ``[[t_s, n_tokens], ...]``
    (content chunks only). With ``t_first``/``t_last`` the first/last chunk times and
    ``N`` = ``completion_tokens``:

    - ``ttft_ms`` = (t_first - t_send) * 1e3
    - ``icl_ms``: list of the N_chunks - 1 gaps between consecutive chunks, ms
    - ``itl_ms``: per-token inter-token latency: each gap divided by the tokens of the chunk
      that closed it, repeated once per token (a 3-token chunk gives 3 values of gap/3;
      vLLM PR #27485 fixes exactly this under-count for speculative decoding). Length
      ``sum(n_tokens) - n_tokens[0]``; its sum is t_last - t_first.
    - ``tpot_ms`` = (e2e - ttft) / (N - 1)
    - ``decode_tok_s`` = (N - 1) / (t_last - t_first)
    - ``e2e_ms`` = (t_end - t_send) * 1e3; ``dispatch_delay_ms`` = (t_send - t_dispatch) * 1e3
    - ``cycle_ms`` = decode time (t_last - t_first) / ``spec_verify_ct`` for speculative
      requests, / (N - 1) (one decode step per token) otherwise
    - ``accept_length`` = N / ``spec_verify_ct`` (SGLang's own per-request definition, bonus
      token included; ``tokenizer_manager.py``); None without speculation
    - ``token_accounting_ok``: sum of chunk tokens == N

    :param record: one client record (docs/contracts.md).
    :returns: dict with the keys above plus ``ok``, ``completion_tokens``,
        ``spec_verify_ct``, ``n_chunks``, ``chunk_tokens``; a value that cannot be computed
        (failed request, a single token, no chunks) is None (lists are empty).
    """
    chunks = record.get("chunks") or []
    n_tok = record.get("completion_tokens")
    meta = record.get("meta_info") or {}
    verify_ct = meta.get("spec_verify_ct")
    speculative = bool(verify_ct)
    t_send, t_end, t_dispatch = record.get("t_send"), record.get("t_end"), record.get("t_dispatch")
    chunk_tokens = sum(int(c[1]) for c in chunks)
    out: dict[str, Any] = {
        "ok": bool(record.get("ok")),
        "completion_tokens": n_tok,
        "spec_verify_ct": verify_ct if speculative else None,
        "speculative": speculative,
        "n_chunks": len(chunks),
        "chunk_tokens": chunk_tokens,
        "token_accounting_ok": n_tok is not None and chunk_tokens == n_tok,
        "ttft_ms": None,
        "icl_ms": [],
        "itl_ms": [],
        "tpot_ms": None,
        "decode_tok_s": None,
        "e2e_ms": None,
        "dispatch_delay_ms": None,
        "cycle_ms": None,
        "accept_length": None,
    }
    if t_send is not None and t_dispatch is not None:
        out["dispatch_delay_ms"] = (t_send - t_dispatch) * 1e3
    if not out["ok"] or not chunks or t_send is None or t_end is None:
        return out
    t_first, t_last = chunks[0][0], chunks[-1][0]
    ttft_s = t_first - t_send
    e2e_s = t_end - t_send
    out["ttft_ms"] = ttft_s * 1e3
    out["e2e_ms"] = e2e_s * 1e3
    icl: list[float] = []
    itl: list[float] = []
    for (t0, _), (t1, n) in zip(chunks, chunks[1:]):
        gap_ms = (t1 - t0) * 1e3
        icl.append(gap_ms)
        if n > 0:  # content chunks always carry >= 1 token (docs/contracts.md)
            itl.extend([gap_ms / n] * int(n))
    out["icl_ms"] = icl
    out["itl_ms"] = itl
    if n_tok is not None and n_tok >= 2:
        out["tpot_ms"] = (e2e_s - ttft_s) * 1e3 / (n_tok - 1)
        decode_s = t_last - t_first
        if decode_s > 0:
            out["decode_tok_s"] = (n_tok - 1) / decode_s
            steps = verify_ct if speculative else n_tok - 1
            out["cycle_ms"] = decode_s * 1e3 / steps
    if speculative and n_tok is not None:
        out["accept_length"] = n_tok / verify_ct
    return out


# --------------------------------------------------------------------------- Prometheus


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
        ``tp_rank``).
    """
    b, a = _as_snapshot(before), _as_snapshot(after)
    ranks = _rank_selectors(b, a)
    categories = sorted(set(a.label_values(FORWARD_SECONDS, "category")))
    forward_s = {c: _delta_ranks(b, a, FORWARD_SECONDS, ranks, category=c) for c in categories}
    graph = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="decode_cuda_graph")
    eager = _delta_ranks(b, a, CUDA_GRAPH_PASSES, ranks, mode="decode_none")
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
            "tp_rank": ranks[0].get("tp_rank"),
            "rank_selectors": ranks,
        },
    }


# --------------------------------------------------------------------------- logs, server_info

_DECODE_LINE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)(?P<ranks>[^\]]*)\]\s*)?"
    r"Decode batch(?: \[(?P<iter>\d+)\])?,\s*(?P<body>.*)$"
)
_TP = re.compile(r"\bTP(\d+)\b")
_DECODE_KEYS = {
    "#running-req": ("running_req", int),
    "#token": ("token", int),
    "#full token": ("token", int),
    "token usage": ("token_usage", float),
    "full token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "gen throughput (token/s)": ("gen_throughput_tok_s", float),
    "#queue-req": ("queue_req", int),
}
_GRAPH_KEYS = ("cuda graph", "cpu graph", "npu graph", "musa graph")
DECODE_LOG_FIELDS = (
    "running_req",
    "token",
    "token_usage",
    "accept_len",
    "accept_rate",
    "cuda_graph",
    "gen_throughput_tok_s",
    "queue_req",
)


def parse_decode_log(text: str | Iterable[str]) -> list[dict[str, Any]]:
    """Parse SGLang "Decode batch" log lines.

    Format (SGLang 0.5.23 ``metrics_reporter.py`` ``log_decode_stats``)::

        [2026-01-05 10:00:00 TP0] Decode batch, #running-req: 1, #token: 512,
        token usage: 0.01, accept len: 1.85, accept rate: 0.42, cuda graph: True,
        gen throughput (token/s): 61.20, #queue-req: 0[, fwd occupancy: ...]

    ``accept len``/``accept rate`` appear only with speculation; the timestamp prefix,
    ``[iter]``, hybrid-pool token fields, MFU and occupancy suffixes are optional. Other
    lines are skipped.

    :param text: log text or an iterable of lines.
    :returns: one dict per line with keys ``ts`` (str|None), ``tp_rank`` (int|None),
        ``forward_iter`` (int|None), :data:`DECODE_LOG_FIELDS` (``cuda_graph`` bool;
        absent fields None) and ``extra`` (other ``key: value`` pairs as strings).
    """
    lines = text.splitlines() if isinstance(text, str) else text
    out: list[dict[str, Any]] = []
    for line in lines:
        if "Decode batch" not in line:
            continue
        m = _DECODE_LINE.search(line.rstrip())
        if not m:
            continue
        rec: dict[str, Any] = {"ts": m["ts"], "tp_rank": None, "forward_iter": None}
        rec.update(dict.fromkeys(DECODE_LOG_FIELDS))
        rec["extra"] = {}
        if m["ranks"]:
            tp = _TP.search(m["ranks"])
            rec["tp_rank"] = int(tp.group(1)) if tp else None
        if m["iter"]:
            rec["forward_iter"] = int(m["iter"])
        for part in m["body"].split(", "):
            key, sep, val = part.partition(": ")
            if not sep:
                continue
            key, val = key.strip(), val.strip().rstrip(",")
            if key in _GRAPH_KEYS:
                rec["cuda_graph"] = val == "True"
            elif key in _DECODE_KEYS:
                name, typ = _DECODE_KEYS[key]
                try:
                    rec[name] = typ(val)
                except ValueError:
                    rec["extra"][key] = val
            else:
                rec["extra"][key] = val
        out.append(rec)
    return out


def summarize_decode_log(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate parsed "Decode batch" lines (:func:`parse_decode_log`).

    Each line reports one iteration out of every ``--decode-log-interval`` (default 40),
    so ``cuda_graph_fraction`` is a sampled share of decode iterations run in a CUDA
    graph (DESIGN.md ``verify_graph_fraction``, log variant); the means are over lines.

    :returns: ``{"lines": int, "cuda_graph_fraction", "mean_accept_len",
        "mean_gen_throughput_tok_s", "max_running_req"}``; None where no line has the field.
    """
    graph = [r["cuda_graph"] for r in rows if r.get("cuda_graph") is not None]
    acc = [r["accept_len"] for r in rows if r.get("accept_len") is not None]
    thr = [r["gen_throughput_tok_s"] for r in rows if r.get("gen_throughput_tok_s") is not None]
    run = [r["running_req"] for r in rows if r.get("running_req") is not None]
    return {
        "lines": len(rows),
        "cuda_graph_fraction": sum(graph) / len(graph) if graph else None,
        "mean_accept_len": float(np.mean(acc)) if acc else None,
        "mean_gen_throughput_tok_s": float(np.mean(thr)) if thr else None,
        "max_running_req": max(run) if run else None,
    }


def _step_time_dict(server_info: Mapping[str, Any] | None) -> dict[int, list[float]] | None:
    if not server_info:
        return None
    states = server_info.get("internal_states") or []
    if not states or not isinstance(states[0], Mapping):
        return None
    d = states[0].get("step_time_dict")
    if d is None:
        return None
    return {int(k): list(v) for k, v in d.items()}


def step_time_ms(
    server_info_before: Mapping[str, Any] | None, server_info_after: Mapping[str, Any]
) -> dict[int, list[float]] | None:
    """Decode step times recorded during a window, from ``/server_info``.

    SGLang (``SGLANG_RECORD_STEP_TIME=1``) appends, at every decode log interval, the mean
    wall time per decode iteration (``gap_latency / decode_log_interval``, seconds) to
    ``internal_states[0].step_time_dict[batch_size]`` (``metrics_reporter.py``,
    ``internal_state.py``). Lists only grow, so entries beyond the "before" lengths are new.

    :param server_info_before: ``/server_info`` JSON at window start (None: take all).
    :param server_info_after: ``/server_info`` JSON at window end.
    :returns: ``{batch_size: [step_ms, ...]}`` of the new entries (batch sizes with no new
        entry omitted), or None when the server does not record step times.
    """
    after = _step_time_dict(server_info_after)
    if after is None:
        return None
    before = _step_time_dict(server_info_before) or {}
    out: dict[int, list[float]] = {}
    for bs, vals in after.items():
        new = vals[len(before.get(bs, [])):]
        if new:
            out[bs] = [v * 1e3 for v in new]
    return out


# --------------------------------------------------------------------------- per run


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def measured_window_s(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Wall time of a run from its records: max(t_end) - min(t_dispatch), seconds.

    Records never sent (``t_dispatch`` None) are ignored; None if no record was sent.
    """
    starts = [r["t_dispatch"] for r in records if r.get("t_dispatch") is not None]
    ends = [r["t_end"] for r in records if r.get("t_end") is not None]
    if not starts or not ends:
        return None
    return max(ends) - min(starts)


def summarize_run(
    records: Sequence[Mapping[str, Any]],
    *,
    wall_s: float,
    server: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Summary of one (mode, concurrency, repeat) run (DESIGN.md, "Per run").

    - counts: ``requests``, ``ok``, ``errors``, ``not_sent``, ``error_rate`` = errors / requests
    - ``output_tok_s`` = total completion tokens of ok requests / ``wall_s``
    - ``decode_tok_s``: median over ok requests of per-request decode_tok_s
    - for each of :data:`LATENCY_METRICS` (unit suffix kept last): ``mean_<m>``,
      ``p50_<m>``, ``p90_<m>``, ``p99_<m>`` — over requests for ttft/tpot/e2e/dispatch
      delay, over all gaps (ICL) or tokens (ITL) of the ok requests
    - ``accept_length`` = sum(completion_tokens) / sum(spec_verify_ct) over the ok
      requests (never ``/server_info``'s lifetime ``avg_spec_accept_length``); None
      without speculation
    - ``cycle_ms``: median per-request cycle time (decode time / spec_verify_ct, or per
      decode step)
    - server side: :data:`SERVER_TIMING_KEYS` copied from ``server`` (None if absent),
      ``server_step_ms`` = median of ``server["step_time_ms"]`` entries if given (the median
      because the first entry of a window covers the idle gap before it: SGLang's step clock
      is not reset while idle, ``metrics_reporter.py`` ~942; every entry is wall time per
      decode iteration *including* the prefill passes interleaved in its interval, so it
      reads above the GPU cycle when requests arrive during the window), and
      ``server`` (the whole dict, with raw deltas)
    - ``token_accounting_ok``: every ok request's chunk tokens sum to completion_tokens

    :param records: client records of the run (warm-up excluded by the caller).
    :param wall_s: measured window, seconds (> 0), e.g. :func:`measured_window_s`.
    :param server: optional :func:`server_timing` output, optionally with a
        ``"step_time_ms"`` entry from :func:`step_time_ms`.
    :returns: flat dict of the keys above plus ``completion_tokens_total``, ``wall_s``,
        ``speculative``, ``mode``/``concurrency``/``repeat`` (when the records agree).
    :raises ValueError: ``wall_s`` not positive.
    """
    if not wall_s or wall_s <= 0:
        raise ValueError(f"wall_s={wall_s}: must be a positive duration in seconds")
    per = [request_metrics(r) for r in records]
    ok = [m for m in per if m["ok"]]
    n = len(records)
    not_sent = sum(1 for r in records if not r.get("ok") and r.get("t_send") is None)
    tokens = sum(m["completion_tokens"] or 0 for m in ok)
    out: dict[str, Any] = {}
    for key in ("mode", "concurrency", "repeat"):
        vals = {r.get(key) for r in records}
        out[key] = vals.pop() if len(vals) == 1 else None
    out.update(
        requests=n,
        ok=len(ok),
        errors=n - len(ok),
        not_sent=not_sent,
        error_rate=(n - len(ok)) / n if n else None,
        wall_s=wall_s,
        completion_tokens_total=tokens,
        output_tok_s=tokens / wall_s,
        decode_tok_s=_median([m["decode_tok_s"] for m in ok if m["decode_tok_s"] is not None]),
    )
    for metric in LATENCY_METRICS:
        if metric in ("itl_ms", "icl_ms"):
            vals = [v for m in ok for v in m[metric]]
        elif metric == "dispatch_delay_ms":
            vals = [m[metric] for m in per if m[metric] is not None]
        else:
            vals = [m[metric] for m in ok if m[metric] is not None]
        out[f"mean_{metric}"] = float(np.mean(vals)) if vals else None
        for q in (50, 90, 99):
            out[f"p{q}_{metric}"] = _pct(vals, q)
    spec = [m for m in ok if m["speculative"]]
    out["speculative"] = bool(spec)
    verify_total = sum(m["spec_verify_ct"] for m in spec)
    out["accept_length"] = sum(m["completion_tokens"] for m in spec) / verify_total if verify_total else None
    out["cycle_ms"] = _median([m["cycle_ms"] for m in ok if m["cycle_ms"] is not None])
    out["token_accounting_ok"] = all(m["token_accounting_ok"] for m in ok)
    server = dict(server or {})
    for key in SERVER_TIMING_KEYS:
        out[key] = server.get(key)
    steps = server.get("step_time_ms")
    flat = [v for vs in steps.values() for v in vs] if steps else []
    # Median, not mean: SGLang does not reset the step clock while idle
    # (metrics_reporter.py ~942: last_decode_stats_tic), so a window's first entry spans the
    # idle gap before it (warm-up end to the first measured request) and reads high.
    out["server_step_ms"] = _median(flat) if flat else None
    out["server_step_entries"] = len(flat)
    out["server"] = server
    return out
