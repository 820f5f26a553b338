"""Acceptance by draft position and the speedup waterfall through real emulator launches
(run_mode, then the compare stage), judged against the emulator's ground truth: its profile's
accept probability per position, and the waterfall computed from what it actually did (offline
parts: tests/unit/test_position_acceptance.py, tests/unit/test_waterfall.py)."""

from __future__ import annotations

import json
import math

import pytest


@pytest.mark.integration
def test_acceptance_and_waterfall_end_to_end(tmp_path):
    from mlflow.tracking import MlflowClient

    from lab.emulator.profile import load_profile
    from lab.pipeline.bench import run_mode
    from lab.pipeline.compare import run_compare
    from reliability_util import small_params

    p = small_params(tmp_path, num_prompts=8, max_new_tokens=48, concurrency=[1])
    res = tmp_path / "results"
    modes = ["baseline", "eagle3_decode"]
    for m in modes:
        run_mode(p, m, res / m)
    result = json.loads((res / "eagle3_decode" / "result.json").read_text())
    sec = result["acceptance_by_position"]
    prof, _ = load_profile(p.emulator.profile)
    c1 = sec["points"]["c1"]
    assert sec["num_positions"] == result["effective_config"]["speculative_num_draft_tokens"] - 1
    truth_al = result["ground_truth"]["c1"]["accept_length"]
    assert abs(c1["implied_accept_length"] - truth_al) <= c1["gap_bound"] + 1e-12
    for cat, acc in c1.get("by_category", {}).items():  # each category's own accept probability
        pa = prof.p_accept_for(cat)
        for row in acc["positions"]:
            if row["trials"] >= 20:
                assert row["ci95_lo"] - 0.05 <= pa <= row["ci95_hi"] + 0.05, (cat, pa, row)
    run = MlflowClient(tracking_uri=p.mlflow.tracking_uri).get_run(result["mlflow_run_id"]).data.metrics
    assert run["c1.accept_rate_pos1"] == pytest.approx(c1["positions"][0]["accept_rate"])

    summary = run_compare(p, modes, res, tmp_path / "reports")
    [wf] = [w for w in summary["waterfall"] if w["point"] == "c1"]
    assert "truth" in wf  # the emulator's own waterfall beside the measured one
    prod = wf["ideal_speedup"] * math.prod(s["factor"] for s in wf["steps"])
    assert abs(prod / wf["measured_speedup"] - 1) < 0.01
    lab_parts = {s["step"]: s["loss_ms"] for s in wf["steps"]}
    truth_parts = {s["step"]: s["loss_ms"] for s in wf["truth"]["steps"]}
    # device parts from /metrics against the emulator's phases; the cycle from the client against its iterations
    assert lab_parts["draft"] == pytest.approx(truth_parts["draft"], abs=0.3)
    assert lab_parts["verify"] == pytest.approx(truth_parts["verify"], abs=0.5)
    assert lab_parts["host"] == pytest.approx(truth_parts["host"], abs=1.0)
    assert wf["measured_speedup"] == pytest.approx(wf["truth"]["measured_speedup"], rel=0.05)
    md = (tmp_path / "reports" / "summary.md").read_text()
    assert "Speedup waterfall, eagle3_decode c1: ideal" in md and "largest loss:" in md
    assert "Acceptance by draft position, eagle3_decode c1" in md
    for name in ("acceptance_by_position", "speedup_waterfall"):
        assert (tmp_path / "reports" / "figures" / f"{name}.png").is_file()
    metrics = MlflowClient(tracking_uri=p.mlflow.tracking_uri).get_run(summary["mlflow_run_id"]).data.metrics
    assert metrics["eagle3_decode.c1.waterfall.verify.loss_ms"] == pytest.approx(lab_parts["verify"])
