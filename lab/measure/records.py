"""Client request records: per-request latency metrics and the per-run summary.

Every definition follows DESIGN.md, "Measurement definitions"; names carry units
(``_ms``, ``_s``, ``_tok_s``). Input: the client's request records (``docs/contracts.md``,
produced by :mod:`lab.measure.client`), plus, for :func:`summarize_run`, the server-side
timing already derived from the ``/metrics`` scrapes (:mod:`lab.measure.prometheus`) and
``/server_info`` (:mod:`lab.measure.server_info`). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from lab.measure.prometheus import SERVER_TIMING_KEYS
from lab.measure.request_record import RequestRecord, as_record, as_records

__all__ = ["LATENCY_METRICS", "RequestMetrics", "RunSummary", "request_metrics", "measured_window_s", "summarize_run"]

#: Latency metrics summarized per run (percentiles p50/p90/p99 and mean).
LATENCY_METRICS = ("ttft_ms", "itl_ms", "icl_ms", "tpot_ms", "e2e_ms", "dispatch_delay_ms")


def _as_dict(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, in field order, values shared (not copied as ``asdict`` does)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass(kw_only=True)
class RequestMetrics:
    """Per-request metrics of one client record (:func:`request_metrics` gives the definitions).

    :ivar ok: the request completed. :ivar completion_tokens: the server's count (tokens), None
        without one. :ivar spec_verify_ct: verify passes of a speculative request, None otherwise.
    :ivar speculative: ``spec_verify_ct`` was reported and > 0. :ivar n_chunks: content chunks.
    :ivar chunk_tokens: tokens summed over the chunks. :ivar token_accounting_ok: chunk tokens
        equal ``completion_tokens``.
    :ivar ttft_ms: time to first token (ms). :ivar icl_ms: gaps between consecutive chunks (ms).
    :ivar itl_ms: per-token inter-token latencies (ms). :ivar tpot_ms: time per output token
        after the first (ms). :ivar decode_tok_s: decode speed (tokens/s). :ivar e2e_ms: send to
        end (ms). :ivar dispatch_delay_ms: due to sent (ms). :ivar cycle_ms: decode time per
        verify pass or decode step (ms). :ivar accept_length: tokens per verify pass.

    A value that cannot be computed (failed request, a single token, no chunks) is None; the
    lists are then empty.
    """

    ok: bool
    completion_tokens: int | None
    spec_verify_ct: int | None
    speculative: bool
    n_chunks: int
    chunk_tokens: int
    token_accounting_ok: bool
    ttft_ms: float | None = None
    icl_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    tpot_ms: float | None = None
    decode_tok_s: float | None = None
    e2e_ms: float | None = None
    dispatch_delay_ms: float | None = None
    cycle_ms: float | None = None
    accept_length: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, in the order above (what :func:`request_metrics` returned as a dict)."""
        return _as_dict(self)


