"""Measuring one point of the sweep, one repeat at a time.

A *point* is one cell of the measurement grid (concurrency x context length x output length),
or an open-loop request rate (``r<R>``, ``bench.request_rates``: requests sent on a seeded
arrival schedule, :mod:`lab.workload.arrivals`, at the primary context/output length);
:func:`measurement_points` lists them from ``params.bench``.
:func:`measure_point` measures one (point, repeat): ``/metrics`` and ``/server_info`` scraped
before, requests streamed (:mod:`lab.measure.client`, each record appended to
``requests.jsonl`` at once), GPUs sampled (:mod:`lab.engine.telemetry`), the engine's liveness
checked (:func:`check_alive`), scraped after, summarised (:mod:`lab.measure.records`),
cross-checked (:mod:`lab.measure.crosscheck`) and hygiene-checked (:mod:`lab.measure.hygiene`).
It returns that repeat's summary (a ``runs.json`` row); everything it measured also lands in
the mode's :class:`lab.measure.result.ModeResult`, so a failure keeps it.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from lab.measure.goodput import run_load_metrics
from lab.engine.telemetry import GpuSampler, energy_per_token_mj
from lab.measure import client, hygiene
from lab.measure.records import measured_window_s, summarize_run
from lab.measure.request_record import RequestRecord
from lab.measure.crosscheck import LogWindow, add_cross_checks, window_server_timing
from lab.workload.arrivals import arrival_times, rate_key
from lab.workload.context import TokenCount, estimate_tokens, pad_prompt
from lab.workload.dataset import output_lengths, workload

if TYPE_CHECKING:
    from lab.measure.result import ModeResult

__all__ = ["BenchError", "Point", "level_key", "measurement_points", "measure_point", "check_alive",
           "TELEMETRY_INTERVAL_S"]

#: GPU telemetry sampling period, seconds (DESIGN: 1 s or faster).
TELEMETRY_INTERVAL_S = 0.5


class BenchError(RuntimeError):
    """The benchmark could not complete (engine died, all requests failed...)."""


def level_key(concurrency: int, context_tokens: int | None = None, output_tokens: int | None = None) -> str:
    """``"c8"``: the key of a concurrency level in metrics.json and MLflow metric names.

    A point off the primary context/output length (``bench.context_tokens[0]``,
    ``bench.output_levels[0]``) gets ``"c8_ctx4096_out64"``; pass ``None`` for the primary.
    """
    if context_tokens is None and output_tokens is None:
        return f"c{concurrency}"
    return f"c{concurrency}_ctx{context_tokens}_out{output_tokens}"


@dataclass(frozen=True)
class Point:
    """One cell of the measurement grid.

    :ivar concurrency: requests in flight (closed loop); at a rate point the in-flight cap
    (``bench.rate_max_concurrency``, 0 = none). :ivar context_tokens: prompt length
    the prompts are padded to (tokens). :ivar output_tokens: ``max_new_tokens`` per request
    (before ``bench.output_tokens_spread``). :ivar key: its name in results and MLflow
    (:func:`level_key`, or :func:`lab.workload.arrivals.rate_key` for a rate point).
    :ivar request_rate: open-loop rate, requests/s (None: a closed-loop point).
    """

    concurrency: int
    context_tokens: int
    output_tokens: int
    key: str
    request_rate: float | None = None


def measurement_points(bench) -> list[Point]:
    """Every point of ``bench`` (:class:`lab.config.BenchParams`), in measurement order:
    concurrency ascending, then ``context_tokens``, then ``output_levels`` as listed. The
    primary context/output length (each list's first) keeps the short key ``c<N>``. Then one
    open-loop point per ``bench.request_rates`` entry (as listed), key ``r<R>``, at the primary
    context/output length."""
    points = []
    for c, ctx, out_len in itertools.product(sorted(bench.concurrency), bench.context_tokens, bench.output_levels):
        primary = ctx == bench.context_tokens[0] and out_len == bench.output_levels[0]
        points.append(Point(c, ctx, out_len, level_key(c) if primary else level_key(c, ctx, out_len)))
    for r in getattr(bench, "request_rates", None) or ():  # open loop (lab/workload/arrivals.py)
        points.append(Point(getattr(bench, "rate_max_concurrency", 0), bench.context_tokens[0],
                            bench.output_levels[0], rate_key(r), request_rate=float(r)))
    return points


def _appender(req_file: IO[str], records_all: list[RequestRecord],
              **fields: Any) -> Callable[[RequestRecord], None]:
    """``on_record`` for the client: append each finished request (with ``fields`` set, names of
    :class:`~lab.measure.request_record.RequestRecord` fields) to ``requests.jsonl`` at once
    (flushed), so an interrupted or killed run keeps every request it measured."""
    def append(rec: RequestRecord) -> None:
        rec.set(**fields)
        req_file.write(json.dumps(rec.to_json()) + "\n")
        req_file.flush()
        records_all.append(rec)
    return append


def check_alive(srv, where: str, out: Path, recs: list[RequestRecord] | None = None) -> None:
    """Liveness = the engine process plus request outcomes (``/health`` is not polled: a
    busy server may answer it slowly). Raises :class:`BenchError` at once if the engine
    exited, or if requests were refused and it exits within 2 s (the client stops sending
    as soon as connections are refused, so a crash never waits out request timeouts).

    :param srv: the running :class:`lab.engine.process.ServerProcess`.
    :param where: what was running, for the message. :param out: the mode's results dir.
    :param recs: the records of the window just measured (refusals among them).
    """
    refused = any((r.error or "").startswith((client.NOT_SENT_PREFIX, "connection failed"))
                  for r in recs or ())
    deadline = time.monotonic() + (2.0 if refused else 0.0)
    while srv.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not srv.alive():
        from lab.engine.process import log_tail

        code = srv.proc.returncode if srv.proc is not None else None
        raise BenchError(f"engine died (exit code {code}) during {where}; requests measured so far are "
                         f"kept in {out / 'requests.jsonl'}. Log tail ({out / 'server.log'}):\n"
                         f"{log_tail(out / 'server.log', 15)}")
    if refused:
        raise BenchError(f"engine refused connections during {where} but its process runs; "
                         f"see {out / 'server.log'}")


def _ask(srv, fetch, path: str, where: str, out: Path) -> Any:
    """``fetch(srv.base_url + path)`` (:func:`lab.measure.client.fetch_text` / ``fetch_json``); a
    connection reset or refused (the engine killed, e.g. SIGKILL or the OOM killer) becomes
    :func:`check_alive`'s "engine died (exit code ...)" with its log tail, not a bare
    ``ConnectionResetError``.

    :raises BenchError: the engine died, or its process runs but does not answer ``path``.
    """
    import http.client

    try:
        return fetch(srv.base_url + path)
    except (OSError, http.client.HTTPException) as exc:
        try:
            check_alive(srv, where, out, [RequestRecord(error="connection failed")])  # dead within 2 s, or refused
        except BenchError as cause:
            raise BenchError(f"{cause} [GET {path}: {type(exc).__name__}: {exc}]") from None
        raise


def measure_point(srv, point: Point, rep: int, *, bench, prompts: list[str], speculative: bool, out: Path,
                  req_file: IO[str], result: ModeResult, log=print,
                  count: TokenCount = estimate_tokens) -> dict[str, Any]:
    """Measure one repeat of one point against the running engine.

    :param count: the served model's prompt-length counter (:func:`lab.engine.tokenizer.token_counter`),
        which pads prompts to ``point.context_tokens`` exactly.
    :param srv: the running :class:`lab.engine.process.ServerProcess` (``base_url``, liveness).
    :param point: the grid cell; :param rep: repeat index (seeds the workload: ``bench.seed + rep``).
    :param bench: :class:`lab.config.BenchParams`. :param prompts: the dataset's prompts.
    :param speculative: the mode drafts (server timing reads verify/draft phases).
    :param out: the mode's results dir (``server.log`` read for the window's log lines).
    :param req_file: ``requests.jsonl`` open for appending; each record is written at once.
    :param result: the mode's result; its ``records`` and ``telemetry`` grow as this measures.
    :returns: the repeat's summary (:meth:`lab.measure.records.RunSummary.to_dict` of
        :func:`lab.measure.records.summarize_run`, plus
        ``crosscheck``, ``hygiene``, ``gpu_telemetry``, ``concurrency``, ``repeat``,
        ``context_tokens``, ``max_new_tokens``, ``point``, ``request_rate`` and
        :func:`lab.measure.goodput.run_load_metrics`): one ``runs.json`` row.
    :raises BenchError: the engine died or refused connections (also on its ``/metrics`` or
        ``/server_info``: "engine died", not a bare ``ConnectionResetError``), or no request succeeded.
    """
    b, mode, c = bench, result.mode, point.concurrency
    texts = [(i, pad_prompt(t, point.context_tokens, count)) for i, t in workload(prompts, b.num_prompts, b.seed + rep)]
    lengths = output_lengths(len(texts), point.output_tokens, b.output_tokens_spread, b.seed + rep)
    where = f"{mode} c={c} repeat {rep}"
    prom0 = _ask(srv, client.fetch_text, "/metrics", where, out)
    info0 = _ask(srv, client.fetch_json, "/server_info", where, out)
    log_window = LogWindow(out / "server.log")
    with GpuSampler(TELEMETRY_INTERVAL_S) as gpu:
        send = client.request_function(getattr(getattr(srv, "command", None), "engine", None))
        recs = send(
            srv.base_url, texts, concurrency=c, max_new_tokens=lengths,
            temperature=b.temperature, timeout_s=b.request_timeout_s,
            rid_prefix=f"{mode}-{point.key}-r{rep}",
            progress_desc=f"{mode} {point.key} repeat {rep + 1}/{b.repeats}",
            mode=mode, repeat=rep,
            arrivals=None if point.request_rate is None else arrival_times(
                len(texts), point.request_rate, b.burstiness, b.seed + rep),  # same schedule in every mode
            on_record=_appender(req_file, result.records, concurrency=c, context_tokens=point.context_tokens,
                                max_new_tokens=point.output_tokens, point=point.key,
                                request_rate=point.request_rate))
    result.add_telemetry(gpu.step_metrics())
    check_alive(srv, where, out, recs)
    server = window_server_timing(
        prom0, _ask(srv, client.fetch_text, "/metrics", where, out), info0,
        _ask(srv, client.fetch_json, "/server_info", where, out), log_window.read(), speculative=speculative)
    window = measured_window_s(recs)
    if not window or not any(r.ok for r in recs):
        # all failed: a summary would read as a (zero-throughput) result
        raise BenchError(
            f"no request succeeded at c={c}{'' if point.key == level_key(c) else ' (' + point.key + ')'} "
            f"repeat {rep} ({len(recs)} sent): "
            f"{recs[0].error if recs else 'no requests'}. Fix: see "
            f"{out / 'requests.jsonl'} and {out / 'server.log'}; raise "
            "bench.request_timeout_s if requests timed out")
    summary = add_cross_checks(summarize_run(recs, wall_s=window, server=server).to_dict())  # the runs.json row
    summary.update(concurrency=c, repeat=rep, context_tokens=point.context_tokens,
                   max_new_tokens=point.output_tokens, point=point.key, gpu_telemetry=gpu.summary(),
                   request_rate=point.request_rate,  # goodput under bench.slo etc. (lab/analysis/load.py)
                   **run_load_metrics(recs, window, b.slo, point.request_rate))
    # GPU energy per output token over the window (NVML energy counters; None without them)
    summary["energy_mj_per_output_token"] = energy_per_token_mj(summary["gpu_telemetry"],
                                                                summary.get("completion_tokens_total") or 0)
    for flag in summary["crosscheck"]["flags"]:
        log(f"[lab] {mode} {point.key} repeat {rep}: CROSS-CHECK: {flag}")
    summary["hygiene"] = hygiene.run_hygiene(
        recs, ngram_n=b.ngram_n, ngram_threshold=b.ngram_repeat_threshold,
        degenerate_max_fraction=b.degenerate_max_fraction)
    return summary
