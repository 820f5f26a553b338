"""Workload hygiene: warm-up until stable, degenerate outputs, token accounting, dispatch delay.

Four checks that keep a run's numbers honest (issue 4, "Workload hygiene"):

- :func:`warmup_until_stable`: warm-up requests are sent in small batches until the
  iteration time is stable: the coefficient of variation (sample std / mean) of the
  per-request mean inter-chunk latency (ICL, one chunk per iteration) of the last
  ``window`` warm-up requests is below ``cv_threshold``, or a cap on warm-up requests is
  reached (then the run is marked ``stable: false``).
- :func:`repeated_ngram_share` / :func:`degenerate_check`: the share of repeated word
  n-grams in each output. A looping output ("the the the ...") repeats most n-grams, and
  loops inflate accept length because a draft model predicts a loop trivially (DESIGN.md,
  "Random-token prompts collapse EAGLE acceptance ... check outputs for degenerate
  repetition"). The measure is the complement of the distinct-n ratio of Li et al. 2016,
  *A Diversity-Promoting Objective Function for Neural Conversation Models* (distinct-n).
- :func:`accounting_check`: streamed tokens (sum of chunk tokens) equal the server's
  ``completion_tokens`` for every ok request (DESIGN.md, "Token accounting is checked").
- :func:`dispatch_delay_summary`: time a request waited in the client before it was sent
  (``t_send - t_dispatch``), so client queueing never hides in latency figures.
- :func:`stall_check` and the first-use rows of :func:`hygiene_warnings`: a one-time cost inside
  a measured window (a kernel that SGLang or Triton compiles on its first use, through tvm-ffi or
  Triton's JIT, or an allocation) shows as an iteration gap far above the run's median that no
  joining request's prefill explains, or as a first repeat whose TTFT exceeds the later
  repeats'. Seen on a real SGLang 0.5.16 (``tests/fixtures/sglang-0.5.16/``): the first batch of
  8 at c=8 took 428 ms to its first token in repeat 0 against 281 and 218 ms in repeats 1 and 2,
  because the warm-up had never run a batch of 8; the warm-up now runs every measured point once
  (:func:`lab.pipeline.lifetime.warm_up`).

Everything here is pure except :func:`warmup_until_stable`, which calls the function it is
given to send requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lab.measure.records import request_metrics
from lab.measure.request_record import RequestRecord, as_records

#: Client records as the checks take them: the client's own, or rows read from a ``requests.jsonl``.
Records = Sequence[RequestRecord | Mapping[str, Any]]

__all__ = [
    "repeated_ngram_share",
    "degenerate_check",
    "accounting_check",
    "dispatch_delay_summary",
    "DISPATCH_DELAY_WARN_MS",
    "SCHEDULE_LAG_WARN_MS",
    "coefficient_of_variation",
    "warmup_until_stable",
    "run_hygiene",
    "hygiene_warnings",
    "MIN_WAVES",
    "stall_check",
    "STALL_FACTOR",
    "STALL_FLOOR_MS",
    "FIRST_USE_RATIO",
    "FIRST_USE_MIN_MS",
]


def repeated_ngram_share(text: str, n: int = 4) -> float | None:
    """Share of word n-grams of ``text`` that repeat an earlier n-gram: ``1 - distinct/total``.

    0.0 for text without any repeated n-gram; close to 1 for a loop (a loop of period p over
    L words gives ``1 - p / (L - n + 1)``). Words are whitespace-separated tokens.

    :param text: the generated text. :param n: n-gram length (>= 1).
    :returns: the share in [0, 1), or None when the text has fewer than ``n + 1`` words
        (too short to judge).
    :raises ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n={n}: the n-gram length must be >= 1, e.g. 4")
    words = text.split()
    total = len(words) - n + 1
    if total < 2:
        return None
    grams = {tuple(words[i:i + n]) for i in range(total)}
    return 1.0 - len(grams) / total


