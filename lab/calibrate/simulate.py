"""A virtual-clock replay of one measured run: the scheduler loop of the emulator, with costs and
acceptance given, no sleeping.

The loop is the emulator's (:mod:`lab.emulator.engine`, ``Engine._iterate``), which follows
SGLang's scheduler order: at each iteration boundary, requests that have arrived are admitted up
to ``max_running_requests``; if any were admitted, one prefill (extend) iteration runs for all of
them and each gets its first token; otherwise one decode step (one token per running request)
or one speculative cycle (each request gets its accept length, cut to the tokens it still
needs). Every decode iteration also costs the scheduler overhead (a prefill's wall time is given
whole); iterations chain (the next starts
when the previous ends) while there is work, and the engine idles until the next arrival
otherwise.

The client side follows :mod:`lab.measure.client`: closed loop at concurrency ``c`` sends the
first ``c`` requests at once (the first ``first_group`` of them reach the first prefill, the
others the next one, as measured: :attr:`lab.calibrate.observe.Observations.first_prefill_group`)
and each later request when one finishes (after ``turnaround_ms``); open loop sends request
``i`` at ``arrivals[i]`` (:func:`lab.workload.arrivals.arrival_times`), capped at
``rate_max_concurrency`` in flight when set.

:func:`simulate_run` returns the run's metrics defined as the lab measures them (DESIGN.md,
"Measurement definitions"; :func:`lab.measure.records.summarize_run`): ``decode_tok_s`` = median
over requests of ``(N - 1) / (t_last - t_first)``, ``output_tok_s`` = total tokens / (last end -
first send), ``accept_length`` = sum N / sum verify cycles, ``verify_ms`` / ``draft_ms`` /
``decode_ms`` = device time per decode iteration.

Chunk delivery delay is the same for every chunk and cancels out of every metric except the end
times, where ``turnaround_ms`` stands for it.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

__all__ = ["SimRequest", "Costs", "ProfileCosts", "chain_sampler", "simulated_sampler", "simulate_run"]


@dataclass
class SimRequest:
    """One request: ``prompt_tokens`` (its KV at admission), ``new_prompt_tokens`` (what its
    prefill computes: the prompt minus a cached prefix), ``max_tokens`` (completion length)."""

    prompt_tokens: int
    new_prompt_tokens: int
    max_tokens: int


class Costs(Protocol):
    """Per-iteration device times (ms) and scheduler overhead (ms) of one configuration.
    :meth:`prefill` is a prefill iteration's whole wall time (device and scheduling); a decode or
    speculative iteration is :meth:`overhead` plus its device time."""

    def prefill(self, new_tokens: int) -> float: ...

    def decode(self, batch: int, kv_k: float) -> float: ...

    def spec(self, batch: int, kv_k: float) -> tuple[float, float]:
        """``(verify_ms, draft_ms)`` of one speculative cycle."""
        ...

    def overhead(self, batch: int) -> float: ...


Sampler = Callable[[random.Random, int], list[int]]


def chain_sampler(alphas: list[float]) -> Sampler:
    """Accept lengths of a chain draft: draft token j is accepted with probability ``alphas[j-1]``
    given tokens 1..j-1 were (each request independently); length = 1 + accepted drafts
    (:mod:`lab.emulator.acceptance`, chain model)."""
    def draw(rng: random.Random, batch: int) -> list[int]:
        out = []
        for _ in range(batch):
            n = 1
            for a in alphas:
                if rng.random() < a:
                    n += 1
                else:
                    break
            out.append(n)
        return out
    return draw


def simulated_sampler(accept_length: float, max_len: int) -> Sampler:
    """``SGLANG_SIMULATE_ACC_LEN``: one length per cycle for the whole batch, ``floor(x)`` or
    ``floor(x) + 1`` with probability ``x - floor(x)``, clamped to ``[1, max_len]`` (SGLang
    ``speculative/spec_utils.py`` ~505-559, as :class:`lab.emulator.acceptance.AcceptanceModel`)."""
    x = max(1.0, min(float(max_len), accept_length))
    lo = int(math.floor(x))

    def draw(rng: random.Random, batch: int) -> list[int]:
        n = lo + 1 if lo < max_len and rng.random() < x - lo else lo
        return [n] * batch
    return draw


@dataclass
class _Req:
    spec: SimRequest
    idx: int
    send: float = 0.0
    arrival: float = 0.0
    ct: int = 0
    cycles: int = 0
    t_first: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    chunks: list | None = None


def simulate_run(requests: list[SimRequest], costs: Costs, *, sampler: Sampler | None, rng: random.Random,
                 concurrency: int, arrivals_s: list[float] | None = None, max_running: int = 48,
                 first_group: int | None = None, turnaround_ms: float = 0.5, latency_ms: float = 0.0,
                 rate_max_concurrency: int = 0, trace: list[dict] | None = None) -> dict[str, float | None]:
    """Replay one run (module docstring); times in ms.

    :param requests: in the order the client sends them.
    :param sampler: accept lengths per cycle (None: no speculation, plain decode steps).
    :param concurrency: closed-loop concurrency (ignored when ``arrivals_s`` is given).
    :param arrivals_s: open-loop send offsets (s), one per request.
    :param first_group: closed loop: how many of the first burst share the first prefill (default all).
    :param turnaround_ms: closed loop: the client's gap from a request's end to the next send.
    :param latency_ms: from a send to the scheduler seeing the request (HTTP, tokenization).
    :param trace: when given, one dict per request is appended: ``send_ms``, ``chunks`` (``[(t_ms,
        tokens)]``, one per iteration that gave it tokens), ``cycles``, ``tokens``.
    :returns: ``decode_tok_s``, ``output_tok_s``, ``accept_length``, ``verify_ms``, ``draft_ms``,
        ``decode_ms``, ``cycle_ms`` (median per request), ``iterations``, ``mean_batch``.
    :raises ValueError: no requests, or ``arrivals_s`` of another length.
    """
    if not requests:
        raise ValueError("simulate_run: no requests")
    reqs = [_Req(r, i, chunks=[] if trace is not None else None) for i, r in enumerate(requests)]
    heap: list[tuple[float, int]] = []
    eps = 1e-6
    next_send = 0
    in_flight = 0
    if arrivals_s is not None:
        if len(arrivals_s) != len(reqs):
            raise ValueError(f"simulate_run: {len(arrivals_s)} arrivals for {len(reqs)} requests")
        cap = rate_max_concurrency or len(reqs)
        backlog = deque(reqs)
    else:
        cap = max(1, concurrency)
        backlog = deque()
        group = len(reqs) if first_group is None else max(1, first_group)
        for r in reqs[:cap]:
            r.send = 0.0
            r.arrival = latency_ms + (0.0 if r.idx < group else eps)
            heapq.heappush(heap, (r.arrival, r.idx))
            in_flight += 1
        next_send = min(cap, len(reqs))

    freed_at = 0.0  # open loop with a cap: when the last slot was freed

    def release(now: float) -> None:
        """Open loop: send every request whose time has come and that the cap allows (a request
        held back by the cap is sent when a slot frees)."""
        nonlocal in_flight
        while backlog and in_flight < cap and arrivals_s[backlog[0].idx] * 1e3 + latency_ms <= now + 1e-9:
            r = backlog.popleft()
            r.send = max(arrivals_s[r.idx] * 1e3, freed_at)
            r.arrival = r.send + latency_ms
            heapq.heappush(heap, (r.arrival, r.idx))
            in_flight += 1

    t = 0.0
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    verify_total = draft_total = decode_total = 0.0
    decode_iters = 0
    batch_sum = 0
    done = 0
    while done < len(reqs):
        if arrivals_s is not None:
            release(t)
        while heap and heap[0][0] <= t + 1e-12:
            waiting.append(reqs[heapq.heappop(heap)[1]])
        if not waiting and not running:
            nxt = heap[0][0] if heap else None
            if arrivals_s is not None and backlog and in_flight < cap:
                due = arrivals_s[backlog[0].idx] * 1e3 + latency_ms
                nxt = due if nxt is None else min(nxt, due)
            if nxt is None:
                break
            t = max(t, nxt)
            continue
        free = max_running - len(running)
        new = [waiting.popleft() for _ in range(min(free, len(waiting)))]
        finished: list[_Req] = []
        if new:
            t += costs.prefill(sum(r.spec.new_prompt_tokens for r in new))
            for r in new:
                r.ct, r.t_first, r.t_last = 1, t, t
                if r.chunks is not None:
                    r.chunks.append((t, 1))
                running.append(r)
                if r.ct >= r.spec.max_tokens:
                    finished.append(r)
        else:
            b = len(running)
            kv_k = sum(r.spec.prompt_tokens + r.ct for r in running) / 1e3
            if sampler is None:
                dev = costs.decode(b, kv_k)
                decode_total += dev
                grants = [1] * b
            else:
                v, d = costs.spec(b, kv_k)
                verify_total += v
                draft_total += d
                dev = v + d
                grants = sampler(rng, b)
            t += costs.overhead(b) + dev
            decode_iters += 1
            batch_sum += b
            for r, g in zip(running, grants):
                g = min(g, r.spec.max_tokens - r.ct)
                r.ct += g
                if r.chunks is not None:
                    r.chunks.append((t, g))
                r.cycles += 1
                r.t_last = t
                if r.ct >= r.spec.max_tokens:
                    finished.append(r)
        if finished:
            gone = set(id(r) for r in finished)
            running = [r for r in running if id(r) not in gone]
            freed_at = t
            for r in finished:
                r.t_end = t
                done += 1
                in_flight -= 1
                if arrivals_s is None and next_send < len(reqs):
                    nr = reqs[next_send]
                    next_send += 1
                    nr.send = t + turnaround_ms
                    nr.arrival = nr.send + latency_ms + eps
                    heapq.heappush(heap, (nr.arrival, nr.idx))
                    in_flight += 1
    if trace is not None:
        trace.extend({"send_ms": r.send, "chunks": r.chunks, "cycles": r.cycles, "tokens": r.ct} for r in reqs)
    per_req = [((r.ct - 1) / ((r.t_last - r.t_first) / 1e3)) for r in reqs
               if r.t_last is not None and r.t_first is not None and r.ct >= 2 and r.t_last > r.t_first]
    cycles = [((r.t_last - r.t_first) / r.cycles) for r in reqs if r.cycles and r.t_last > r.t_first]
    tokens = sum(r.ct for r in reqs)
    span = max(r.t_end for r in reqs) - min(r.send for r in reqs)
    spec_cycles = sum(r.cycles for r in reqs)
    return {
        "decode_tok_s": statistics.median(per_req) if per_req else None,
        "output_tok_s": tokens / (span / 1e3) if span > 0 else None,
        "accept_length": (tokens / spec_cycles) if (sampler is not None and spec_cycles) else None,
        "verify_ms": verify_total / decode_iters if (sampler is not None and decode_iters) else None,
        "draft_ms": draft_total / decode_iters if (sampler is not None and decode_iters) else None,
        "decode_ms": decode_total / decode_iters if (sampler is None and decode_iters) else None,
        "cycle_ms": statistics.median(cycles) if cycles else None,
        "iterations": float(decode_iters),
        "mean_batch": batch_sum / decode_iters if decode_iters else None,
    }


class ProfileCosts:
    """:class:`Costs` straight from an emulator cost profile (:class:`lab.emulator.profile.CostProfile`),
    with the emulator's graph rule (a batch up to ``graph_max_bs`` replays a graph; verify only if
    the attention mode is graph-captured). Used to check the replay against the emulator itself and
    to synthesise results in tests. ``booked``: device ms per forward category so far, as the
    emulator books them (``lab/emulator/engine.py``; the draft-extend as ``extend`` when
    ``draft_extend_graph`` is False); ``passes``: decode iterations by graph use, and prefills.

    :param num_steps, num_draft_tokens, attention_mode: the speculative configuration (None: baseline).
    """

    def __init__(self, profile, *, graph_max_bs: int = 48, num_steps: int | None = None,
                 num_draft_tokens: int | None = None, attention_mode: str | None = None,
                 draft_extend_graph: bool = True) -> None:
        self.p, self.gmax = profile, graph_max_bs
        self.steps, self.tokens, self.mode = num_steps, num_draft_tokens, attention_mode
        self.ext_graph = draft_extend_graph
        self.booked: dict[str, float] = {}
        self.passes = {"decode_cuda_graph": 0, "decode_none": 0, "prefill_none": 0}

    def _book(self, cat: str, ms: float) -> float:
        self.booked[cat] = self.booked.get(cat, 0.0) + ms
        return ms

    def prefill(self, new_tokens: int) -> float:
        self.passes["prefill_none"] += 1
        return self._book("extend", self.p.prefill_s(new_tokens) * 1e3) + self.p.overhead_s * 1e3

    def decode(self, batch: int, kv_k: float) -> float:
        g = batch <= self.gmax
        self.passes["decode_cuda_graph" if g else "decode_none"] += 1
        return self._book("decode", self.p.decode_s(batch, int(kv_k * 1e3), g) * 1e3)

    def spec(self, batch: int, kv_k: float) -> tuple[float, float]:
        g = batch <= self.gmax
        vg = g and self.p.verify_graph_captured(self.mode)
        self.passes["decode_cuda_graph" if vg else "decode_none"] += 1
        v = self._book("target_verify", self.p.verify_s(batch, self.tokens, int(kv_k * 1e3), self.mode, vg) * 1e3)
        d, e = (x * 1e3 for x in self.p.draft_parts_s(batch, self.steps))
        self._book("eagle_draft" if g else "decode", d)
        self._book("eagle_draft_extend" if (g and self.ext_graph) else "extend", e)
        return v, d + e

    def overhead(self, batch: int) -> float:
        return self.p.overhead_s * 1e3
