"""Tests of the emulator (lab/emulator): cost math, acceptance, CLI, and a live server.

Unit tests check the profile against the seed numbers (12 ms decode, 29 ms prefill-mode
verify, 18.31 ms decode-mode verify at batch 1) and the acceptance model's means.
Integration tests start ``python -m lab.emulator`` on free ports and check what a client
sees against the emulator's ground-truth file, its /metrics and its log.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.emulator.acceptance import AcceptanceModel
from lab.emulator.args import parse_args
from lab.emulator.engine import Engine
from lab.emulator.metrics import EmulatorMetrics
from lab.emulator.profile import PROFILES_DIR, ProfileError, accept_prob_for_mean, load_profile
from lab.emulator.sglog import decode_batch_line
from lab.emulator.request import Request
from lab.emulator.truth import TruthWriter, load_truth
from lab.engine.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PHYSICS_RATIO_3_OVER_1 = 9.399 / 6.16  # /work/shared/physics-h200.json graph_ms T=3 / T=1
DECODE_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, "
    r"(accept len: \d+\.\d\d, accept rate: \d+\.\d\d, )?cuda graph: (True|False), gen throughput \(token/s\): \d+\.\d\d, "
    r"#queue-req: \d+(, fwd occupancy: \d+\.\d\d%, fwd\+idle occupancy: \d+\.\d\d%)?$"
)


# --------------------------------------------------------------------------- unit
def test_profile_matches_seed_numbers():
    p, path = load_profile("kimi_k25_tp8_pcie")
    assert path == PROFILES_DIR / "kimi_k25_tp8_pcie.json" and p.version == 2  # 2: acceptance.per_category
    assert p.decode_s(1, 0, graph=True) == pytest.approx(0.012, abs=1e-9)
    assert not p.verify_graph_captured("prefill") and p.verify_graph_captured("decode")
    assert p.verify_s(1, 3, 0, "prefill", graph=False) == pytest.approx(0.029, abs=1e-9)
    assert p.verify_s(1, 3, 0, "decode", graph=True) == pytest.approx(0.012 * PHYSICS_RATIO_3_OVER_1, abs=2e-5)
    assert p.decode_s(1, 0, graph=False) == pytest.approx(0.012 * 15.462 / 6.16, rel=1e-3)
    draft = p.draft_s(1, 2)
    assert 0.0008 <= draft <= 0.0011
    cycle = draft + p.verify_s(1, 3, 0, "prefill", False) + p.overhead_s
    assert 0.964 <= 0.029 / cycle <= 0.972  # seeds: verify 96.9 % of the cycle
    assert 82.0 <= 1 / (p.decode_s(1, 0, True) + p.overhead_s) <= 83.5  # seeds: 82-83 tok/s
    # larger batch / context / eager cost more
    assert p.decode_s(8, 0, True) > p.decode_s(1, 0, True)
    assert p.verify_s(1, 3, 4000, "prefill", False) > p.verify_s(1, 3, 0, "prefill", False)
    load_profile("fast")


def test_every_profile_constant_has_a_source():
    for f in PROFILES_DIR.glob("*.json"):
        def walk(o, key=""):
            if isinstance(o, dict):
                if "value" in o:
                    assert o.get("source"), f"{f}: {key} has no source"
                for k, v in o.items():
                    walk(v, f"{key}.{k}")
        walk(json.loads(f.read_text()))


def test_bad_profile_error_names_file_and_key(tmp_path):
    raw = json.loads((PROFILES_DIR / "fast.json").read_text())
    raw["decode"]["graph_ms_bs2"] = raw["decode"].pop("graph_ms_bs1")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ProfileError) as e:
        load_profile(bad)
    msg = str(e.value)
    assert str(bad) in msg and "decode.graph_ms_bs1" in msg and "decode.graph_ms_bs2: unknown key" in msg
    with pytest.raises(ProfileError, match="not found"):
        load_profile("no_such_profile")


def test_accept_probability_for_seed_mean():
    p = accept_prob_for_mean(1.85, 2)
    assert p == pytest.approx(0.5488, abs=1e-4)
    assert load_profile("kimi_k25_tp8_pcie")[0].p_accept == pytest.approx(p, abs=1e-4)


def test_acceptance_mean_chain_topk_and_simulated():
    n = 40000
    m = AcceptanceModel(0.5488, num_steps=2, topk=1, num_draft_tokens=3, simulate_acc_len=None, rng=random.Random(1))
    draws = [m.draw() for _ in range(n)]
    assert set(draws) == {1, 2, 3}
    assert sum(draws) / n == pytest.approx(1.85, abs=0.02) and m.expected_length == pytest.approx(1.85, abs=1e-3)
    t = AcceptanceModel(0.5, num_steps=3, topk=4, num_draft_tokens=8, simulate_acc_len=None, rng=random.Random(2))
    q = 1 - 0.5**4
    assert sum(t.draw() for _ in range(n)) / n == pytest.approx(1 + q + q * q + q**3, abs=0.03)
    s = AcceptanceModel(0.5488, num_steps=3, topk=1, num_draft_tokens=4, simulate_acc_len=2.3, rng=random.Random(3))
    sd = [s.draw() for _ in range(n)]
    assert set(sd) == {2, 3} and sum(sd) / n == pytest.approx(2.3, abs=0.02)
    off = AcceptanceModel(0.5, 2, 1, 3, simulate_acc_len=-1.0, rng=random.Random(4))
    assert off.simulate is None


def test_cli_topk1_rewrite_and_caps():
    base = ["--model-path", "m", "--port", "1234"]
    spec = base + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
                   "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"]
    a, unknown = parse_args(spec + ["--mem-fraction-static", "0.8", "--weird-flag", "x"])
    assert a.speculative_num_draft_tokens == 3 and a.max_running_requests == 48
    assert a.speculative_draft_attention_backend is None and unknown == ["--weird-flag", "x"]  # raw, as SGLang
    assert a.context_length is None
    b, _ = parse_args(base + ["--max-running-requests", "16"])
    assert b.max_running_requests == 16 and b.speculative_num_draft_tokens is None
    with pytest.raises(SystemExit):
        parse_args(spec[:-6] + ["--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "9"])


def test_decode_batch_line_format():
    line = "[2026-01-01 00:00:00 TP0] " + decode_batch_line(
        running=2, num_tokens=300, token_usage=0.001, accept_len=1.85, accept_rate=0.425, cuda_graph=True,
        gen_throughput=61.234, queue=0)
    assert DECODE_LINE.match(line), line
    plain = decode_batch_line(running=1, num_tokens=3, token_usage=0, accept_len=None, accept_rate=None,
                              cuda_graph=False, gen_throughput=1, queue=0)
    assert "accept" not in plain


def test_engine_batching_graph_limit_and_simulated_accept(tmp_path):
    """In-process engine (fast profile): running cap, graph batch limit, pinned accept length."""
    import logging

    argv = ["--emulator-profile", "fast", "--max-running-requests", "3", "--cuda-graph-max-bs-decode", "2",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-attention-mode", "decode", "--decode-log-interval", "1000"]
    args, _ = parse_args(argv)
    prof, _ = load_profile("fast")
    events = []
    truth = TruthWriter(tmp_path / "t.jsonl")
    truth.write({"kind": "header", "profile": {}, "argv": argv, "pid": os.getpid()})
    log = logging.getLogger("test-emulator-engine")
    eng = Engine(args, prof, deliver=events.extend, metrics=EmulatorMetrics("m", True), truth=truth, log=log,
                 simulate_acc_len=2.0)
    eng.start()
    for i in range(4):
        eng.submit(Request(rid=f"r{i}", prompt_tokens=8, max_new_tokens=9))
    t0 = time.monotonic()
    while sum(ev["finished"] for _, ev in events) < 4 and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    eng.stop()
    truth.close()
    t = load_truth(tmp_path / "t.jsonl")
    assert set(t.requests) == {"r0", "r1", "r2", "r3"}
    assert all(r["completion_tokens"] == 9 for r in t.requests.values())
    assert max(it["batch"] for it in t.iterations) == 3  # the running cap
    for it in t.iterations:
        if it["kind"] == "spec":
            assert it["graph"] == (it["batch"] <= 2)
            assert all(n == 2 for n in it["tokens"].values())  # pinned accept length 2.0
    # 1 prefill token + 4 cycles x 2 tokens = 9 tokens in 4 verify calls each
    assert all(r["spec_verify_ct"] == 4 for r in t.requests.values())
    assert t.accept_length() == pytest.approx(9 / 4)
    by_rid = t.tokens_by_rid()
    assert all(v == [1, 2, 2, 2, 2] for v in by_rid.values()), by_rid


# --------------------------------------------------------------------------- integration
_free_port = free_port  # lab.engine.ports


class Server:
    """A running ``python -m lab.emulator`` subprocess."""

    def __init__(self, tmp: Path, name: str, extra: list[str], env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.truth_path = tmp / f"{name}.truth.jsonl"
        self.log_path = tmp / f"{name}.log"
        argv = [sys.executable, "-m", "lab.emulator", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
                "--host", "127.0.0.1", "--port", str(self.port), "--enable-metrics", "--decode-log-interval", "5",
                "--max-running-requests", "48", "--cuda-graph-max-bs-decode", "48",
                "--ground-truth-file", str(self.truth_path), "--emulator-startup-delay-s", "0", *extra]
        e = {**os.environ, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", "SGLANG_RECORD_STEP_TIME": "1", **(env or {})}
        self.log_f = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=e, stdout=self.log_f, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    async def wait_ready(self, timeout: float = 20.0) -> None:
        t0 = time.monotonic()
        async with aiohttp.ClientSession() as s:
            while time.monotonic() - t0 < timeout:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"emulator exited {self.proc.returncode}: {self.log_path.read_text()}")
                try:
                    async with s.get(self.url + "/ready") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise TimeoutError(self.log_path.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.log_f.close()


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
        "decode": Server(tmp, "decode", spec + ["--speculative-attention-mode", "decode", "--unknown-flag"]),
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
        assert "ignoring unknown flags: --unknown-flag" in log


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
    assert [r["completion_tokens"] for r in recs] == lengths
    assert all(sum(n for _, n in r["chunks"]) == r["completion_tokens"] for r in recs)
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


def _run_engine(tmp_path, name: str, argv: list[str], reqs: list[Request], *, simulate: float | None = None,
                metrics: EmulatorMetrics | None = None):
    import logging

    args, _ = parse_args(["--emulator-profile", "fast", *argv])
    prof, _ = load_profile("fast")
    events: list = []
    truth = TruthWriter(tmp_path / f"{name}.jsonl")
    truth.write({"kind": "header", "profile": {}, "argv": argv, "pid": os.getpid()})
    eng = Engine(args, prof, deliver=events.extend, metrics=metrics or EmulatorMetrics("m", True, args.tp_size),
                 truth=truth, log=logging.getLogger("test-emulator-" + name), simulate_acc_len=simulate)
    eng.start()
    for r in reqs:
        eng.submit(r)
    t0 = time.monotonic()
    while sum(ev["finished"] for _, ev in events) < len(reqs) and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    eng.stop()
    truth.close()
    return load_truth(tmp_path / f"{name}.jsonl")


SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--decode-log-interval", "1000"]


def test_accept_draws_are_a_function_of_seed_prompt_repeat_position(tmp_path):
    """Issue 13 item 6: both modes see the same accept lengths whatever warm-up and batch order."""
    from lab.emulator.http import accept_key

    def reqs(mode: str, order: list[int]) -> list[Request]:
        return [Request(rid=f"{mode}-c4-r1-{i}", prompt_tokens=8, max_new_tokens=40,
                        accept_key=accept_key(0, f"prompt {i}", f"{mode}-c4-r1-{i}")) for i in order]

    warm = [Request(rid=f"w{i}", prompt_tokens=8, max_new_tokens=20, accept_key=accept_key(0, "warm", f"w{i}"))
            for i in range(3)]
    a = _run_engine(tmp_path, "a", SPEC + ["--speculative-attention-mode", "prefill"], reqs("eagle3_prefill", [0, 1, 2, 3]))
    b = _run_engine(tmp_path, "b", SPEC + ["--speculative-attention-mode", "decode", "--max-running-requests", "2"],
                    warm + reqs("eagle3_decode", [3, 1, 0, 2]))
    ta, tb = a.tokens_by_rid(), b.tokens_by_rid()
    for i in range(4):
        assert ta[f"eagle3_prefill-c4-r1-{i}"] == tb[f"eagle3_decode-c4-r1-{i}"]
    assert len({tuple(v) for k, v in ta.items()}) > 1  # draws differ between prompts
    c = _run_engine(tmp_path, "c", SPEC, [Request(rid="eagle3_prefill-c4-r2-0", prompt_tokens=8, max_new_tokens=40,
                                                  accept_key=accept_key(0, "prompt 0", "eagle3_prefill-c4-r2-0"))])
    assert c.tokens_by_rid()["eagle3_prefill-c4-r2-0"] != ta["eagle3_prefill-c4-r1-0"]  # another repeat
    # SGLANG_SIMULATE_ACC_LEN: one draw per step for the whole batch (spec_utils.py ~505-559)
    s = _run_engine(tmp_path, "s", SPEC, [Request(rid=f"s{i}", prompt_tokens=8, max_new_tokens=60) for i in range(4)],
                    simulate=2.5)
    spec_its = [it for it in s.iterations if it["kind"] == "spec" and len(it["tokens"]) == 4]
    assert spec_its and all(len(set(it["tokens"].values())) == 1 for it in spec_its if
                            all(v < 4 for v in it["tokens"].values()))
    assert {n for it in spec_its for n in it["tokens"].values()} >= {2, 3}


def test_eager_draft_is_booked_as_decode_and_extend(tmp_path):
    """Issue 12 item 1: above the captured batch size the draft runs eagerly, booked as
    ``decode``/``extend`` (eagle_worker_v2.py ~693-715, eager_runner.py ~261, ~342-350); the
    ground truth still counts it as draft time; every TP rank exports its series."""
    from lab.measure.prometheus import parse_prometheus, server_timing

    m = EmulatorMetrics("m", True, tp_size=4)
    before = m.render().decode()
    t = _run_engine(tmp_path, "e", SPEC + ["--cuda-graph-max-bs-decode", "1", "--tp-size", "4"],
                    [Request(rid=f"e{i}", prompt_tokens=8, max_new_tokens=n) for i, n in enumerate((10, 20, 60))], metrics=m)
    spec = [it for it in t.iterations if it["kind"] == "spec"]
    eager = [it for it in spec if it["batch"] > 1]
    graphed = [it for it in spec if it["batch"] == 1]
    assert eager and graphed
    assert all(set(it["booked_s"]) == {"decode", "target_verify", "extend"} for it in eager)
    assert all(set(it["booked_s"]) == {"eagle_draft", "target_verify", "eagle_draft_extend"} for it in graphed)
    assert all(it["draft_s"] == pytest.approx(it["booked_s"]["decode"] + it["booked_s"]["extend"]) for it in eager)
    after = m.render().decode()
    assert parse_prometheus(after).label_values("sglang:cuda_graph_passes_total", "tp_rank") == ["0", "1", "2", "3"]
    st = server_timing(before, after, speculative=True)
    assert st["decode_iterations"] == len(spec)  # one rank's count, not 4x
    assert st["draft_incomplete"] is True
    truth_draft_ms = sum(it["booked_s"].get("eagle_draft", 0) + it["booked_s"].get("decode", 0) +
                         it["booked_s"].get("eagle_draft_extend", 0) for it in spec) * 1e3 / len(spec)
    # draft_ms holds every draft step (graph or eager); only eager draft-extend (in "extend",
    # mixed with prefill) is missing, which draft_incomplete says
    assert st["draft_ms"] == pytest.approx(truth_draft_ms, rel=1e-6)


def test_startup_log_captures_verify_graph_only_where_the_profile_replays_it():
    from lab.emulator.sglog import startup_lines

    kw = dict(speculative=True, graph_bs=[1, 2], disable_cuda_graph=False, backend="full", num_tokens_per_req=3)
    eager = [m for _, m in startup_lines(**kw, verify_graph=False)]
    graphed = [m for _, m in startup_lines(**kw, verify_graph=True)]
    assert not any("Capture target verify" in m for m in eager)
    assert any(m.startswith("Capture draft decode CUDA graph begin") for m in eager)
    assert any(m.startswith("Capture target verify CUDA graph end. bs=[1, 2]") for m in graphed)
