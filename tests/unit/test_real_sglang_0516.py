"""The lab's parsers and measurements on what a real SGLang 0.5.16 server produced.

Replays ``tests/fixtures/sglang-0.5.16/`` (one H200, random weights, ``SGLANG_SIMULATE_ACC_LEN=1.85``;
its README says how each file was made) through the code the bench stage runs:

- ``/metrics`` before/after: :func:`lab.measure.prometheus.server_timing` (checked against the
  raw exposition lines read with a plain regex, not the parser under test) and the metric
  names, label keys and label values 0.5.16 emits;
- ``/server_info``: :func:`lab.measure.server_info.step_time_ms`, the fields
  :func:`lab.engine.effective.effective_config` reads, the 0.5.16 contract of
  :mod:`lab.engine.surfaces`;
- ``server.log``: :func:`lab.measure.decode_log.parse_decode_log` (0.5.16's ``fwd occupancy``
  suffix), :func:`lab.engine.startup.parse_startup_line` and a replayed
  :class:`lab.engine.startup.StartupTracker`, :func:`lab.engine.surfaces.captured_graph_bs`
  (``bs=[...]`` on the capture *begin* line);
- ``generate.stream.txt`` through :class:`lab.measure.client.StreamParser`, ``generate.json``'s
  ``meta_info``;
- ``window.json`` reproduced by :func:`lab.measure.records.summarize_run` from ``requests.jsonl``.

Several checks tie two independent surfaces of the same server together (log lines vs
``/metrics`` counters vs ``step_time_dict``), so a misread of either fails.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from lab.engine.effective import effective_config, identical_modes, identical_notice
from lab.engine.startup import StartupTracker, parse_startup_line
from lab.engine.surfaces import captured_graph_bs, surface_for
from lab.engine.telemetry import energy_per_token_mj
from lab.measure.client import StreamParser
from lab.measure.decode_log import parse_decode_log, summarize_decode_log
from lab.measure.prometheus import CUDA_GRAPH_PASSES, FORWARD_SECONDS, PromSnapshot, parse_prometheus, server_timing
from lab.measure.records import measured_window_s, request_metrics, summarize_run
from lab.measure.server_info import step_time_ms

FX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16"
#: ``lab capture`` folders: (preset, mode) -> (speculative, CUDA graphs on).
CAPTURES = {
    "tiny/baseline": (False, True),
    "tiny/eagle3_prefill": (True, True),
    "tiny/eagle3_decode": (True, True),
    "tiny/baseline_eager": (False, False),
    "tiny/eagle3_prefill_eager": (True, False),
    "tiny/eagle3_decode_eager": (True, False),
    "kshard/baseline_eager": (False, False),
    "kshard/eagle3_prefill_eager": (True, False),
    "kshard/eagle3_decode_eager": (True, False),
}
#: Every folder with a ``server.log`` (the ``lab capture`` ones plus the kshard ``dvc repro`` logs).
LOGS = {**CAPTURES, "kshard/baseline": (False, True), "kshard/eagle3_prefill": (True, True),
        "kshard/eagle3_decode": (True, True)}
#: Label keys of every series of the two counters the lab reads (besides category / mode).
RANK_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
SIMULATED_ACCEPT = 1.85  # SGLANG_SIMULATE_ACC_LEN of the captures (launch.json env)
NUM_DRAFT_TOKENS = 3  # configs/h200/params-*.yaml: 2 steps, topk 1
MAX_NEW_TOKENS = 64

_SAMPLE = re.compile(r"^(sglang:[a-z_]+)\{([^}]*)\} (\S+)$")
_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _read(folder: str, name: str) -> str:
    return (FX / folder / name).read_text()


@functools.cache
def _snapshot(folder: str, name: str) -> PromSnapshot:
    """:func:`parse_prometheus` of a capture's scrape, parsed once per run (prometheus_client's
    parser takes ~0.1 s a scrape; read-only afterwards)."""
    return parse_prometheus(_read(folder, name))


def _json(folder: str, name: str):
    return json.loads(_read(folder, name))


def _raw_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """``(labels, value)`` of every exposition line of ``name``, by regex (independent of
    prometheus_client and of :mod:`lab.measure.prometheus`)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out.append((labels, float(m.group(3))))
    return out


