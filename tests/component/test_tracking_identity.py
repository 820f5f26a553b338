"""One ``dvc repro`` keeps one identity: the pipeline's own outputs do not make the commit
``-dirty`` (a fresh clone rewrites its committed ``results/<mode>/metrics.json`` in the first
stage; the later stages must still find the same MLflow parent run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from lab.config import load_params
from lab.tracking.grouping import pipeline_key
from lab.tracking.runs import git_commit

ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_outputs_do_not_change_the_commit_or_the_pipeline_key(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "baseline").mkdir(parents=True)
    (repo / "reports").mkdir()
    (repo / "lab").mkdir()
    shutil.copy(ROOT / "params.yaml", repo / "params.yaml")
    (repo / "results" / "baseline" / "metrics.json").write_text("{}")
    (repo / "reports" / "summary.json").write_text("{}")
    (repo / "dvc.lock").write_text("schema: '2.0'\n")
    (repo / "lab" / "code.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    params = load_params(repo / "params.yaml")
    sha, key = git_commit(repo), pipeline_key(params, repo)
    assert not sha.endswith("-dirty")

    # what a stage writes: its metrics, the comparison, dvc.lock (staged by core.autostage)
    (repo / "results" / "baseline" / "metrics.json").write_text('{"decode_tok_s": 82.1}')
    (repo / "reports" / "summary.json").write_text('{"x": 1}')
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    _git(repo, "add", "dvc.lock")
    assert git_commit(repo) == sha and pipeline_key(params, repo) == key

    # a change of code is a change of identity
    (repo / "lab" / "code.py").write_text("x = 2\n")
    assert git_commit(repo) == sha + "-dirty" and pipeline_key(params, repo) != key
