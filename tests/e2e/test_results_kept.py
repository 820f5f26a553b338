"""Nothing measured is lost and no recorded history is rewritten (issue 21), on a real
`dvc repro` in a scratch copy of the lab:

- an interrupted measuring stage leaves the previous complete results byte for byte, its
  own partial result in ``results/<mode>/partial/<time>/``, named in its message; a compare
  that refuses leaves the previous report and figures (lab/pipeline/staging.py);
- each `dvc repro` has its own MLflow parent: a later failing invocation (port taken) makes
  its own FAILED parent and changes nothing of the earlier FINISHED one or its children;
- every file a param points at is a DVC dependency: an edited profile under ``data/`` shows in
  ``dvc status``; one outside the dependencies is refused with the fix, before any engine;
- ``results/<mode>`` being a file, or ``MLFLOW_TRACKING_URI`` naming another store, fails
  in seconds with the fix and only paths that exist.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from scratch import dvc_env, run_dvc, scratch_repo, wait_until_measuring

pytestmark = pytest.mark.integration

SMALL = {"num_prompts": 2, "max_new_tokens": 16, "concurrency": [1], "warmup_requests": 0, "repeats": 2,
         "request_rates": []}
MODE_FILES = ("metrics.json", "result.json", "requests.jsonl", "runs.json", "server.log", "bench.ipynb",
              "mlflow_run.json")


def _edit(p: dict) -> None:
    p["modes"] = {k: v for k, v in p["modes"].items() if k in ("baseline", "eagle3_decode")}
    p["bench"].update(SMALL)
    p["server"]["stop_grace_s"] = 1.0
    p["emulator"]["startup_delay_s"] = 0.05
    p["mlflow"]["tracking_uri"] = "sqlite:///mlflow.db"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = scratch_repo(tmp_path_factory.mktemp("lab"), _edit, extra_files=(".gitignore",))
    proc = run_dvc(repo, "repro")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return repo


def _snapshot(repo: Path) -> dict[str, bytes]:
    files = [repo / "results" / m / f for m in ("baseline", "eagle3_decode") for f in MODE_FILES]
    files += [p for p in (repo / "reports").rglob("*") if p.is_file() and "partial" not in p.parts]
    return {str(p.relative_to(repo)): p.read_bytes() for p in files}


def _params(repo: Path) -> dict:
    return yaml.safe_load((repo / "params.yaml").read_text())


def _write_params(repo: Path, p: dict) -> None:
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def _client(repo: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")


def _runs(repo: Path) -> dict[str, object]:
    c = _client(repo)
    exp = c.get_experiment_by_name("eagle-verify-lab")
    return {r.info.run_id: r for r in c.search_runs([exp.experiment_id], max_results=1000)}


def _state(run) -> tuple:
    return (run.info.status, run.info.end_time, dict(run.data.tags), dict(run.data.metrics), dict(run.data.params))


def test_complete_results_then_a_later_failing_invocation_rewrites_nothing(repo):
    """The issue's reproduction: `dvc repro`, then take the port and `dvc repro -f -s bench@baseline`."""
    first = _runs(repo)
    parents = [r for r in first.values() if r.data.tags.get("lab_role") == "pipeline"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    before = {rid: _state(r) for rid, r in first.items()}
    files = _snapshot(repo)
    assert all(files[f"results/baseline/{f}"] for f in MODE_FILES)
    port = _params(repo)["server"]["port"]
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last engine's connections may be in TIME_WAIT
        s.bind(("127.0.0.1", port))
        s.listen()
        proc = run_dvc(repo, "repro", "-f", "-s", "bench@baseline")
    assert proc.returncode != 0 and f"port {port}" in proc.stdout + proc.stderr
    after = _runs(repo)
    assert {rid: _state(after[rid]) for rid in before} == before  # no earlier run changed in any way
    new = [r for rid, r in after.items() if rid not in before]  # none: the preflight fails before any run
    assert all(r.info.status == "FAILED" and r.data.tags.get("mlflow.parentRunId") != parents[0].info.run_id
               for r in new), new
    assert _snapshot(repo) == files


def test_interrupted_measuring_stage_keeps_the_previous_results_byte_for_byte(repo):
    files = _snapshot(repo)
    p = _params(repo)
    saved = dict(p["bench"])
    p["bench"].update(num_prompts=400, repeat_prompts=True, max_new_tokens=64)  # long enough to interrupt mid-measurement
    _write_params(repo, p)
    dvc = str(Path(sys.executable).with_name("dvc"))
    env = {**dvc_env(), "SHELL": "/bin/sh"}
    proc = subprocess.Popen([dvc, "repro", "-s", "bench@baseline"], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        partial = wait_until_measuring(repo, proc).parent
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        p["bench"] = saved
        _write_params(repo, p)
    assert proc.returncode != 0
    assert _snapshot(repo) == files  # metrics.json, result.json, requests.jsonl, ..., the report: unchanged
    (attempt,) = sorted(partial.iterdir())
    assert json.loads((attempt / "metrics.json").read_text())["status"] == "failed"
    assert (attempt / "requests.jsonl").read_text().count("\n") >= 1  # what was measured is kept there
    assert f"its partial result is in {attempt.relative_to(repo)}" in out, out[-3000:]
    assert "previous results are untouched in results/baseline" in out
    status = run_dvc(repo, "status")
    assert "bench@baseline" not in status.stdout, status.stdout  # dvc.lock still describes the kept results
    shutil.rmtree(partial)


def test_compare_that_refuses_keeps_the_previous_report(repo):
    files = _snapshot(repo)
    p = _params(repo)
    saved = dict(p["modes"])
    p["modes"]["eagle3_prefill"] = {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
                                    "attention_mode": "prefill"}  # never measured: compare must refuse
    _write_params(repo, p)
    try:
        proc = run_dvc(repo, "repro", "-s", "compare")
    finally:
        p["modes"] = saved
        _write_params(repo, p)
    assert proc.returncode != 0 and "eagle3_prefill" in proc.stdout + proc.stderr
    assert _snapshot(repo) == files
    assert (repo / "reports" / "report.html").stat().st_size > 10_000 and list((repo / "reports" / "figures").glob("*.png"))


def test_edited_profile_file_shows_in_dvc_status_and_the_sentinel_hash(repo):
    """A cost profile under data/ (a bench dependency): after `dvc commit` accepts the
    current state, editing the file alone makes every bench stage out of date, and changes
    the sentinel's configuration hash."""
    from lab.analysis.sentinel import config_fingerprint
    from lab.pipeline.bench import launch_setup
    from lab.config import load_params
    from lab.emulator.profile import PROFILES_DIR

    prof = json.loads((PROFILES_DIR / "kimi_k25_tp8_pcie.json").read_text())
    target = repo / "data" / "my_profile.json"
    target.write_text(json.dumps(prof))
    p = _params(repo)
    old_profile = p["emulator"]["profile"]
    p["emulator"]["profile"] = "data/my_profile.json"
    _write_params(repo, p)

    def hash_now() -> str:
        params = load_params(repo / "params.yaml")
        cwd = os.getcwd()
        os.chdir(repo)  # repo_root() from the cwd, as in a stage
        try:
            setup = launch_setup(params, "baseline")
        finally:
            os.chdir(cwd)
        return config_fingerprint({"engine": "emulator", "engine_version": "x"}, params.bench.model_dump(),
                                  setup=setup)[0]

    try:
        assert run_dvc(repo, "commit", "-f").returncode == 0
        assert "changed" not in run_dvc(repo, "status").stdout
        h0 = hash_now()
        prof["decode"]["graph_ms_bs1"]["value"] = 12.9
        target.write_text(json.dumps(prof))
        status = run_dvc(repo, "status").stdout
        assert "bench@baseline" in status and "bench@eagle3_decode" in status and "modified:" in status, status
        assert hash_now() != h0
    finally:
        target.unlink()
        p["emulator"]["profile"] = old_profile
        _write_params(repo, p)
        run_dvc(repo, "commit", "-f")


@pytest.mark.parametrize("key, value", [("request_rates", [6]), ("burstiness", 0.5), ("rate_max_concurrency", 4)])
def test_open_loop_settings_are_bench_params_in_dvc_status(repo, key, value):
    p = _params(repo)
    old = p["bench"].get(key)
    p["bench"][key] = value
    _write_params(repo, p)
    try:
        status = run_dvc(repo, "status").stdout
    finally:
        p["bench"][key] = old
        _write_params(repo, p)
    import re

    # the whole `bench` section is each bench stage's param (dvc.yaml), so its open-loop keys are too
    assert "bench@baseline:" in status and "bench@eagle3_decode:" in status, status
    assert re.search(r"modified:\s+bench\b", status), status


def _stage(repo: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lab.pipeline.bench_stage", *args], cwd=repo, capture_output=True,
                          text=True, timeout=120, env={**dvc_env(), **(env or {})})
    return proc, time.monotonic() - t0


def test_profile_outside_the_dependencies_is_refused_with_the_fix(repo, tmp_path):
    files = _snapshot(repo)
    outside = tmp_path / "my.json"
    shutil.copy(Path(__file__).resolve().parents[2] / "lab" / "emulator" / "profiles" / "kimi_k25_tp8_pcie.json", outside)
    p = _params(repo)
    old = p["emulator"]["profile"]
    p["emulator"]["profile"] = str(outside)
    _write_params(repo, p)
    try:
        proc, elapsed = _stage(repo, "--mode", "baseline")
    finally:
        p["emulator"]["profile"] = old
        _write_params(repo, p)
    print(f"refused after {elapsed:.1f} s")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"emulator.profile = {outside}" in proc.stderr and "outside the bench stage's DVC dependencies" in proc.stderr
    assert "Fix: move it under data/" in proc.stderr and "Traceback" not in proc.stderr
    assert _snapshot(repo) == files and not (repo / "results" / "baseline" / "partial").exists()


def test_results_dir_that_is_a_file_names_the_fix_and_no_missing_path(tmp_path):
    repo = scratch_repo(tmp_path / "lab", _edit)
    (repo / "results").mkdir(exist_ok=True)
    (repo / "results" / "baseline").write_text("a file where the results directory should be")
    proc, _ = _stage(repo, "--mode", "baseline")
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr
    assert "results/baseline is a file, not a directory" in err and "Fix: move it away" in err, err
    assert "FileExistsError" not in err and "Traceback" not in err and "executed notebook" not in err


def test_mlflow_tracking_uri_in_the_environment_is_refused_not_ignored(tmp_path, capsys):
    repo = scratch_repo(tmp_path / "lab", _edit)
    other = f"sqlite:///{tmp_path / 'team.db'}"
    proc, elapsed = _stage(repo, "--mode", "baseline", env={"MLFLOW_TRACKING_URI": other})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"MLFLOW_TRACKING_URI={other} is set" in proc.stderr and "Fix: set mlflow.tracking_uri" in proc.stderr
    assert not (tmp_path / "team.db").exists() and not (repo / "mlflow.db").exists()
    from lab.cli import main as lab_main

    os.environ["MLFLOW_TRACKING_URI"] = other
    try:
        assert lab_main(["log", str(repo / "results"), "--params", str(repo / "params.yaml")]) == 2
        assert f"MLFLOW_TRACKING_URI={other} is set" in capsys.readouterr().err
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    # the same store given both ways is fine
    same = f"sqlite:///{repo / 'mlflow.db'}"
    from lab.config import load_params
    from lab.tracking.tracker import tracking_uri

    os.environ["MLFLOW_TRACKING_URI"] = same
    try:
        assert tracking_uri(load_params(repo / "params.yaml"), repo) == same
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
