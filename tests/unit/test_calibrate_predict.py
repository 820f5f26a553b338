"""``lab predict`` / ``lab sweep --order`` on synthetic results of a known profile: held-out
configurations predicted near the profile's own replay, undetermined ones refused with what they
need, the attention-mode rule by build, rankings, the CLI's files."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
from pathlib import Path

import pytest

from calib_synth import PROMPTS, write_result
from lab.calibrate.calibrate_cli import calibrate_main, parse_grid, predict_main
from lab.calibrate.fit import calibrate
from lab.calibrate.order import rank
from lab.calibrate.predict import Candidate, PredictPoint, Workload, predict
from lab.calibrate.prediction_report import markdown, measured_by_config
from lab.calibrate.simulate import ProfileCosts, SimRequest, chain_sampler, simulate_run
from lab.emulator.profile import load_profile
from lab.workload.dataset import workload_indices

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ROOT / "benchmarks" / "profiles" / "validation_h200_0516.json"
WL = Workload(num_prompts=4, repeats=3, seed=0)
POINTS = [PredictPoint("c1", 1, 0, 24), PredictPoint("c4", 4, 0, 24)]


def _spec(steps, mode):
    return Candidate(name=f"s{steps}_{mode}", speculative=True, num_steps=steps, topk=1, num_draft_tokens=steps + 1,
                     attention_mode=mode)


@pytest.fixture(scope="module")
def prof():
    return load_profile(HIDDEN)[0]


@pytest.fixture(scope="module")
def results(tmp_path_factory, prof):
    d = tmp_path_factory.mktemp("pred")
    return {"baseline": write_result(d / "baseline", prof),
            "s1": write_result(d / "s1", prof, spec={"num_steps": 1, "attention_mode": "decode"}),
            "s2": write_result(d / "s2", prof, spec={"num_steps": 2, "attention_mode": "decode"}, seed=2),
            "s4": write_result(d / "s4", prof, spec={"num_steps": 4, "attention_mode": "prefill"}, seed=1)}


def _truth(prof, cand: Candidate, point: PredictPoint, n: int = 200) -> float:
    """Expected measured decode tok/s of ``cand`` under the true profile (the same replay, many seeds)."""
    vals = []
    for s in range(n):
        rep = s % WL.repeats
        reqs = [SimRequest(PROMPTS[i], PROMPTS[i], point.output_tokens)
                for i in workload_indices(len(PROMPTS), WL.num_prompts, WL.seed + rep)]
        costs = ProfileCosts(prof, num_steps=cand.num_steps, num_draft_tokens=cand.num_draft_tokens,
                             attention_mode=cand.attention_mode)
        sampler = chain_sampler([prof.p_accept] * cand.num_steps) if cand.speculative else None
        vals.append(simulate_run(reqs, costs, sampler=sampler, rng=random.Random(10_000 + s),
                                 concurrency=point.concurrency)["decode_tok_s"])
    return statistics.fmean(vals)


def test_held_out_configurations_are_predicted_near_the_true_profile(results, prof):
    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    cands = [Candidate("baseline", False), _spec(2, "decode"), _spec(3, "prefill")]
    preds = predict(cal, cands, POINTS, WL, draws=60, seed=1)
    assert all(p.status == "ok" for p in preds)
    for p in preds:
        truth = _truth(prof, p.candidate, p.point)
        d = p.metrics["decode_tok_s"]
        assert d["pred"] == pytest.approx(truth, rel=0.04), (p.candidate.key, p.point.key)
        assert d["lo"] < d["pred"] < d["hi"]
        if p.candidate.speculative:
            assert 0.0 <= p.p_win <= 1.0 and p.metrics["speedup_decode_tok_s"]["pred"] > 1.0
    ranked = rank(preds, "c1", "win")
    assert [p.candidate.key for p in ranked][0] == "s3_k1_d4_prefill"  # 3 steps beat 2 on this profile


def test_undetermined_predictions_name_what_they_need(results):
    cal = calibrate([results["baseline"], results["s2"]])
    cands = [Candidate("baseline", False), _spec(1, "decode"), _spec(3, "decode"), _spec(2, "prefill")]
    preds = {p.candidate.key: p for p in predict(cal, cands, POINTS[:1], WL, draws=20)}
    assert preds["s1_k1_d2_decode"].status == "undetermined"
    assert any("verify.per_extra_token_ms" in n for n in preds["s1_k1_d2_decode"].needs)
    assert any("draft positions 3..3" in n for n in preds["s3_k1_d4_decode"].needs)
    # SGLang 0.5.16: the other attention mode runs the same verify (same backend): predicted
    assert preds["s2_k1_d3_prefill"].status == "ok"
    text = markdown(list(preds.values()), cal, "c1")
    assert "Not predicted" in text and "verify.per_extra_token_ms" in text


def test_other_attention_mode_is_refused_for_a_build_without_the_rule(tmp_path, prof):
    d = {"baseline": write_result(tmp_path / "baseline", prof, engine_version="seeds-build"),
         "s2": write_result(tmp_path / "s2", prof, spec={"num_steps": 2, "attention_mode": "decode"},
                            engine_version="seeds-build")}
    cal = calibrate(list(d.values()))
    p = predict(cal, [Candidate("baseline", False), _spec(2, "prefill")], POINTS[:1], WL, draws=10)[1]
    assert p.status == "undetermined" and any("mode:prefill was never measured" in n for n in p.needs)


def test_rank_orders(results):
    cal = calibrate([results["baseline"], results["s2"]])
    preds = predict(cal, [Candidate("baseline", False), _spec(2, "decode"), _spec(3, "decode")], POINTS[:1], WL, draws=20)
    win = rank(preds, "c1", "win")
    assert [p.status for p in win] == ["ok", "undetermined"]
    unc = rank(preds, "c1", "uncertain")
    assert unc[0].status == "undetermined"
    with pytest.raises(ValueError, match="use one of"):
        rank(preds, "c1", "fastest")
    with pytest.raises(ValueError, match="no speculative prediction at point 'c9'"):
        rank(preds, "c9", "win")


def test_measured_values_sit_beside_predictions(results):
    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    measured = measured_by_config([results["s2"], results["baseline"]])
    assert "speedup_decode_tok_s" in measured["s2_k1_d3_decode"]["c1"]
    p = [q for q in predict(cal, [Candidate("baseline", False), _spec(2, "decode")], POINTS, WL, draws=30,
                            measured=measured) if q.candidate.speculative][0]
    assert p.not_measured is None, p.not_measured
    assert p.measured["decode_tok_s"] == measured["s2_k1_d3_decode"]["c1"]["decode_tok_s"]
    assert abs(p.to_dict()["error_pct"]["decode_tok_s"]) < 6.0


def test_a_measurement_of_another_workload_is_not_measured(results):
    """Issue 32, item 4: a prediction at 128 new tokens was set beside the 64-token measurement."""
    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    measured = measured_by_config([results["s2"], results["baseline"]])
    longer = [PredictPoint("c1", 1, 0, 48)]  # the measurement decoded 24 tokens
    p = [q for q in predict(cal, [Candidate("baseline", False), _spec(2, "decode")], longer, WL, draws=20,
                            measured=measured) if q.candidate.speculative][0]
    assert not p.measured and p.not_measured.startswith("not measured: max_new_tokens 24 measured, 48 predicted")
    assert p.to_dict()["error_pct"] == {}
    other = Workload(num_prompts=8, repeats=3, seed=0)  # more prompts per point: another workload
    q = [r for r in predict(cal, [Candidate("baseline", False)], POINTS[:1], other, draws=20, measured=measured)][0]
    assert not q.measured and "num_prompts 4 measured, 8 predicted" in q.not_measured
    seeded = predict(cal, [Candidate("baseline", False)], POINTS[:1], WL, draws=20, measured=measured,
                     workload={"temperature": 0.7})  # a key the measurement did not record is not compared
    assert seeded[0].measured


def test_prediction_intervals_include_launch_noise(results):
    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    cands = [Candidate("baseline", False), _spec(2, "decode")]
    without = predict(cal, cands, POINTS[:1], WL, draws=60, launch_cv=None)
    with_ = predict(cal, cands, POINTS[:1], WL, draws=60)  # the emulator's documented 2.2 %
    for a, b in zip(without, with_):
        wa = a.metrics["decode_tok_s"]["hi"] - a.metrics["decode_tok_s"]["lo"]
        wb = b.metrics["decode_tok_s"]["hi"] - b.metrics["decode_tok_s"]["lo"]
        assert wb > wa + 0.03 * a.metrics["decode_tok_s"]["pred"]  # at least +-1.5 % wider
        assert any("leaves out launch-to-launch noise" in n for n in a.notes)
        assert not any("leaves out launch-to-launch noise" in n for n in b.notes)
    sa, sb = without[1].metrics["speedup_decode_tok_s"], with_[1].metrics["speedup_decode_tok_s"]
    assert sb["hi"] - sb["lo"] > sa["hi"] - sa["lo"]  # two launches' noise in a speedup


def test_cli_writes_calibration_profile_and_predictions(results, tmp_path, capsys):
    params = yaml_params(tmp_path)
    out = tmp_path / "cal"
    args = argparse.Namespace(results=[results["baseline"], results["s1"], results["s4"]], out=out, name="fitted",
                              fill_from=None, points=None)
    assert calibrate_main(args) == 0
    assert {"calibration.json", "profile.json", "calibration.md"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "profile.json").read_text())["decode"]["graph_ms_bs1"]["fit"]["results"]
    pargs = argparse.Namespace(calibration=out / "calibration.json", params=str(params), grid=["num_steps=2,3"],
                               concurrency=None, request_rate=None, point="c1", order="win", draws=6, seed=0,
                               measured=[results["s2"]], out=tmp_path / "pred")
    assert predict_main(pargs) == 0
    printed = capsys.readouterr().out
    assert "ranking at c1" in printed
    pred = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert pred["ranking"] and "EMULATOR" in pred["caption"]
    assert (tmp_path / "pred" / "predicted_vs_measured.png").stat().st_size > 1000
    bad = argparse.Namespace(results=[tmp_path / "nothing"], out=out, name="x", fill_from=None, points=None)
    assert calibrate_main(bad) == 2 and "no result.json" in capsys.readouterr().err
    assert parse_grid(["num_steps=1,2", "prefill_attention_backend=null,fa3"]) == {
        "num_steps": [1, 2], "prefill_attention_backend": [None, "fa3"]}


def yaml_params(tmp_path: Path) -> Path:
    """params.yaml of the repository with a small bench matching the synthetic results."""
    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["bench"].update(num_prompts=4, max_new_tokens=24, concurrency=[1, 4], repeats=3, request_rates=[])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_sweep_writes_generated_modes_in_the_given_order(tmp_path):
    from lab.pipeline.sweep import check_current, write_modes

    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    modes, _ = write_modes(path)
    want = list(reversed(list(modes)))
    again, _ = write_modes(path, order=want[:2])
    assert list(again)[:2] == want[:2] and set(again) == set(modes)
    import yaml

    raw = yaml.safe_load(path.read_text())
    assert [m for m in raw["modes"] if m.startswith("sw_")][:2] == want[:2]
    check_current(raw)  # the order does not make the generated modes stale


def test_sweep_order_repro_is_one_pipeline_invocation(tmp_path, monkeypatch):
    """`lab sweep --order win --repro` runs the ordered benches, then the rest, as two `dvc
    repro` calls: both carry one LAB_INVOCATION, so their runs share one MLflow parent
    (lab/tracking/grouping.py). The prediction and DVC are stand-ins (no process here)."""
    import subprocess

    import lab.calibrate.calibrate_cli as calibrate_cli
    from lab.cli import main as lab_main
    from lab.tracking.grouping import INVOCATION_ENV

    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    monkeypatch.delenv(INVOCATION_ENV, raising=False)
    monkeypatch.setattr(calibrate_cli, "sweep_order", lambda args: ["sw_s3_k1_d4_decode", "sw_s1_k1_d2_prefill"])
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: calls.append((argv, kw.get("env") or {}))
                        or subprocess.CompletedProcess(argv, 0))
    assert lab_main(["sweep", "--params", str(path), "--order", "win", "--repro"]) == 0
    assert [argv[1:5] for argv, _ in calls] == [["repro", "--single-item", "bench@baseline", "bench@sw_s3_k1_d4_decode"],
                                                ["repro"]]
    invocations = {env.get(INVOCATION_ENV) for _, env in calls}
    assert len(invocations) == 1 and None not in invocations


def test_points_can_be_held_out_of_a_calibration(results):
    cal = calibrate([results["baseline"], results["s2"]], points={"c1"})
    assert {w.point for w in cal.obs.windows} == {"c1"}
    assert not cal.constants()["decode.per_extra_seq_ms"]["determined"]  # one batch size left
    p = predict(cal, [Candidate("baseline", False)], POINTS, WL, draws=10)
    assert [q.status for q in p] == ["ok", "undetermined"]  # c4 needs the per-sequence slope


def test_concurrency_beyond_the_measured_batches_is_refused_naming_the_launch(results):
    """c16 from windows of at most 4 sequences (c1, c4): refused, naming concurrency 16; c4 is not
    refused by the range rule (issue 32 item 4: "c16 from c1/c8 alone")."""
    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    wl = Workload(num_prompts=16, repeats=2, seed=0)
    pts = [PredictPoint("c4", 4, 0, 24), PredictPoint("c16", 16, 0, 24)]
    preds = {(p.candidate.key, p.point.key): p
             for p in predict(cal, [Candidate("baseline", False), _spec(2, "decode")], pts, wl, draws=10)}
    for key in ("baseline", "s2_k1_d3_decode"):
        assert preds[(key, "c4")].status == "ok", preds[(key, "c4")].needs
        refused = preds[(key, "c16")]
        assert refused.status == "undetermined" and not refused.metrics
        text = " ".join(refused.needs)
        assert "mean batch" in text and "concurrency including 16" in text and "--concurrency 16" in text


def test_a_kv_context_beyond_the_measured_one_is_refused_naming_the_launch(results):
    """A context of 2048 tokens from windows of ~100-token prompts is refused, and the range rule
    itself (not only the aliased KV column) names the context to measure."""
    from lab.calibrate.predict import range_needs

    cal = calibrate([results["baseline"], results["s1"], results["s4"]])
    base = Candidate("baseline", False)
    ctx = PredictPoint("c1_ctx2048_out24", 1, 2048, 24)
    preds = predict(cal, [base], [PredictPoint("c1", 1, 0, 24), ctx], WL, draws=10)
    assert preds[0].status == "ok" and preds[1].status == "undetermined"
    # the rule on its own: a replay at 2.1k KV tokens per sequence, batch 1, against these windows
    text = " ".join(range_needs(cal, base, ctx, [(1, 2.1)] * 10))
    assert "KV context of 2100 tokens" in text and "context_tokens including 2048" in text
    assert "--context-tokens 2048" in text
    assert range_needs(cal, base, PredictPoint("c1", 1, 0, 24), [(1, 0.1)] * 10) == []


def test_figure_labels_fitted_and_held_out_measurements_truthfully(results):
    """A configuration fitted at c1 only is labelled so, its c4 measurement is "measured (held out)"
    and an unfitted configuration "(held out)": no held-out row is called calibration (issue 32)."""
    from lab.calibrate.prediction_report import figure

    cal = calibrate([results["baseline"], results["s2"]], points={"c1"})
    dirs = [results["baseline"], results["s2"], results["s4"]]
    cands = [Candidate("baseline", False), _spec(2, "decode"), _spec(4, "prefill")]
    preds = predict(cal, cands, POINTS[:1], WL, draws=10, measured=measured_by_config(dirs))
    preds += [p for p in predict(cal, cands[:1], [PredictPoint("c4", 4, 0, 24)], WL, draws=10,
                                 measured=measured_by_config(dirs))]
    fig = figure(preds, cal)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "baseline (fitted at c1)" in labels and "s2_k1_d3_decode (fitted at c1)" in labels
    assert "s4_k1_d5_prefill (held out)" in labels and not any("calibration" in t for t in labels)
    marks = {t for ax in fig.axes for t in ax.get_legend_handles_labels()[1]}
    assert {"measured (fitted)", "measured (held out)"} <= marks
