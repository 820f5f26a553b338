"""Break-even model, sweep expansion, context padding (no engine, no process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from lab.analysis import theory
from lab.config import ParamsError, load_params
from lab.workload.context import CHARS_PER_TOKEN, USER_HEADER, pad_prompt
from lab.pipeline.sweep import check_current, expand, write_modes

ROOT = Path(__file__).resolve().parents[2]


def test_seed_numbers_need_accept_length_above_2_5_of_3():
    # seeds: decode ~12 ms, verify ~29 ms, draft ~1 ms, 2 steps (at most 3 tokens per cycle)
    assert theory.break_even_accept_length(12.0, 1.0, 29.0) == pytest.approx(2.5)
    assert theory.speedup(1.86, 12.0, 1.0, 29.0) == pytest.approx(0.744, abs=1e-3)  # seeds: 59-61 vs 82-83 tok/s
    c = theory.ModeCosts("eagle3_prefill", 1, 12.0, 1.0, 29.0, 1.86, 1.80, 1.92, 3)
    text = theory.explain(c)
    assert "break-even accept length 2.50 of a possible 3" in text
    assert "It loses" in text and "accept length above 2.50 of a possible 3" in text
    assert "verify under 21.3 ms" in text  # 1.86 * 12 - 1
    win = theory.ModeCosts("eagle3_decode", 1, 12.0, 1.1, 18.3, 1.86, 1.8, 1.9, 3)
    assert win.modelled_speedup > 1 and "It wins" in theory.explain(win)


def test_impossible_break_even_is_called_impossible():
    c = theory.ModeCosts("slow", 1, 10.0, 2.0, 40.0, 2.0, 1.9, 2.1, 3)
    assert "impossible with at most 3" in theory.explain(c)


@pytest.mark.parametrize("args", [(1.0, 0.0, 1.0, 1.0), (1.0, 10.0, 0.0, 0.0), (0.5, 10.0, 1.0, 20.0)])
def test_speedup_rejects_bad_input(args):
    with pytest.raises(ValueError, match="Fix:"):
        theory.speedup(*args)


def test_sweep_grid_drops_invalid_combinations_with_notes():
    modes, notes = expand({"grid": {"num_steps": [1, 2], "eagle_topk": [1, 2], "num_draft_tokens": [3, 4],
                                    "attention_mode": ["decode"], "simulate_accept_length": [None, 2.5]}})
    assert "sw_s2_k1_d3_decode" in modes and "sw_s2_k1_d3_decode_acc2p5" in modes
    assert "sw_s2_k2_d4_decode" in modes  # 2*2+1 >= 4
    assert not any(n.startswith("sw_s1_k1") for n in modes)  # topk 1 needs d = s + 1 = 2
    assert any("topk 1" in n for n in notes) and any("SGLang's rule" in n for n in notes)  # s1 k2 d4: 3 < 4
    assert modes["sw_s2_k1_d3_decode_acc2p5"]["simulate_accept_length"] == 2.5
    with pytest.raises(ParamsError, match="sweep.grid.nmu_steps"):
        expand({"grid": {"nmu_steps": [1]}})


def test_lab_sweep_round_trip_and_staleness(tmp_path):
    p = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", p)
    original = p.read_text()
    modes, _ = write_modes(p)
    assert len(modes) >= 6
    params = load_params(p)
    assert set(modes) <= set(params.modes) and "baseline" in params.modes
    raw = yaml.safe_load(p.read_text())
    check_current(raw)  # fresh
    raw["sweep"]["grid"]["num_steps"] = [1]
    with pytest.raises(ParamsError, match="lab sweep"):
        check_current(raw)
    write_modes(p, clear=True)
    assert p.read_text() == original


def test_pad_prompt_reaches_target_length():
    text = "<|im_system|>system<|im_middle|>hi<|im_end|>" + USER_HEADER + "What is 2+2?<|im_end|>"
    padded = pad_prompt(text, 2048)
    assert abs(len(padded) / CHARS_PER_TOKEN - 2048) <= 1
    assert padded.startswith(text[: text.index(USER_HEADER) + len(USER_HEADER)]) and padded.endswith(text[-20:])
    assert "statement" in padded  # real document text
    assert pad_prompt(text, 0) == text and pad_prompt(text, 3) == text


def test_break_even_inside_the_interval_is_too_close_to_call():
    c = theory.ModeCosts("close", 1, 12.0, 1.0, 29.0, 2.55, 2.3, 2.8, 3, 1.01, "not distinguishable")
    assert "Too close to call" in theory.explain(c)


def test_attention_backends_cross_the_hand_written_modes(tmp_path):
    """``sweep.attention_backends`` writes one mode per (hand-written mode, backend), named
    ``<prefix>_<mode>_<backend>``, each the hand-written mode with ``attention_backend`` set;
    ``grid: null`` leaves the grid out; staleness is detected as for the grid (issue 30, item 2)."""
    p = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", p)
    raw = yaml.safe_load(p.read_text())
    hand = raw["modes"]
    section = {"grid": None, "attention_backends": ["triton", "flashinfer"]}
    modes, notes = expand(section, hand)
    assert list(modes) == [f"sw_{m}_{b}" for m in hand for b in ("triton", "flashinfer")] and not notes
    assert modes["sw_eagle3_decode_flashinfer"] == {**hand["eagle3_decode"], "attention_backend": "flashinfer"}
    assert modes["sw_baseline_triton"]["attention_backend"] == "triton"
    only, _ = expand({**section, "cross_modes": ["eagle3_decode"], "attention_backends": [None, "fa3"]}, hand)
    assert list(only) == ["sw_eagle3_decode_default", "sw_eagle3_decode_fa3"]
    assert "attention_backend" not in only["sw_eagle3_decode_default"]
    with pytest.raises(ParamsError, match="sweep.cross_modes"):
        expand({**section, "cross_modes": ["nope"]}, hand)
    # the grid crosses --attention-backend too (tag a<backend>)
    grid, _ = expand({"grid": {"num_steps": [2], "attention_mode": ["decode"], "attention_backend": ["triton"]}})
    assert list(grid) == ["sw_s2_k1_d3_decode_atriton"] and grid["sw_s2_k1_d3_decode_atriton"]["attention_backend"] == "triton"
    # round trip through params.yaml: lab sweep writes them, load_params accepts them, staleness is caught
    text = p.read_text().replace("sweep:\n  prefix: sw\n", "sweep:\n  prefix: sw\n  attention_backends: [triton, flashinfer]\n")
    p.write_text(text)
    written, _ = write_modes(p)
    params = load_params(p)
    assert {f"sw_{m}_{b}" for m in hand for b in ("triton", "flashinfer")} <= set(params.modes)
    assert params.mode("sw_eagle3_prefill_triton").attention_backend == "triton"
    raw = yaml.safe_load(p.read_text())
    check_current(raw)
    raw["sweep"]["attention_backends"] = ["triton"]
    with pytest.raises(ParamsError, match="lab sweep"):
        check_current(raw)