@dataclass(kw_only=True)
class RunSummary:
    """Summary of one (mode, concurrency, repeat) run (:func:`summarize_run` gives the definitions).

    Counts: ``requests``, ``ok``, ``errors``, ``not_sent`` (requests); ``error_rate`` (errors /
    requests). ``wall_s``: the measured window (s). ``completion_tokens_total`` (tokens of ok
    requests), ``output_tok_s`` (tokens/s over the window), ``decode_tok_s`` (median per-request
    decode speed, tokens/s). For each of :data:`LATENCY_METRICS` (ms): ``mean_<m>``, ``p50_<m>``,
    ``p90_<m>``, ``p99_<m>``. ``speculative``, ``accept_length`` (tokens per verify pass),
    ``cycle_ms`` (median per-request cycle, ms), ``token_accounting_ok``. Server side (copied from
    :func:`lab.measure.prometheus.server_timing`, :data:`lab.measure.prometheus.SERVER_TIMING_KEYS`):
    ``verify_ms``, ``draft_ms``, ``decode_ms``, ``gpu_cycle_ms`` (ms), ``verify_share`` (0..1),
    ``verify_graph_fraction`` (0..1), ``decode_iterations``; ``server_step_ms`` (median
    ``/server_info`` step time, ms), ``server_step_entries`` (its entries) and ``server`` (the
    whole server dict, raw deltas included). ``mode``/``concurrency``/``repeat``: the records'
    own, None when they disagree. None: not computable (no ok request, no speculation, no server
    data). Every field is required: :func:`summarize_run` sets them all.
    """

    mode: str | None
    concurrency: int | None
    repeat: int | None
    requests: int
    ok: int
    errors: int
    not_sent: int
    error_rate: float | None
    wall_s: float
    completion_tokens_total: int
    output_tok_s: float
    decode_tok_s: float | None
    mean_ttft_ms: float | None
    p50_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_itl_ms: float | None
    p50_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    mean_icl_ms: float | None
    p50_icl_ms: float | None
    p90_icl_ms: float | None
    p99_icl_ms: float | None
    mean_tpot_ms: float | None
    p50_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_e2e_ms: float | None
    p50_e2e_ms: float | None
    p90_e2e_ms: float | None
    p99_e2e_ms: float | None
    mean_dispatch_delay_ms: float | None
    p50_dispatch_delay_ms: float | None
    p90_dispatch_delay_ms: float | None
    p99_dispatch_delay_ms: float | None
    speculative: bool
    accept_length: float | None
    cycle_ms: float | None
    token_accounting_ok: bool
    verify_ms: float | None
    draft_ms: float | None
    decode_ms: float | None
    gpu_cycle_ms: float | None
    verify_share: float | None
    verify_graph_fraction: float | None
    decode_iterations: float | None
    server_step_ms: float | None
    server_step_entries: int
    server: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The ``runs.json`` / ``window.json`` keys of the summary, in the order above (a row
        then gains the point's own keys: :func:`lab.measure.point.measure_point`)."""
        return _as_dict(self)



def request_metrics(record: RequestRecord | Mapping[str, Any]) -> RequestMetrics:
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

    :param record: one client record (docs/contracts.md), or a ``requests.jsonl`` row read from a
        file (:meth:`lab.measure.request_record.RequestRecord.from_json`).
    :returns: :class:`RequestMetrics`: the metrics above plus ``ok``, ``completion_tokens``,
        ``spec_verify_ct``, ``n_chunks``, ``chunk_tokens``; a value that cannot be computed
        (failed request, a single token, no chunks) is None (lists are empty).
    """
    record = as_record(record)
    chunks = record.chunks or []
    n_tok = record.completion_tokens
    meta = record.meta_info or {}
    verify_ct = meta.get("spec_verify_ct")
    speculative = bool(verify_ct)
    t_send, t_end, t_dispatch = record.t_send, record.t_end, record.t_dispatch
    chunk_tokens = sum(int(c[1]) for c in chunks)
    out = RequestMetrics(
        ok=bool(record.ok),
        completion_tokens=n_tok,
        spec_verify_ct=verify_ct if speculative else None,
        speculative=speculative,
        n_chunks=len(chunks),
        chunk_tokens=chunk_tokens,
        token_accounting_ok=n_tok is not None and chunk_tokens == n_tok,
    )
    if t_send is not None and t_dispatch is not None:
        out.dispatch_delay_ms = (t_send - t_dispatch) * 1e3
    if not out.ok or not chunks or t_send is None or t_end is None:
        return out
    t_first, t_last = chunks[0][0], chunks[-1][0]
    ttft_s = t_first - t_send
    e2e_s = t_end - t_send
    out.ttft_ms = ttft_s * 1e3
    out.e2e_ms = e2e_s * 1e3
    icl: list[float] = []
    itl: list[float] = []
    for (t0, _), (t1, n) in zip(chunks, chunks[1:]):
        gap_ms = (t1 - t0) * 1e3
        icl.append(gap_ms)
        if n > 0:  # content chunks always carry >= 1 token (docs/contracts.md)
            itl.extend([gap_ms / n] * int(n))
    out.icl_ms = icl
    out.itl_ms = itl
    if n_tok is not None and n_tok >= 2:
        out.tpot_ms = (e2e_s - ttft_s) * 1e3 / (n_tok - 1)
        decode_s = t_last - t_first
        if decode_s > 0:
            out.decode_tok_s = (n_tok - 1) / decode_s
            steps = verify_ct if speculative else n_tok - 1
            out.cycle_ms = decode_s * 1e3 / steps
    if speculative and n_tok is not None:
        out.accept_length = n_tok / verify_ct
    return out


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def measured_window_s(records: Sequence[RequestRecord | Mapping[str, Any]]) -> float | None:
    """Wall time of a run from its records (:class:`~lab.measure.request_record.RequestRecord`,
    or rows read from a file): max(t_end) - min(t_dispatch), seconds.

    Records never sent (``t_dispatch`` None) are ignored; None if no record was sent.
    """
    records = as_records(records)
    starts = [r.t_dispatch for r in records if r.t_dispatch is not None]
    ends = [r.t_end for r in records if r.t_end is not None]
    if not starts or not ends:
        return None
    return max(ends) - min(starts)


def summarize_run(
    records: Sequence[RequestRecord | Mapping[str, Any]],
    *,
    wall_s: float,
    server: Mapping[str, Any] | None = None,
) -> RunSummary:
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

    :param records: client records of the run (warm-up excluded by the caller), or rows read
        from a ``requests.jsonl``.
    :param wall_s: measured window, seconds (> 0), e.g. :func:`measured_window_s`.
    :param server: optional :func:`lab.measure.prometheus.server_timing` output, optionally with a
        ``"step_time_ms"`` entry from :func:`lab.measure.server_info.step_time_ms`.
    :returns: :class:`RunSummary`: the keys above plus ``completion_tokens_total``, ``wall_s``,
        ``speculative``, ``mode``/``concurrency``/``repeat`` (when the records agree);
        :meth:`RunSummary.to_dict` is its ``runs.json`` content.
    :raises ValueError: ``wall_s`` not positive.
    """
    if not wall_s or wall_s <= 0:
        raise ValueError(f"wall_s={wall_s}: must be a positive duration in seconds")
    records = as_records(records)
    per = [request_metrics(r) for r in records]
    ok = [m for m in per if m.ok]
    n = len(records)
    not_sent = sum(1 for r in records if not r.ok and r.t_send is None)
    tokens = sum(m.completion_tokens or 0 for m in ok)
    out: dict[str, Any] = {}
    for key in ("mode", "concurrency", "repeat"):
        vals = {getattr(r, key) for r in records}
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
        decode_tok_s=_median([m.decode_tok_s for m in ok if m.decode_tok_s is not None]),
    )
    for metric in LATENCY_METRICS:
        if metric in ("itl_ms", "icl_ms"):
            vals = [v for m in ok for v in getattr(m, metric)]
        elif metric == "dispatch_delay_ms":
            vals = [getattr(m, metric) for m in per if getattr(m, metric) is not None]
        else:
            vals = [getattr(m, metric) for m in ok if getattr(m, metric) is not None]
        out[f"mean_{metric}"] = float(np.mean(vals)) if vals else None
        for q in (50, 90, 99):
            out[f"p{q}_{metric}"] = _pct(vals, q)
    spec = [m for m in ok if m.speculative]
    out["speculative"] = bool(spec)
    verify_total = sum(m.spec_verify_ct for m in spec)
    out["accept_length"] = sum(m.completion_tokens for m in spec) / verify_total if verify_total else None
    out["cycle_ms"] = _median([m.cycle_ms for m in ok if m.cycle_ms is not None])
    out["token_accounting_ok"] = all(m.token_accounting_ok for m in ok)
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
    return RunSummary(**out)