def _raw_sum(text: str, name: str, **want: str) -> float:
    return sum(v for lab, v in _raw_samples(text, name) if all(lab.get(k) == w for k, w in want.items()))


def _ts(line: str) -> float | None:
    m = _TS.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() if m else None


# --------------------------------------------------------------------------- /metrics


@pytest.mark.parametrize("folder", CAPTURES)
def test_metric_names_labels_and_values_as_0516_emits_them(folder):
    spec, graphs = CAPTURES[folder]
    for name in ("metrics.before.txt", "metrics.after.txt"):
        text = _read(folder, name)
        snap = _snapshot(folder, name)
        assert FORWARD_SECONDS in snap and CUDA_GRAPH_PASSES in snap, (folder, name)
        for metric, key in ((FORWARD_SECONDS, "category"), (CUDA_GRAPH_PASSES, "mode")):
            rows = _raw_samples(text, metric)
            assert rows, (folder, metric)
            for labels, _ in rows:
                assert set(labels) == RANK_LABELS | {key}, (folder, metric, labels)
                assert (labels["engine_type"], labels["tp_rank"], labels["pp_rank"], labels["moe_ep_rank"]) == (
                    "unified", "0", "0", "0"), labels
    after = _snapshot(folder, "metrics.after.txt")
    cats = set(after.label_values(FORWARD_SECONDS, "category"))
    modes = set(after.label_values(CUDA_GRAPH_PASSES, "mode"))
    if spec and graphs:  # verify, draft and draft-extend all graph-captured (triton)
        assert cats == {"extend", "target_verify", "eagle_draft", "eagle_draft_extend"}
    elif spec:  # eager: the draft is booked as "decode", its extend inside "extend" (DESIGN.md)
        assert cats == {"extend", "target_verify", "decode"}
    else:
        assert cats == {"extend", "decode"}
    assert modes == {"prefill_none", "decode_cuda_graph" if graphs else "decode_none"}
    assert after.label_values(CUDA_GRAPH_PASSES, "tp_rank") == ["0"]


@pytest.mark.parametrize("folder", CAPTURES)
def test_server_timing_over_the_whole_capture(folder):
    spec, graphs = CAPTURES[folder]
    before, after = _read(folder, "metrics.before.txt"), _read(folder, "metrics.after.txt")
    st = server_timing(_snapshot(folder, "metrics.before.txt"), _snapshot(folder, "metrics.after.txt"))

    def delta(name, **lab):
        return _raw_sum(after, name, **lab) - _raw_sum(before, name, **lab)

    iters = delta(CUDA_GRAPH_PASSES, mode="decode_cuda_graph") + delta(CUDA_GRAPH_PASSES, mode="decode_none")
    assert iters > 500 and st["decode_iterations"] == iters
    assert st["verify_graph_fraction"] == (1.0 if graphs else 0.0)
    assert st["deltas"]["tp_rank"] == "0"
    fwd = {c: delta(FORWARD_SECONDS, category=c) for c in st["deltas"]["forward_s"]}
    assert st["deltas"]["forward_s"] == pytest.approx(fwd, rel=1e-12)
    if spec:
        assert st["verify_ms"] == pytest.approx(fwd["target_verify"] * 1e3 / iters, rel=1e-12)
        draft_cats = ("eagle_draft", "eagle_draft_extend") if graphs else ("decode",)
        assert st["draft_ms"] == pytest.approx(sum(fwd[c] for c in draft_cats) * 1e3 / iters, rel=1e-12)
        assert st["decode_ms"] is None
        assert st["verify_ms"] > st["draft_ms"] > 0  # 61-layer / 8-layer target vs a 1-layer draft
        # eager: draft-extend ran inside "extend" and cannot be separated, which the readout says
        assert st["draft_incomplete"] is (not graphs)
        assert st["gpu_cycle_ms"] == pytest.approx(st["verify_ms"] + st["draft_ms"])
    else:
        assert st["decode_ms"] == pytest.approx(fwd["decode"] * 1e3 / iters, rel=1e-12)
        assert st["verify_ms"] is None and st["draft_ms"] is None and not st["draft_incomplete"]


