"""Acceptance by draft position (lab/analysis/position_acceptance.py, issue 33 item 1).

- SGLang's own code: both builds name the per-request counts ``spec_correct_drafts_histogram`` in
  ``meta_info``, and their ``Req.update_spec_correct_drafts_histogram`` (run here from its source)
  builds the histogram the module reads.
- Replay of the real 0.5.16 captures: ``1 + sum of prefix products`` equals SGLang's own
  ``1 + correct / verify_ct`` to 1e-12, and is within :func:`accept_length_gap_bound` of the lab's
  accept length (``sum completion_tokens / sum verify_ct``); the captures ran with
  ``SGLANG_SIMULATE_ACC_LEN=1.85`` at 3 draft tokens, so SGLang's simulator drew 2 tokens with
  probability 0.85 and 1 otherwise: position 1's interval at concurrency 1 covers 0.85 and position 2 is never accepted.
- The emulator's ground truth: its acceptance model accepts each position with the profile's
  ``p``; every position's interval covers it, and the implied accept length matches the
  ground-truth accept length within the bound.
"""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest

from lab.analysis.position_acceptance import (HISTOGRAM_KEY, acceptance_by_position, acceptance_metrics, acceptance_rows,
                                     chain_depth, implied_accept_length, point_acceptance, position_rates)
from lab.calibrate.observe import capture_as_result

FX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16"
CHAIN = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 3}


def _rec(hist, ct, point="c1", prompt_index=0, ctx=0):
    vct = sum(hist)
    return {"ok": True, "point": point, "prompt_index": prompt_index, "context_tokens": ctx, "completion_tokens": ct,
            "meta_info": {HISTOGRAM_KEY: hist, "spec_verify_ct": vct,
                          "spec_num_correct_drafts": sum(k * c for k, c in enumerate(hist))}}


def test_counts_and_wilson_intervals_by_hand():
    # 10 cycles: 2 accepted 0 drafts, 3 accepted 1, 5 accepted 2 -> pos1 8/10, pos2 5/8
    acc = point_acceptance([_rec([2, 3, 5], 1 + 10 + 13)], 2)
    rows = acc["positions"]
    assert [(r["successes"], r["trials"]) for r in rows] == [(8, 10), (5, 8)]
    assert rows[0]["ci95_lo"] < 0.8 < rows[0]["ci95_hi"] and rows[0]["ci95_lo"] == pytest.approx(0.4902, abs=1e-3)
    assert acc["implied_accept_length"] == pytest.approx(1 + 0.8 + 0.5) == pytest.approx(1 + 13 / 10)
    assert acc["accept_length"] == pytest.approx(24 / 10)
    with pytest.raises(ValueError, match="not a count"):
        position_rates([3], [2])
    assert implied_accept_length([0.5, None, 0.9]) == 1.5


def test_sections_by_category_context_and_mlflow_names():
    recs = [_rec([1, 1, 2], 9, prompt_index=0), _rec([3, 1, 0], 5, prompt_index=1, ctx=2048), _rec([0, 1], 4, point="c4")]
    sec = acceptance_by_position(recs, CHAIN, ["code", "chat writing"])
    assert sec["num_positions"] == 2 and set(sec["points"]) == {"c1", "c4"}
    c1 = sec["points"]["c1"]
    assert set(c1["by_category"]) == {"code", "chat writing"} and set(c1["by_context"]) == {"0", "2048"}
    assert c1["by_category"]["code"]["positions"][0]["trials"] == 4
    flat = acceptance_metrics(sec)
    assert flat["c1.accept_rate_pos1"] == pytest.approx((3 + 1) / 8)
    assert "c1.category.chat_writing.accept_rate_pos2_ci95_hi" in flat and "c4.accept_length_implied" in flat
    assert {r["group"] for r in acceptance_rows({"m": {"acceptance_by_position": sec}})} >= {"all", "category:code",
                                                                                             "context:2048"}
    assert acceptance_by_position(recs, {**CHAIN, "speculative_eagle_topk": 4}) is None  # tree drafts: no chain
    assert acceptance_by_position(recs, {}) is None and chain_depth(CHAIN) == 2
    assert chain_depth({**CHAIN, "speculative_adaptive": True}) is None  # mixed tier depths


def test_sglang_names_and_builds_the_histogram_the_module_reads(sglang_nodeps_each):
    version, root = sglang_nodeps_each
    src = root / "sglang" / "srt" / "managers"
    tm = (src / "tokenizer_manager.py").read_text()
    assert f'meta_info["{HISTOGRAM_KEY}"]' in tm and 'meta_info["spec_verify_ct"]' in tm
    assert "completion_tokens[i] / recv_obj.spec_verify_ct[i]" in tm  # spec_accept_length = the lab's definition
    brp = (src / "scheduler_components" / "batch_result_processor.py").read_text()
    assert "req.update_spec_correct_drafts_histogram(num_correct_drafts)" in brp
    tree = ast.parse((src / "schedule_batch.py").read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "update_spec_correct_drafts_histogram")
    ns: dict = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "schedule_batch.py", "exec"), ns)

    class Req:
        spec_correct_drafts_histogram: list = []

    req = Req()
    req.spec_correct_drafts_histogram = []
    per_cycle = [2, 0, 1, 2, 2, 0]  # correct drafts of each verify
    for n in per_cycle:
        ns["update_spec_correct_drafts_histogram"](req, n)
    assert req.spec_correct_drafts_histogram == [2, 1, 3]
    acc = point_acceptance([_rec(req.spec_correct_drafts_histogram, 1 + 6 + 7)], 2)
    assert [(r["successes"], r["trials"]) for r in acc["positions"]] == [(4, 6), (3, 4)]


