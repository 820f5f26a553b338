"""The speedup waterfall (lab/analysis/waterfall.py, issue 33 item 2): parts by hand, the parts
multiply to the measured speedup within 1 %, the answer's one line, and the emulator's cost
profile (which knows each part: draft, verify, decode step, scheduler overhead) recovered from
what its ground truth recorded (the live path through run_mode and the compare stage:
tests/component/test_speculation_live.py)."""

from __future__ import annotations

import logging
import math
import os
import statistics
import time

import pytest

from lab.analysis.waterfall import (WaterfallInputError, largest_loss, summary_waterfalls, waterfall, waterfall_line,
                                    waterfall_metrics)
from lab.report.speculation import speculation_lines


def _seeds():
    # the seeds' shape: 12 ms decode + 0.5 ms host, 29 ms verify, 1 ms draft, accept 1.85, measured 0.72x
    return waterfall(1.85, 12.5, 12.0, 1.0, 29.0, 30.6, 0.72)


def test_parts_by_hand_and_they_multiply_to_the_measured_speedup():
    wf = _seeds()
    steps = {s["step"]: s for s in wf["steps"]}
    assert [s["step"] for s in wf["steps"]] == ["draft", "verify", "host", "remainder"]
    assert wf["ideal_speedup"] == 1.85
    assert steps["draft"]["loss_ms"] == 1.0 and steps["verify"]["loss_ms"] == pytest.approx(17.0)
    assert steps["host"]["loss_ms"] == pytest.approx((30.6 - 30.0) - 0.5)
    assert steps["draft"]["speedup_after"] == pytest.approx(1.85 * 12.5 / 13.5)
    assert wf["modelled_speedup"] == pytest.approx(1.85 * 12.5 / 30.6)
    prod = wf["ideal_speedup"] * math.prod(s["factor"] for s in wf["steps"])
    assert abs(prod / 0.72 - 1) < 0.01
    assert wf["ideal_speedup"] - sum(s["loss_speedup"] for s in wf["steps"]) == pytest.approx(0.72)
    assert steps["remainder"]["loss_ms"] == pytest.approx(1.85 * 12.5 / 0.72 - 30.6)
    assert largest_loss(wf)["step"] == "verify"
    with pytest.raises(WaterfallInputError, match="verify_ms"):
        waterfall(1.85, 12.5, 12.0, 1.0, None, 30.6, 0.72)


def test_summary_rows_truth_metrics_and_the_answer_line():
    rows = [{"mode": "baseline", "point": "c1", "cycle_ms_mean": 12.5, "decode_ms_mean": 12.0},
            {"mode": "eagle3", "point": "c1", "accept_length_mean": 1.85, "cycle_ms_mean": 30.6, "decode_ms_mean": None,
             "draft_ms_mean": 1.0, "verify_ms_mean": 29.0, "speedup_decode_tok_s": 0.72},
            {"mode": "eagle3", "point": "c4", "accept_length_mean": 1.85, "cycle_ms_mean": 30.6, "verify_ms_mean": 29.0,
             "speedup_decode_tok_s": 0.72}]
    truth = {"baseline": {"c1": {"cycle_ms": 12.5, "decode_ms": 12.0, "decode_tok_s": 80.0}},
             "eagle3": {"c1": {"accept_length": 1.85, "cycle_ms": 30.6, "draft_ms": 1.0, "verify_ms": 29.0,
                               "decode_tok_s": 57.6}}}
    [wf] = summary_waterfalls(rows, "baseline", truth)  # c4 has no baseline row
    assert wf["measured_speedup"] == 0.72 and wf["truth"]["measured_speedup"] == pytest.approx(0.72)
    line = waterfall_line({**wf})
    lost = 1.85 * 12.5 / 13.5 - 1.85 * 12.5 / 30.5  # speedup after the draft minus after the verify: 0.95
    assert line == ("eagle3 c1: ideal 1.85x -> measured 0.72x; largest loss: verify above a decode step "
                    f"(+17.0 ms/cycle, {-lost:+.2f}x)") and f"{-lost:+.2f}" == "-0.95"
    assert waterfall_metrics([wf])["eagle3.c1.waterfall.verify.loss_ms"] == pytest.approx(17.0)
    assert any(ln.startswith("Speedup waterfall, eagle3 c1") for ln in speculation_lines({"waterfall": [wf]}))
    assert summary_waterfalls(rows, None) == []
    bad = summary_waterfalls([rows[0], {**rows[1], "verify_ms_mean": None}], "baseline")
    assert "error" in bad[0] and "device timer" in bad[0]["error"]


