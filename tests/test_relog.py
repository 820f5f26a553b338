"""``lab log`` on a run that MLflow holds in full (lab/tracking/relog.py): a finished run is
never rewritten; only a recorded artifact the store lacks (the executed notebook, when the
store failed just after the kernel ended the run) is added. A store without the run gets a
new one with the same content."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from lab.tracking.relog import relog
from lab.tracking.runs import RECORD_FILE
from lab.tracking.tracker import Tracker
from reliability_util import small_params


def _finished_run(tmp_path):
    params = small_params(tmp_path)
    tracker = Tracker.from_params(params)
    run = tracker.open_run("baseline | emulator | no speculation", {"mode": "baseline"}, base=tmp_path)
    (tmp_path / "result.json").write_text("{}")
    run.log_params({"bench.num_prompts": "4"})
    run.log_metrics({"decode_tok_s": 82.0})
    run.log_artifact(tmp_path / "result.json")
    run.finish("FINISHED", save_to=tmp_path / RECORD_FILE)
    return params, tracker, run.run_id


def test_finished_run_is_left_alone_but_gets_its_missing_notebook(tmp_path):
    params, tracker, run_id = _finished_run(tmp_path)
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
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
    params, _, run_id = _finished_run(tmp_path)
    other = small_params(tmp_path / "other")  # another (empty) store
    (tmp_path / "other").mkdir(exist_ok=True)
    other.mlflow.tracking_uri = f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"
    said: list[str] = []
    rid, what = relog(Tracker.from_params(other), tmp_path, log=said.append)
    assert what == "created" and rid != run_id
    assert any("recorded for" in s for s in said) and any("without a parent" in s for s in said)
    run = MlflowClient(tracking_uri=other.mlflow.tracking_uri).get_run(rid)
    assert run.info.status == "FINISHED" and run.data.params == {"bench.num_prompts": "4"}
    assert run.data.metrics["decode_tok_s"] == 82.0 and run.data.tags["mode"] == "baseline"
    assert "mlflow.parentRunId" not in run.data.tags  # its parent is not in that store