def _capture_dirs():
    return sorted(p for p in (FX / "kshard-context").glob("eagle3_*") if (p / "window.json").is_file())


@pytest.mark.parametrize("d", _capture_dirs(), ids=lambda p: p.name)
def test_replay_real_0516_captures_agree_with_the_accept_length(d):
    result, runs, recs = capture_as_result(d)
    assert "SGLANG_SIMULATE_ACC_LEN=1.85" in result["server_command"]
    sec = acceptance_by_position(recs, result["effective_config"], simulated=True)
    assert sec["num_positions"] == 2 and len(sec["points"]) == len(runs)
    s1 = t1 = 0
    for point, acc in sec["points"].items():
        mine = [r for r in recs if r.point == point and r.ok]
        vct = sum(r.meta_info["spec_verify_ct"] for r in mine)
        correct = sum(r.meta_info["spec_num_correct_drafts"] for r in mine)
        assert acc["implied_accept_length"] == pytest.approx(1 + correct / vct, abs=1e-12)
        lab_al = sum(r.completion_tokens for r in mine) / vct  # lab.measure.records' accept_length
        assert acc["accept_length"] == pytest.approx(lab_al)
        assert abs(acc["implied_accept_length"] - lab_al) <= acc["gap_bound"] + 1e-12
        assert acc["positions"][1]["successes"] == 0  # the simulator never gives 3 tokens at x = 1.85
        if point.split("_")[0] == "c1":  # at c4 one simulator draw serves the whole batch (spec_utils.py ~505-559):
            s1, t1 = s1 + acc["positions"][0]["successes"], t1 + acc["positions"][0]["trials"]  # correlated cycles
    pooled = position_rates([s1], [t1])[0]
    assert pooled["ci95_lo"] <= 0.85 <= pooled["ci95_hi"], pooled


def test_replay_kshard_windows_match_runs_json_accept_length():
    d = FX / "kshard" / "eagle3_decode"
    recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
    runs = json.loads((d / "runs.json").read_text())
    assert acceptance_by_position(recs, CHAIN, simulated=True)["num_positions"] == 2
    for run in runs:  # one window (point x repeat): its own requests
        mine = [r for r in recs if r["concurrency"] == run["concurrency"] and r["repeat"] == run["repeat"]]
        acc = point_acceptance(mine, 2)
        assert acc["accept_length"] == pytest.approx(run["accept_length"])
        assert abs(acc["implied_accept_length"] - run["accept_length"]) <= acc["gap_bound"] + 1e-12


def test_emulator_ground_truth_per_position(tmp_path):
    """The emulator accepts draft k (given 1..k-1) with probability p (lab/emulator/acceptance.py):
    the ground truth every position's interval must cover; its truth file's accept length is the
    lab's, within the bound."""
    import logging

    from lab.emulator.args import parse_args
    from lab.emulator.engine import Engine
    from lab.emulator.http import accept_key
    from lab.emulator.metrics import EmulatorMetrics
    from lab.emulator.profile import load_profile
    from lab.emulator.request import Request
    from lab.emulator.truth import TruthWriter, load_truth

    argv = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--decode-log-interval", "1000"]
    args, _ = parse_args(["--emulator-profile", "fast", *argv])
    prof, _ = load_profile("fast")
    p = prof.p_accept
    events: list = []
    truth = TruthWriter(tmp_path / "t.jsonl")
    truth.write({"kind": "header", "profile": {}, "argv": argv, "pid": os.getpid()})
    eng = Engine(args, prof, deliver=events.extend, metrics=EmulatorMetrics("m", True, args.tp_size), truth=truth,
                 log=logging.getLogger("test-acceptance"), simulate_acc_len=None)
    reqs = [Request(rid=f"r{i}", prompt_tokens=8, max_new_tokens=96, accept_key=accept_key(0, f"prompt {i}", f"r{i}"))
            for i in range(32)]
    eng.start()
    for r in reqs:
        eng.submit(r)
    t0 = time.monotonic()
    while sum(ev["finished"] for _, ev in events) < len(reqs) and time.monotonic() - t0 < 20:
        time.sleep(0.01)
    eng.stop()
    truth.close()
    t = load_truth(tmp_path / "t.jsonl")
    recs = [{"ok": True, "point": "c32", "completion_tokens": r.completion_tokens,
             "meta_info": {HISTOGRAM_KEY: list(r.histogram), "spec_verify_ct": r.spec_verify_ct}} for r in reqs]
    eff = {**CHAIN, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
    acc = acceptance_by_position(recs, eff)["points"]["c32"]
    for row in acc["positions"]:
        assert row["trials"] > 100 and row["ci95_lo"] <= p <= row["ci95_hi"], (p, row)
    assert acc["accept_length"] == pytest.approx(t.accept_length([r.rid for r in reqs]))
    assert abs(acc["implied_accept_length"] - t.accept_length()) <= acc["gap_bound"] + 1e-12
    assert acc["implied_accept_length"] == pytest.approx(1 + p + p**2 + p**3, abs=0.15)
