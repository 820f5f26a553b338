"""aiohttp front end of the emulator: SGLang 0.5.23's HTTP surfaces.

Endpoints: ``GET /ready`` (cheap), ``/health``, ``/health_generate`` (a one-token generation,
>= 1 s, like SGLang), ``/v1/models``, ``/server_info`` (and deprecated
``/get_server_info``), ``/metrics``; ``GET|POST /start_profile``, ``/stop_profile``
(a modelled trace, :mod:`lab.emulator.modelled_trace`); ``POST /generate`` (SGLang native, SSE when
``stream``), ``POST /v1/completions`` and ``/v1/chat/completions`` (OpenAI format; ``sglext.spec_tokens_details``
when ``return_spec_tokens_details``). ``meta_info`` keys follow
``sglang/srt/managers/tokenizer_manager.py`` (``_calculate_spec_decoding_metrics``);
``finish_reason`` follows ``schedule_batch.py:FINISH_LENGTH.to_json``; the server-info
shape follows ``entrypoints/http_server.py:server_info`` and
``scheduler_components/internal_state.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from lab.emulator.args import DEFAULT_CONTEXT_LENGTH, ServerArgs
from lab.emulator.engine import Engine
from lab.emulator.faults import Faults
from lab.emulator.request import Request
from lab.emulator.metrics import CONTENT_TYPE_LATEST, EmulatorMetrics
from lab.emulator.profile import CostProfile
from lab.workload.context import estimate_tokens

__all__ = ["AppState", "build_app", "dispatch_events", "SGLANG_VERSION", "reported_version", "accept_key",
           "prompt_digest", "token_key", "is_greedy"]

SGLANG_VERSION = "0.5.23"  # the SGLang build whose HTTP surfaces (formats) are emulated


def reported_version(profile: CostProfile) -> str:
    """``/server_info`` ``version``: the modelled build's SGLang version when the profile's
    timing is faithful to one, else its label (never "0.5.23" for a build that runs
    differently: the default profile models the seeds' older build)."""
    return profile.models_build.sglang_version or profile.models_build.label
STATE_KEY = web.AppKey("emulator_state", object)


@dataclasses.dataclass
class AppState:
    """What every handler shares: the parsed flags, the cost profile, the engine thread, the
    Prometheus metrics, the start time (``time.time()``, s) and the injected faults."""

    args: ServerArgs
    profile: CostProfile
    profile_path: Path
    engine: Engine
    metrics: EmulatorMetrics
    startup_time: float
    faults: Faults = dataclasses.field(default_factory=Faults)
    categories: Any = None  # lab.emulator.categories.CategoryMap: prompt text -> category (per-category acceptance)
    fixed_sim_tokens: bool = False  # SGLANG_SIMULATE_ACC_LEN on, token mode "fixed" (SGLang's default)


def dispatch_events(events: list[tuple[Request, dict]]) -> None:
    """Runs on the event loop: put each event into its request's asyncio.Queue."""
    for req, ev in events:
        if req.sink is not None:
            req.sink.put_nowait(ev)


#: Prompt length of a text prompt: the lab's one rule (``ceil(len / 4)``, at least 1), which
#: :func:`lab.workload.context.pad_prompt` pads against on this engine.
_prompt_tokens_from_text = estimate_tokens


def _final_meta(st: AppState, req: Request, ev: dict) -> dict[str, Any]:
    m: dict[str, Any] = {"e2e_latency": ev["t"] - req.arrival}
    a = st.args
    if a.is_speculative and req.spec_verify_ct > 0:
        proposed = req.spec_verify_ct * ((a.speculative_num_draft_tokens or 2) - 1)
        m.update({
            "spec_accept_rate": req.num_correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": req.completion_tokens / req.spec_verify_ct,
            "spec_num_correct_drafts": req.num_correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": req.spec_verify_ct,
        })
        if req.histogram:
            m["spec_correct_drafts_histogram"] = list(req.histogram)
    return m


def _meta(st: AppState, req: Request, ev: dict) -> dict[str, Any]:
    m: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": {"type": "length", "length": req.max_new_tokens} if ev["finished"] else None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": ev["ct"],
        "cached_tokens": 0,
    }
    if ev["finished"]:
        m.update(_final_meta(st, req, ev))
    return m


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


_LAB_RID = re.compile(r"-r(?P<repeat>\d+)-(?P<index>\d+)$")


