"""Tests for lab.measure.records, .prometheus, .decode_log and .server_info on hand-built records and SGLang-format fixtures with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.measure.decode_log import parse_decode_log, summarize_decode_log
from lab.measure.prometheus import SERVER_TIMING_KEYS, parse_prometheus, server_timing
from lab.measure.records import LATENCY_METRICS, measured_window_s, request_metrics, summarize_run
from lab.measure.server_info import step_time_ms

FX = Path(__file__).resolve().parents[1] / "fixtures"


def rec(chunks, *, ct=None, verify_ct=None, t_dispatch=0.0, t_send=0.001, t_end=None, ok=True, rid="r"):
    meta = {"completion_tokens": ct if ct is not None else sum(n for _, n in chunks)}
    if verify_ct is not None:
        meta["spec_verify_ct"] = verify_ct
    return {
        "rid": rid, "mode": "m", "concurrency": 1, "repeat": 0, "prompt_index": 0,
        "t_dispatch": t_dispatch, "t_send": t_send,
        "t_end": t_end if t_end is not None else (chunks[-1][0] + 0.001 if chunks else t_send),
        "chunks": [list(c) for c in chunks], "completion_tokens": meta["completion_tokens"],
        "prompt_tokens": 7, "meta_info": meta, "ok": ok, "error": None if ok else "boom", "output_text": "",
    }


def test_request_metrics_speculative_chunk_of_three_counts_three():
    # send at 0.0, first token at 0.100; then chunks of 3, 1, 2 tokens 30 ms apart
    r = rec([(0.100, 1), (0.130, 3), (0.160, 1), (0.190, 2)], verify_ct=3, t_dispatch=-0.002, t_send=0.0, t_end=0.200)
    m = request_metrics(r)
    assert m.completion_tokens == 7
    assert m.ttft_ms == pytest.approx(100.0)
    assert m.icl_ms == pytest.approx([30.0, 30.0, 30.0])
    # ITL: one value per token: 3 x 10 ms, 1 x 30 ms, 2 x 15 ms
    assert m.itl_ms == pytest.approx([10.0, 10.0, 10.0, 30.0, 15.0, 15.0])
    assert len(m.itl_ms) == 6
    assert sum(m.itl_ms) == pytest.approx(90.0)  # = t_last - t_first
    assert m.e2e_ms == pytest.approx(200.0)
    assert m.tpot_ms == pytest.approx((200.0 - 100.0) / 6)
    assert m.decode_tok_s == pytest.approx(6 / 0.090)
    assert m.cycle_ms == pytest.approx(90.0 / 3)
    assert m.accept_length == pytest.approx(7 / 3)
    assert m.dispatch_delay_ms == pytest.approx(2.0)
    assert m.token_accounting_ok is True
    assert m.speculative is True


def test_request_metrics_baseline_cycle_is_per_decode_step():
    r = rec([(0.05 + 0.012 * i, 1) for i in range(11)], t_send=0.0)
    m = request_metrics(r)
    assert m.accept_length is None and m.spec_verify_ct is None
    assert m.cycle_ms == pytest.approx(12.0)
    assert m.decode_tok_s == pytest.approx(10 / 0.120)
    assert m.itl_ms == pytest.approx([12.0] * 10)


def test_token_accounting_detects_mismatch():
    r = rec([(0.1, 1), (0.2, 2)], ct=5)
    assert request_metrics(r).token_accounting_ok is False


def test_failed_and_single_token_records_give_none():
    bad = rec([(0.1, 1)], ok=False)
    m = request_metrics(bad)
    assert m.ttft_ms is None and m.itl_ms == [] and m.tpot_ms is None
    one = rec([(0.1, 1)])
    m1 = request_metrics(one)
    assert m1.ttft_ms is not None and m1.tpot_ms is None and m1.decode_tok_s is None
    not_sent = rec([], ok=False, t_dispatch=None, t_send=None)
    not_sent["t_end"] = None
    assert request_metrics(not_sent).dispatch_delay_ms is None


def test_prometheus_sums_over_extra_labels():
    text = (FX / "metrics_eagle3_after.prom").read_text()
    snap = parse_prometheus(text)
    assert snap.value("sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == 1150.0
    assert snap.value("sglang:cuda_graph_passes_total") == 1150.0 + 350.0 + 28.0
    assert snap.value("sglang:forward_execution_seconds_total", category="target_verify") == 39.0
    assert snap.value("sglang:forward_execution_seconds_total", category="nope") is None
    assert snap.value("sglang:not_there_total") is None
    assert snap.value("sglang:num_running_reqs", model_name="moonshotai/Kimi-K2.5", tp_rank=0) == 0.0


def test_prometheus_two_ranks_sum():
    lines = [
        "# HELP sglang:cuda_graph_passes_total Total number of forward passes categorized by CUDA graph.",
        "# TYPE sglang:cuda_graph_passes_total counter",
        'sglang:cuda_graph_passes_total{engine_type="unified",mode="decode_cuda_graph",model_name="k",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 10.0',
        'sglang:cuda_graph_passes_total{engine_type="unified",mode="decode_cuda_graph",model_name="k",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 12.0',
    ]
    snap = parse_prometheus("\n".join(lines) + "\n")
    assert snap.value("sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == 22.0
    assert snap.value("sglang:cuda_graph_passes_total", mode="decode_cuda_graph", tp_rank="1") == 12.0


def test_server_timing_eagle3():
    st = server_timing((FX / "metrics_eagle3_before.prom").read_text(), (FX / "metrics_eagle3_after.prom").read_text())
    assert st["decode_iterations"] == 1000.0
    assert st["verify_ms"] == pytest.approx(29.0)
    assert st["draft_ms"] == pytest.approx(1.0)
    assert st["decode_ms"] is None  # no "decode" category in a speculative server
    assert st["gpu_cycle_ms"] == pytest.approx(30.0)
    assert st["verify_share"] == pytest.approx(29.0 / 30.0)
    assert st["verify_graph_fraction"] == pytest.approx(0.75)
    d = st["deltas"]
    assert d["forward_s"]["target_verify"] == pytest.approx(29.0)
    assert d["forward_s"]["extend"] == pytest.approx(0.5)
    assert d["decode_cuda_graph_passes"] == 750.0 and d["decode_none_passes"] == 250.0


def test_server_timing_baseline_lazy_series_and_timer_off():
    st = server_timing((FX / "metrics_baseline_before.prom").read_text(), (FX / "metrics_baseline_after.prom").read_text())
    assert st["decode_ms"] == pytest.approx(12.0)  # series absent before counts from 0
    assert st["verify_ms"] is None and st["draft_ms"] is None
    assert st["verify_graph_fraction"] == pytest.approx(1.0)
    off = server_timing((FX / "metrics_notimer_before.prom").read_text(), (FX / "metrics_notimer_after.prom").read_text())
    assert off["verify_ms"] is None and off["draft_ms"] is None and off["decode_ms"] is None
    assert off["gpu_cycle_ms"] is None
    assert off["decode_iterations"] == 100.0 and off["verify_graph_fraction"] == 1.0
    empty = server_timing("", "")
    assert empty["decode_iterations"] is None and empty["verify_graph_fraction"] is None


def test_parse_decode_log_fixture():
    rows = parse_decode_log((FX / "decode_batch.log").read_text())
    assert len(rows) == 5
    a, b, c, d, e = rows
    assert a == {**a, "ts": "2026-01-05 10:00:01", "tp_rank": 0, "running_req": 1, "token": 552,
                 "token_usage": 0.01, "accept_len": 1.85, "accept_rate": 0.42, "cuda_graph": True,
                 "gen_throughput_tok_s": 61.2, "queue_req": 0}
    assert b["cuda_graph"] is False and b["running_req"] == 8 and b["queue_req"] == 2
    assert b["extra"]["fwd occupancy"] == "97.10%"
    assert c["accept_len"] is None and c["accept_rate"] is None and c["cuda_graph"] is True
    assert c["gen_throughput_tok_s"] == pytest.approx(82.47)
    assert d["tp_rank"] == 3 and d["forward_iter"] == 1234 and d["ts"] == "2026-01-05 10:00:04.123"
    assert d["cuda_graph"] is False and d["accept_len"] is None
    assert e["ts"] is None and e["token"] == 100 and e["token_usage"] == 0.10 and e["accept_len"] == 2.5
    assert parse_decode_log(["no decode here"]) == []
    agg = summarize_decode_log(rows)
    assert agg["lines"] == 5 and agg["cuda_graph_fraction"] == pytest.approx(3 / 5)
    assert agg["mean_accept_len"] == pytest.approx((1.85 + 1.90 + 2.50) / 3)
    assert agg["max_running_req"] == 8
    assert summarize_decode_log([])["cuda_graph_fraction"] is None


def test_step_time_ms_new_entries_only():
    before = json.loads((FX / "server_info_before.json").read_text())
    after = json.loads((FX / "server_info_after.json").read_text())
    st = step_time_ms(before, after)
    assert set(st) == {1, 16}
    assert st[1] == pytest.approx([30.0, 30.2])
    assert st[16] == pytest.approx([50.0])
    assert step_time_ms(None, after)[8] == pytest.approx([41.2])
    assert step_time_ms(before, {"internal_states": [{}]}) is None


def test_summarize_run_known_answers():
    recs = [
        rec([(0.100, 1), (0.130, 3), (0.160, 2)], verify_ct=2, t_dispatch=0.0, t_send=0.0, t_end=0.170, rid="a"),
        rec([(0.200, 1), (0.230, 1), (0.260, 2)], verify_ct=2, t_dispatch=0.0, t_send=0.010, t_end=0.270, rid="b"),
        rec([], ok=False, t_dispatch=0.0, t_send=0.0, t_end=0.05, rid="c"),
    ]
    recs[2]["completion_tokens"] = None
    recs[2]["meta_info"] = {}
    server = {"verify_ms": 29.0, "draft_ms": 1.0, "decode_ms": None, "verify_graph_fraction": 0.5,
              "step_time_ms": {1: [30.0, 32.0]}, "deltas": {}}
    wall = measured_window_s(recs)
    assert wall == pytest.approx(0.270)
    s = summarize_run(recs, wall_s=0.5, server=server)
    assert (s.requests, s.ok, s.errors, s.not_sent) == (3, 2, 1, 0)
    assert s.error_rate == pytest.approx(1 / 3)
    assert s.completion_tokens_total == 10
    assert s.output_tok_s == pytest.approx(10 / 0.5)
    assert s.accept_length == pytest.approx(10 / 4)
    assert s.cycle_ms == pytest.approx(30.0)
    assert s.p50_ttft_ms == pytest.approx(145.0)  # median of 100 and 190
    assert s.mean_icl_ms == pytest.approx(30.0)
    # ITL pooled per token: [10,10,10,15,15] + [30,15,15]
    assert s.p50_itl_ms == pytest.approx(15.0)
    assert s.mean_itl_ms == pytest.approx(120 / 8)
    assert s.decode_tok_s == pytest.approx((5 / 0.060 + 3 / 0.060) / 2)  # median of two
    assert s.verify_ms == 29.0 and s.decode_ms is None and s.server_step_ms == pytest.approx(31.0)
    assert s.token_accounting_ok is True and s.speculative is True
    assert s.mode == "m" and s.concurrency == 1
    row = s.to_dict()  # the runs.json keys, by name
    for m in LATENCY_METRICS:
        for p in ("mean", "p50", "p90", "p99"):
            assert f"{p}_{m}" in row
    for k in SERVER_TIMING_KEYS:
        assert k in row
    assert row["server"] is s.server and row["p50_ttft_ms"] == s.p50_ttft_ms
    with pytest.raises(ValueError):
        summarize_run(recs, wall_s=0, server=None)


def test_summarize_run_all_failed():
    recs = [rec([], ok=False, t_dispatch=None, t_send=None, rid="x")]
    recs[0]["t_end"] = None
    s = summarize_run(recs, wall_s=1.0, server=None)
    assert s.ok == 0 and s.not_sent == 1 and s.error_rate == 1.0
    assert s.p50_ttft_ms is None and s.accept_length is None and s.verify_ms is None
    assert s.output_tok_s == 0.0


def _prom(rows: dict[tuple[str, str, int], float]) -> str:
    """Exposition text with SGLang 0.5.23's scheduler labels (metrics_collector.py ~1383-1387)."""
    out = []
    for (name, lv, rank), v in rows.items():
        key, val = lv.split("=")
        out.append(f'{name}{{{key}="{val}",engine_type="unified",model_name="k",moe_ep_rank="0",pp_rank="0",'
                   f'tp_rank="{rank}"}} {v}')
    return "\n".join(out) + "\n"


