"""The tracking store fails in the middle of a measuring stage (issue 21, item 3).

A real ``mlflow server`` (SQLite behind it) is the stage's tracking URI; it is killed while
``bench@baseline`` measures. The stage must measure to the end, keep the complete result in
``results/baseline`` (with its run record), fail (non-zero exit) with a short message that
says the results are safe and names ``lab log results/baseline``, and not report success.
Once the server is back, ``lab log`` completes the very run the stage opened (every param,
metric, tag, its parent), and no run is left RUNNING.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from scratch import dvc_env, free_port, scratch_repo, wait_until_measuring

pytestmark = pytest.mark.integration


def _server(db: Path, arts: Path, port: int, log: Path) -> subprocess.Popen:
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{db}", "--artifacts-destination",
                             str(arts), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    _kill(proc)
    pytest.fail("mlflow server did not answer in 180 s")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def test_store_dies_mid_stage_then_lab_log_completes_the_same_run(tmp_path):
    port = free_port()
    db, arts, log = tmp_path / "store.db", tmp_path / "arts", tmp_path / "server.log"
    uri = f"http://127.0.0.1:{port}"

    def edit(p):
        p["modes"] = {"baseline": p["modes"]["baseline"]}
        p["bench"].update({"num_prompts": 4, "max_new_tokens": 64, "concurrency": [1], "warmup_requests": 0,
                           "repeats": 3, "request_rates": []})
        p["emulator"]["startup_delay_s"] = 0.05
        p["mlflow"] = {"tracking_uri": uri, "experiment": "store-dies"}

    repo = scratch_repo(tmp_path / "lab", edit)
    server = _server(db, arts, port, log)
    dvc = str(Path(sys.executable).with_name("dvc"))
    stage = subprocess.Popen([dvc, "repro", "-s", "bench@baseline"], cwd=repo, env={**dvc_env(), "SHELL": "/bin/sh"},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        partial = wait_until_measuring(repo, stage).parent
        _kill(server)  # the store dies while the stage measures
        out, _ = stage.communicate(timeout=300)
    finally:
        if stage.poll() is None:
            stage.kill()
        _kill(server)
    assert stage.returncode != 0, out[-3000:]  # never reported as success
    errors = [ln for ln in out.splitlines() if ln.startswith("error: stage bench baseline")]
    assert errors and "the measured results are safe in results/baseline" in errors[-1], out[-3000:]
    assert errors[-1].endswith("then run: lab log results/baseline") and len(errors[-1]) < 800, errors[-1]
    res = json.loads((repo / "results" / "baseline" / "result.json").read_text())
    assert res["status"] == "ok" and res["levels"]["c1"]["decode_tok_s"]["mean"] > 0
    assert json.loads((repo / "results" / "baseline" / "metrics.json").read_text())["status"] == "ok"
    rec = json.loads((repo / "results" / "baseline" / "mlflow_run.json").read_text())
    assert rec["run_id"] == res["mlflow_run_id"] and not partial.exists()

    server = _server(db, arts, port, log)  # the store is back
    try:
        relog = subprocess.run([sys.executable, "-m", "lab.cli", "log", "results/baseline"], cwd=repo,
                               capture_output=True, text=True, timeout=300, env=dvc_env())
        assert relog.returncode == 0, relog.stdout + relog.stderr
        assert f"MLflow run {rec['run_id']} completed" in relog.stdout
        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(rec["run_id"])
        assert run.info.status == "FINISHED" and run.data.params == rec["params"] and len(rec["params"]) > 90
        assert run.data.tags["mlflow.parentRunId"] == rec["parent_run_id"]
        assert run.data.metrics["decode_tok_s"] == pytest.approx(res["headline"]["decode_tok_s"])
        exp = client.get_experiment_by_name("store-dies")
        left = client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
        assert [r.info.run_name for r in left] == []  # the mode run and its parent: none left RUNNING
        assert client.get_run(rec["parent_run_id"]).info.status == "FAILED"  # that invocation did fail
        assert "bench.ipynb" in {a.path for a in client.list_artifacts(rec["run_id"])}
    finally:
        _kill(server)
    # the failed stage left dvc.lock as it was; `dvc commit` records the kept results without measuring again
    from scratch import run_dvc

    assert "bench@baseline" in run_dvc(repo, "status", "bench@baseline").stdout
    assert run_dvc(repo, "commit", "-f", "bench@baseline").returncode == 0
    assert "bench@baseline" not in run_dvc(repo, "status", "bench@baseline").stdout