def accept_key(seed: int, prompt: Any, rid: str | None) -> str:
    """The key of a request's acceptance draws: (``--random-seed``, prompt, repeat, index).

    ``repeat`` and ``index`` (the request's place in its repeat) come from the lab's request
    ids ``<mode>-<point>-r<repeat>-<index>`` (``lab/measure/point.py``); the mode name is left out, so
    every mode streams the same prompts with the same draws. Other ids: repeat = index = 0.
    """
    m = _LAB_RID.search(rid or "")
    rep, idx = (m["repeat"], m["index"]) if m else ("0", "0")
    return f"{seed}|{prompt_digest(prompt)}|{rep}|{idx}"


def prompt_digest(prompt: Any) -> str:
    """16 hex digits (blake2b, 8 bytes) of the prompt (text or token ids, as JSON)."""
    return hashlib.blake2b(json.dumps(prompt, sort_keys=True).encode(), digest_size=8).hexdigest()


def is_greedy(sampling_params: dict[str, Any] | None) -> bool:
    """True when SGLang decodes greedily: ``temperature`` below 1e-6 (SGLang turns it into
    ``top_k = 1``) or ``top_k == 1``; a missing temperature is SGLang's default 1.0
    (``sglang/srt/sampling/sampling_params.py`` ~157 and ~245-247, ``_SAMPLING_EPS``)."""
    sp = sampling_params or {}
    try:
        temp = float(sp.get("temperature") if sp.get("temperature") is not None else 1.0)
    except (TypeError, ValueError):
        temp = 1.0
    return temp < 1e-6 or sp.get("top_k") == 1


def token_key(prompt: Any, sampling_params: dict[str, Any] | None, rid: str) -> str:
    """The key of a request's generated tokens (:class:`lab.emulator.request.Request`).

    Greedy requests (:func:`is_greedy`): the prompt's digest only, so every mode, repeat and
    output length gets the same token stream for the same prompt (a shorter
    ``max_new_tokens`` gets a prefix), as plain greedy decoding and lossless EAGLE-3 do.
    Sampled requests: the digest, the sampling parameters and the rid (a fresh draw each).
    """
    if is_greedy(sampling_params):
        return f"greedy|{prompt_digest(prompt)}"
    sp = {k: v for k, v in (sampling_params or {}).items() if k != "max_new_tokens"}
    return f"sampled|{prompt_digest(prompt)}|{json.dumps(sp, sort_keys=True, default=str)}|{rid}"


def _submit(st: AppState, rid: str | None, prompt_tokens: int, max_new_tokens: int, stream: bool,
            prompt: Any = None, sampling: dict[str, Any] | None = None) -> Request:
    rid = rid or uuid.uuid4().hex
    req = Request(rid=rid, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                  stream=stream, sink=asyncio.Queue(), loop=st.args.emulator_output == "loop",
                  accept_key=accept_key(st.args.random_seed, prompt, rid), fixed_token=st.fixed_sim_tokens,
                  token_key=token_key(prompt, sampling, rid),
                  diverge_at=st.faults.diverges_at(prompt_digest(prompt), st.args.is_speculative),
                  category=st.categories.lookup(prompt) if st.categories is not None else None)
    st.engine.submit(req)
    return req


def _record_sent(st: AppState, req: Request, first: float | None, last: float | None) -> None:
    """Ground truth "on the wire": when the first and last content chunks were written to the socket."""
    if first is not None:
        st.engine.truth.write({"kind": "sent", "rid": req.rid, "first_sent": first, "last_sent": last})


def _bad(msg: str) -> web.Response:
    return web.json_response({"error": {"message": msg, "type": "BadRequestError", "code": 400}}, status=400)


async def _events(req: Request):
    while True:
        ev = await req.sink.get()
        yield ev
        if ev["finished"]:
            return


async def _final_event(req: Request) -> dict[str, Any]:
    """The last event of a request (the one with ``finished``), after waiting for all of them."""
    async for ev in _events(req):
        last = ev
    return last


