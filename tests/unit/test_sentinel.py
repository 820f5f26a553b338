"""Regression sentinel: the launch-level decision on known distributions and the config hash.
Real emulator launches through MLflow are tests/component/test_sentinel_live.py.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from pathlib import Path

from lab.analysis.sentinel import compare, config_fingerprint, decide, launch_delta

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- decision logic, known distributions


def test_launch_delta_known_values():
    d = launch_delta(82.0, [89.0, 89.5, 90.0], alpha=0.01, min_effect=0.02)
    assert d["delta"] == pytest.approx(-7.5) and d["history_sd"] == pytest.approx(0.5)
    # prediction interval half-width: t_{0.995, 2} = 9.924843 * 0.5 * sqrt(1 + 1/3)
    assert d["delta_hi"] == pytest.approx(9.924843 * 0.5 * (4 / 3) ** 0.5, rel=1e-5)
    assert d["p_value"] < 0.01 and d["outside_noise"] is True
    assert d["rel_delta"] == pytest.approx(-7.5 / 89.5)
    inside = launch_delta(88.0, [89.0, 89.5, 90.0], alpha=0.01, min_effect=0.02)
    assert inside["outside_noise"] is False and inside["p_value"] > 0.01


@functools.cache
def _design():
    """``benchmarks/sentinel_design.py`` as a module (benchmarks/ is not a package), loaded once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sentinel_design", ROOT / "benchmarks" / "sentinel_design.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _launches(rng, k, launch_sd, repeat_sd, repeats=3, mean=85.0):
    """k launches: a launch effect (server process, warm state, clocks) plus repeat noise."""
    return _design().launches(rng, k, launch_sd, repeat_sd, repeats, mean)


def test_launch_level_false_alarms_near_alpha_where_pooled_repeats_fail():
    """With launch-to-launch variance, pooling repeats (the old design) flags ordinary
    relaunches; comparing one value per launch keeps the false-alarm rate at alpha. A small
    seeded run of ``benchmarks/sentinel_design.py`` (4,000 trials there): at 600 trials the
    rate's standard error is 0.009, so [0.025, 0.08] fails a design off alpha by 3 of them."""
    ours, pooled = _design().false_alarms(trials=600, seed=42, alpha=0.05, launch_sd=1.0, repeat_sd=0.3)
    assert 0.025 <= ours <= 0.08, ours
    assert pooled > 0.3, pooled


def test_launch_level_power_for_an_8_percent_drop():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(500):
        hist = [h.mean() for h in _launches(rng, 5, launch_sd=0.5, repeat_sd=0.5, mean=89.0)]
        now = _launches(rng, 1, launch_sd=0.5, repeat_sd=0.5, mean=82.0)[0].mean()
        hits += bool(launch_delta(now, hist, alpha=0.01, min_effect=0.02)["outside_noise"])
    assert hits / 500 > 0.95


def test_min_effect_floor_and_too_little_history():
    # a 0.5 % shift with almost no launch noise is outside the band but below the 2 % floor
    d = launch_delta(100.5, [100.0, 100.0001, 99.9999], alpha=0.01, min_effect=0.02)
    assert d["p_value"] < 0.01 and d["outside_noise"] is False
    one = launch_delta(50.0, [100.0])
    assert one["outside_noise"] is None and one["rel_delta"] == pytest.approx(-0.5)
    assert launch_delta(None, [1.0, 2.0])["delta"] is None
    same = launch_delta(5.0, [5.0, 5.0])
    assert same["p_value"] == 1.0 and same["outside_noise"] is False
    out = decide({"alpha": 0.01, "min_effect": 0.02, "history_run_ids": ["a"]},
                 {"c1": {"decode_tok_s": 50.0}}, {"c1": {"decode_tok_s": [100.0]}}, log=lambda *_: None)
    assert out["status"] == "too little history" and out["flagged"] == []


def test_compare_direction_respects_lower_is_better():
    cmp_ = compare({"c1": {"decode_tok_s": 82.0, "cycle_ms": 12.0}},
                   {"c1": {"decode_tok_s": [89.0, 89.1, 88.9], "cycle_ms": [11.2, 11.21, 11.19]}},
                   alpha=0.01, min_effect=0.02)
    assert cmp_["c1"]["decode_tok_s"]["direction"] == "worse"
    assert cmp_["c1"]["cycle_ms"]["direction"] == "worse"  # longer cycle is worse


