"""DVC experiments on a tiny bench: `dvc exp run -S`, `dvc exp show`, the queue, and the
refusal of untracked stage dependencies (which would never reach a queued run's temp copy)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scratch import dvc_env, run_dvc as _dvc, scratch_repo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
GIT = ["git", "-c", "user.email=t@localhost", "-c", "user.name=t"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    def edit(params):
        params["modes"] = {k: v for k, v in params["modes"].items() if k in ("baseline", "eagle3_decode")}
        params["bench"].update({"num_prompts": 2, "max_new_tokens": 12, "concurrency": [1],
                                "warmup_requests": 0, "repeats": 2})

    repo = scratch_repo(tmp_path_factory.mktemp("exp"), edit, extra_files=(".gitignore",))
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "lab"], cwd=repo, check=True)
    return repo


def _dvc_at_120_columns(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """`dvc` as a terminal of 120 columns runs it (rich, which DVC draws its tables with, reads
    COLUMNS; without a terminal it assumes 80)."""
    dvc = Path(sys.executable).with_name("dvc")
    return subprocess.run([str(dvc), *args], cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**dvc_env(), "COLUMNS": "120"})


def test_exp_run_set_param_and_exp_show(repo):
    proc = _dvc(repo, "exp", "run", "-n", "short", "-S", "bench.max_new_tokens=10")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    shown = json.loads(_dvc(repo, "exp", "show", "--json").stdout)
    exps = [e for rev in shown for e in (rev.get("experiments") or [])]
    run = next(e for e in exps if e.get("name") == "short")["revs"][0]["data"]
    assert run["params"]["params.yaml"]["data"]["bench"]["max_new_tokens"] == 10
    # what DVC sees as metrics: one small headline per mode (reports/headline/<mode>.json), labelled
    head = run["metrics"]["reports/headline/eagle3_decode.json"]["data"]
    assert head["speedup"] > 0 and head["source"] == "emulator" and head["point"] == "c1"
    # one launch, no launch spread measured: the estimate without a verdict word (issue 32)
    assert head["headline"].startswith(f"{head['speedup']:.2f}x [") and "not judged" in head["headline"]
    assert "(reference)" in run["metrics"]["reports/headline/baseline.json"]["data"]["headline"]
    assert set(run["metrics"]) == {f"reports/headline/{m}.json" for m in ("baseline", "eagle3_decode")} \
        | {"results/physics/headline.json"}
    # README's commands print the headline within 120 columns with its source (engine, weights,
    # acceptance) beside it, no column collapsed into "…"
    readme = (ROOT / "README.md").read_text()
    cmd = next(shlex.split(ln.split("  #")[0]) for ln in readme.splitlines() if ln.startswith("dvc exp show "))
    shown_text = _dvc_at_120_columns(repo, *cmd[1:], "--no-pager")
    lines = shown_text.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 120, shown_text.stdout
    assert "short" in shown_text.stdout and head["headline"] in shown_text.stdout and "emulator" in shown_text.stdout
    assert ":headline" in lines[1] and ":source" in lines[1] and "…" not in shown_text.stdout, shown_text.stdout
    metrics = _dvc_at_120_columns(repo, "metrics", "show")
    assert max(len(ln) for ln in metrics.stdout.splitlines()) <= 120, metrics.stdout
    assert "reports/headline/eagle3_decode.json" in metrics.stdout and "emulator" in metrics.stdout
    plots = _dvc(repo, "plots", "show", "--json")
    assert plots.returncode == 0, plots.stderr[-2000:]
    assert "break_even.png" in plots.stdout
    data = json.loads(plots.stdout)["data"]
    for title in ("decode tok/s vs concurrency", "share of outputs identical to the baseline's, token for token "
                  "(lossless check)", "accept length by task category", "output tok/s vs tok/s per user (Pareto, every point)"):
        assert title in data, sorted(data)


def test_exp_run_refuses_untracked_dependency(repo):
    # a new module the bench stage would import: listed in its deps (as tests/unit/test_dvc_deps.py
    # requires), not yet added to git
    extra = repo / "lab" / "zz_untracked.py"
    extra.write_text("X = 1\n")
    dvc_yaml = repo / "dvc.yaml"
    committed = dvc_yaml.read_text()
    dvc_yaml.write_text(committed.replace("        - notebooks/bench.ipynb\n",
                                          "        - notebooks/bench.ipynb\n        - lab/zz_untracked.py\n", 1))
    try:
        proc = _dvc(repo, "exp", "run", "-S", "bench.max_new_tokens=11")
    finally:
        extra.unlink()
        dvc_yaml.write_text(committed)
    assert proc.returncode != 0
    assert "lab/zz_untracked.py" in proc.stdout + proc.stderr and "untracked by git" in proc.stdout + proc.stderr


def test_queued_experiment_runs_in_a_temp_copy(repo):
    proc = _dvc(repo, "exp", "run", "--queue", "-n", "queued", "-S", "bench.max_new_tokens=8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _dvc(repo, "queue", "start", "-j", "1").returncode == 0
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        status = _dvc(repo, "queue", "status").stdout
        if "Success" in status or "Failed" in status:
            break
        time.sleep(3)
    assert "Success" in status, status + _dvc(repo, "queue", "logs", "queued").stdout[-4000:]
    shown = json.loads(_dvc(repo, "exp", "show", "--json").stdout)
    exps = {e.get("name"): e for rev in shown for e in (rev.get("experiments") or [])}
    data = exps["queued"]["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["bench"]["max_new_tokens"] == 8
    assert data["metrics"]["reports/headline/eagle3_decode.json"]["data"]["speedup"] > 0
    # the answer names the report as the experiment's, not its temporary copy (gone by now)
    report = [ln for ln in _dvc(repo, "queue", "logs", "queued").stdout.splitlines() if "Report:" in ln]
    assert report and "reports/report.html of experiment queued (`dvc exp apply queued`" in report[-1], report
    assert ".dvc/tmp/exps" not in report[-1]