async def _stream(request: web.Request, st: AppState, req: Request, chunk: Callable[[dict], dict],
                  after: Callable[[dict], list[dict]] | None = None) -> web.StreamResponse:
    """The streaming skeleton of ``/generate``, ``/v1/completions`` and ``/v1/chat/completions``.

    A prepared ``text/event-stream`` (SSE) response; per engine event one ``data:`` chunk
    (``chunk(event)``), after the injected mid-stream stall (fault ``stall``); then the "sent"
    ground truth (when the first and last content chunks were written to the socket,
    :func:`_record_sent`), the chunks of ``after(last event)`` (OpenAI's usage) and
    ``data: [DONE]``. A client that disconnects marks the request aborted, so the engine stops
    generating for it (SGLang aborts a request whose connection closed).

    :raises ConnectionResetError, asyncio.CancelledError: the client went away (re-raised).
    """
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    stalled = [False]
    first_sent = last_sent = None
    last: dict = {}
    try:
        async for ev in _events(req):
            await st.faults.maybe_stall(ev["ct"], req.max_new_tokens, stalled)
            await resp.write(_sse(chunk(ev)))
            last_sent = time.perf_counter()
            first_sent = first_sent or last_sent
            last = ev
        _record_sent(st, req, first_sent, last_sent)
        for extra in (after(last) if after else ()):
            await resp.write(_sse(extra))
        await resp.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        req.aborted = True
        raise
    return resp


async def generate(request: web.Request) -> web.StreamResponse:
    st: AppState = request.app[STATE_KEY]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _bad("body is not JSON")
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
        return _bad("batched /generate is not supported by the emulator; send one prompt per request")
    if ids is not None:
        prompt_tokens = max(1, len(ids))
    elif isinstance(text, str):
        prompt_tokens = _prompt_tokens_from_text(text)
    else:
        return _bad("either text or input_ids must be provided")
    sp = body.get("sampling_params") or {}
    try:
        max_new = int(sp.get("max_new_tokens", 128))
    except (TypeError, ValueError):
        return _bad("sampling_params.max_new_tokens must be an integer")
    if max_new < 1:
        return _bad("sampling_params.max_new_tokens must be >= 1")
    stream = bool(body.get("stream", False))
    if (status := st.faults.on_generate(logging.getLogger("sglang"))) is not None:
        return web.json_response({"error": {"message": "Internal server error (injected fault http500-every)",
                                            "type": "InternalServerError", "code": status}}, status=status)
    req = _submit(st, body.get("rid"), prompt_tokens, max_new, stream, prompt=ids if ids is not None else text,
                  sampling=sp)
    if not stream:
        last = await _final_event(req)
        # no "index": SGLang adds it to batched requests only (tokenizer_manager.py ~2224)
        return web.json_response({"text": " ".join(req.words[: last["ct"]]), "output_ids": req.ids[: last["ct"]],
                                  "meta_info": _meta(st, req, last)})
    incremental, sent = st.args.incremental_streaming_output, 0

    def chunk(ev: dict) -> dict:
        nonlocal sent
        # output_ids as tokenizer_manager.py ~2636-2668 (_handle_batch_output): the new ids
        # with --incremental-streaming-output, else all ids so far
        if incremental:  # --incremental-streaming-output: only the new words
            text, ids_out = (" " if sent else "") + " ".join(req.words[sent: ev["ct"]]), req.ids[sent: ev["ct"]]
            sent = ev["ct"]
        else:
            text, ids_out = " ".join(req.words[: ev["ct"]]), req.ids[: ev["ct"]]
        return {"text": text, "output_ids": ids_out, "meta_info": _meta(st, req, ev)}

    return await _stream(request, st, req, chunk)


