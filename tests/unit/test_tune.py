"""``lab tune`` (lab/calibrate/tune.py): the decision rule on predictions whose draws are known,
the tier table judged by SGLang 0.5.16's own adaptive_spec_params.py and launch rule, the
params.yaml modes, the predicted-vs-measured report on capture folders, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.calibrate import tune as tune_mod
from lab.calibrate.predict import Candidate, Prediction, PredictPoint
from lab.config import load_params

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "configs" / "emulator" / "params-adaptive.yaml"


class _Cal:
    engine = "emulator"
    engine_versions = ["0.5.16"]


def _fake_predict(speedups: dict[tuple[int, int], dict[int, tuple[float, float]]], refused=()):
    """A stand-in for lab.calibrate.predict.predict: at point (c, ctx), num_steps k's speedup draws
    are N(mean, sd) (seeded), the baseline's decode tok/s 100; ``refused`` (c, k) pairs undetermined."""

    def fake(cal, cands, points, wl, *, draws, seed, log=None):
        rng = np.random.default_rng(seed)
        out = []
        for cand in cands:
            for pt in points:
                if not cand.speculative:
                    out.append(Prediction(cand, pt, "ok", {"decode_tok_s": {"pred": 100.0, "lo": 99.0, "hi": 101.0}},
                                          samples={"decode_tok_s": [100.0] * draws}))
                    continue
                if (pt.concurrency, cand.num_steps) in refused or cand.num_steps not in speedups[(pt.concurrency, pt.context_tokens)]:
                    out.append(Prediction(cand, pt, "undetermined", needs=["draft position 4 acceptance"]))
                    continue
                mean, sd = speedups[(pt.concurrency, pt.context_tokens)][cand.num_steps]
                r = list(rng.normal(mean, sd, draws))
                q = np.percentile(r, [2.5, 50, 97.5])
                out.append(Prediction(cand, pt, "ok", {"speedup_decode_tok_s": {"pred": q[1], "lo": q[0], "hi": q[2]}},
                                      samples={"speedup_decode_tok_s": r}))
        return out

    return fake


SPEEDUPS = {
    (1, 0): {1: (1.10, 0.02), 2: (1.30, 0.03), 3: (1.25, 0.03)},   # 2 clearly best, above 1
    (8, 0): {1: (1.02, 0.05), 2: (0.99, 0.05), 3: (0.95, 0.05)},   # spans 1: undetermined
    (32, 0): {1: (0.90, 0.02), 2: (0.85, 0.02), 3: (0.80, 0.02)},  # all below 1
    (64, 0): {1: (0.80, 0.02), 2: (0.75, 0.02), 3: (0.70, 0.02)},
}


@pytest.fixture()
def tuning(monkeypatch):
    monkeypatch.setattr(tune_mod, "predict", _fake_predict(SPEEDUPS))
    params = load_params(PARAMS)
    return tune_mod.tune(_Cal(), params, concurrency=[1, 8, 32, 64], context_tokens=[0], max_steps=4, draws=400)


def test_the_rule_speculates_only_where_the_interval_is_above_one(tuning):
    by_c = {p.point.concurrency: p for p in tuning.points}
    assert by_c[1].verdict == "speculate" and by_c[1].steps == 2 and by_c[1].best_steps == 2
    assert by_c[1].speedup["lo"] > 1.0
    assert by_c[1].p_best > 0.8 and by_c[1].p_win == 1.0
    assert by_c[8].verdict == "undetermined" and by_c[8].steps is None and by_c[8].best_steps == 1
    assert by_c[8].speedup["lo"] < 1.0 < by_c[8].speedup["hi"]
    assert by_c[32].verdict == "no speculation" and by_c[32].best_steps == 1
    # num_steps 4 has no prediction: listed as refused with what it needs, never chosen
    assert all(4 in p.refused and all(s != 4 for s, _ in p.ranked) for p in tuning.points)
    assert [s for s, _ in by_c[1].ranked] == [2, 3, 1]


