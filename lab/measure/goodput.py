"""Goodput and the other load metrics of one run, judged under ``bench.slo``.

Definitions (one place; the bench stage and the comparison both call these):

- A request is **good** when it succeeded and meets every limit of ``bench.slo``: its
  ``ttft_ms`` <= ``slo.ttft_ms`` and its ``tpot_ms`` <= ``slo.tpot_ms`` (per request, as
  :func:`lab.measure.records.request_metrics` defines them; a 1-token request has TPOT 0).
  This is vLLM's goodput rule (``vllm/benchmarks/serve.py`` ``calculate_metrics``:
  ``is_good_req = all(s >= r ...)`` over the SLO'd per-request metrics, TPOT 0 when
  ``output_len <= 1``), also AIPerf's ``goodput`` (requests meeting every ``--goodput``
  constraint per second).
- At an open-loop rate point TTFT is judged **from the scheduled send time** (``t_scheduled``,
  :mod:`lab.measure.client`), not from ``t_send``: a request the client sent late (it fell behind
  its schedule, or a ``bench.rate_max_concurrency`` slot kept it waiting) was late for its user,
  so the lag counts against the SLO. At a closed-loop point there is no schedule and TTFT counts
  from ``t_send`` (:func:`lab.measure.records.request_metrics`). The run's reported
  ``p50_ttft_ms`` stays from ``t_send`` (what the server can be held to; the accuracy check
  compares it with the emulator's arrival stamps); ``p99_schedule_lag_ms`` is the difference, and
  :func:`lab.measure.hygiene.hygiene_warnings` warns above
  :data:`lab.measure.hygiene.SCHEDULE_LAG_WARN_MS`.
- ``goodput_req_s`` = good requests / the run's **measured** window (``wall_s``,
  :func:`lab.measure.records.measured_window_s`: first dispatch to last end), at every point,
  closed loop and rate points alike: vLLM's ``request_goodput = good_completed / dur_s``
  (``vllm/benchmarks/serve.py`` ``calculate_metrics``; ``dur_s`` is the benchmark's measured
  duration). ``goodput_tok_s`` = output tokens of the good requests / the same window (the token
  form). Good requests are ok requests, so ``goodput_req_s <= request_throughput_req_s`` always
  (a test). A rate point with few requests has a window that includes the drain after the last
  arrival, so a mode that drains faster serves more good requests per second even when every
  request of both modes met the SLO; ``slo_attainment`` is the share that met it, whatever the
  window.
- ``slo_attainment`` = good / requests sent (errors count as not good);
  ``request_throughput_req_s`` = ok requests / measured window.
- ``output_tok_s_per_user``: mean over ok requests of completion_tokens / e2e seconds (the
  tokens per second one user sees, TTFT included): the x axis of the Pareto figure, whose y
  is the run's total ``output_tok_s`` (tokens/s per user against total tokens/s: the
  throughput-interactivity trade-off inference teams plot for each configuration).
- ``p99_schedule_lag_ms`` (rate points): p99 of ``t_send - t_scheduled``: how far behind
  the arrival schedule requests left the client (a concurrency cap's queueing included;
  the client's own share is ``dispatch_delay_ms``). Both are warned about by
  :func:`lab.measure.hygiene.hygiene_warnings`, each with its fix.

The comparison of these across modes (goodput speedups, the Pareto frontier, "beats up to N
req/s") is :mod:`lab.analysis.load`; the metrics' declarations (units, intervals, where shown)
are :mod:`lab.catalog` (source ``load``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lab.measure.records import request_metrics
from lab.measure.request_record import RequestRecord, as_record, as_records

__all__ = ["DEFINITION_VERSION", "is_good", "run_load_metrics", "ttft_from_schedule_ms"]

#: Version of the load metrics' definitions above, written beside them (``result.json``
#: ``load.goodput_definition``, the comparison's ``load``, ``summary.csv``): 1 = goodput over the
#: offered schedule (before the redefinition; it could exceed the measured request throughput),
#: 2 = good requests / the measured window (this module). Bump it when a definition changes.
DEFINITION_VERSION = 2


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


def ttft_from_schedule_ms(record: RequestRecord | Mapping[str, Any]) -> float | None:
    """TTFT of one open-loop request counted from its scheduled send time, ms: first content
    chunk minus ``t_scheduled`` (module docstring). Falls back to ``t_send`` when the record has
    no schedule (a closed-loop record); None for a failed request or one without chunks."""
    record = as_record(record)
    chunks = record.chunks or []
    start = record.t_scheduled
    if start is None:
        start = record.t_send
    if not record.ok or not chunks or start is None:
        return None
    return (chunks[0][0] - start) * 1e3


def run_load_metrics(records: Sequence[RequestRecord | Mapping[str, Any]], wall_s: float, slo: Any,
                     rate_req_s: float | None = None) -> dict[str, Any]:
    """The load metrics of one run (module docstring for the definitions).

    :param records: client records of the run (:mod:`lab.measure.client`), or rows read from a
        ``requests.jsonl``.
    :param wall_s: the run's measured window, seconds (> 0; :func:`lab.measure.records.measured_window_s`).
    :param slo: ``bench.slo`` (or a mapping with ``ttft_ms``/``tpot_ms``).
    :param rate_req_s: the offered rate of an open-loop point (None: a closed-loop point); at a
        rate point TTFT is judged from each record's ``t_scheduled`` (module docstring).
    :returns: ``{metric: value}``; ``p99_schedule_lag_ms`` None without ``t_scheduled``,
        ``output_tok_s_per_user`` None without an ok request.
    :raises ValueError: ``wall_s`` not positive, ``rate_req_s`` not > 0.
    """
    if not wall_s or wall_s <= 0:
        raise ValueError(f"wall_s={wall_s}: must be a positive duration in seconds")
    if rate_req_s is not None and not rate_req_s > 0:
        raise ValueError(f"rate_req_s={rate_req_s}: must be > 0 requests/s")
    records = as_records(records)
    good = good_tok = ok = 0
    per_user: list[float] = []
    for r in records:
        m = request_metrics(r)
        if not m.ok:
            continue
        ok += 1
        n = m.completion_tokens or 0
        if m.e2e_ms:
            per_user.append(n / (m.e2e_ms / 1e3))
        tpot = m.tpot_ms if n > 1 else 0.0
        ttft = ttft_from_schedule_ms(r) if rate_req_s is not None else m.ttft_ms
        if ttft is not None and is_good(ttft, tpot, slo):
            good += 1
            good_tok += n
    lags = [(r.t_send - r.t_scheduled) * 1e3 for r in records
            if r.t_scheduled is not None and r.t_send is not None]
    return {"goodput_req_s": good / wall_s, "goodput_tok_s": good_tok / wall_s,
            "slo_attainment": good / len(records) if records else None,
            "request_throughput_req_s": ok / wall_s,
            "output_tok_s_per_user": float(np.mean(per_user)) if per_user else None,
            "p99_schedule_lag_ms": float(np.percentile(lags, 99)) if lags else None}
