"""Closed-loop streaming benchmark client for SGLang's native ``POST /generate``.

The client only *records*: for every request it keeps ``time.perf_counter()`` timestamps
and the number of new tokens each streamed chunk delivered, in one
:class:`lab.measure.request_record.RequestRecord` per request; its
:meth:`~lab.measure.request_record.RequestRecord.to_json` is the ``requests.jsonl`` line of
``docs/contracts.md`` ("Client request record")::

    {"rid", "mode", "concurrency", "repeat", "prompt_index",
     "t_dispatch", "t_send", "t_end",          # perf_counter seconds (None: not sent)
     "chunks": [[t_s, n_tokens], ...],          # content chunks only
     "completion_tokens", "prompt_tokens", "meta_info", "ok", "error", "output_text",
     "output_ids"}                              # generated token ids, or None

All metric arithmetic lives in :mod:`lab.measure.records`, :mod:`lab.measure.prometheus`, :mod:`lab.measure.server_info` and :mod:`lab.measure.decode_log`.

Wire format (SGLang 0.5.23, ``sglang/srt/entrypoints/http_server.py``
``serve_generate_request``): a ``text/event-stream`` of ``data: {json}\\n\\n`` lines,
ending with ``data: [DONE]``; an error inside the stream arrives as
``data: {"error": {"message": ...}}``. Every chunk carries ``meta_info`` with the running
``completion_tokens`` (``tokenizer_manager.py`` ``_handle_batch_output``); when the client
lags, SGLang coalesces several iterations into one chunk, so the tokens of a chunk are the
*delta* of ``completion_tokens`` between consecutive chunks, and a chunk that adds 0 tokens
is not a content chunk. ``text`` is cumulative by default and a delta with
``--incremental-streaming-output``; both are handled. ``output_ids`` (the generated token
ids, for the lossless check of :mod:`lab.analysis.lossless`) follows the same rule
(``tokenizer_manager.py`` ``_handle_batch_output`` ~2636-2668: ``state.output_ids`` so far,
or ``delta_output_ids`` when incremental; coalesced incremental chunks concatenate their
ids, ``_coalesce_streaming_chunks`` ~1873-1874): a chunk whose list is as long as its
``completion_tokens`` is cumulative, one as long as the chunk's new tokens is a delta.

Concurrency is closed-loop: ``concurrency`` worker tasks share one request queue, so at most
``concurrency`` requests are in flight and a new one is issued as soon as one finishes.
``t_dispatch`` is when the request became due (its worker's slot freed: the run start or
the previous request's ``t_end``), ``t_send`` is taken just before the POST, so
``t_send - t_dispatch`` exposes client-side dispatch delay (a busy event loop).

Open loop (``arrivals=``, a request-rate point; :mod:`lab.workload.arrivals`): request ``i``
is due at ``t_scheduled = t0 + arrivals[i]`` whether or not earlier requests have finished
(vLLM ``vllm/benchmarks/serve.py`` ``benchmark``/``get_request``: one task per request,
an optional ``max_concurrency`` semaphore). Its record also holds ``t_scheduled``;
``t_dispatch`` is when it could first be sent: ``t_scheduled``, or, when a concurrency cap
is given and every slot was busy, the ``t_end`` of the request whose slot it took. So
``t_send - t_dispatch`` is again the client's own delay (flagged by
:mod:`lab.measure.hygiene`, never hidden), and ``t_send - t_scheduled`` the whole lag behind
the schedule (the cap's queueing included).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
import urllib.request
from typing import Any, Callable, Sequence

import aiohttp
from tqdm import tqdm  # plain text bar: renders in papermill-executed notebooks without ipywidgets

from lab.measure.request_record import RequestRecord

try:  # orjson parses SGLang's growing cumulative chunks ~5x faster; json is the fallback
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover
    _json_loads = json.loads

__all__ = [
    "NOT_SENT_PREFIX",
    "StreamParser",
    "run_requests",
    "run_requests_sync",
    "request_function",
    "fetch_text",
    "fetch_json",
]

#: ``error`` text prefix of records that were never sent (the server went away first).
NOT_SENT_PREFIX = "not sent"

_ERROR_BODY_CHARS = 500


def _new_record(rid: str, prompt_index: int, mode: str, concurrency: int, repeat: int) -> RequestRecord:
    return RequestRecord(rid=rid, mode=mode, concurrency=concurrency, repeat=repeat, prompt_index=prompt_index)


class _ConnectionRefused(Exception):
    """The server could not be reached at all (it died or never started)."""


class StreamParser:
    """SGLang's ``/generate`` event stream, line by line, into the client record's fields (the
    wire format of the module docstring). Pure: no I/O, no clock; :func:`_one_request` feeds it
    what it reads, and tests feed it a real server's captured stream
    (``tests/fixtures/sglang-0.5.16/*/*/generate.stream.txt``).

    :ivar chunks: content chunks ``[[t_s, n_tokens], ...]``: ``n_tokens`` is the delta of
        ``meta_info.completion_tokens`` since the previous content chunk; a chunk adding none is
        not a content chunk.
    :ivar meta: the last chunk's ``meta_info`` ({} before any).
    :ivar text: the output text (cumulative chunks replace it, incremental ones extend it).
    :ivar done: ``data: [DONE]`` was seen.
    :ivar error: why the stream is unusable (a server error in the stream, a malformed chunk), or None.
    """

    def __init__(self) -> None:
        self.chunks: list[list[float]] = []
        self.meta: dict[str, Any] = {}
        self.text = ""
        self.done = False
        self.error: str | None = None
        self._prev_tokens = 0
        self._ids: list[int] | None = []  # None once a chunk's ids did not fit its token count
        self._got_ids = False

    def feed(self, t: float, line: bytes) -> bool:
        """One line of the stream, received at ``t`` (seconds).

        :returns: False once the stream is over (``[DONE]``, or an error: see :attr:`error`);
            the caller stops reading then.
        """
        if not line.startswith(b"data:"):
            return True  # blank separator lines, SSE comments
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return False
        try:
            obj = _json_loads(data)
            m = obj.get("meta_info")
            if m is None:
                err = obj.get("error")
                if err is not None:
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    self.error = f"server error in stream: {msg}"
                    return False
                raise ValueError("chunk has neither meta_info nor error")
            ct = m["completion_tokens"]
            n = ct - self._prev_tokens
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.error = f"malformed chunk ({type(exc).__name__}: {exc}): {data[:200]!r}"
            return False
        self.meta = m
        oids = obj.get("output_ids")
        if oids is not None and self._ids is not None:
            self._got_ids = True
            if len(oids) == ct:
                self._ids = oids  # cumulative (SGLang's default)
            elif len(oids) == n:
                self._ids.extend(oids)  # --incremental-streaming-output
            else:
                self._ids = None  # neither: record no ids rather than wrong ones
        if n > 0:
            self.chunks.append([t, n])
            self._prev_tokens = ct
        delta_text = obj.get("text")
        if delta_text:
            # cumulative text (SGLang default) or delta (incremental streaming)
            if delta_text.startswith(self.text):
                self.text = delta_text
            else:
                self.text += delta_text
        return True

    def output_ids(self) -> list[int] | None:
        """The generated token ids, when every chunk carried ids that fit and they number the
        final ``completion_tokens``; else None."""
        ids = self._ids
        if self._got_ids and ids is not None and len(ids) == self.meta.get("completion_tokens"):
            return ids
        return None


async def _one_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    rec: RequestRecord,
) -> None:
    """Send one streaming request and fill ``rec`` in place (never raises, except
    :class:`_ConnectionRefused` after recording the error)."""
    perf = time.perf_counter
    stream = StreamParser()
    stream.chunks = rec.chunks
    error: str | None = None
    refused = False
    rec.t_send = perf()
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:_ERROR_BODY_CHARS]
                error = f"HTTP {resp.status}: {body.strip()}"
            else:
                feed = stream.feed
                async for line in resp.content:
                    if not feed(perf(), line):
                        break
                error = stream.error
                if error is None and not stream.done and stream.meta.get("finish_reason") is None:
                    error = "stream ended before [DONE] and without finish_reason"
    except aiohttp.ClientConnectorError as exc:
        error = f"connection failed: {exc}"
        refused = True
    except asyncio.TimeoutError:
        error = f"timeout after {perf() - rec.t_send:.1f} s"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except OSError as exc:  # connection reset surfacing as a bare OSError
        error = f"{type(exc).__name__}: {exc}"
    rec.t_end = perf()
    meta = stream.meta
    fr = meta.get("finish_reason")
    if error is None and isinstance(fr, dict) and fr.get("type") == "abort":
        error = f"request aborted by server: {fr.get('message', fr)}"
    rec.meta_info = meta
    rec.completion_tokens = meta.get("completion_tokens")
    rec.prompt_tokens = meta.get("prompt_tokens")
    rec.output_text = stream.text
    rec.output_ids = stream.output_ids()
    rec.error = error
    rec.ok = error is None
    if refused:
        raise _ConnectionRefused(error)


async def run_requests(
    base_url: str,
    texts: list[tuple[int, str]],
    *,
    concurrency: int,
    max_new_tokens: int | Sequence[int],
    temperature: float,
    timeout_s: float,
    rid_prefix: str,
    progress_desc: str | None = None,
    mode: str = "",
    repeat: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
    arrivals: Sequence[float] | None = None,
) -> list[RequestRecord]:
    """Send ``texts`` to ``{base_url}/generate`` with at most ``concurrency`` in flight
    (closed loop), or on the schedule ``arrivals`` (open loop; module docstring).

    Each request body is ``{"text", "sampling_params": {"max_new_tokens", "temperature",
    "ignore_eos": true}, "stream": true, "rid": f"{rid_prefix}-{i}"}`` (``rid`` must be
    unique among in-flight requests on the server: SGLang rejects duplicates).

    :param base_url: server root, e.g. ``http://127.0.0.1:30000``.
    :param texts: ``(prompt_index, templated_text)`` pairs (see :func:`lab.workload.dataset.workload`).
    :param concurrency: closed-loop concurrency C >= 1; with ``arrivals``, the cap on
        requests in flight (0 = no cap, pure open loop).
    :param max_new_tokens: output length per request (``ignore_eos`` forces it): one int
        for all, or one per entry of ``texts``.
    :param temperature: sampling temperature (0 = greedy).
    :param timeout_s: total time limit per request, seconds.
    :param rid_prefix: request-id prefix, e.g. ``"eagle3_decode-c8-r1"``.
    :param progress_desc: tqdm label; None disables the progress bar.
    :param mode, repeat: copied into each record.
    :param on_record: called (on the client's event loop) with each record as soon as it is
        final, so a caller can persist it at once: a run interrupted mid-way, even by
        SIGKILL, keeps every request that had finished.
    :param arrivals: open loop: one offset per entry of ``texts``, seconds from the run's
        start ``t0`` (non-decreasing, >= 0; :func:`lab.workload.arrivals.arrival_times`).
        Request ``i`` is sent at ``t0 + arrivals[i]`` (not before; later only when the cap is
        reached or the client lags) and its record gets ``t_scheduled``.
    :returns: one :class:`~lab.measure.request_record.RequestRecord` per input, in input order
        (docs/contracts.md). Errors are never
        dropped: ``ok=False`` with ``error`` text (HTTP status, timeout, connection reset,
        malformed chunk, server error). If the server refuses connections (it died), the
        run stops promptly: requests not yet sent get ``ok=False``, ``t_send=None`` and an
        ``error`` starting with :data:`NOT_SENT_PREFIX`.
    :raises ValueError: ``concurrency < 1`` (``< 0`` with ``arrivals``), a length list whose
        size is not ``len(texts)``, or ``arrivals`` of the wrong size, negative or decreasing.
    """
    if concurrency < (0 if arrivals is not None else 1):
        raise ValueError(f"concurrency={concurrency}: must be >= 1 (>= 0 with arrivals: 0 = no cap)")
    lengths = [max_new_tokens] * len(texts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(lengths) != len(texts):
        raise ValueError(f"max_new_tokens: {len(lengths)} lengths for {len(texts)} requests. Fix: one per request")
    if arrivals is not None:
        arrivals = [float(a) for a in arrivals]
        if len(arrivals) != len(texts) or any(a < 0 for a in arrivals) or any(
                b < a for a, b in zip(arrivals, arrivals[1:])):
            raise ValueError(f"arrivals: need {len(texts)} non-decreasing offsets >= 0 s, got {len(arrivals)}. "
                             "Fix: use lab.workload.arrivals.arrival_times(len(texts), rate, burstiness, seed)")
        return await _run_open_loop(url=base_url.rstrip("/") + "/generate", texts=texts, lengths=lengths,
                                    arrivals=arrivals, cap=concurrency, temperature=temperature,
                                    timeout_s=timeout_s, rid_prefix=rid_prefix, progress_desc=progress_desc,
                                    mode=mode, repeat=repeat, on_record=on_record)
    url = base_url.rstrip("/") + "/generate"
    records = [
        _new_record(f"{rid_prefix}-{i}", pi, mode, concurrency, repeat) for i, (pi, _) in enumerate(texts)
    ]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(texts)):
        queue.put_nowait(i)
    stop_reason: list[str] = []
    bar = tqdm(
        total=len(texts), desc=progress_desc, unit="req", disable=progress_desc is None, leave=True, mininterval=0.5
    )
    tokens_total = 0

    connector = aiohttp.TCPConnector(limit=concurrency + 8, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, read_bufsize=1 << 22, auto_decompress=False
    ) as session:

        async def worker() -> None:
            nonlocal tokens_total
            t_due = time.perf_counter()
            while not stop_reason:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                rec = records[i]
                rec.t_dispatch = t_due
                await _send(session, url, _payload(texts[i][1], lengths[i], temperature, rec.rid), rec, stop_reason)
                t_due = rec.t_end
                if on_record is not None:
                    on_record(rec)
                tokens_total += rec.completion_tokens or 0
                bar.update(1)
                bar.set_postfix(tok=tokens_total, refresh=False)

        try:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, max(len(texts), 1)))))
        finally:
            bar.close()

    if stop_reason:
        _mark_unsent(records, stop_reason, on_record)
    return records


def _mark_unsent(records: list[RequestRecord], stop_reason: list[str],
                 on_record: Callable[[RequestRecord], None] | None) -> None:
    """Every request never sent becomes a failed record (``error`` starting with
    :data:`NOT_SENT_PREFIX`, naming why the run stopped), handed to ``on_record`` too."""
    for rec in records:
        if rec.t_send is None:
            rec.error = f"{NOT_SENT_PREFIX}: server unreachable ({stop_reason[0] if stop_reason else 'stopped'})"
            rec.ok = False
            if on_record is not None:
                on_record(rec)


async def _send(session: aiohttp.ClientSession, url: str, payload: dict[str, Any], rec: RequestRecord,
                stop_reason: list[str]) -> bool:
    """:func:`_one_request`, with a refused connection recorded once in ``stop_reason`` (the
    run stops sending). Returns True when this request was the first refused one."""
    try:
        await _one_request(session, url, payload, rec)
    except _ConnectionRefused as exc:
        if not stop_reason:
            stop_reason.append(str(exc))
            return True
    return False


def _payload(text: str, max_new_tokens: int, temperature: float, rid: str) -> dict[str, Any]:
    """The ``/generate`` body of one streamed request (:func:`run_requests`)."""
    return {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                                              "ignore_eos": True}, "stream": True, "rid": rid}


async def _sleep_until(t: float) -> None:
    """Sleep until ``time.perf_counter() >= t`` (the event loop may wake a timer a clock
    resolution early, so it re-checks)."""
    while (left := t - time.perf_counter()) > 0:
        await asyncio.sleep(left)


async def _run_open_loop(*, url: str, texts: list[tuple[int, str]], lengths: list[int], arrivals: list[float],
                         cap: int, temperature: float, timeout_s: float, rid_prefix: str,
                         progress_desc: str | None, mode: str, repeat: int,
                         on_record: Callable[[RequestRecord], None] | None) -> list[RequestRecord]:
    """The open-loop branch of :func:`run_requests` (its arguments, validated; ``cap`` 0 = no
    cap): one task per request sleeps until ``t0 + arrivals[i]``, takes a slot when capped
    (slots are handed over FIFO with the freeing request's ``t_end``), and streams it."""
    records = [_new_record(f"{rid_prefix}-{i}", pi, mode, cap, repeat) for i, (pi, _) in enumerate(texts)]
    stop_reason: list[str] = []
    bar = tqdm(total=len(texts), desc=progress_desc, unit="req", disable=progress_desc is None, leave=True,
               mininterval=0.5)
    slots: asyncio.Queue[float] | None = asyncio.Queue() if cap else None
    connector = aiohttp.TCPConnector(limit=(cap + 8) if cap else 0, limit_per_host=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s),
                                     read_bufsize=1 << 22, auto_decompress=False) as session:
        t0 = time.perf_counter()
        if slots is not None:
            for _ in range(cap):
                slots.put_nowait(t0)
        tasks: list[asyncio.Task] = []

        async def one(i: int) -> None:
            rec = records[i]
            rec.t_scheduled = t_sched = t0 + arrivals[i]
            await _sleep_until(t_sched)
            t_free = t_sched
            if slots is not None:
                t_free = max(t_sched, await slots.get())
            if stop_reason:
                return
            rec.t_dispatch = t_free
            try:
                if await _send(session, url, _payload(texts[i][1], lengths[i], temperature, rec.rid), rec,
                               stop_reason):
                    for t in tasks:  # the server is gone: do not wait out the rest of the schedule
                        if t is not asyncio.current_task():
                            t.cancel()
            finally:
                if slots is not None:
                    slots.put_nowait(rec.t_end if rec.t_end is not None else time.perf_counter())
            if on_record is not None:
                on_record(rec)
            bar.update(1)

        tasks.extend(asyncio.ensure_future(one(i)) for i in range(len(texts)))
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            bar.close()
    _mark_unsent(records, stop_reason, on_record)
    for rec in records:
        if rec.t_send is not None and rec.t_end is None:  # cancelled mid-stream after the server went away
            rec.t_end, rec.error, rec.ok = time.perf_counter(), f"cancelled: {stop_reason[:1]}", False
            if on_record is not None:
                on_record(rec)
    return records


def run_requests_sync(base_url: str, texts: list[tuple[int, str]], **kwargs: Any) -> list[RequestRecord]:
    """Blocking wrapper of :func:`run_requests` (same arguments and result).

    Works both in plain scripts and inside a running event loop (a Jupyter/papermill
    kernel): there it runs the client's own loop in a worker thread.
    """
    coro_fn = lambda: run_requests(base_url, texts, **kwargs)  # noqa: E731
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()
    finally:
        # On KeyboardInterrupt/SystemExit (a signal to the kernel) do not wait for the
        # benchmark to drain: the caller stops the engine, which ends the thread's requests.
        pool.shutdown(wait=False, cancel_futures=True)


def request_function(engine: str | None) -> Callable[..., list[RequestRecord]]:
    """The blocking function that sends a batch of requests to ``engine`` (a registered name): the
    one its class names (:attr:`lab.engine.registry.Engine.request_function`, ``"module:function"``,
    taking :func:`run_requests_sync`'s arguments); :func:`run_requests_sync` for None.

    :raises lab.engine.registry.EngineError: ``engine`` is not registered.
    """
    if engine is None:
        return run_requests_sync
    import importlib

    from lab.engine.registry import engine_named

    module, _, name = engine_named(engine).request_function.partition(":")
    return getattr(importlib.import_module(module), name)


def fetch_text(url: str, timeout_s: float = 10.0) -> str:
    """GET ``url`` and return the body as text (e.g. ``/metrics``).

    :raises urllib.error.URLError: unreachable server; ``urllib.error.HTTPError`` on a
        non-2xx status (its message includes the status).
    """
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (lab-local URLs)
        return resp.read().decode("utf-8", errors="replace")


def fetch_json(url: str, timeout_s: float = 10.0) -> Any:
    """GET ``url`` and parse JSON (e.g. ``/server_info``).

    :raises urllib.error.URLError: as :func:`fetch_text`; ``json.JSONDecodeError`` if the
        body is not JSON.
    """
    return json.loads(fetch_text(url, timeout_s))
