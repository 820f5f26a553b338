"""A local SQLite tracking store keeps its artifacts beside the database, never in the project's
own mlruns/ (component tier: an MLflow store's schema set-up takes seconds)."""

from __future__ import annotations

from pathlib import Path

from lab.config import load_params
from lab.tracking.runs import artifact_location
from lab.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parents[2]


def test_sqlite_store_keeps_artifacts_beside_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # as under pytest: the current directory is the project
    before = set((ROOT / "mlruns").rglob("*")) if (ROOT / "mlruns").is_dir() else set()
    params = load_params(overrides={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "t"}})
    run = Tracker.for_store(params.mlflow.resolved_tracking_uri(), "t").open_run("x", {}, nested=False)
    f = tmp_path / "note.txt"
    f.write_text("x")
    run.log_artifact(f)
    run.finish()
    assert list((tmp_path / "mlruns").rglob("note.txt"))
    after = set((ROOT / "mlruns").rglob("*")) if (ROOT / "mlruns").is_dir() else set()
    assert after == before
    assert artifact_location("sqlite:////a/b/mlflow.db") == "file:///a/b/mlruns"
    assert artifact_location("http://127.0.0.1:5000") is None
