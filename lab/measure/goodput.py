"""Goodput and the other load metrics of one run, judged under ``bench.slo``.

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

The comparison of these across modes (goodput speedups, the Pareto frontier, "beats up to N
req/s") is :mod:`lab.analysis.load`; the metrics' declarations (units, intervals, where shown)
are :mod:`lab.catalog` (source ``load``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lab.measure.records import request_metrics

__all__ = ["is_good", "run_load_metrics"]


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
    """The load metrics of one run (module docstring for the definitions).

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