async def _openai_stream(request: web.Request, st: AppState, req: Request, body: dict[str, Any], head: dict[str, Any],
                         choice: Callable[[str, bool], dict], want_spec: bool) -> web.StreamResponse:
    """The OpenAI endpoints' stream on :func:`_stream`: per event the envelope ``head`` (id,
    object, created, model) with one ``choice(new text, finished)``, ``sglext`` on the last
    chunk when ``return_spec_tokens_details`` asked for it, and a usage chunk when
    ``stream_options.include_usage`` did (SGLang's ``CompletionStreamResponse`` and
    ``ChatCompletionStreamResponse`` shapes, ``protocol.py``)."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    sent = 0

    def chunk(ev: dict) -> dict:
        nonlocal sent
        text = (" " if sent else "") + " ".join(req.words[sent: ev["ct"]])
        sent = ev["ct"]
        out: dict[str, Any] = {**head, "choices": [choice(text, ev["finished"])]}
        if ev["finished"] and want_spec and (ext := _spec_details(_meta(st, req, ev))) is not None:
            out["sglext"] = ext
        return out

    def after(last: dict) -> list[dict]:
        return [{**head, "choices": [], "usage": _usage(req, sent)}] if include_usage else []

    return await _stream(request, st, req, chunk, after)


def _usage(req: Request, completion_tokens: int) -> dict[str, int]:
    """OpenAI ``usage`` of a request: prompt, completion and total tokens."""
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": req.prompt_tokens + completion_tokens}


def _spec_details(meta: dict[str, Any]) -> dict[str, Any] | None:
    """SGLang's ``sglext.spec_tokens_details`` from a finished request's ``meta_info`` (asked for
    with ``return_spec_tokens_details``); None without speculative counters (no speculation)."""
    if "spec_verify_ct" not in meta:
        return None
    keys = ("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
            "spec_verify_ct", "spec_correct_drafts_histogram")
    return {"spec_tokens_details": {k: meta.get(k, [] if k.endswith("histogram") else 0) for k in keys}}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    st: AppState = request.app[STATE_KEY]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _bad("body is not JSON")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return _bad("messages must be a non-empty list")
    prompt = "\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
    max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 128)
    stream = bool(body.get("stream", False))
    want_spec = bool(body.get("return_spec_tokens_details", False))
    req = _submit(st, body.get("rid"), _prompt_tokens_from_text(prompt), max_new, stream, prompt=prompt,
                  sampling={k: body[k] for k in ("temperature", "top_k", "top_p") if k in body})
    cid, created, model = f"chatcmpl-{req.rid}", int(time.time()), st.args.served_model_name

    def sglext(meta: dict) -> dict | None:
        return _spec_details(meta) if want_spec else None

    def usage(ct: int) -> dict:
        return _usage(req, ct)

    if not stream:
        last = await _final_event(req)
        meta = _meta(st, req, last)
        out = {"id": cid, "object": "chat.completion", "created": created, "model": model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(req.words[: last["ct"]])},
                            "finish_reason": "length"}], "usage": usage(last["ct"])}
        if (ext := sglext(meta)) is not None:
            out["sglext"] = ext
        return web.json_response(out)
    return await _openai_stream(
        request, st, req, body, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model},
        lambda text, finished: {"index": 0, "delta": {"role": "assistant", "content": text},
                                "finish_reason": "length" if finished else None}, want_spec)


HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"  # sglang/srt/constants.py:12
HEALTH_CHECK_TIMEOUT_S = 20.0  # entrypoints/http_server.py:218 (SGLANG_HEALTH_CHECK_TIMEOUT)


async def ready(request: web.Request) -> web.Response:
    """``GET /ready``: cheap, 200 while the engine can take requests (``http_server.py``
    ~714-718, ``tokenizer_manager.is_ready``)."""
    st: AppState = request.app[STATE_KEY]
    return web.Response(status=200 if st.engine.is_alive() else 503)


async def health(request: web.Request) -> web.Response:
    """``GET /health`` and ``/health_generate``: like SGLang 0.5.23 (``http_server.py``
    ~721-800, ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` on by default), a one-token
    generation (``max_new_tokens=1``, ``input_ids=[0]``, not counted in metrics) is queued,
    then the handler checks once per second for any scheduler output since it started:
    200 after >= 1 s, 503 after ``HEALTH_CHECK_TIMEOUT_S`` without one."""
    st: AppState = request.app[STATE_KEY]
    await st.faults.on_health(bool(st.engine.running or st.engine.waiting))
    if not st.engine.is_alive():
        return web.Response(status=503, text=f"engine thread not running: {st.engine.error!r}")
    it0 = st.engine.iteration
    req = Request(rid=f"{HEALTH_CHECK_RID_PREFIX}_{uuid.uuid4().hex}", prompt_tokens=1, max_new_tokens=1,
                  stream=False, sink=asyncio.Queue(), internal=True)
    st.engine.submit(req)
    tic = time.monotonic()
    while time.monotonic() < tic + HEALTH_CHECK_TIMEOUT_S:
        await asyncio.sleep(1.0)
        if req.finished or st.engine.iteration > it0:
            return web.Response(status=200)
        if not st.engine.is_alive():
            break
    req.aborted = True
    return web.Response(status=503)


async def v1_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: SGLang's ``ModelList`` of ``ModelCard`` (``entrypoints/openai/
    protocol.py`` ~87-103; ``http_server.py`` ~1993-2010)."""
    st: AppState = request.app[STATE_KEY]
    name = st.args.served_model_name
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "created": int(st.startup_time), "owned_by": "sglang", "root": name,
         "parent": None, "max_model_len": st.args.context_length or DEFAULT_CONTEXT_LENGTH}]})


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``: OpenAI text completions in SGLang's shapes
    (``protocol.py`` ``CompletionResponse`` ~528-536, ``CompletionStreamResponse`` ~568-575;
    ``object: "text_completion"``, ``usage``, ``sglext`` only when asked)."""
    st: AppState = request.app[STATE_KEY]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _bad("body is not JSON")
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if len(prompt) != 1:
            return _bad("batched /v1/completions is not supported by the emulator; send one prompt per request")
        prompt = prompt[0]
    if not isinstance(prompt, (str, list)) or not prompt:
        return _bad("prompt must be a non-empty string or token list")
    n_prompt = len(prompt) if isinstance(prompt, list) else _prompt_tokens_from_text(prompt)
    try:
        max_new = int(body.get("max_tokens") or 16)
    except (TypeError, ValueError):
        return _bad("max_tokens must be an integer")
    stream = bool(body.get("stream", False))
    want_spec = bool(body.get("return_spec_tokens_details", False))
    req = _submit(st, body.get("rid"), n_prompt, max_new, stream, prompt=prompt,
                  sampling={k: body[k] for k in ("temperature", "top_k", "top_p") if k in body})
    cid, created, model = f"cmpl-{req.rid}", int(time.time()), st.args.served_model_name

    def usage(ct: int) -> dict:
        return _usage(req, ct)

    def sglext(ev: dict) -> dict | None:
        return _spec_details(_meta(st, req, ev)) if want_spec else None

    if not stream:
        last = await _final_event(req)
        out = {"id": cid, "object": "text_completion", "created": created, "model": model,
               "choices": [{"index": 0, "text": " ".join(req.words[: last["ct"]]), "logprobs": None,
                            "finish_reason": "length", "matched_stop": None}], "usage": usage(last["ct"])}
        if (ext := sglext(last)) is not None:
            out["sglext"] = ext
        return web.json_response(out)
    return await _openai_stream(
        request, st, req, body, {"id": cid, "object": "text_completion", "created": created, "model": model},
        lambda text, finished: {"index": 0, "text": text, "logprobs": None,
                                "finish_reason": "length" if finished else None, "matched_stop": None}, want_spec)


def server_info_dict(st: AppState) -> dict[str, Any]:
    """The /server_info object (resolved args + emulator identity + internal_states)."""
    info = st.args.to_dict()
    info["emulator_profile"] = {"name": st.profile.name, "version": st.profile.version, "path": str(st.profile_path)}
    info["engine"] = "emulator"
    eng = st.engine
    internal: dict[str, Any] = {"effective_max_running_requests_per_dp": st.args.max_running_requests}
    if st.args.is_speculative and eng.avg_spec_accept_length is not None:
        internal["avg_spec_accept_length"] = eng.avg_spec_accept_length
    if eng.record_step_time:
        for _ in range(3):  # the engine thread may append concurrently
            try:
                internal["step_time_dict"] = {k: list(v) for k, v in list(eng.step_time_dict.items())}
                break
            except RuntimeError:
                continue
    info.update({"startup_time": st.startup_time, "internal_states": [internal], "version": reported_version(st.profile),
                 "emulator_models_build": st.profile.models_build.label,
                 "emulator_surfaces_version": SGLANG_VERSION, "frontend": "python"})
    return info


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(server_info_dict(request.app[STATE_KEY]))


async def metrics(request: web.Request) -> web.Response:
    st: AppState = request.app[STATE_KEY]
    return web.Response(body=st.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(state: AppState) -> web.Application:
    """The aiohttp application serving ``state``."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE_KEY] = state
    app.router.add_get("/ready", ready)
    app.router.add_get("/v1/models", v1_models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/chat/completions", chat_completions)
    from lab.emulator.modelled_trace import add_profile_routes

    add_profile_routes(app, STATE_KEY)  # /start_profile, /stop_profile
    return app
