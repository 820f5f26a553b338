"""Tests of the emulator (lab/emulator) without a server: cost math, acceptance, CLI, the engine
loop in-process.

They check the profile against the seed numbers (12 ms decode, 29 ms prefill-mode verify,
18.31 ms decode-mode verify at batch 1) and the acceptance model's means. The live servers are
tests/component/test_emulator_live.py.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from lab.emulator.acceptance import AcceptanceModel
from lab.emulator.args import parse_args
from lab.emulator.engine import Engine
from lab.emulator.metrics import EmulatorMetrics
from lab.emulator.profile import PROFILES_DIR, ProfileError, accept_prob_for_mean, load_profile
from lab.emulator.sglog import decode_batch_line
from lab.emulator.request import Request
from lab.emulator.truth import TruthWriter, load_truth
from shared import DECODE_LINE, PHYSICS_RATIO_3_OVER_1



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


def test_a_last_cycle_cut_at_max_new_tokens_counts_its_whole_run(tmp_path):
    """As SGLang 0.5.16 does (batch_result_processor.py:592-595; the real captures in
    tests/unit/test_real_sglang_0516.py): accept length pinned at 2, 8 new tokens = the prefill
    token + 3 cycles of 2 + a 4th cycle cut to 1. That 4th cycle's accepted draft is still counted
    (correct drafts 4, histogram [0, 4]), the output is not."""
    reqs = [Request(rid="a", prompt_tokens=8, max_new_tokens=8)]
    argv = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--decode-log-interval", "1000"]
    t = _run_engine(tmp_path, "cut", argv, reqs, simulate=2.0)
    assert t.tokens_by_rid()["a"] == [1, 2, 2, 2, 1]
    r = reqs[0]
    assert (r.completion_tokens, r.spec_verify_ct, r.num_correct_drafts, r.histogram) == (8, 4, 4, [0, 4])
