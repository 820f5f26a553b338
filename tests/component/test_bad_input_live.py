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
    with pytest.raises(BenchError, match="is not writable.*Fix"):
        run_mode(params, "baseline", out)
    assert engines_on(params.server.port) == []


def test_mlflow_down_after_benchmark_keeps_results_then_lab_log(tmp_path, monkeypatch, capsys):
    """Nothing lost: MLflow breaks after the engine is up; the results stay on disk, the
    message says `lab log results/<mode>`, and `lab log` then records them."""
    import lab.pipeline.bench
    from lab.cli import main as lab_main

    params = small_params(tmp_path, num_prompts=2, concurrency=[1])
    real_open_run = lab.pipeline.bench.open_run
    dead_uri = f"http://127.0.0.1:{free_port()}"

    def open_run_then_break(*a, **kw):
        handle = real_open_run(*a, **kw)
        real_log_params, calls = handle.log_params, []

        def log_params(p):
            real_log_params(p)
            calls.append(1)
            if len(calls) == 2:  # effective config logged: the engine is up; now the store dies
                handle.client, handle.uri = MlflowClient(tracking_uri=dead_uri), dead_uri
        handle.log_params = log_params
        return handle

    monkeypatch.setattr(lab.pipeline.bench, "open_run", open_run_then_break)
    out = tmp_path / "baseline"
    result = run_mode(params, "baseline", out, log=print)
    assert result["status"] == "ok"
    said = capsys.readouterr().out
    assert "MLflow logging failed" in said and f"lab log {out}" in said
    for name in ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "metrics.json").read_text())["decode_tok_s"] > 0
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    assert lab_main(["log", str(out), "--params", str(pfile)]) == 0
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(params.mlflow.experiment).experiment_id],
                              filter_string="tags.relogged_from != ''")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics["decode_tok_s"] == pytest.approx(result["headline"]["decode_tok_s"])


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
