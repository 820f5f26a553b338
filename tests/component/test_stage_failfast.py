"""A stage that cannot start fails before papermill starts a kernel (issue 11, item 6), and
the physics stage records "not run" without a kernel when CUDA is absent (item 7).

Each case runs the stage's entry module (``python -m lab.pipeline.<stage>_stage``) in a scratch copy of the lab, as ``dvc repro`` does,
and checks what a user would see and what is left: the short preflight table instead of a
papermill traceback, the previous results of the mode byte for byte (``ground_truth.jsonl``
included), no MLflow run left RUNNING (the pipeline's parent included). The elapsed time is
printed (a figure, not a verdict: ``-s`` shows it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from scratch import dvc_env, scratch_repo

PREVIOUS = ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", "bench.ipynb",
            "ground_truth.jsonl")


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch) -> Path:
    # one pipeline invocation for the stage and the earlier stage that opened the parent
    # (under `dvc repro` it is the dvc process: lab.tracking.grouping)
    monkeypatch.setenv("LAB_INVOCATION", "stage-failfast-test")
    repo = scratch_repo(tmp_path / "lab", lambda p: p["mlflow"].update(tracking_uri="sqlite:///mlflow.db"))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], cwd=repo, check=True)
    prev = repo / "results" / "baseline"
    prev.mkdir(parents=True)
    for name in PREVIOUS:  # stand-ins for an earlier run's results
        (prev / name).write_text(f"previous {name}\n")
    return repo


# A test double for nvidia-ml-py on a machine without an NVIDIA driver: nvmlInit fails as the
# real one does (pynvml raises NVMLError_LibraryNotFound there). Put first on the stage's
# PYTHONPATH, it makes the no-GPU cases run the same on a CPU box and on a GPU node.
NO_GPU_PYNVML = """
class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


def nvmlInit():
    raise NVMLError_LibraryNotFound("NVML Shared Library Not Found (test double: no GPU)")
"""


def _stage(repo: Path, *args: str, no_gpu: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    env = dvc_env()
    if no_gpu:
        fake = repo.parent / "no_gpu"
        fake.mkdir(exist_ok=True)
        (fake / "pynvml.py").write_text(NO_GPU_PYNVML)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(fake), env.get("PYTHONPATH")) if p)
    t0 = time.monotonic()
    stage, *rest = args
    proc = subprocess.run([sys.executable, "-m", f"lab.pipeline.{stage}_stage", *rest], cwd=repo, capture_output=True, text=True,
                          timeout=300, env=env)
    return proc, time.monotonic() - t0


def _open_parent(repo: Path) -> str:
    """The pipeline's parent run as an earlier stage of the same `dvc repro` left it (RUNNING)."""
    code = ("from lab.config import load_params; from lab.tracking.tracker import Tracker; "
            "print(Tracker.from_params(load_params()).parent_run_id())")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True,
                         env=dvc_env(), timeout=120)
    return out.stdout.strip().splitlines()[-1]


def _runs(repo: Path, db: str = "mlflow.db"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / db}")
    exp = client.get_experiment_by_name("eagle-verify-lab")
    return client.search_runs([exp.experiment_id]) if exp else []


def _check_fast_failure(repo: Path, proc: subprocess.CompletedProcess, elapsed: float, parent: str) -> None:
    print(f"stage failed after {elapsed:.1f} s (issue 11 target: 10 s)")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "preflight failed before any engine started" in proc.stderr
    assert "NOT READY" in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "papermill" not in proc.stderr.lower()
    for name in PREVIOUS:  # nothing deleted, nothing rewritten
        assert (repo / "results" / "baseline" / name).read_text() == f"previous {name}\n", name
    runs = _runs(repo)
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    assert {r.info.run_id: r.info.status for r in runs}[parent] == "FAILED"
    assert len(runs) == 1  # the stage opened no run of its own


def test_taken_port_fails_fast_with_the_table_and_deletes_nothing(repo):
    parent = _open_parent(repo)
    port = yaml.safe_load((repo / "params.yaml").read_text())["server"]["port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        proc, elapsed = _stage(repo, "bench", "--mode", "baseline")
    _check_fast_failure(repo, proc, elapsed, parent)
    assert f"port 127.0.0.1:{port}" in proc.stderr or f"port {port}" in proc.stderr
    assert "stop that process or set server.port" in proc.stderr


def test_sglang_engine_without_gpu_or_sglang_fails_fast(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["engine"] = "sglang"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    parent = _open_parent(repo)
    proc, elapsed = _stage(repo, "bench", "--mode", "eagle3_decode", no_gpu=True)
    _check_fast_failure(repo, proc, elapsed, parent)
    assert "gpus" in proc.stderr and "FAIL" in proc.stderr and "test double: no GPU" in proc.stderr


def test_physics_without_cuda_records_not_run_without_a_kernel_and_honours_params(repo, tmp_path):
    from lab.physics.run import STATUS_NO_CUDA, STATUS_NO_TORCH

    # without NVML's GPUs (the test double), torch or no torch, the stage cannot measure
    status = STATUS_NO_TORCH if importlib.util.find_spec("torch") is None else STATUS_NO_CUDA
    other = tmp_path / "other.yaml"  # --params: MLflow goes to this file's store, not params.yaml's
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["mlflow"]["tracking_uri"] = f"sqlite:///{tmp_path / 'other.db'}"
    other.write_text(yaml.safe_dump(params, sort_keys=False))
    proc, elapsed = _stage(repo, "physics", "--params", str(other), no_gpu=True)
    print(f"physics stage recorded '{status}' in {elapsed:.1f} s (issue 11 target: 5 s)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((repo / "results" / "physics" / "metrics.json").read_text())
    assert metrics["status"] == status and metrics["rows"] == []
    nb = json.loads((repo / "results" / "physics" / "physics.ipynb").read_text())
    assert "Not executed" in "".join(nb["cells"][0]["source"])
    assert not any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")  # no kernel ran
    assert not (repo / "mlflow.db").exists()  # params.yaml's store untouched
    runs = _runs(tmp_path, "other.db")
    physics = [r for r in runs if r.data.tags.get("stage") == "physics"]
    assert len(physics) == 1 and physics[0].data.tags["status"] == status
    assert {r.info.status for r in runs} == {"FINISHED"}  # the parent too
