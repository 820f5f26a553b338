"""Tests for lab.measure.client against a tiny fake SGLang streaming server (tests/fixtures/fake_sglang.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
from aiohttp import web

from lab.engine.ports import free_port
from lab.measure.client import NOT_SENT_PREFIX, fetch_json, fetch_text, run_requests, run_requests_sync
from lab.measure.request_record import RequestRecord

FX = Path(__file__).resolve().parents[1] / "fixtures"
_spec = importlib.util.spec_from_file_location("fake_sglang", FX / "fake_sglang.py")
fake_sglang = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_sglang)


def script(tokens, delays=None, **kw) -> str:
    return json.dumps({"tokens": tokens, "delays": delays or [0.0] * len(tokens), **kw})


async def _with_server(coro_fn):
    runner = web.AppRunner(fake_sglang.make_app())
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        return await coro_fn(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def run(texts, **kw):
    kw.setdefault("concurrency", 1)
    kw.setdefault("max_new_tokens", 16)
    kw.setdefault("temperature", 0.0)
    kw.setdefault("timeout_s", 10.0)
    kw.setdefault("rid_prefix", "t")
    return asyncio.run(_with_server(lambda url: run_requests(url, texts, **kw)))


@pytest.fixture
def subprocess_server():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FX / "fake_sglang.py"), str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "READY"
    yield proc, f"http://127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=5)
    proc.stdout.close()


def test_chunks_tokens_and_timings():
    texts = [(3, script([1, 3, 0, 2], [0.05, 0.02, 0.02, 0.02], spec_verify_ct=2))]
    [r] = run(texts, mode="eagle3", repeat=2, concurrency=1, rid_prefix="eagle3-c1-r2")
    assert r.ok and r.error is None
    assert (r.rid, r.mode, r.repeat, r.concurrency, r.prompt_index) == ("eagle3-c1-r2-0", "eagle3", 2, 1, 3)
    assert [n for _, n in r.chunks] == [1, 3, 2]  # the 0-token chunk is not a content chunk
    assert r.completion_tokens == 6 and r.prompt_tokens == 7
    assert r.meta_info["spec_verify_ct"] == 2 and r.meta_info["finish_reason"]["type"] == "length"
    t = [c[0] for c in r.chunks]
    assert r.t_dispatch <= r.t_send < t[0] <= t[1] <= t[2] <= r.t_end
    assert 0.045 <= t[0] - r.t_send < 0.3  # TTFT ~ 50 ms
    assert 0.035 <= t[2] - t[1] < 0.3  # gap spans the empty chunk: ~40 ms
    assert r.output_text.split() == ["beta", "gamma", "delta", "epsilon", "alpha", "beta"]
    line = json.dumps(r.to_json())  # the requests.jsonl line: docs/contracts.md's keys, in its order
    assert list(json.loads(line)) == ["rid", "mode", "concurrency", "repeat", "prompt_index", "t_dispatch", "t_send",
                                      "t_end", "chunks", "completion_tokens", "prompt_tokens", "meta_info", "ok",
                                      "error", "output_text", "output_ids"]
    assert RequestRecord.from_json(json.loads(line)) == r  # written, then read: the same record
    assert r.output_ids == [0, 1, 2, 3, 4, 5]  # the fake's ids: 0..n-1


@pytest.mark.parametrize("incremental", [False, True])
def test_output_ids_cumulative_or_incremental(incremental):
    """The lossless check's input: the whole output's token ids, whether SGLang streams all ids
    so far (default) or only each chunk's new ones (--incremental-streaming-output), with
    0-token chunks in between."""
    [r] = run([(0, script([2, 0, 3, 1], incremental=incremental))])
    assert r.ok and r.output_ids == list(range(6)) and r.completion_tokens == 6


def test_output_ids_that_do_not_fit_are_not_recorded():
    """A chunk whose ids fit neither rule: no ids (the lossless check then says "not checked"),
    never a wrong list; the request itself still counts."""
    for kw in ({"bad_ids_at": 1}, {"bad_ids_at": 2, "incremental": True}):
        [r] = run([(0, script([2, 1, 3], **kw))])
        assert r.ok and r.completion_tokens == 6 and r.output_ids is None, kw


def _dict_values(fn, key: str) -> dict[str, set[str]]:
    """Source of the values of ``key`` in the dict literals of ``fn``, split by whether the
    dict sits under an ``if incremental:`` branch."""
    import ast

    out: dict[str, set[str]] = {"incremental": set(), "other": set()}

    def visit(node, under: bool) -> None:
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == key:
                    out["incremental" if under else "other"].add(ast.unparse(v))
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "incremental":
            for n in node.body:
                visit(n, True)
            for n in node.orelse:
                visit(n, under)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, under)

    visit(fn, False)
    return out


def test_output_ids_rule_is_sglangs(sglang_nodeps):
    """The client's reading of ``output_ids`` (and tests/fixtures/fake_sglang.py, and the
    emulator) against SGLang 0.5.23's own source: ``TokenizerManager._handle_batch_output``
    streams ``state.output_ids`` (all ids so far, extended by each batch's
    ``delta_output_ids``) unless ``incremental`` (``--incremental-streaming-output``), then
    ``output_token_ids = delta_output_ids``; ``serve_generate_request`` writes each of those
    dicts as one ``data:`` line."""
    import ast

    src = (sglang_nodeps / "sglang/srt/managers/tokenizer_manager.py").read_text()
    tree = ast.parse(src)
    [fn] = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)
            and n.name == "_handle_batch_output"]
    vals = _dict_values(fn, "output_ids")
    assert vals["incremental"] == {"output_token_ids"}, vals
    assert vals["other"] <= {"state.output_ids", "state.output_ids.copy()"} and vals["other"], vals
    body = ast.unparse(fn)
    assert "delta_output_ids = list(recv_obj.output_ids[i])" in body
    assert "state.output_ids.extend(delta_output_ids)" in body
    assert "output_token_ids = delta_output_ids" in body
    assert "incremental = is_stream and self.incremental_streaming_output" in body
    server = (sglang_nodeps / "sglang/srt/entrypoints/http_server.py").read_text()
    assert 'yield b"data: " + dumps_json(out) + b"\\n\\n"' in server
    # completion_tokens of a chunk is the length of state.output_ids (the client's rule to tell
    # a cumulative list from a delta): SGLang's stream meta sets it from the same counter
    assert "'completion_tokens': recv_obj.completion_tokens[i]" in body


def peak_in_flight(recs) -> int:
    """The most requests in flight at once, from the records' send and end times."""
    events = sorted([(r.t_send, 1) for r in recs] + [(r.t_end, -1) for r in recs])
    inflight = peak = 0
    for _, d in events:
        inflight += d
        peak = max(peak, inflight)
    return peak


