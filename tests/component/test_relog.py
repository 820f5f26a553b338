"""``lab log`` on a run that MLflow holds in full (lab/tracking/relog.py): a finished run is
never rewritten; only a recorded artifact the store lacks (the executed notebook, when the
store failed just after the kernel ended the run) is added. A store without the run gets a
new one with the same content. (Component tier: MLflow SQLite stores in a temp dir, no process, but
seconds of MLflow schema set-up each.)"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from lab.tracking.relog import relog
from lab.tracking.runs import RECORD_FILE
from lab.tracking.tracker import Tracker


@pytest.fixture(autouse=True)
def _no_git(monkeypatch):
    """The parent run's name reads the git commit (a subprocess): a fixed one here."""
    monkeypatch.setattr("lab.tracking.tracker.git_commit", lambda root=None: "0123abcd" * 5)


def _tracker(store) -> Tracker:
    """A stage's tracker on a temp SQLite store (``store``: the database file)."""
    return Tracker(f"sqlite:///{store}", "relog-test", root=store.parent, key="relog-test-key", base_tags={},
                   engine="emulator")


def _finished_run(tmp_path):
    tracker = _tracker(tmp_path / "mlflow.db")
    run = tracker.open_run("baseline | emulator | no speculation", {"mode": "baseline"}, base=tmp_path)
    (tmp_path / "result.json").write_text("{}")
    run.log_params({"bench.num_prompts": "4"})
    run.log_metrics({"decode_tok_s": 82.0})
    run.log_artifact(tmp_path / "result.json")
    run.finish("FINISHED", save_to=tmp_path / RECORD_FILE)
    return tracker, run.run_id


def test_finished_run_is_left_alone_but_gets_its_missing_notebook(tmp_path):
    tracker, run_id = _finished_run(tmp_path)
    client = MlflowClient(tracking_uri=tracker.uri)
    before = client.get_run(run_id)
    # the stage recorded the executed notebook, then the store failed before the upload
    (tmp_path / "bench.ipynb").write_text("{}")
    rec = json.loads((tmp_path / RECORD_FILE).read_text())
    rec["artifacts"].append(["bench.ipynb", None])
    (tmp_path / RECORD_FILE).write_text(json.dumps(rec))
    rid, what = relog(tracker, tmp_path, log=lambda *a: None)
    assert rid == run_id and what == "already logged; added its missing artifacts bench.ipynb"
    after = client.get_run(run_id)
    assert {a.path for a in client.list_artifacts(run_id)} == {"result.json", "bench.ipynb"}
    assert (after.info.status, after.info.end_time, after.data.tags, after.data.metrics, after.data.params) == \
        (before.info.status, before.info.end_time, before.data.tags, before.data.metrics, before.data.params)
    assert relog(tracker, tmp_path, log=lambda *a: None) == (run_id, "already logged")


def test_a_store_without_the_run_gets_a_new_one_with_the_same_content(tmp_path):
    _, run_id = _finished_run(tmp_path)
    (tmp_path / "other").mkdir()
    other = _tracker(tmp_path / "other" / "mlflow.db")  # another (empty) store
    said: list[str] = []
    rid, what = relog(other, tmp_path, log=said.append)
    assert what == "created" and rid != run_id
    assert any("recorded for" in s for s in said) and any("without a parent" in s for s in said)
    run = MlflowClient(tracking_uri=other.uri).get_run(rid)
    assert run.info.status == "FINISHED" and run.data.params == {"bench.num_prompts": "4"}
    assert run.data.metrics["decode_tok_s"] == 82.0 and run.data.tags["mode"] == "baseline"
    assert "mlflow.parentRunId" not in run.data.tags  # its parent is not in that store