def test_p_best_is_the_share_of_draws_where_the_best_beats_every_other(monkeypatch):
    tied = {(1, 0): {1: (1.20, 0.05), 2: (1.20, 0.05)}}
    monkeypatch.setattr(tune_mod, "predict", _fake_predict(tied))
    t = tune_mod.tune(_Cal(), load_params(PARAMS), concurrency=[1], context_tokens=[0], max_steps=2, draws=2000)
    assert 0.4 < t.points[0].p_best < 0.6  # two equal candidates: either is best about half the time


def test_tier_table_is_what_sglang_0516_serves(tuning, sglang_adaptive, tmp_path):
    """SGLang 0.5.16's own AdaptiveSpeculativeParams loads the table and, at each tuned concurrency
    (padded to the lab's CUDA-graph batch sizes as SGLang pads), serves the tuned steps and stays
    there whatever the verify results (one candidate per slot: nothing to switch)."""
    cfg, notes = tune_mod.adaptive_config(tuning)
    assert cfg == {"1": {"candidate_steps": [2]}, "8": {"candidate_steps": [1]}, "32": {"candidate_steps": [1]},
                   "64": {"candidate_steps": [1]}}
    assert any("slot 8: undetermined" in n for n in notes)
    assert any("slot 32: no speculation" in n and "without speculation" in n for n in notes)
    path = tmp_path / "adaptive-config.json"
    path.write_text(json.dumps(cfg))
    modes = tune_mod.tuned_modes(tuning, str(path))
    launch_steps = modes[tune_mod.TUNED_MODE]["num_steps"]
    assert launch_steps == 2 and modes[tune_mod.TUNED_MODE]["num_draft_tokens"] == 3
    sp = sglang_adaptive.AdaptiveSpeculativeParams(initial_steps=launch_steps, cfg_path=str(path))
    sp.set_cuda_graph_bs([1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64])
    assert sp.candidate_steps == [1, 2]
    for c, want in ((1, 2), (8, 1), (32, 1), (64, 1), (5, 1), (2, 2)):
        for _ in range(40):
            sp.on_verify_complete([0] * c, c)  # every draft rejected: a multi-candidate slot would step down
        assert sp.get_steps_for_batch(c) == want, c
    assert modes["tune_s2"]["num_steps"] == 2 and "tune_s1" not in modes  # only recommended step counts
    assert modes[tune_mod.DEFAULT_TIERS_MODE]["num_steps"] == 7
    assert "--speculative-adaptive-config" not in modes[tune_mod.DEFAULT_TIERS_MODE]["extra_args"]


def test_tuned_launch_passes_the_0516_launch_rules(tuning, tmp_path):
    """The tuned adaptive mode launches at its largest tier: SGLang's candidate check and 0.5.16's
    CUDA-graph logits-buffer rule (lab/engine/adaptive_rules.py, tested against 0.5.16's code) pass;
    one step lower would be refused."""
    from lab.engine.adaptive_rules import adaptive_launch_refusal

    cfg, _ = tune_mod.adaptive_config(tuning)
    path = tmp_path / "adaptive-config.json"
    path.write_text(json.dumps(cfg))
    mode = tune_mod.tuned_modes(tuning, str(path))[tune_mod.TUNED_MODE]
    flags = ["--speculative-num-steps", str(mode["num_steps"]), *mode["extra_args"]]
    assert adaptive_launch_refusal(flags, "0.5.16") is None
    lower = ["--speculative-num-steps", str(mode["num_steps"] - 1), *mode["extra_args"]]
    assert "logits buffer" in adaptive_launch_refusal(lower, "0.5.16")


def test_round_trip_through_tune_json(tuning):
    back = tune_mod.Tuning.from_dict(json.loads(json.dumps(tuning.to_dict(), default=str)))
    assert [(p.point.key, p.verdict, p.steps, p.best_steps) for p in back.points] == \
        [(p.point.key, p.verdict, p.steps, p.best_steps) for p in tuning.points]
    assert back.prediction(2, "c1").metrics["speedup_decode_tok_s"] == tuning.prediction(2, "c1").metrics["speedup_decode_tok_s"]
    assert tune_mod.adaptive_config(back) == tune_mod.adaptive_config(tuning)