def test_server_timing_counts_one_tp_rank_and_books_eager_draft_as_draft():
    """Issue 12 items 1 and 6: 8 TP ranks export identical series; an eager draft is
    timed as ``decode`` (eagle_worker_v2.py ~693-715), which is draft time under speculation."""
    FS, CG = "sglang:forward_execution_seconds_total", "sglang:cuda_graph_passes_total"
    after = {}
    for rank in range(8):
        after.update({(FS, "category=target_verify", rank): 2.0, (FS, "category=eagle_draft", rank): 0.05,
                      (FS, "category=eagle_draft_extend", rank): 0.03, (FS, "category=decode", rank): 0.2,
                      (CG, "mode=decode_cuda_graph", rank): 80.0, (CG, "mode=decode_none", rank): 20.0})
    st = server_timing("", _prom(after))
    assert st["decode_iterations"] == 100.0  # not 800
    assert st["verify_ms"] == pytest.approx(20.0)
    assert st["draft_ms"] == pytest.approx((0.05 + 0.03 + 0.2) * 10)  # eager draft steps included
    assert st["decode_ms"] is None
    assert st["gpu_cycle_ms"] == pytest.approx(22.8)
    assert st["draft_incomplete"] is True  # eager draft-extend hides in "extend"
    assert st["deltas"]["tp_rank"] == "0"
    graphed = {k: v for k, v in after.items() if "decode_none" not in k[1] and "category=decode" != k[1]}
    st2 = server_timing("", _prom(graphed))
    assert st2["draft_incomplete"] is False and st2["draft_ms"] == pytest.approx(0.8 / 0.8)
    # an eager *verify* (the seeds' build: decode_none passes) with a graphed draft is complete
    eager_verify = {k: v for k, v in after.items() if k[1] != "category=decode"}
    assert server_timing("", _prom(eager_verify))["draft_incomplete"] is False
    # draft-extend not graphed (SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH): its time is in "extend"
    no_ext = {k: v for k, v in graphed.items() if k[1] != "category=eagle_draft_extend"}
    no_ext.update({(FS, "category=extend", r): 0.5 for r in range(8)})
    assert server_timing("", _prom(no_ext))["draft_incomplete"] is True
    base = {(FS, "category=decode", r): 1.2 for r in range(8)} | {(CG, "mode=decode_cuda_graph", r): 100.0 for r in range(8)}
    b = server_timing("", _prom(base))
    assert b["decode_ms"] == pytest.approx(12.0) and b["draft_ms"] is None and b["decode_iterations"] == 100.0