def test_closed_loop_concurrency_and_dispatch():
    texts = [(i, script([1, 1, 1], [0.03, 0.03, 0.03])) for i in range(6)]
    recs = run(texts, concurrency=2)
    assert all(r.ok for r in recs)
    assert peak_in_flight(recs) == 2
    ends = {r.t_end for r in recs}
    later = sorted(recs, key=lambda r: r.t_send)[2:]
    assert all(r.t_dispatch in ends for r in later)  # due when a slot freed
    assert all(0 <= r.t_send - r.t_dispatch < 0.05 for r in recs)


def test_errors_are_recorded_not_dropped():
    texts = [
        (0, script([1, 1])),
        (1, script([1], status=500)),
        (2, script([1, 1, 1], malformed_at=1)),
        (3, script([1, 1, 1], error_at=1)),
        (4, script([1, 1], no_done=True)),
        (5, script([1, 1], [0.0, 0.8])),  # exceeds the timeout
    ]
    t0 = time.perf_counter()
    recs = run(texts, concurrency=6, timeout_s=0.4)
    assert time.perf_counter() - t0 < 30  # nothing hangs (a loose bound: the verdict must not depend on load)
    assert len(recs) == 6 and [r.prompt_index for r in recs] == list(range(6))
    ok, http, bad, err, nodone, slow = recs
    assert ok.ok and ok.completion_tokens == 2
    assert not http.ok and http.error.startswith("HTTP 500") and http.t_send is not None
    assert not bad.ok and "malformed chunk" in bad.error and bad.chunks == [[bad.chunks[0][0], 1]]
    assert not err.ok and "fake scheduler failure" in err.error
    assert not nodone.ok and "[DONE]" in nodone.error
    assert not slow.ok and "timeout" in slow.error


