"""Bad input with live processes: each case of docs/reliability.md's "Bad input" table that
needs a stage, an engine or MLflow gets an error naming the problem and the fix, raised before
any engine starts where possible; plus the "nothing lost" (MLflow down after a benchmark, then
`lab log`) and security (secrets redacted end to end) rows. The params-only cases are in
tests/unit/test_bad_input.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

from lab.measure.point import BenchError
from lab.pipeline.bench import run_mode
from lab.workload.dataset import DatasetError
from lab.engine.preflight import PreflightError
from lab.engine.process import ServerError
from lab.tracking.runs import TrackingError
from reliability_util import ROOT, engines_on, free_port, params_file, small_params


def test_bad_params_stop_the_stage_before_any_server(tmp_path):
    p = params_file(tmp_path, lambda r: r["bench"].update(concurency=[1]))
    proc = subprocess.run([sys.executable, "-m", "lab.pipeline.bench_stage", "--mode", "baseline", "--params", str(p)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "bench.concurency: unknown key" in proc.stderr
    assert not (tmp_path / "server.log").exists()


def _no_engine_started(params, out):
    assert not (out / "server.log").exists() and not (out / "ground_truth.jsonl").exists()
    assert engines_on(params.server.port) == []


@pytest.mark.parametrize("content, words", [
    (None, ["prompt file not found", "Fix"]),
    ("", ["empty", "Fix"]),
    ('{"id": "a", "category": "c", "messages": [{"role": "user", "content": "hi"}]}\n'
     '{"id": "b", "category": "c", "messages": [{"role": "user", "content": "hi"}]}\n'
     '{"id": "c", "category": \n', ["malformed JSON at line 3", "Fix"]),
], ids=["missing", "empty", "malformed at line 3"])
def test_bad_dataset_fails_before_server(tmp_path, content, words):
    params = small_params(tmp_path)
    ds = tmp_path / "prompts.jsonl"
    if content is not None:
        ds.write_text(content)
    params.bench.dataset = str(ds)
    out = tmp_path / "baseline"
    with pytest.raises(DatasetError) as err:
        run_mode(params, "baseline", out)
    for w in words:
        assert w in str(err.value), str(err.value)
    _no_engine_started(params, out)


def test_port_in_use_fails_before_server(tmp_path):
    params = small_params(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", params.server.port))
        s.listen()
        out = tmp_path / "baseline"
        # preflight (lab.engine.preflight) catches it first; lab.engine.process.s own check is the backstop
        with pytest.raises((ServerError, PreflightError), match=rf"(?s)port {params.server.port} on 127.0.0.1 is in use.*[Ff]ix"):
            run_mode(params, "baseline", out)
    assert not (out / "ground_truth.jsonl").exists()  # the emulator never ran
    assert json.loads((out / "metrics.json").read_text())["status"] == "failed"


def test_mlflow_unreachable_fails_before_server(tmp_path):
    params = small_params(tmp_path)
    params.mlflow.tracking_uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    out = tmp_path / "baseline"
    t0 = time.perf_counter()
    with pytest.raises(TrackingError, match="cannot use MLflow tracking URI.*Fix"):
        run_mode(params, "baseline", out)
    assert time.perf_counter() - t0 < 60
    _no_engine_started(params, out)


def test_results_dir_not_writable(tmp_path):
    params = small_params(tmp_path)
    blocker = tmp_path / "results"
    blocker.write_text("a file where the results directory should be")
    out = blocker / "baseline"
    with pytest.raises(BenchError, match=f"{blocker} is a file, not a directory.*Fix: move it away"):
        run_mode(params, "baseline", out)
    assert engines_on(params.server.port) == []


def test_mlflow_down_after_benchmark_keeps_results_then_lab_log(tmp_path, monkeypatch, capsys):
    """Nothing lost, nothing reported as success: MLflow breaks once the engine is up; the
    measurement goes on to the end, its files are on disk (status ok), the run record beside
    them, and run_mode raises TrackingError naming `lab log <dir>`. `lab log` then completes
    the *same* run in place: every param, metric (value, step, timestamp), tag and artifact
    the record lists, its parent, FINISHED; a second `lab log` changes nothing."""
    from lab.cli import main as lab_main
    from lab.tracking.runs import RECORD_FILE, load_record
    from lab.tracking.tracker import Tracker

    params = small_params(tmp_path, num_prompts=2, concurrency=[1])
    dead_uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once, not after MLflow's backoff
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # the pipeline invocation (a dvc process) has ended by the time `lab log` runs
    monkeypatch.setenv("LAB_INVOCATION", f"{gone.pid}-1")
    real_open_run = Tracker.open_run

    def open_run_then_break(self, *a, **kw):
        handle = real_open_run(self, *a, **kw)
        real_log_params, calls = handle.log_params, []

        def log_params(p):
            real_log_params(p)
            calls.append(1)
            if len(calls) == 2:  # effective config logged: the engine is up; now the store dies
                handle.client, handle.uri = MlflowClient(tracking_uri=dead_uri), dead_uri
        handle.log_params = log_params
        return handle

    monkeypatch.setattr(Tracker, "open_run", open_run_then_break)
    out = tmp_path / "baseline"
    with pytest.raises(TrackingError, match=rf"measured results are safe in {out}.*lab log {out}"):
        run_mode(params, "baseline", out, log=print)
    said = capsys.readouterr().out
    assert "MLflow logging failed" in said and f"lab log {out}" in said
    for name in ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", RECORD_FILE):
        assert (out / name).stat().st_size > 0
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and json.loads((out / "metrics.json").read_text())["decode_tok_s"] > 0
    rec = load_record(out / RECORD_FILE)
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    half = client.get_run(result["mlflow_run_id"])
    assert half.info.status == "RUNNING" and not half.data.metrics  # what the failure left: no metric, no end
    monkeypatch.undo()

    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    assert lab_main(["log", str(out), "--params", str(pfile)]) == 0
    run = client.get_run(result["mlflow_run_id"])  # the same run: result.json's id stays valid
    assert run.info.status == "FINISHED" and run.info.end_time == rec["end_time"]
    assert run.data.params == rec["params"] and len(rec["params"]) > 90  # every param, not 22 of 97
    assert rec["params"]["bench.num_prompts"] == "2" and "effective.tp_size" in rec["params"]
    assert {k: v for k, v in run.data.tags.items() if k in rec["tags"]} == rec["tags"]
    assert run.data.tags["mlflow.parentRunId"] == rec["parent_run_id"] and rec["parent_run_id"]
    assert run.data.tags["lab_logged"] == "complete" and run.data.tags["lab_relogged_from"] == str(out)
    logged = {(m.key, m.value, m.timestamp, m.step) for k in {r[0] for r in rec["metrics"]}
              for m in client.get_metric_history(run.info.run_id, k)}
    assert logged == {tuple(r) for r in rec["metrics"]}  # every metric row once, with its step and time
    assert run.data.metrics["decode_tok_s"] == pytest.approx(result["headline"]["decode_tok_s"])
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"result.json", "metrics.json", "requests.jsonl", "server.log"} <= arts
    parent = client.get_run(rec["parent_run_id"])
    assert parent.info.status != "RUNNING"  # the failed invocation's parent is not left RUNNING either
    exp = client.get_experiment_by_name(params.mlflow.experiment)
    assert [r.info.run_id for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")] == []
    before = client.get_run(run.info.run_id)
    assert lab_main(["log", str(out), "--params", str(pfile)]) == 0
    assert "already logged" in capsys.readouterr().out
    after = client.get_run(run.info.run_id)
    assert (after.info.end_time, after.data.tags) == (before.info.end_time, before.data.tags)


def test_secrets_redacted_end_to_end(tmp_path):
    secret, key = "hf_FAKEsecretTOKEN123456", "sk-FAKEapikey987654"
    params = small_params(tmp_path, num_prompts=2, concurrency=[1])
    params.server.env = {"HF_TOKEN": secret, "MY_SERVICE_PASSWORD": key + "x", "TOKENIZERS_PARALLELISM": "false"}
    params.server.extra_args = ["--api-key", key]  # SGLang's flag; the emulator logs it as unknown
    out = tmp_path / "baseline"
    result = run_mode(params, "baseline", out)
    assert result["status"] == "ok"
    assert "HF_TOKEN='***'" in result["server_command"] and "--api-key '***'" in result["server_command"]
    for f in (p for p in out.rglob("*") if p.is_file()):
        text = f.read_text(errors="replace")
        assert secret not in text and key not in text, f"secret leaked into {f.name}"
    assert "[lab] launch:" in (out / "server.log").read_text()
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.data.params["server.env.HF_TOKEN"] == "***"
    assert run.data.params["server.env.MY_SERVICE_PASSWORD"] == "***"
    # only credentials: token counts and tokenizer settings keep their values (lab.tracking.params_log)
    from lab.tracking.params_log import mode_run_params

    assert run.data.params["server.env.TOKENIZERS_PARALLELISM"] == "false"
    assert run.data.params["bench.max_new_tokens"] == str(params.bench.max_new_tokens)
    assert {k: v for k, v in run.data.params.items() if not k.startswith(("effective.", "dataset."))} == mode_run_params(
        params, "baseline")
    dumped = json.dumps({"params": run.data.params, "tags": run.data.tags})
    assert secret not in dumped and key not in dumped
    art_dir = client.download_artifacts(result["mlflow_run_id"], "", str(tmp_path / "arts"))
    from pathlib import Path

    for f in Path(art_dir).rglob("*"):
        if f.is_file():
            assert secret not in f.read_text(errors="replace") and key not in f.read_text(errors="replace")