def test_eager_costs_more_than_graphs_on_the_same_model():
    """kshard eager: a 3-token verify forward costs more than a 1-token decode step (same
    61-layer model, same eager path); the tiny model's graph verify is under a millisecond."""
    eager_verify = server_timing(_snapshot("kshard/eagle3_decode_eager", "metrics.before.txt"),
                                 _snapshot("kshard/eagle3_decode_eager", "metrics.after.txt"))["verify_ms"]
    eager_decode = server_timing(_snapshot("kshard/baseline_eager", "metrics.before.txt"),
                                 _snapshot("kshard/baseline_eager", "metrics.after.txt"))["decode_ms"]
    graph_verify = server_timing(_snapshot("tiny/eagle3_decode", "metrics.before.txt"),
                                 _snapshot("tiny/eagle3_decode", "metrics.after.txt"))["verify_ms"]
    assert eager_verify > eager_decode > 10 * graph_verify


# --------------------------------------------------------------------------- server.log


@pytest.mark.parametrize("folder", LOGS)
def test_decode_batch_lines_in_0516_format(folder):
    spec, graphs = LOGS[folder]
    log = _read(folder, "server.log")
    heads = [ln for ln in log.splitlines() if "Decode batch" in ln]
    rows = parse_decode_log(log)
    assert len(rows) == len(heads) > 50, folder  # every line parsed, none skipped
    for r in rows:
        assert r["ts"] is not None and r["tp_rank"] is None  # TP 1: SGLang writes no " TP0" prefix
        assert r["cuda_graph"] is graphs, r
        assert r["running_req"] >= 1 and r["queue_req"] == 0 and r["token"] >= 0
        assert 0.0 <= r["token_usage"] <= 1.0 and r["gen_throughput_tok_s"] >= 0
        # 0.5.16's device-timer suffix: "fwd occupancy: X%" only (0.5.23 adds "fwd+idle occupancy")
        assert set(r["extra"]) == {"fwd occupancy"}, r["extra"]
        assert re.fullmatch(r"(\d+\.\d\d|nan)%", r["extra"]["fwd occupancy"]), r["extra"]
        if spec:
            assert 1.0 <= r["accept_len"] <= NUM_DRAFT_TOKENS
            assert r["accept_rate"] == pytest.approx((r["accept_len"] - 1) / (NUM_DRAFT_TOKENS - 1), abs=0.006)
        else:
            assert r["accept_len"] is None and r["accept_rate"] is None
    s = summarize_decode_log(rows)
    assert s["cuda_graph_fraction"] == (1.0 if graphs else 0.0)
    if spec:
        assert s["mean_accept_len"] == pytest.approx(SIMULATED_ACCEPT, abs=0.1)