def _engine_run(tmp_path, name, argv, n=6, tokens=64):
    from lab.emulator.args import parse_args
    from lab.emulator.engine import Engine
    from lab.emulator.http import accept_key
    from lab.emulator.metrics import EmulatorMetrics
    from lab.emulator.profile import load_profile
    from lab.emulator.request import Request
    from lab.emulator.truth import TruthWriter, load_truth

    args, _ = parse_args(["--emulator-profile", "fast", "--max-running-requests", "1", *argv])
    prof, _ = load_profile("fast")
    events: list = []
    truth = TruthWriter(tmp_path / f"{name}.jsonl")
    truth.write({"kind": "header", "profile": {}, "argv": argv, "pid": os.getpid()})
    eng = Engine(args, prof, deliver=events.extend, metrics=EmulatorMetrics("m", True, args.tp_size), truth=truth,
                 log=logging.getLogger("test-waterfall-" + name), simulate_acc_len=None)
    reqs = [Request(rid=f"{name}{i}", prompt_tokens=8, max_new_tokens=tokens,
                    accept_key=accept_key(0, f"prompt {i}", f"{name}{i}")) for i in range(n)]
    eng.start()
    for r in reqs:
        eng.submit(r)
    t0 = time.monotonic()
    while sum(ev["finished"] for _, ev in events) < n and time.monotonic() - t0 < 30:
        time.sleep(0.01)
    eng.stop()
    truth.close()
    return load_truth(tmp_path / f"{name}.jsonl"), prof, [r.rid for r in reqs]


def test_emulator_profile_parts_are_recovered(tmp_path):
    """One request at a time (batch 1): the profile's decode step, draft, verify and scheduler
    overhead are each waterfall part's truth; the parts multiply to the measured speedup."""
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3", "--speculative-attention-mode", "prefill"]
    tb, prof, rb = _engine_run(tmp_path, "base", [])
    ts, _, rs = _engine_run(tmp_path, "spec", spec)
    mb, ms = tb.run_metrics(rb), ts.run_metrics(rs)
    speedup = ms["decode_tok_s"] / mb["decode_tok_s"]
    wf = waterfall(ms["accept_length"], mb["cycle_ms"], mb["decode_ms"], ms["draft_ms"], ms["verify_ms"], ms["cycle_ms"],
                   speedup)
    steps = {s["step"]: s for s in wf["steps"]}
    kv = 8 + tokens_mid(64)
    draft_ms = sum(prof.draft_parts_s(1, 2)) * 1e3  # draft steps + draft extend, as planned by the profile
    verify_ms = statistics.fmean(prof.verify_s(1, 3, 8 + n, "prefill", False) for n in range(64)) * 1e3
    slack = 0.3 + ts.fidelity()["spec"].mean_abs_error_ms + tb.fidelity()["decode"].mean_abs_error_ms  # its own error
    assert steps["draft"]["loss_ms"] == pytest.approx(draft_ms, abs=slack)
    assert steps["verify"]["loss_ms"] == pytest.approx(verify_ms - prof.decode_s(1, kv, True) * 1e3, abs=slack)
    # the profile's scheduler overhead: a floor (on this shared 2-core machine the engine thread
    # wakes late, which only adds host time); the host step is the difference per cycle vs per step
    assert prof.overhead_s * 1e3 - 0.1 <= wf["host_ms"] <= prof.overhead_s * 1e3 + 2.0
    assert abs(steps["host"]["loss_ms"]) < 2.0
    prod = wf["ideal_speedup"] * math.prod(s["factor"] for s in wf["steps"])
    assert abs(prod / speedup - 1) < 0.01
    # the remainder is mostly the prefill's first token (accept length counts it, decode tok/s does
    # not: a factor ~ 1 - 1/completion_tokens) plus medians against means
    assert abs(steps["remainder"]["factor"] - 1) < 0.1


def tokens_mid(n: int) -> int:
    """Mean tokens generated so far over a request's decode iterations (KV grows during decoding)."""
    return n // 2