def test_server_killed_mid_run_stops_promptly(subprocess_server):
    proc, url = subprocess_server
    texts = [(i, script([1] * 10, [0.1] * 10)) for i in range(40)]  # ~1 s each, 10 s in total at C=4

    async def main():
        asyncio.get_running_loop().call_later(0.5, proc.kill)
        return await run_requests(url, texts, concurrency=4, max_new_tokens=10, temperature=0.0,
                                  timeout_s=60.0, rid_prefix="k", progress_desc=None)

    t0 = time.perf_counter()
    recs = asyncio.run(main())
    elapsed = time.perf_counter() - t0
    assert elapsed < 30  # did not wait for request timeouts (60 s); `not_sent` below shows it stopped sending
    assert len(recs) == 40 and not any(r.ok for r in recs)
    sent = [r for r in recs if r.t_send is not None]
    not_sent = [r for r in recs if r.t_send is None]
    assert 4 <= len(sent) <= 12
    assert all(r.error for r in sent)
    assert len(not_sent) >= 28 and all(r.error.startswith(NOT_SENT_PREFIX) for r in not_sent)


def test_connection_refused_from_start():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    recs = asyncio.run(run_requests(url, [(i, "x") for i in range(20)], concurrency=3, max_new_tokens=4,
                                    temperature=0.0, timeout_s=60.0, rid_prefix="r", progress_desc=None))
    assert time.perf_counter() - t0 < 30  # did not wait for request timeouts (60 s)
    assert not any(r.ok for r in recs)
    assert sum(r.t_send is not None for r in recs) <= 3
    assert sum(r.error.startswith(NOT_SENT_PREFIX) for r in recs) >= 17


def test_many_chunks_per_second():
    n_chunks = 1500
    texts = [(i, script([1] * n_chunks)) for i in range(4)]
    t0 = time.perf_counter()
    recs = run(texts, concurrency=4, progress_desc="throughput")
    elapsed = time.perf_counter() - t0
    assert all(r.ok and r.completion_tokens == n_chunks and len(r.chunks) == n_chunks for r in recs)
    # server and client share this one core here; the client alone is much faster
    assert 4 * n_chunks / elapsed > 2000


def test_sync_wrapper_and_fetch_helpers(subprocess_server):
    _, url = subprocess_server
    texts = [(0, script([1, 2]))]
    kw = dict(concurrency=1, max_new_tokens=3, temperature=0.0, timeout_s=5.0, rid_prefix="s", progress_desc=None)
    [r] = run_requests_sync(url, texts, **kw)
    assert r.ok and r.completion_tokens == 3

    async def inside_loop():  # as in a Jupyter kernel: a loop is already running
        return run_requests_sync(url, texts, **kw)

    [r2] = asyncio.run(inside_loop())
    assert r2.ok
    with pytest.raises(urllib.error.HTTPError, match="404") as ei:
        fetch_text(url + "/missing")
    ei.value.close()


def test_fetch_json(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"a": 1}')
    assert fetch_json(f.as_uri()) == {"a": 1}
    assert fetch_text(f.as_uri()) == '{"a": 1}'


# ------------------------------------------------------------------ open loop (arrivals=)