def _capture(d: Path, mode: str, tok_s: dict[int, float], log_steps: dict[int, int] | None = None) -> Path:
    """A capture mode folder: 6 requests per concurrency, each 11 tokens at ``tok_s`` decode tok/s
    (+-1 %), and decode log lines at each batch size for ``log_steps`` (accept len 1.8)."""
    d = d / mode
    d.mkdir(parents=True)
    lines = []
    for c, v in tok_s.items():
        for i in range(6):
            rate = v * (1 + 0.01 * (i - 2.5) / 2.5)
            chunks = [[1.0 + k / rate, 1] for k in range(11)]
            lines.append(json.dumps({"mode": mode, "concurrency": c, "context_tokens": 0, "warmup": False, "ok": True,
                                     "t_dispatch": 0.9, "t_send": 0.9, "t_end": chunks[-1][0], "chunks": chunks,
                                     "completion_tokens": 11, "prompt_tokens": 100}))
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    log = [f"[2026-12-03 10:00:00] Decode batch, #running-req: {c}, #token: 100, token usage: 0.01, accept len: 1.80, "
           f"accept rate: {0.8 / s:.2f}, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0"
           for c, s in (log_steps or {}).items() for _ in range(3)]
    (d / "server.log").write_text("\n".join(log) + "\n")
    return d


def test_measured_report_sets_measurements_beside_predictions(tuning, tmp_path):
    """Tuned tiers measured at c1 (2 steps served, 1.30x) and c32 (1 step, 0.90x) against the default
    tiers (3 and 1 steps): the ratios, the served steps from the decode log, 'inside' against the
    prediction of the served tier, and the tuned-over-default comparison with the documented
    launch spread of the emulator's profile."""
    dirs = [_capture(tmp_path, "baseline", {1: 100.0, 32: 100.0}),
            _capture(tmp_path, tune_mod.TUNED_MODE, {1: 130.0, 32: 90.0}, {1: 2, 32: 1}),
            _capture(tmp_path, tune_mod.DEFAULT_TIERS_MODE, {1: 110.0, 32: 90.0}, {1: 3, 32: 1})]
    rep = tune_mod.measured_report(tuning, dirs, engine_profile="kimi_k25_tp8_pcie")
    rows = {(r["mode"], r["concurrency"]): r for r in rep["rows"]}
    t1 = rows[(tune_mod.TUNED_MODE, 1)]
    assert t1["served_steps"] == 2 and t1["measured"]["ratio"] == pytest.approx(1.30, rel=0.01)
    assert t1["inside"] is True  # predicted 1.30 [~1.24, ~1.36]
    d1 = rows[(tune_mod.DEFAULT_TIERS_MODE, 1)]
    assert d1["served_steps"] == 3 and d1["inside"] is False  # 1.10 measured, 3 steps predicted ~1.25
    assert rows[(tune_mod.TUNED_MODE, 32)]["inside"] is True
    vs = {v["concurrency"]: v for v in rep["versus_default"]}
    assert vs[1]["ratio"]["ratio"] == pytest.approx(130 / 110, rel=0.01) and vs[1]["ratio"]["ci95_lo"] > 1
    assert "launch spread" in vs[1]["ratio"]["scope"]
    # one launch per mode: the documented spread widens the interval, and no word is printed (the lab's rule)
    assert vs[1]["ratio"]["verdict"] is None and vs[32]["ratio"]["verdict"] is None
    md = tune_mod.markdown(tuning, *tune_mod.adaptive_config(tuning), rep)
    assert "Predicted against measured" in md and "| 1 | 0 | 2 | 3 |" in md


