"""Regression sentinel on real emulator launches recorded in MLflow: what it reads of earlier
launches and what it decides (the decision logic alone: tests/unit/test_sentinel.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from lab.config import repo_root
from lab.engine.ports import free_port
from lab.emulator.profile import load_profile
from lab.tracking.tracker import Tracker

ROOT = repo_root()


@pytest.mark.integration
def test_sentinel_end_to_end_on_real_launches(tmp_path):
    """Three real emulator launches of one configuration, then the decision on recorded
    launch values. Nothing here depends on how fast the machine ran: the assertions are
    about what the sentinel read (the earlier launches' recorded means, exactly), which
    launches it compared, and its decision on values placed relative to the recorded spread."""
    from mlflow.tracking import MlflowClient

    from lab.analysis import sentinel
    from lab.catalog import sentinel_metrics
    from lab.pipeline.bench import launch_setup, run_mode
    from lab.config import load_params

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = load_params(overrides={
        "mlflow": {"tracking_uri": uri, "experiment": "sentinel-test"},
        "emulator": {"profile": "fast", "startup_delay_s": 0.0},
        "bench": {"dataset": "data/prompts.jsonl", "num_prompts": 3, "max_new_tokens": 24, "concurrency": [1],
                  "warmup_requests": 1, "warmup_max_requests": 2, "repeats": 2},
        "server": {"port": free_port(), "max_running_requests": 8, "cuda_graph_max_bs_decode": 8}})
    quiet: list[str] = []
    runs = [run_mode(params, "baseline", tmp_path / f"r{i}", log=quiet.append) for i in range(3)]
    first, second, third = (r["sentinel"] for r in runs)
    assert len({s["config_hash"] for s in (first, second, third)}) == 1
    assert first["status"] == "no history"
    assert second["status"] == "too little history" and second["history_run_ids"] == [runs[0]["mlflow_run_id"]]
    assert third["history_run_ids"] == [runs[1]["mlflow_run_id"], runs[0]["mlflow_run_id"]]
    # the history is one value per launch: each earlier launch's recorded mean over its repeats
    d = third["comparison"]["c1"]["decode_tok_s"]
    recorded = [r["levels"]["c1"]["decode_tok_s"]["mean"] for r in runs]
    assert d["n_history"] == 2 and d["history_mean"] == pytest.approx(np.mean(recorded[:2]), rel=1e-9)
    assert d["current_mean"] == pytest.approx(recorded[2], rel=1e-9)
    redo = sentinel.decide({"alpha": third["alpha"], "min_effect": third["min_effect"], "history_run_ids": [1, 2]},
                           sentinel.current_launch(runs[2]),
                           {"c1": {m: [r["levels"]["c1"][m]["mean"] for r in runs[1::-1]]
                                   for m in sentinel_metrics() if m in runs[0]["levels"]["c1"]}},
                           log=quiet.append)
    assert redo["status"] == third["status"] and redo["flagged"] == third["flagged"]
    run = MlflowClient(tracking_uri=uri).get_run(runs[2]["mlflow_run_id"])
    assert run.data.tags["config_hash"] == third["config_hash"]
    assert run.data.tags["sentinel.status"] == third["status"]
    # the emulator names the build its profile models (lab/emulator/profile.py ModelledBuild)
    build = load_profile(params.emulator.profile)[0].models_build
    assert run.data.tags["sglang_version"] == "emulator"
    assert run.data.tags["emulated_sglang_version"] == (build.sglang_version or build.label)
    assert not any(k.startswith("sample.") for k in run.data.metrics)  # one launch value, no last-repeat metric

    # decisions on recorded launch values, against the three launches in MLflow
    hist = recorded
    band = sentinel.launch_delta(hist[0], hist, alpha=params.bench.sentinel_alpha, min_effect=0.0)["delta_hi"]
    mean = float(np.mean(hist))

    def judged(value):
        fake = {**runs[2], "levels": {"c1": {**runs[2]["levels"]["c1"], "decode_tok_s": {"mean": value}}}}
        return sentinel.check(fake, bench=params.bench, setup=launch_setup(params, fake["mode"]), run_id=None,
                              root=ROOT, tracker=Tracker.from_params(params), log=quiet.append)

    slow = judged(min(mean - 2 * band, mean * (1 - 2 * params.bench.sentinel_min_effect)))
    assert len(slow["history_run_ids"]) == 3
    assert slow["status"] == "regression" and "c1.decode_tok_s" in slow["flagged"]
    assert slow["comparison"]["c1"]["decode_tok_s"]["direction"] == "worse"
    same = judged(mean)
    assert "c1.decode_tok_s" not in same["flagged"]
