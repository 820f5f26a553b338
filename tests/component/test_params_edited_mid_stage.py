"""params.yaml edited while a stage runs (issue 34, item 5): the stage found its MLflow parent by
the pipeline key it recomputed from params.yaml at its end, missed, and left the parent RUNNING
forever; DVC then recorded the edited value in dvc.lock for a result measured with the old one.

Now the stage records the key at its start (lab.tracking.grouping.PIPELINE_KEY_ENV, inherited
by its kernel) and ends the parent by it; a parameter the stage declares that changed while it
ran fails the stage (exit 1, the changed key and both values, the fix) with its result kept.
The test runs ``python -m lab.pipeline.bench_stage`` (the emulator) in a scratch copy, edits
``bench.max_new_tokens`` once the stage has opened its runs, and reads the scratch MLflow store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from scratch import dvc_env, scratch_repo

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]  # ~60 s on 2 cores: the slow tier


def _runs(repo: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name(yaml.safe_load((repo / "params.yaml").read_text())["mlflow"]["experiment"])
    return client.search_runs([exp.experiment_id]) if exp else []


def test_params_edited_during_the_stage_leave_no_run_running(tmp_path, monkeypatch):
    monkeypatch.delenv("LAB_PIPELINE_KEY", raising=False)

    def edit(p):
        p["modes"] = {"baseline": p["modes"]["baseline"]}
        p["mlflow"]["tracking_uri"] = "sqlite:///mlflow.db"
        p["bench"].update(num_prompts=8, max_new_tokens=48, concurrency=[1, 2], warmup_requests=1, repeats=2,
                          context_tokens=[0])

    repo = scratch_repo(tmp_path / "lab", edit)
    env = {k: v for k, v in dvc_env().items() if k not in ("LAB_INVOCATION", "LAB_PIPELINE_KEY")}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "lab.pipeline.bench_stage", "--mode", "baseline"], cwd=repo,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent_file = repo / ".cache" / "mlflow_parent.json"
    while not parent_file.is_file():  # the kernel opened the mode run under a new parent: the stage is measuring
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() - t0 < 300, "the stage never opened its MLflow runs"
        time.sleep(0.2)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["bench"]["max_new_tokens"] = 24  # the user prepares the next run
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    edited_while_running = proc.poll() is None
    out, err = proc.communicate(timeout=300)
    assert edited_while_running, "the stage ended before the edit: the test proved nothing"

    runs = _runs(repo)
    assert runs, err[-3000:]
    running = [(r.data.tags.get("mlflow.runName"), r.info.status) for r in runs if r.info.status == "RUNNING"]
    assert not running, f"left RUNNING: {running}\n{err[-3000:]}"
    parents = [r for r in runs if r.data.tags.get("lab_role") == "pipeline"]
    assert len(parents) == 1, [r.data.tags.get("mlflow.runName") for r in runs]
    mode_run = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id)
    assert mode_run.info.status == "FINISHED"
    assert mode_run.data.params.get("bench.max_new_tokens") in ("48", None)  # what it measured with, not the edit

    # the stage says what happened and what to do, in one message, and keeps its result
    assert proc.returncode == 1, (out[-2000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert "params.yaml changed while it ran (bench.max_new_tokens: 48 -> 24)" in err, err[-3000:]
    assert "Fix: run `dvc repro` again" in err, err[-3000:]
    result = json.loads((repo / "results" / "baseline" / "result.json").read_text())
    assert result.get("status", "ok") != "failed"
    assert json.loads((repo / "results" / "baseline" / "metrics.json").read_text()).get("status") != "failed"