def _hash(params, result=None):
    from lab.analysis.sentinel import file_sha256
    from lab.pipeline.bench import launch_setup

    res = result or {"engine": "emulator", "engine_version": "0.5.23", "effective_config": {"tp_size": 8},
                     "mode": "eagle3_decode"}
    wl = {**params.bench.model_dump(), "dataset_sha256": file_sha256(ROOT / params.bench.dataset)}
    return config_fingerprint(res, wl, setup=launch_setup(params, res["mode"]))[0]


def test_config_hash_covers_everything_that_changes_the_measurement(tmp_path):
    """README's workloads A (default), B (48 prompts) and C (48 prompts, lengths spread) hash
    differently, and so does every workload, mode and hardware setting; thresholds do not."""
    from lab.config import load_params

    base = load_params(ROOT / "params.yaml")
    h0 = _hash(base)

    def changed(section, **kv):
        p = base.model_copy(deep=True)
        for k, v in kv.items():
            setattr(getattr(p, section) if section else p, k, v)
        return _hash(p)

    workload_b = changed("bench", num_prompts=48)
    workload_c = changed("bench", num_prompts=48, output_tokens_spread=0.5)
    assert len({h0, workload_b, workload_c}) == 3
    for kv in ({"output_tokens": [32]}, {"output_tokens_spread": 0.25}, {"context_tokens": [2048]},
               {"concurrency": [1, 16]}, {"max_new_tokens": 128}, {"temperature": 0.7}, {"seed": 1},
               {"repeats": 5}, {"warmup_requests": 4}, {"request_rates": [2.0]}, {"burstiness": 0.5},
               {"rate_max_concurrency": 4}):  # the open-loop settings too (issue 20)
        assert changed("bench", **kv) != h0, kv
    for kv in ({"sentinel_alpha": 0.05}, {"request_timeout_s": 60}, {"ngram_n": 3}, {"trace": True}):
        assert changed("bench", **kv) == h0, kv
    # every bench key is hashed unless NOT_WORKLOAD names it: a new key cannot be forgotten
    from lab.analysis.sentinel import NOT_WORKLOAD

    hashed = set(config_fingerprint({"engine": "emulator"}, base.bench.model_dump())[1]["workload"])
    assert hashed == set(base.bench.model_dump()) - NOT_WORKLOAD and NOT_WORKLOAD <= set(base.bench.model_dump())
    assert changed("emulator", profile="fast") != h0
    assert changed("server", env={"SGLANG_SIMULATE_ACC_LEN": "2.5"}) != h0
    p = base.model_copy(deep=True)
    p.modes["eagle3_decode"].attention_mode = "prefill"
    assert _hash(p) != h0
    # the dataset's content, not only its path
    data = tmp_path / "prompts.jsonl"
    data.write_text((ROOT / base.bench.dataset).read_text())
    p = base.model_copy(deep=True)
    p.bench.dataset = str(data)
    h_copy = _hash(p)
    data.write_text(data.read_text().replace("a", "b", 1))
    assert _hash(p) != h_copy
    # the engine, its version and the GPU
    res = {"engine": "sglang", "engine_version": "0.5.23", "effective_config": {}, "mode": "baseline"}
    wl = base.bench.model_dump()
    h_gpu = config_fingerprint(res, wl, gpu="8x NVIDIA H200")[0]
    assert h_gpu != config_fingerprint(res, wl, gpu="8x NVIDIA H100")[0]
    assert h_gpu != config_fingerprint({**res, "engine_version": "0.5.24"}, wl, gpu="8x NVIDIA H200")[0]
    assert config_fingerprint({**res, "engine": "emulator"}, wl)[1]["gpu_model"] == "none (emulator)"


# --------------------------------------------------------------------------- files params point at


def test_an_edited_profile_file_is_another_configuration(tmp_path):
    """Issue 21: the emulator's cost profile is read from a file; two launches with different
    file contents under one path (or name) are different configurations, so the sentinel
    never compares them as one. (A GPU's real speed is still not hashed: only its model.)"""
    from lab.config import load_params
    from lab.emulator.profile import PROFILES_DIR

    prof = json.loads((PROFILES_DIR / "kimi_k25_tp8_pcie.json").read_text())
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(prof))
    params = load_params(ROOT / "params.yaml").model_copy(deep=True)
    params.emulator.profile = str(path)
    before = _hash(params)
    assert _hash(params) == before  # same file, same configuration
    prof["decode"]["graph_ms_bs1"]["value"] = 12.9
    path.write_text(json.dumps(prof))
    assert _hash(params) != before