def test_open_loop_follows_the_schedule():
    arrivals = [0.0, 0.04, 0.05, 0.2]
    texts = [(i, script([1, 1], [0.01, 0.01])) for i in range(4)]
    recs = run(texts, concurrency=0, arrivals=arrivals, rid_prefix="eagle3-r4-r0")
    assert all(r.ok for r in recs)
    t0 = recs[0].t_scheduled
    # the recorded schedule is exactly the requested one; each request left at or after its time
    assert [r.t_scheduled - t0 for r in recs] == pytest.approx(arrivals, abs=1e-9)
    assert all(r.t_send >= r.t_scheduled for r in recs)
    assert all(r.t_dispatch == r.t_scheduled for r in recs)  # no cap: due when scheduled
    line = json.loads(json.dumps(recs[0].to_json()))  # an open-loop line: t_scheduled after the client's keys
    assert list(line)[-2:] == ["output_ids", "t_scheduled"] and RequestRecord.from_json(line) == recs[0]
    assert [r.rid for r in sorted(recs, key=lambda r: r.t_send)] == [f"eagle3-r4-r0-{i}" for i in range(4)]


def test_open_loop_sends_regardless_of_completions():
    """The server answers no request until all N have arrived: only a client that sends on
    its schedule, not on completions, finishes (a closed loop at concurrency 1 would wait)."""
    n = 5
    arrived: list[str] = []
    all_in = asyncio.Event()

    async def generate(request):
        body = await request.json()
        arrived.append(body["rid"])
        if len(arrived) == n:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=20)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        meta = {"completion_tokens": 2, "prompt_tokens": 3, "finish_reason": {"type": "length", "length": 2}}
        await resp.write(b"data: " + json.dumps({"text": "a b", "meta_info": meta}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def main():
        app = web.Application()
        app.router.add_post("/generate", generate)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            return await run_requests(f"http://127.0.0.1:{port}", [(i, "x") for i in range(n)], concurrency=0,
                                      max_new_tokens=2, temperature=0.0, timeout_s=30.0, rid_prefix="o",
                                      arrivals=[0.01 * i for i in range(n)])
        finally:
            await runner.cleanup()

    recs = asyncio.run(main())
    assert all(r.ok for r in recs) and len(arrived) == n
    last_send = max(r.t_send for r in recs)
    assert all(r.t_end > last_send for r in recs)  # every request was in flight at once


def test_open_loop_cap_hands_slots_over():
    texts = [(i, script([1, 1, 1], [0.02, 0.02, 0.02])) for i in range(5)]
    recs = run(texts, concurrency=2, arrivals=[0.0] * 5)
    assert all(r.ok for r in recs)
    assert peak_in_flight(recs) == 2
    ends = {r.t_end for r in recs}
    later = sorted(recs, key=lambda r: r.t_send)[2:]
    # due when a slot freed (the freeing request's t_end), after the schedule: the cap's wait is
    # not the client's own delay, so t_send - t_dispatch stays the client's own share
    assert all(r.t_dispatch in ends and r.t_dispatch >= r.t_scheduled for r in later)
    assert all(r.t_send >= r.t_dispatch for r in recs)


def test_open_loop_bad_arrivals():
    for bad in ([0.0], [0.1, 0.0], [-1.0, 0.0]):
        with pytest.raises(ValueError, match="arrivals"):
            run([(0, script([1])), (1, script([1]))], concurrency=0, arrivals=bad)
    with pytest.raises(ValueError, match="concurrency"):
        run([(0, script([1]))], concurrency=-1, arrivals=[0.0])


def test_open_loop_connection_refused_stops_the_schedule():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    recs = asyncio.run(run_requests(url, [(i, "x") for i in range(20)], concurrency=0, max_new_tokens=4,
                                    temperature=0.0, timeout_s=60.0, rid_prefix="r", progress_desc=None,
                                    arrivals=[2.0 * i for i in range(20)]))  # a 38 s schedule
    assert time.perf_counter() - t0 < 30  # stopped at the first refusal, not at the end of the schedule
    assert not any(r.ok for r in recs)
    assert sum(r.error.startswith(NOT_SENT_PREFIX) for r in recs) >= 19