def test_server_step_ms_not_biased_by_the_idle_gap_before_a_window():
    """Issue 12 item 5: SGLang's step clock is not reset while idle (metrics_reporter.py ~942),
    so the window's first step_time_dict entry spans the idle gap; the median ignores it."""

    before = {"internal_states": [{"step_time_dict": {"1": [0.0121] * 3}}]}
    # first new entry: 40 iterations of 12 ms plus 2 s idle, spread over the interval of 40
    after = {"internal_states": [{"step_time_dict": {"1": [0.0121] * 3 + [(40 * 0.012 + 2.0) / 40] + [0.012] * 6}}]}
    steps = step_time_ms(before, after)
    rec = {"rid": "r", "ok": True, "t_send": 0.0, "t_dispatch": 0.0, "t_end": 1.0, "chunks": [[0.1, 1], [0.112, 1]],
           "completion_tokens": 2, "meta": {"completion_tokens": 2}}
    s = summarize_run([rec], wall_s=1.0, server={"step_time_ms": steps})
    assert s.server_step_ms == pytest.approx(12.0)  # the mean would read 19.1
    assert s.server_step_entries == 7


def test_incomplete_draft_time_is_a_run_warning():
    from lab.measure.hygiene import hygiene_warnings

    runs = [{"concurrency": 8, "repeat": 0, "server": {"draft_incomplete": True}},
            {"concurrency": 1, "repeat": 0, "server": {"draft_incomplete": False}}]
    w = hygiene_warnings(runs, None)
    assert len(w) == 1 and "draft_ms is incomplete at c=8 repeat 0" in w[0]
    assert hygiene_warnings(runs[1:], None) == []


def test_server_timing_with_dp_ranks_sums_one_tp_rank_per_dp_group():
    """With data-parallel attention each DP group runs its own batches (label dp_rank,
    metrics_collector.py ~1390): one TP rank per group, summed over groups."""
    CG = "sglang:cuda_graph_passes_total"
    lines = []
    for dp, tps, n in (("0", ("0", "1"), 30.0), ("1", ("2", "3"), 50.0)):
        for tp in tps:
            lines.append(f'{CG}{{dp_rank="{dp}",engine_type="unified",mode="decode_cuda_graph",model_name="k",'
                         f'moe_ep_rank="0",pp_rank="0",tp_rank="{tp}"}} {n}')
    st = server_timing("", "\n".join(lines) + "\n")
    assert st["decode_iterations"] == 80.0  # 30 + 50, not 160
    assert st["deltas"]["rank_selectors"] == [{"tp_rank": "0", "dp_rank": "0"}, {"tp_rank": "2", "dp_rank": "1"}]
