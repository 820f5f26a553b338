"""lab.physics.kernel_traces's traces logged with the physics stage's MLflow run (the lab's run tags
call git): the artifacts under ``profile/`` and the per-case metrics.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_log_physics_logs_profile_artifacts(tmp_path):
    from mlflow.tracking import MlflowClient

    from lab.config import load_params
    from lab.tracking.physics_log import log_physics
    from lab.tracking.tracker import Tracker

    params = load_params(ROOT / "params.yaml").model_copy(deep=True)
    params.mlflow.tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "physics"
    (out / "profile").mkdir(parents=True)
    (out / "metrics.json").write_text("{}")
    (out / "profile" / "verify_eager_T3.trace.json.gz").write_bytes(b"\x1f\x8b")
    (out / "profile" / "profile.json").write_text("{}")
    metrics = {"status": "ok", "tp": 1, "rows": [], "ratios": {}, "figures": [], "device": {"name": "Fake GPU"},
               "profile": {"status": "ok", "dir": str(out / "profile"),
                           "cases": {"verify_eager_T3": {"T": 3, "graph": False, "trace": "verify_eager_T3.trace.json.gz",
                                                         "wall_ms_p50": 30.4, "host_gap_share_p50": 0.786}}}}
    run_id = log_physics(Tracker.from_params(params, tmp_path), params, metrics, out)
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    assert sorted(a.path for a in client.list_artifacts(run_id, "profile")) == \
        ["profile/profile.json", "profile/verify_eager_T3.trace.json.gz"]
    m = client.get_run(run_id).data.metrics
    assert m["profile.verify_eager_T3.wall_ms_p50"] == 30.4 and "profile.verify_eager_T3.graph" not in m
