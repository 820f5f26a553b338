"""The physics notebook run through papermill as a thin shell, recording one MLflow run (the
stage's logic: tests/unit/test_physics.py).
"""

from __future__ import annotations

import json

from shared import PHYSICS_TINY


# ---------------------------------------------------------------- with torch (CPU), skipped without it


def test_notebook_runs_as_a_thin_shell_and_records_one_mlflow_run(tmp_path):
    """physics.ipynb executed by papermill in a scratch copy (its own params and MLflow store):
    lab.pipeline.physics validates the injected section, measures (or records "not run"), and
    lab.tracking.physics_log logs one run whose record mlflow_run.json is."""
    import papermill as pm
    from mlflow.tracking import MlflowClient

    from scratch import scratch_repo

    db = tmp_path / "physics.db"

    def edit(p: dict) -> None:
        p["mlflow"]["tracking_uri"] = f"sqlite:///{db}"

    repo = scratch_repo(tmp_path / "repo", edit)
    tiny = {**PHYSICS_TINY, "timed_iters": 5, "tokens": [1, 3]}
    pm.execute_notebook(str(repo / "notebooks" / "physics.ipynb"), str(tmp_path / "out.ipynb"), cwd=str(repo),
                        parameters={"physics": tiny, "results_dir": "results/physics"}, kernel_name="python3",
                        progress_bar=False)
    out = repo / "results" / "physics"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["params"]["hidden_size"] == 64 and metrics["params"]["tokens"] == [1, 3]  # the injected section ran
    assert metrics["status"] == "ok" or metrics["status"].startswith("not run")
    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]  # the run record (lab/tracking/runs.py)
    logged = MlflowClient(tracking_uri=f"sqlite:///{db}").get_run(run_id)
    assert logged.data.tags["stage"] == "physics" and logged.data.tags["status"] == metrics["status"]
    assert logged.data.params["physics.hidden_size"] == "64"
    assert not list(out.glob(".*.tmp")), "mlflow_run.json is written through lab.atomic"