def test_measured_report_on_a_real_engine_withholds_the_word(tuning, tmp_path):
    """Without a documented launch spread (a real GPU, one launch per mode) the comparison keeps its
    estimate and says 'no verdict' (the lab's one rule, lab/analysis/launches.py)."""
    dirs = [_capture(tmp_path, "baseline", {1: 100.0}), _capture(tmp_path, tune_mod.TUNED_MODE, {1: 130.0}, {1: 2}),
            _capture(tmp_path, tune_mod.DEFAULT_TIERS_MODE, {1: 110.0}, {1: 3})]
    rep = tune_mod.measured_report(tuning, dirs, engine_profile=None)
    assert rep["versus_default"][0]["ratio"]["verdict"] is None
    assert "no verdict word" in rep["scope"]


def test_bad_input_says_the_fix(monkeypatch, tmp_path, tuning):
    monkeypatch.setattr(tune_mod, "predict", _fake_predict(SPEEDUPS))
    params = load_params(PARAMS)
    with pytest.raises(ValueError, match="objective"):
        tune_mod.tune(_Cal(), params, objective="goodput")
    with pytest.raises(ValueError, match="max_steps"):
        tune_mod.tune(_Cal(), params, max_steps=0)
    no_spec = params.model_copy(update={"modes": {k: v for k, v in params.modes.items() if not v.algorithm}})
    with pytest.raises(ValueError, match="no speculative mode"):
        tune_mod.tune(_Cal(), no_spec)
    with pytest.raises(ValueError, match="no baseline"):
        tune_mod.measured_report(tuning, [_capture(tmp_path, tune_mod.TUNED_MODE, {1: 130.0}, {1: 2})])
    with pytest.raises(ValueError, match="context 4096"):
        tune_mod.adaptive_config(tuning, 4096)


def test_without_mode_each_attention_mode_is_tuned_and_the_better_one_kept(monkeypatch):
    """The default params.yaml has eagle3_prefill (prefill-mode verify) first and eagle3_decode second;
    the candidates used to copy the first speculative mode, so ``lab tune`` on the default run said
    "no speculation" everywhere while its own answer had eagle3_decode faster. Now each distinct
    speculative mode is tuned and the better predicted one kept (with a note naming both);
    ``mode=`` picks one, and a mode that does not speculate is refused naming those that do."""
    def fake(cal, cands, points, wl, *, draws, seed, log=None):
        out = []
        for cand in cands:
            for pt in points:
                if not cand.speculative:
                    out.append(Prediction(cand, pt, "ok", {}, samples={"decode_tok_s": [100.0] * draws}))
                    continue
                mean = (1.10 if cand.attention_mode == "decode" else 0.70) + 0.01 * cand.num_steps
                r = list(np.random.default_rng(seed + cand.num_steps).normal(mean, 0.01, draws))
                out.append(Prediction(cand, pt, "ok", {}, samples={"speedup_decode_tok_s": r}))
        return out

    monkeypatch.setattr(tune_mod, "predict", fake)
    params = load_params(ROOT / "params.yaml")
    assert [n for n, m in params.modes.items() if m.algorithm][:2] == ["eagle3_prefill", "eagle3_decode"]
    assert tune_mod.speculative_modes(params) == ["eagle3_prefill", "eagle3_decode"]
    kw = dict(concurrency=[1, 8], context_tokens=[0], max_steps=3, draws=200)
    best = tune_mod.tune(_Cal(), params, **kw)
    assert best.template["from_mode"] == "eagle3_decode" and best.template["attention_mode"] == "decode"
    assert all(p.verdict == "speculate" for p in best.points)
    assert "candidates copy mode eagle3_decode" in best.notes[0] and "eagle3_prefill 0.7" in best.notes[0]
    forced = tune_mod.tune(_Cal(), params, mode="eagle3_prefill", **kw)
    assert forced.template["from_mode"] == "eagle3_prefill"
    assert all(p.verdict == "no speculation" for p in forced.points)
    with pytest.raises(ValueError, match=r"'baseline': does not speculate\. Fix: pass --mode with one of eagle3_prefill, eagle3_decode"):
        tune_mod.tune(_Cal(), params, mode="baseline", **kw)