def degenerate_check(records: Records, *, n: int = 4, threshold: float = 0.5,
                     max_fraction: float = 0.25) -> dict[str, Any]:
    """Mark a run whose outputs loop.

    A request is degenerate when :func:`repeated_ngram_share` of its ``output_text`` exceeds
    ``threshold``; the run is degenerate when the fraction of degenerate requests (among ok
    requests long enough to judge) exceeds ``max_fraction``.

    :param records: client records (docs/contracts.md). :param n: n-gram length.
    :param threshold: per-request repeated share above which an output loops, in [0, 1].
    :param max_fraction: share of looping outputs above which the run is marked, in [0, 1].
    :returns: ``{"degenerate": bool, "degenerate_fraction", "mean_repeated_ngram_share",
        "judged", "looping_rids" (first 10), "ngram_n", "threshold", "max_fraction"}``;
        fraction and mean are None when no output could be judged.
    """
    shares: list[tuple[str, float]] = []
    for r in as_records(records):
        if not r.ok:
            continue
        s = repeated_ngram_share(r.output_text or "", n)
        if s is not None:
            shares.append((r.rid if r.rid is not None else "?", s))
    looping = [rid for rid, s in shares if s > threshold]
    frac = len(looping) / len(shares) if shares else None
    return {
        "degenerate": bool(frac is not None and frac > max_fraction),
        "degenerate_fraction": frac,
        "mean_repeated_ngram_share": float(np.mean([s for _, s in shares])) if shares else None,
        "judged": len(shares),
        "looping_rids": looping[:10],
        "ngram_n": n,
        "threshold": threshold,
        "max_fraction": max_fraction,
    }


def accounting_check(records: Records) -> dict[str, Any]:
    """Streamed tokens vs ``completion_tokens`` for every ok request.

    :returns: ``{"ok": bool, "checked": int, "mismatches": [{"rid", "streamed",
        "completion_tokens"}, ...] (first 10), "mismatch_count": int}``. A request with no
        ``completion_tokens`` reported counts as a mismatch.
    """
    bad = []
    checked = 0
    for r in as_records(records):
        if not r.ok:
            continue
        checked += 1
        m = request_metrics(r)
        if not m.token_accounting_ok:
            bad.append({"rid": r.rid, "streamed": m.chunk_tokens, "completion_tokens": m.completion_tokens})
    return {"ok": not bad, "checked": checked, "mismatch_count": len(bad), "mismatches": bad[:10]}


def dispatch_delay_summary(records: Records) -> dict[str, float | None]:
    """Client-side dispatch delay ``(t_send - t_dispatch)`` in ms: p50, p99, max over sent requests."""
    vals = [(r.t_send - r.t_dispatch) * 1e3 for r in as_records(records)
            if r.t_send is not None and r.t_dispatch is not None]
    if not vals:
        return {"p50_dispatch_delay_ms": None, "p99_dispatch_delay_ms": None, "max_dispatch_delay_ms": None}
    return {"p50_dispatch_delay_ms": float(np.percentile(vals, 50)),
            "p99_dispatch_delay_ms": float(np.percentile(vals, 99)),
            "max_dispatch_delay_ms": float(max(vals))}


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample std (ddof=1) / mean; nan for fewer than 2 values or a zero mean."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or x.mean() == 0:
        return math.nan
    return float(x.std(ddof=1) / abs(x.mean()))


def _mean_icl_ms(record: RequestRecord | Mapping[str, Any]) -> float | None:
    icl = request_metrics(record).icl_ms
    return float(np.mean(icl)) if icl else None