@pytest.mark.parametrize("folder", CAPTURES)
def test_decode_lines_step_times_and_counters_agree(folder):
    """Three surfaces count the same decode iterations: one "Decode batch" line and one
    ``step_time_dict`` entry per ``--decode-log-interval`` iterations, at the batch size the
    line reports; the passes counter counts every iteration."""
    rows = parse_decode_log(_read(folder, "server.log"))
    info_b, info_a = _json(folder, "server_info.before.json"), _json(folder, "server_info.after.json")
    interval = info_a["decode_log_interval"]
    assert interval == 10
    passes = sum(v for lab, v in _raw_samples(_read(folder, "metrics.after.txt"), CUDA_GRAPH_PASSES)
                 if lab["mode"].startswith("decode_"))
    assert len(rows) == int(passes) // interval, (len(rows), passes)
    steps = step_time_ms(info_b, info_a)
    assert steps is not None and step_time_ms(None, info_b) == {}  # nothing decoded before the lab's requests
    assert {bs: len(v) for bs, v in steps.items()} == dict(collections.Counter(r["running_req"] for r in rows))
    raw = info_a["internal_states"][0]["step_time_dict"]
    assert steps == {int(k): pytest.approx([x * 1e3 for x in v], rel=1e-12) for k, v in raw.items()}
    gpu = server_timing(_snapshot(folder, "metrics.before.txt"), _snapshot(folder, "metrics.after.txt"))["gpu_cycle_ms"]
    median_step = sorted(steps[1])[len(steps[1]) // 2]
    assert median_step >= gpu  # wall time per iteration holds the GPU time of that iteration


@pytest.mark.parametrize("folder", LOGS)
def test_startup_lines_and_phases(folder, tmp_path):
    spec, graphs = LOGS[folder]
    lines = _read(folder, "server.log").splitlines()
    events = [(i, ev) for i, ln in enumerate(lines) if (ev := parse_startup_line(ln)) is not None]
    names = [e[0] for _, e in events]
    assert names.count("ready") == 1 and names[-1] == "ready"  # "The server is fired up and ready to roll!"
    assert names.count("load_begin") == names.count("load_end") == (2 if spec else 1)  # target (+ draft)
    begins = [e[1]["what"] for _, e in events if e[0] == "capture_begin"]
    ends = [e[1]["what"] for _, e in events if e[0] == "capture_end"]
    if not graphs:
        assert begins == ends == []
    elif spec:
        assert begins == ends == ["target verify", "draft decode", "draft extend"]
    else:
        assert begins == ends == ["target decode"]
    assert not any(e[0] == "shards" for _, e in events)  # --load-format dummy reads no shards
    # the tracker, fed the log line by line at the log's own timestamps
    path = tmp_path / "server.log"
    path.write_text("")
    tracker = StartupTracker(path, show=False)
    t0, now = None, 0.0
    ready_at = None
    at: list[float] = []  # each line's time since the first timestamp (untimed lines: the last one's)
    with open(path, "a") as f:
        for ln in lines:
            ts = _ts(ln)
            if ts is not None:
                t0 = ts if t0 is None else t0
                now = ts - t0
            at.append(now)
            f.write(ln + "\n")
            f.flush()
            tracker.poll(now)
            if "fired up and ready to roll" in ln:
                ready_at = now
                break
    out = tracker.finish(ready_at)
    stamp = {name: [at[i] for i, e in events if e[0] == name] for name in set(names)}
    assert out["captures"] == sorted(begins)
    if graphs:
        assert out["phases"]["cuda_graph_capture_s"] == stamp["capture_end"][-1] - stamp["capture_begin"][0] > 0
    else:
        assert out["phases"]["cuda_graph_capture_s"] is None
    assert out["phases"]["init_s"] == stamp["load_begin"][0]
    if (FX / folder / "launch.json").exists():  # what the tracker saw live on the H200 (polled ~0.25 s)
        live = _json(folder, "launch.json")["startup"]
        assert live["captures"] == out["captures"]
        for key in ("cuda_graph_capture_s", "load_weights_s"):
            if live["phases"][key] is None:
                assert out["phases"][key] is None, key
            else:  # log timestamps have 1 s resolution
                assert abs(live["phases"][key] - out["phases"][key]) <= 2.0, (key, live["phases"][key], out["phases"][key])


@pytest.mark.parametrize("folder", LOGS)
def test_captured_bs_from_the_begin_line(folder):
    spec, graphs = LOGS[folder]
    log = _read(folder, "server.log")
    cap_lines = [ln for ln in log.splitlines() if re.search(r"Capture .* CUDA graph (begin|end)\.", ln)]
    # 0.5.16: bs=[...] rides on the begin line, never the end line (lab/engine/surfaces.py)
    assert all("bs=[" not in ln for ln in cap_lines if " end." in ln)
    assert all("bs=[" in ln for ln in cap_lines if " begin." in ln)
    assert surface_for("0.5.16")[0].capture_bs_line == "begin"
    expect = None
    if graphs:
        expect = list(range(1, 9)) if spec else [1, 2, 4, 8]
    assert captured_graph_bs(log) == expect
    end_only = "\n".join(ln for ln in log.splitlines() if "begin." not in ln)
    assert captured_graph_bs(end_only) is None  # an end-line-only reader finds nothing here


def test_no_ready_endpoint_in_0516():
    """The dvc repro probed ``/ready`` first: 0.5.16 answered 404, so the lab relies on /health."""
    log = _read("kshard/eagle3_decode", "server.log")
    assert '"GET /ready HTTP/1.1" 404 Not Found' in log and '"GET /health HTTP/1.1" 200 OK' in log
    assert surface_for("0.5.16")[0].ready_path is None and surface_for("0.5.23")[0].ready_path == "/ready"


# --------------------------------------------------------------------------- /server_info


@pytest.mark.parametrize("folder", CAPTURES)
def test_effective_config_reads_0516_server_info(folder):
    spec, graphs = CAPTURES[folder]
    info = _json(folder, "server_info.after.json")
    eff = effective_config(info, _read(folder, "server.log"))
    assert (eff["engine_version"], eff["sglang_contract"], eff["contract_note"], eff["modelled_build"]) == (
        "0.5.16", "0.5.16", None, None)
    assert eff["attention_backend"] == "triton" and eff["tp_size"] == 1
    assert eff["max_running_requests"] == eff["effective_max_running_requests"] == 8
    assert eff["cuda_graph_max_bs_decode"] == 8
    assert eff["decode_cuda_graph_disabled"] is (not graphs)
    assert eff["cuda_graph_decode_backend"] == ("full" if graphs else "disabled")
    assert eff["disable_cuda_graph"] is (not graphs)
    dec = info["cuda_graph_config"]["decode"]
    assert set(dec) >= {"backend", "max_bs", "bs"} and dec["max_bs"] == 8
    assert eff["cuda_graph_bs_decode"] == dec["bs"]
    assert eff["captured_cuda_graph_bs"] == (dec["bs"] if graphs else None)  # what was captured is what resolved
    if spec:
        assert eff["speculative_algorithm"] == "EAGLE3" and eff["speculative_num_draft_tokens"] == NUM_DRAFT_TOKENS
        assert eff["verify_attention_backend"] == "triton"
        assert eff["speculative_attention_mode"] == folder.split("_")[1].split("/")[0]
        assert eff["prefill_attention_backend"] is None and eff["decode_attention_backend"] is None
    else:
        assert eff["speculative_algorithm"] is None and eff["verify_attention_backend"] is None
    st = info["internal_states"][0]
    assert isinstance(st["step_time_dict"], dict)
    assert (st.get("avg_spec_accept_length") is not None) is spec


def test_prefill_and_decode_verify_are_identical_under_triton():
    """Both attention modes resolved to the triton backend with graph-captured verify: the lab
    calls them identical (0.5.16 contract: the mode only picks the backend)."""
    cfgs = {m: effective_config(_json(f"tiny/{m}", "server_info.after.json"), _read(f"tiny/{m}", "server.log"))
            for m in ("baseline", "eagle3_prefill", "eagle3_decode")}
    assert surface_for("0.5.16")[0].mode_picks_backend_only
    groups = identical_modes(cfgs)
    assert groups == [["eagle3_prefill", "eagle3_decode"]]
    assert "eagle3_prefill and eagle3_decode" in identical_notice(groups)
    # teeth: a different verify backend in one mode makes them differ
    cfgs["eagle3_decode"] = {**cfgs["eagle3_decode"], "decode_attention_backend": "flashinfer",
                             "verify_attention_backend": "flashinfer"}
    assert identical_modes(cfgs) == []


# --------------------------------------------------------------------------- /generate


def _replay(folder: str) -> StreamParser:
    sp = StreamParser()
    for i, line in enumerate((FX / folder / "generate.stream.txt").read_bytes().splitlines(keepends=True)):
        if not sp.feed(float(i), line):
            break
    return sp


@pytest.mark.parametrize("folder", CAPTURES)
def test_sse_stream_through_the_client_parser(folder):
    spec, _ = CAPTURES[folder]
    sp = _replay(folder)
    assert sp.done and sp.error is None
    ct = sp.meta["completion_tokens"]
    assert ct == MAX_NEW_TOKENS and sp.meta["finish_reason"] == {"type": "length", "length": MAX_NEW_TOKENS}
    tokens = [n for _, n in sp.chunks]
    assert sum(tokens) == ct  # token accounting against meta_info
    ids = sp.output_ids()
    assert ids is not None and len(ids) == ct  # SGLang's cumulative output_ids
    last = json.loads(next(ln for ln in reversed((FX / folder / "generate.stream.txt").read_text().splitlines())
                           if ln.startswith("data: {"))[6:])
    assert ids == last["output_ids"] and sp.text == last["text"]
    if spec:  # one chunk for the prefill token, then one per verify cycle of 1..num_draft_tokens tokens
        assert len(tokens) == sp.meta["spec_verify_ct"] + 1
        assert max(tokens) > 1 and all(1 <= n <= NUM_DRAFT_TOKENS for n in tokens)
        assert sp.meta["spec_accept_length"] == pytest.approx(ct / sp.meta["spec_verify_ct"], abs=0.04)
        # the last cycle's run, cut at max_new_tokens, was counted whole in spec_num_correct_drafts
        overshoot = 1 + sp.meta["spec_verify_ct"] + sp.meta["spec_num_correct_drafts"] - ct
        assert overshoot >= 0 and tokens[-1] + overshoot <= NUM_DRAFT_TOKENS, (folder, overshoot, tokens[-1])
    else:
        assert tokens == [1] * ct and "spec_verify_ct" not in sp.meta
    # only the final chunk carries the speculative fields and e2e_latency
    assert "e2e_latency" in sp.meta
    rec = {"ok": True, "chunks": sp.chunks, "completion_tokens": ct, "meta_info": sp.meta, "t_send": -0.5,
           "t_end": float(len(sp.chunks)), "t_dispatch": -0.5}
    m = request_metrics(rec)
    assert m.token_accounting_ok and m.n_chunks == len(tokens)
    assert (m.accept_length is not None) is spec


def test_stream_parser_has_teeth():
    """A truncated stream, a server error inside it and a malformed chunk are told apart."""
    lines = (FX / "tiny/eagle3_decode/generate.stream.txt").read_bytes().splitlines(keepends=True)
    sp = StreamParser()
    for i, ln in enumerate(lines[:10]):
        sp.feed(float(i), ln)
    assert not sp.done and sp.meta["finish_reason"] is None and sum(n for _, n in sp.chunks) < MAX_NEW_TOKENS
    sp = StreamParser()
    assert sp.feed(0.0, lines[0]) and not sp.feed(1.0, b'data: {"error": {"message": "boom"}}\n')
    assert sp.error == "server error in stream: boom"
    sp = StreamParser()
    assert not sp.feed(0.0, b"data: {not json\n") and sp.error.startswith("malformed chunk")


#: ``meta_info`` keys the lab reads (DESIGN.md "SGLang facts"; lab/measure/records.py, lossless, hygiene).
META_KEYS = {"completion_tokens", "prompt_tokens", "finish_reason", "e2e_latency", "id"}
SPEC_META_KEYS = {"spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                  "spec_num_proposed_drafts", "spec_correct_drafts_histogram"}


@pytest.mark.parametrize("folder", CAPTURES)
def test_generate_meta_info_keys_and_their_arithmetic(folder):
    spec, _ = CAPTURES[folder]
    meta = _json(folder, "generate.json")["meta_info"]
    assert META_KEYS <= set(meta)
    assert bool(SPEC_META_KEYS & set(meta)) is spec
    if spec:
        assert SPEC_META_KEYS <= set(meta)
        n, v = meta["completion_tokens"], meta["spec_verify_ct"]
        assert meta["spec_accept_length"] == pytest.approx(n / v, rel=1e-12)  # the lab's accept_length definition
        assert meta["spec_num_proposed_drafts"] == v * (NUM_DRAFT_TOKENS - 1)
        assert meta["spec_accept_rate"] == pytest.approx(meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])
        hist = meta["spec_correct_drafts_histogram"]  # cycles by how many drafts they accepted
        assert sum(hist) == v and sum(k * c for k, c in enumerate(hist)) == meta["spec_num_correct_drafts"]
        # The prefill token, then each cycle's accepted drafts + 1 bonus token; the correct-draft
        # count takes the whole last run (batch_result_processor.py:592-595 of 0.5.16) while
        # output_ids stop at max_new_tokens (schedule_batch.py:1485-1489, 1104-1105), so a
        # length finish overshoots by less than one cycle's run.
        assert meta["finish_reason"] == {"type": "length", "length": MAX_NEW_TOKENS} and n == MAX_NEW_TOKENS
        assert 0 <= 1 + v + meta["spec_num_correct_drafts"] - n < NUM_DRAFT_TOKENS


# --------------------------------------------------------------------------- window.json


#: summarize_run keys every window.json of these captures holds: the replay checks at least these.
REPLAYED_KEYS = {"mode", "concurrency", "requests", "ok", "errors", "wall_s", "completion_tokens_total", "output_tok_s",
                 "decode_tok_s", "p50_ttft_ms", "p99_itl_ms", "mean_icl_ms", "p50_tpot_ms", "mean_e2e_ms",
                 "speculative", "accept_length", "cycle_ms", "token_accounting_ok", "verify_ms", "decode_ms",
                 "verify_graph_fraction", "server_step_ms"}


def _records(folder: str) -> list[dict]:
    return [json.loads(ln) for ln in _read(folder, "requests.jsonl").splitlines()]


@pytest.mark.parametrize("folder", CAPTURES)
def test_window_json_is_reproduced_from_requests_and_server_readout(folder):
    spec, graphs = CAPTURES[folder]
    window, records = _json(folder, "window.json"), _records(folder)
    assert set(window) == {"c1", "c4"}
    for level, w in window.items():
        c = int(level[1:])
        recs = [r for r in records if r["concurrency"] == c and not r["warmup"]]
        assert len(recs) == 8 and all(r["ok"] for r in recs)
        summ = summarize_run(recs, wall_s=measured_window_s(recs), server=w["server"])
        # every key the capture recorded (a key summarize_run gained later is not in it)
        checked = [k for k in summ.to_dict() if k in w and k != "server"]
        assert REPLAYED_KEYS <= set(checked), (folder, level, REPLAYED_KEYS - set(checked))
        for key in checked:
            val = getattr(summ, key)
            if isinstance(val, float):
                assert w[key] == pytest.approx(val, rel=1e-12), (folder, level, key)
            else:
                assert w[key] == val, (folder, level, key)
        assert w["energy_mj_per_output_token"] == pytest.approx(
            energy_per_token_mj(w["gpu_telemetry"], summ.completion_tokens_total), rel=1e-12)
        assert summ.token_accounting_ok and summ.completion_tokens_total == 8 * MAX_NEW_TOKENS
        assert summ.verify_graph_fraction == (1.0 if graphs else 0.0)
        if spec:
            assert summ.accept_length == pytest.approx(SIMULATED_ACCEPT, abs=0.15)
            assert summ.verify_ms > 0 and summ.decode_ms is None
        else:
            assert summ.accept_length is None and summ.decode_ms > 0
        # the window's server readout sits inside the capture's own surfaces
        srv = w["server"]
        after = _json(folder, "server_info.after.json")["internal_states"][0]["step_time_dict"]
        for bs, vals in srv["step_time_ms"].items():
            whole = [x * 1e3 for x in after[bs]]
            starts = [i for i in range(len(whole) - len(vals) + 1) if whole[i:i + len(vals)] == pytest.approx(vals)]
            assert starts, (folder, level, bs)  # a contiguous run of step_time_dict[bs]
        assert srv["log_decode_lines"] == sum(len(v) for v in srv["step_time_ms"].values())
    total = server_timing(_snapshot(folder, "metrics.before.txt"), _snapshot(folder, "metrics.after.txt"))
    assert sum(w["decode_iterations"] for w in window.values()) < total["decode_iterations"]  # + warm-ups


def test_client_records_account_for_every_token():
    """Every streamed request of every capture: chunk tokens sum to ``completion_tokens``, and
    the per-request accept length is SGLang's own ``spec_accept_length``."""
    for folder, (spec, _) in CAPTURES.items():
        for r in _records(folder):
            m = request_metrics(r)
            assert m.token_accounting_ok, (folder, r["rid"])
            assert r["output_ids"] is not None and len(r["output_ids"]) == r["completion_tokens"]
            if spec:
                assert m.accept_length == pytest.approx(r["meta_info"]["spec_accept_length"], rel=1e-9)
                assert m.n_chunks == r["meta_info"]["spec_verify_ct"] + 1
            else:
                assert m.accept_length is None and m.n_chunks == r["completion_tokens"]


@pytest.mark.parametrize("folder", CAPTURES)
def test_client_cycle_agrees_with_the_scheduler_clock(folder):
    """The lab's client-side cycle time (decode time / verify count) and SGLang's own
    ``step_time_dict`` agree within the cross-check tolerance on every real window, and the
    CUDA-graph share from the counters matches the one from the "Decode batch" lines. (GPU
    time per iteration is below both: on the tiny model CPU overhead dominates, which the
    cross-check rightly flags as ``step_vs_gpu``.)"""
    from lab.measure.crosscheck import add_cross_checks

    for level, w in _json(folder, "window.json").items():
        cc = add_cross_checks(dict(w))["crosscheck"]["checks"]
        assert cc["cycle_vs_step"]["ok"] is True, (folder, level, cc["cycle_vs_step"])
        assert cc["graph_fraction"]["ok"] is True, (folder, level, cc["graph_fraction"])
        assert w["gpu_cycle_ms"] <= 1.02 * w["server_step_ms"], (folder, level)
