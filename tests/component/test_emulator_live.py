"""The emulator as a live server (lab/emulator): ``python -m lab.emulator`` on free ports, and
what a client sees checked against the emulator's ground-truth file, its /metrics and its log.
The cost math and acceptance model without a server are tests/unit/test_emulator.py.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.emulator.profile import load_profile
from lab.emulator.truth import load_truth
from shared import DECODE_LINE, PHYSICS_RATIO_3_OVER_1, Server

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- integration


async def _stream(session: aiohttp.ClientSession, url: str, rid: str, max_new: int, text: str = "Explain CUDA graphs briefly.") -> dict:
    """One streamed /generate; returns {rid, chunks: [(t, n_tokens)], final meta_info, text}."""
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}, "stream": True, "rid": rid}
    chunks, prev, meta, done, txt = [], 0, None, False, ""
    async with session.post(url + "/generate", json=body) as r:
        assert r.status == 200
        async for raw in r.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                break
            obj = json.loads(line[6:])
            ct = obj["meta_info"]["completion_tokens"]
            chunks.append((time.perf_counter(), ct - prev))
            prev, meta, txt = ct, obj["meta_info"], obj["text"]
    assert done
    return {"rid": rid, "chunks": chunks, "meta": meta, "text": txt}


async def _scrape(session: aiohttp.ClientSession, url: str) -> dict[tuple[str, tuple], float]:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    out = {}
    rank_labels = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("tp_rank", "0") != "0":  # every TP rank exports its own series
                continue
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in rank_labels)))] = s.value
    return out


def _delta(after, before, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def _check_iterations_consistent(truth) -> None:
    """What holds under any load: each iteration lasts at least its planned time (the
    emulator sleeps to deadlines, so a busy machine can only lengthen it), and its phases
    fit inside it. How closely it keeps the plan is a benchmark
    (benchmarks/emulator_fidelity.py), not a test."""
    assert truth.iterations, "no iterations recorded"
    for it in truth.iterations:
        span = it["end"] - it["start"]
        assert span >= it["planned_s"] - 1e-6, it
        assert it["verify_s"] + it["draft_s"] + it["decode_s"] + it["prefill_s"] <= span + 1e-6, it


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emulator")
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3-mla",
            "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"]
    srv = {
        "baseline": Server(tmp, "baseline", []),
        "prefill": Server(tmp, "prefill", spec + ["--speculative-attention-mode", "prefill"]),
        "decode": Server(tmp, "decode", spec + ["--speculative-attention-mode", "decode", "--enable-p2p-check"]),
    }
    try:
        async def ready():
            await asyncio.wait_for(asyncio.gather(*(s.wait_ready() for s in srv.values())), 30)

        asyncio.run(ready())
        yield srv
    finally:
        for s in srv.values():
            s.stop()


async def _run_mode(srv: Server, n_conc: int, max_new: int, tag: str):
    async with aiohttp.ClientSession() as s:
        before = await _scrape(s, srv.url)
        results = await asyncio.gather(*(_stream(s, srv.url, f"{tag}-{i}", max_new) for i in range(n_conc)))
        after = await _scrape(s, srv.url)
        async with s.get(srv.url + "/server_info") as r:
            info = await r.json()
    return results, before, after, info


@pytest.mark.integration
@pytest.mark.parametrize("mode,verify_ms", [("prefill", 29.0), ("decode", 12.0 * PHYSICS_RATIO_3_OVER_1)])
def test_spec_server_end_to_end(servers, mode, verify_ms):
    srv = servers[mode]
    results, before, after, info = asyncio.run(_run_mode(srv, 1, 24, f"{mode}-c1"))
    results2, *_ = asyncio.run(_run_mode(srv, 4, 16, f"{mode}-c4"))
    # client accounting and SGLang's speculative meta_info keys
    for res in results + results2:
        m = res["meta"]
        assert sum(n for _, n in res["chunks"]) == m["completion_tokens"]
        assert m["finish_reason"] == {"type": "length", "length": m["completion_tokens"]}
        for k in ("e2e_latency", "spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                  "spec_num_proposed_drafts", "spec_correct_drafts_histogram"):
            assert k in m, k
        assert m["spec_num_proposed_drafts"] == 2 * m["spec_verify_ct"]
        assert sum(m["spec_correct_drafts_histogram"]) == m["spec_verify_ct"]
        assert len(res["text"].split()) == m["completion_tokens"]
    # /metrics: verify seconds per decode pass == profile verify cost (batch 1, tiny context)
    passes = _delta(after, before, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph") + _delta(
        after, before, "sglang:cuda_graph_passes_total", mode="decode_none")
    verify_s = _delta(after, before, "sglang:forward_execution_seconds_total", category="target_verify")
    assert passes == results[0]["meta"]["spec_verify_ct"]
    graph = mode == "decode"  # the default profile: prefill-mode verify outside CUDA graphs
    assert load_profile("kimi_k25_tp8_pcie")[0].verify_s(1, 3, 0, mode, graph=graph) * 1e3 == pytest.approx(verify_ms, abs=0.01)
    # /metrics' verify seconds are what the emulator did (its ground truth, checked below);
    # how close they stay to the profile's verify_ms is benchmarks/emulator_fidelity.py's
    graph_mode = "decode_cuda_graph" if mode == "decode" else "decode_none"
    assert _delta(after, before, "sglang:cuda_graph_passes_total", mode=graph_mode) == passes
    assert _delta(after, before, "sglang:generation_tokens_total", is_streaming="true") == 24
    assert _delta(after, before, "sglang:spec_verify_calls_total") == passes
    # /server_info: topk-1 rewrite (5 -> num_steps + 1), the cap, identity
    assert info["speculative_num_draft_tokens"] == 3 and info["max_running_requests"] == 48
    assert info["speculative_attention_mode"] == mode and info["engine"] == "emulator"
    assert info["emulator_profile"]["name"] == "kimi_k25_tp8_pcie" and info["emulator_profile"]["version"] == 2
    st = info["internal_states"][0]
    assert st["avg_spec_accept_length"] >= 1.0 and st["avg_spec_accept_length"] <= 3.0  # 1 + up to 2 drafts
    assert st["step_time_dict"]
    # ground truth agrees with what the client saw
    truth = load_truth(srv.truth_path)
    by_rid = truth.tokens_by_rid()
    for res in results + results2:
        rq = truth.requests[res["rid"]]
        assert rq["completion_tokens"] == res["meta"]["completion_tokens"]
        assert rq["spec_verify_ct"] == res["meta"]["spec_verify_ct"]
        assert by_rid[res["rid"]] == [n for _, n in res["chunks"]]
        # the first chunk arrives after the first token was produced (delivery delay: a benchmark)
        assert res["chunks"][0][0] - rq["first_token"] >= 0
    _check_iterations_consistent(truth)
    t_verify = sum(it["verify_s"] for it in truth.iterations if it["kind"] == "spec" and set(it["tokens"]) == {results[0]["rid"]})
    assert verify_s == pytest.approx(t_verify, rel=1e-6)  # /metrics reports what the emulator did
    assert truth.accept_length([r["rid"] for r in results]) == pytest.approx(results[0]["meta"]["spec_accept_length"])
    log = srv.log_path.read_text()
    assert any(DECODE_LINE.match(line) and "accept len" in line for line in log.splitlines())
    assert f"cuda graph: {mode == 'decode'}" in log
    if mode == "decode":
        assert "does not model (ignored): --enable-p2p-check" in log  # an SGLang flag; a typo is refused (test_emulator_flags.py)


@pytest.mark.integration
def test_per_request_output_lengths_are_decoded(servers):
    """bench.output_tokens_spread: the client sends one max_new_tokens per request and the
    engine (ignore_eos) decodes exactly that many tokens for each."""
    from lab.measure.client import run_requests_sync
    from lab.workload.dataset import output_lengths

    lengths = output_lengths(6, 24, 0.5, seed=3)
    assert len(set(lengths)) > 1 and all(12 <= n <= 24 for n in lengths)
    # the EAGLE-3 server (its own end-to-end test ran above): a verify may grant several
    # tokens, yet no request overshoots its own limit
    recs = run_requests_sync(servers["decode"].url, [(i, f"prompt {i}") for i in range(6)], concurrency=3,
                             max_new_tokens=lengths, temperature=0.0, timeout_s=30, rid_prefix="spread")
    assert [r.completion_tokens for r in recs] == lengths
    assert all(sum(n for _, n in r.chunks) == r.completion_tokens for r in recs)
    with pytest.raises(ValueError, match="one per request"):
        run_requests_sync(servers["decode"].url, [(0, "x")], concurrency=1, max_new_tokens=[4, 4],
                          temperature=0.0, timeout_s=5, rid_prefix="bad")


@pytest.mark.integration
def test_baseline_server_and_sigterm(servers):
    srv = servers["baseline"]

    async def go():
        async with aiohttp.ClientSession() as s:
            before = await _scrape(s, srv.url)
            res = await _stream(s, srv.url, "base-0", 20)
            after = await _scrape(s, srv.url)
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 3}}
            async with s.post(srv.url + "/generate", json=body) as r:
                nonstream = await r.json()
            chat = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            async with s.post(srv.url + "/v1/chat/completions", json=chat) as r:
                chat_out = await r.json()
            async with s.get(srv.url + "/server_info") as r:
                info = await r.json()
        return res, before, after, nonstream, chat_out, info

    res, before, after, nonstream, chat_out, info = asyncio.run(go())
    m = res["meta"]
    assert sum(n for _, n in res["chunks"]) == m["completion_tokens"] == 20
    assert all(n == 1 for _, n in res["chunks"]) and "spec_verify_ct" not in m
    assert nonstream["meta_info"]["completion_tokens"] == 3 and nonstream["meta_info"]["finish_reason"]["type"] == "length"
    assert chat_out["usage"]["completion_tokens"] == 4 and chat_out["choices"][0]["finish_reason"] == "length"
    assert info["speculative_algorithm"] is None and "avg_spec_accept_length" not in info["internal_states"][0]
    passes = _delta(after, before, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph")
    decode_s = _delta(after, before, "sglang:forward_execution_seconds_total", category="decode")
    assert passes == 19
    truth = load_truth(srv.truth_path)
    dec = [it for it in truth.iterations if it["kind"] == "decode" and "base-0" in it["tokens"]]
    assert len(dec) == 19
    assert decode_s == pytest.approx(sum(it["decode_s"] for it in dec), rel=1e-6)  # /metrics = what it did
    prof = load_profile("kimi_k25_tp8_pcie")[0]
    assert decode_s / passes >= prof.decode_s(1, 0, True) * (1 - 1e-6)  # never faster than the profile
    # ground-truth decode throughput: (20 - 1) tokens between the first and last token
    r0 = truth.requests["base-0"]
    assert truth.decode_tok_s("base-0") == pytest.approx(19 / (r0["last_token"] - r0["first_token"]), rel=1e-9)
    _check_iterations_consistent(truth)
    # the client's timestamps against the ground truth (one monotonic clock): a chunk never
    # arrives before the engine produced its token. How long delivery takes depends on load
    # (benchmarks/emulator_fidelity.py prints it).
    first_delay = res["chunks"][0][0] - r0["first_token"]
    last_delay = res["chunks"][-1][0] - r0["last_token"]
    assert first_delay >= 0 and last_delay >= 0
    assert truth.mean_phase_s()["decode_s"] == pytest.approx(sum(it["decode_s"] for it in truth.iterations
                                                                 if it["kind"] == "decode")
                                                             / sum(it["kind"] == "decode" for it in truth.iterations))
    log = srv.log_path.read_text()
    assert any(DECODE_LINE.match(line) and "accept" not in line for line in log.splitlines())
    for s in ("Load weight begin", "Capture target decode CUDA graph begin", "The server is fired up and ready to roll!"):
        assert s in log
    # SIGTERM: exits 0 promptly with the ground truth flushed
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=10) == 0  # exits on its own (no SIGKILL), however loaded the machine
    truth = load_truth(srv.truth_path)
    assert {"base-0"} <= set(truth.requests) and len(truth.requests) == 3


@pytest.mark.integration
def test_every_streaming_endpoint_records_sent_truth_and_aborts_on_disconnect(tmp_path):
    """/generate, /v1/completions and /v1/chat/completions share one streaming skeleton
    (lab/emulator/http.py): a finished stream writes its "sent" ground-truth line (first and
    last chunk on the wire), and a client that hangs up mid-stream gets its request aborted
    (the engine's request line says ``finish_reason: abort`` and fewer tokens than asked)."""
    bodies = {
        "/generate": lambda rid, n: {"text": "Explain CUDA graphs.", "rid": rid, "stream": True,
                                     "sampling_params": {"max_new_tokens": n, "temperature": 0}},
        "/v1/completions": lambda rid, n: {"prompt": "Explain CUDA graphs.", "rid": rid, "stream": True,
                                           "max_tokens": n, "temperature": 0},
        "/v1/chat/completions": lambda rid, n: {"messages": [{"role": "user", "content": "Explain CUDA graphs."}],
                                                "rid": rid, "stream": True, "max_tokens": n, "temperature": 0},
    }
    srv = Server(tmp_path, "skeleton", ["--emulator-profile", "fast"])

    async def run() -> None:
        await srv.wait_ready()
        async with aiohttp.ClientSession() as s:
            for i, (path, body) in enumerate(bodies.items()):
                async with s.post(srv.url + path, json=body(f"full-{i}", 8)) as r:
                    assert r.status == 200 and (await r.text()).rstrip().endswith("data: [DONE]")
        for i, (path, body) in enumerate(bodies.items()):
            s = aiohttp.ClientSession()
            r = await s.post(srv.url + path, json=body(f"cut-{i}", 100_000))
            await r.content.readline()  # the first chunk arrived: the stream runs
            r.close()  # hang up mid-stream
            await s.close()
        await asyncio.sleep(1.0)  # the server notices at its next write; the engine drops the request

    try:
        asyncio.run(run())
    finally:
        srv.stop()
    truth = load_truth(srv.truth_path)
    for i, path in enumerate(bodies):
        sent = truth.sent.get(f"full-{i}")
        assert sent and sent["first_sent"] <= sent["last_sent"], path
        assert truth.requests[f"full-{i}"]["completion_tokens"] == 8, path
        cut = truth.requests.get(f"cut-{i}")
        assert cut and cut["finish_reason"] == "abort" and cut["completion_tokens"] < 100_000, (path, cut)