def warmup_until_stable(send: Callable[[int, int], Records], *, batch: int, cv_threshold: float,
                        window: int, max_requests: int, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Send warm-up batches until the ICL is stable or ``max_requests`` were sent.

    After each batch, the per-request mean ICL (ms) of the ok requests is appended to a
    history; warm-up stops when the last ``window`` values have a coefficient of variation
    below ``cv_threshold``. At least one batch is sent when ``max_requests >= 1``.

    :param send: ``send(batch_index, n)`` sends ``n`` warm-up requests and returns their
        client records (docs/contracts.md).
    :param batch: requests per batch (>= 1). :param cv_threshold: e.g. 0.05 (5 %).
    :param window: requests whose ICL must agree (>= 2). :param max_requests: cap (0: no warm-up).
    :param log: progress sink (one line per batch).
    :returns: ``{"requests", "batches", "stable", "cv", "icl_ms" (history), "cv_threshold",
        "window", "max_requests"}``; ``stable`` is False when the cap was hit first (the
        run goes on, marked), None when no warm-up was asked for.
    :raises ValueError: ``batch < 1`` or ``window < 2``.
    """
    if batch < 1 or window < 2:
        raise ValueError(f"batch={batch}, window={window}: need batch >= 1 and window >= 2")
    out: dict[str, Any] = {"requests": 0, "batches": 0, "stable": None, "cv": None, "icl_ms": [],
                           "cv_threshold": cv_threshold, "window": window, "max_requests": max_requests}
    history: list[float] = out["icl_ms"]
    while out["requests"] < max_requests:
        n = min(batch, max_requests - out["requests"])
        recs = send(out["batches"], n)
        out["requests"] += n
        out["batches"] += 1
        history.extend(v for v in (_mean_icl_ms(r) for r in as_records(recs) if r.ok) if v is not None)
        cv = coefficient_of_variation(history[-window:]) if len(history) >= window else math.nan
        out["cv"] = None if math.isnan(cv) else cv
        log(f"[lab] warm-up batch {out['batches']}: {out['requests']} requests, mean ICL "
            f"{history[-1] if history else float('nan'):.2f} ms, CV of last {window} = "
            f"{'n/a' if math.isnan(cv) else f'{cv:.3f}'} (threshold {cv_threshold})")
        if not math.isnan(cv) and cv < cv_threshold:
            out["stable"] = True
            return out
    if max_requests > 0:
        out["stable"] = False
        log(f"[lab] warm-up cap of {max_requests} requests reached before the ICL was stable "
            f"(CV {out['cv']}); the run is marked warmup.stable=false")
    return out


#: An iteration gap is a stall when it exceeds both this multiple of the run's median ICL and
#: the median plus :data:`STALL_FLOOR_MS` (a CUDA-graph decode step is steady to a few percent;
#: the seeds' eager verify varied by less than 2x).
STALL_FACTOR = 5.0
STALL_FLOOR_MS = 50.0
#: A point's first repeat reads as paying a first-use cost when its largest TTFT is this many
#: times, and at least FIRST_USE_MIN_MS above, the median of the later repeats' largest TTFTs.
FIRST_USE_RATIO = 1.5
FIRST_USE_MIN_MS = 100.0


def stall_check(records: Records, *, factor: float = STALL_FACTOR,
                floor_ms: float = STALL_FLOOR_MS) -> dict[str, Any]:
    """Iteration gaps of one run that no joining request explains.

    A gap between two chunks of a request is a stall when it exceeds
    ``max(factor x median ICL, median ICL + floor_ms)`` over the run's ok requests and no other
    request was waiting for its first token during it (sent before the gap ended, first chunk
    after it began): a joining request's prefill legitimately holds the batch for its length,
    and its first chunk may be streamed an iteration later. Gaps that several requests share (one engine stall seen by all) are
    merged into one event.

    :param records: client records of one (point, repeat) (docs/contracts.md); times in
        ``perf_counter`` seconds.
    :returns: ``{"median_icl_ms", "threshold_ms", "max_ttft_ms", "stalls": [{"start_s", "ms",
        "requests"}]}`` (start in the records' clock); medians None without two chunks anywhere.
    """
    ok = [r for r in as_records(records) if r.ok and r.chunks]
    per = [request_metrics(r) for r in ok]
    icl = [g for m in per for g in m.icl_ms]
    ttfts = [m.ttft_ms for m in per if m.ttft_ms is not None]
    out: dict[str, Any] = {"median_icl_ms": None, "threshold_ms": None,
                           "max_ttft_ms": max(ttfts) if ttfts else None, "stalls": []}
    if not icl:
        return out
    med = float(np.median(icl))
    thr = max(factor * med, med + floor_ms)
    out.update(median_icl_ms=med, threshold_ms=thr)
    prefill = [(r.t_send, r.chunks[0][0]) for r in ok if r.t_send is not None]
    events: list[dict[str, Any]] = []
    for r in ok:
        ch = r.chunks
        for (a, _), (b, _) in zip(ch, ch[1:]):
            gap = (b - a) * 1e3
            if gap <= thr or any(sent < b and first > a and first != ch[0][0] for sent, first in prefill):
                continue
            for ev in events:  # the same engine stall seen by another request
                if abs(ev["start_s"] - a) * 1e3 < med and abs(ev["ms"] - gap) < med:
                    ev["requests"] += 1
                    break
            else:
                events.append({"start_s": a, "ms": gap, "requests": 1})
    out["stalls"] = sorted(events, key=lambda e: e["start_s"])
    return out


def _first_use_rows(per_run: Sequence[Mapping[str, Any]]) -> list[str]:
    """Warnings for one-time costs inside measured windows (see :func:`stall_check`)."""
    out: list[str] = []
    by_point: dict[str, list[Mapping[str, Any]]] = {}
    for r in per_run:
        key = r.get("point") or f"c{r.get('concurrency')}"
        by_point.setdefault(str(key), []).append(r)
    for key, runs in by_point.items():
        runs = sorted(runs, key=lambda r: r.get("repeat") or 0)
        st = [((r.get("hygiene") or {}).get("stalls") or {}) for r in runs]
        with_stall = [r.get("repeat") for r, s in zip(runs, st) if s.get("stalls")]
        worst = max((e["ms"] for s in st for e in s.get("stalls") or []), default=None)
        if with_stall and len(runs) == 1:
            out.append(f"{key}: a {worst:.0f} ms stall inside the measured window (median ICL "
                       f"{st[0]['median_icl_ms']:.1f} ms, no joining request's prefill explains it); with one repeat "
                       "a first-use cost cannot be told from a recurring one. Fix: raise bench.repeats")
        elif with_stall and len(with_stall) < len(runs):
            first = with_stall == [runs[0].get("repeat")]
            out.append(f"{key}: a {worst:.0f} ms stall in repeat{'s' if len(with_stall) > 1 else ''} "
                       f"{', '.join(str(x) for x in with_stall)} only (none in the others): "
                       + ("a first-use cost (a kernel compiled on first use, an allocation) inside the measured window"
                          if first else "a one-time stall inside the measured window")
                       + "; that repeat's latency and throughput include it")
        elif with_stall:
            out.append(f"{key}: stalls of up to {worst:.0f} ms recur in every repeat (not a first-use cost): the "
                       "engine pauses decoding for something other than a joining request's prefill")
        ttft = [s.get("max_ttft_ms") for s in st]
        if len(runs) >= 2 and ttft[0] is not None and all(t is not None for t in ttft[1:]):
            later = float(np.median(ttft[1:]))
            if ttft[0] > FIRST_USE_RATIO * later and ttft[0] - later >= FIRST_USE_MIN_MS:
                out.append(f"{key}: repeat {runs[0].get('repeat')} waited {ttft[0]:.0f} ms for a first token against "
                           f"{later:.0f} ms in the later repeats: a first-use cost (a kernel compiled on first use for "
                           "a batch the warm-up never ran) inside the measured window; that repeat's TTFT and "
                           "throughput include it")
    return out


def run_hygiene(records: Records, *, ngram_n: int = 4, ngram_threshold: float = 0.5,
                degenerate_max_fraction: float = 0.25) -> dict[str, Any]:
    """All per-run checks of one (mode, level, repeat): degenerate outputs, accounting, dispatch delay.

    :returns: ``{"degenerate": {...}, "accounting": {...}, "stalls": {...}, **dispatch_delay_summary}``
        (see :func:`degenerate_check`, :func:`accounting_check`, :func:`stall_check`,
        :func:`dispatch_delay_summary`).
    """
    records = as_records(records)
    return {"degenerate": degenerate_check(records, n=ngram_n, threshold=ngram_threshold,
                                           max_fraction=degenerate_max_fraction),
            "accounting": accounting_check(records),
            "stalls": stall_check(records),
            **dispatch_delay_summary(records)}


#: Batch refills a level above concurrency 1 needs before its figures count as steady state.
MIN_WAVES = 4

#: p99 client dispatch delay (``t_send - t_dispatch``) above which a run is warned about, ms.
#: A request that waits in the client is load the server never saw: at the seeds' 12 ms decode
#: step, 5 ms is ~40 % of a step, enough to thin a closed-loop batch and inflate latency figures.
DISPATCH_DELAY_WARN_MS = 5.0


#: p99 schedule lag (``t_send - t_scheduled``) at an open-loop rate point above which it is warned
#: about, ms. Goodput judges TTFT from the schedule (:mod:`lab.measure.goodput`), so a lag is
#: charged to the SLO; 50 ms is a tenth of the example 500 ms TTFT SLO (params.yaml) and about
#: four of the seeds' 12 ms decode steps: past it the arrivals the server saw are no longer the
#: configured process and the lag decides the TTFT verdict rather than the engine.
SCHEDULE_LAG_WARN_MS = 50.0


def _schedule_lag_rows(per_run: Sequence[Mapping[str, Any]]) -> list[str]:
    """One warning per rate point whose p99 schedule lag exceeds :data:`SCHEDULE_LAG_WARN_MS` in
    some repeat (its worst repeat named), with the fix for its cause: the concurrency cap's
    queueing (``concurrency`` > 0 at a rate point is ``bench.rate_max_concurrency``) or the client
    itself falling behind."""
    worst: dict[str, tuple[float, Any, int]] = {}
    for r in per_run:
        lag = r.get("p99_schedule_lag_ms")
        if r.get("request_rate") is None or lag is None or lag <= SCHEDULE_LAG_WARN_MS:
            continue
        key = str(r.get("point") or f"r{r['request_rate']:g}")
        if lag > worst.get(key, (-1.0, None, 0))[0]:
            worst[key] = (float(lag), r.get("repeat"), int(r.get("concurrency") or 0))
    out = []
    for key, (lag, rep, cap) in sorted(worst.items()):
        cause = (f"the concurrency cap (bench.rate_max_concurrency: {cap}) held requests back"
                 if cap else "the client fell behind its arrival schedule")
        fix = ("raise bench.rate_max_concurrency (0 = no cap) or lower the rate" if cap else
               "run the benchmark on an idle machine or core, or lower the rate")
        out.append(f"{key}: schedule lag p99 {lag:.0f} ms (repeat {rep}) > {SCHEDULE_LAG_WARN_MS:g} ms: {cause}, "
                   "so requests left later than their arrival times; goodput counts TTFT from the scheduled "
                   f"time, so the lag is charged to the SLO. Fix: {fix}")
    return out


def hygiene_warnings(per_run: Sequence[Mapping[str, Any]], warmup: Mapping[str, Any] | None) -> list[str]:
    """Human-readable warnings for result.json and metrics.json (empty list: all clean).

    :param per_run: dicts with ``concurrency``, ``repeat``, ``requests`` (measured requests
        of the run; optional) and a ``hygiene`` entry from :func:`run_hygiene`.
    :param warmup: :func:`warmup_until_stable` output or None.

    Besides accounting and looping outputs, a level whose p99 client dispatch delay exceeds
    :data:`DISPATCH_DELAY_WARN_MS` in some repeat is flagged (once, with its worst repeat), and
    an open-loop rate point whose p99 schedule lag exceeds :data:`SCHEDULE_LAG_WARN_MS` is flagged
    (once, with its worst repeat and the fix), and
    a level above concurrency 1 that sends fewer
    than :data:`MIN_WAVES` x concurrency requests is flagged: its batch never reaches a
    steady state (measured on the emulator: eagle3_decode at c=8 gave 1.10x baseline with 8
    requests, 0.96x with 48 of identical length, 1.10x with 48 of mixed lengths; README,
    "Concurrency above 1").
    """
    out: list[str] = []
    if warmup and warmup.get("stable") is False:
        out.append(f"warm-up not stable after {warmup['requests']} requests (ICL CV {warmup.get('cv')})")
    one_wave = sorted({(r["concurrency"], r["requests"]) for r in per_run if r.get("requests") is not None
                       and r.get("concurrency", 1) > 1 and r["requests"] < MIN_WAVES * r["concurrency"]})
    for c, n in one_wave:
        out.append(f"c={c}: {n} requests per repeat fill the batch fewer than {MIN_WAVES} times; the batch drains "
                   f"as requests finish, which favours modes whose requests finish at different times "
                   f"(speculative decoding). For a steady-state figure set bench.num_prompts >= "
                   f"{MIN_WAVES * c} and bench.output_tokens_spread > 0 (README: 'Concurrency above 1')")
    eager_draft = sorted({(r.get("concurrency"), r.get("repeat")) for r in per_run
                          if (r.get("server") or {}).get("draft_incomplete")})
    if eager_draft:
        out.append(f"draft_ms is incomplete at {', '.join(f'c={c} repeat {k}' for c, k in eager_draft)}: the draft "
                   "ran outside CUDA graphs there, so SGLang booked its draft-extend time as 'extend', mixed with "
                   "prefill (speculative/eagle_worker_v2.py ~1182-1213); eager draft steps (booked 'decode') are "
                   "counted in draft_ms")
    slow: dict[Any, tuple[float, Any]] = {}
    for r in per_run:  # client dispatch delay: the worst repeat per level (an open-loop rate point by its key)
        d = (r.get("hygiene") or {}).get("p99_dispatch_delay_ms")
        lvl = f"c={r.get('concurrency')}" if r.get("request_rate") is None else r.get("point")
        if d is not None and d > DISPATCH_DELAY_WARN_MS and d > slow.get(lvl, (-1.0, None))[0]:
            slow[lvl] = (d, r.get("repeat"))
    for lvl, (d, rep) in sorted(slow.items(), key=lambda kv: str(kv[0])):
        c = lvl[2:] if lvl.startswith("c=") else lvl
        out.append(f"{lvl}: client dispatch delay p99 {d:.1f} ms (repeat {rep}) > {DISPATCH_DELAY_WARN_MS:g} ms: "
                   "requests waited in the client before being sent, so the server saw less load than "
                   "configured and latencies include client queueing. Fix: run the benchmark on an idle "
                   f"machine or core{'' if c == '1' else (', or lower concurrency' if lvl.startswith('c=') else ', or a lower rate')} "
                   "(p50/p99_dispatch_delay_ms are in the results)")
    out += _schedule_lag_rows(per_run)
    out += _first_use_rows(per_run)
    for r in per_run:
        h = r.get("hygiene") or {}
        where = f"c={r.get('concurrency')} repeat {r.get('repeat')}"
        acc = h.get("accounting") or {}
        if acc and not acc.get("ok"):
            out.append(f"token accounting failed at {where}: {acc['mismatch_count']} request(s) streamed a "
                       f"different number of tokens than completion_tokens, e.g. {acc['mismatches'][:1]}")
        deg = h.get("degenerate") or {}
        if deg.get("degenerate"):
            out.append(f"degenerate (looping) outputs at {where}: {deg['degenerate_fraction']:.0%} of outputs "
                       f"repeat > {deg['threshold']:.0%} of their {deg['ngram_n']}-grams; accept length is inflated")
    return out
