"""Open-loop arrival schedules: when each request of a request-rate point is due.

Production traffic arrives at a rate, not at a fixed concurrency. A rate point ``r<R>``
(``bench.request_rates``) sends request ``i`` at ``t0 + arrivals[i]`` whether or not earlier
requests have finished (optionally capped by ``bench.rate_max_concurrency``;
:func:`lab.measure.client.run_requests` with ``arrivals=``).

Inter-arrival times follow vLLM's ``vllm bench serve`` (``vllm/benchmarks/serve.py``,
``get_request``): gamma-distributed with ``shape = burstiness`` and
``scale = 1 / (rate * burstiness)``, so the mean interval is ``1 / rate`` at every
burstiness; ``burstiness = 1`` is a Poisson process (exponential intervals), ``< 1`` is
burstier, ``> 1`` more uniform. The coefficient of variation of an interval is
``1 / sqrt(burstiness)``. SGLang's ``bench_serving.py`` (``--request-rate``) draws
exponential intervals the same way. Two differences from vLLM, both stated: the first
request is due at 0 (vLLM delays it by one drawn interval, which only shifts the schedule),
and the intervals are not rescaled to make the last arrival exactly ``n / rate`` (vLLM
does, to steady throughput across seeds; here the repeats' spread is part of the interval
the lab reports).

Seeded: ``numpy.random.default_rng(seed)``, with ``seed = bench.seed + repeat`` in
:mod:`lab.pipeline.bench`, so every mode of a comparison sees the same arrivals.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["arrival_times", "rate_key", "interarrival_cv"]


def arrival_times(n: int, rate_req_s: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seeded arrival offsets (seconds from the start of the point) of ``n`` requests.

    ``arrivals[0] = 0``; ``arrivals[i] = sum of i intervals`` drawn from
    ``Gamma(shape=burstiness, scale=1 / (rate_req_s * burstiness))`` (vLLM
    ``vllm/benchmarks/serve.py`` ``get_request``; module docstring).

    :param n: number of requests (>= 0).
    :param rate_req_s: mean request rate, requests/s (> 0, finite).
    :param burstiness: gamma shape (> 0, finite); 1.0 = Poisson.
    :param seed: RNG seed; the same arguments give the same list.
    :returns: ``n`` non-decreasing floats, seconds.
    :raises ValueError: ``n < 0``, a non-positive or non-finite rate or burstiness.
    """
    if n < 0:
        raise ValueError(f"arrival_times: n={n}. Fix: n >= 0")
    if not (math.isfinite(rate_req_s) and rate_req_s > 0):
        raise ValueError(f"arrival_times: rate_req_s={rate_req_s}. Fix: a finite rate > 0 requests/s, e.g. 4")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"arrival_times: burstiness={burstiness}. Fix: a finite gamma shape > 0 (1.0 = Poisson)")
    if n == 0:
        return []
    gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate_req_s * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def interarrival_cv(burstiness: float) -> float:
    """Coefficient of variation of one inter-arrival interval: ``1 / sqrt(burstiness)``
    (gamma with shape k: mean k*theta, sd sqrt(k)*theta).

    :raises ValueError: burstiness not > 0.
    """
    if not burstiness > 0:
        raise ValueError(f"interarrival_cv: burstiness={burstiness}. Fix: > 0")
    return 1.0 / math.sqrt(burstiness)


def rate_key(rate_req_s: float) -> str:
    """``"r4"`` (4 req/s), ``"r0.5"``: the key of a request-rate point in metrics.json, the
    comparison and MLflow metric names, beside the closed-loop ``"c8"``. ``:g`` formatting,
    so ``4.0`` and ``4`` give the same key."""
    return f"r{float(rate_req_s):g}"
