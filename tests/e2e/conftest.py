"""Fixtures the e2e tests share: one scratch `dvc repro` of the default pipeline, made once per
session and read by every test that only reads what a finished run left (test_pipeline.py,
test_load_pipeline.py). A test that changes the repository restores what it changed."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from scratch import SMALL_BENCH, run_dvc, scratch_repo

@dataclass(frozen=True)
class PipelineRun:
    """A scratch copy of the lab after one successful `dvc repro` of every stage.

    :ivar repo: the copy's root (git + DVC, its own ``mlflow.db``).
    :ivar stdout: what `dvc repro` printed.
    :ivar params: ``params.yaml`` as it was for that run (a copy: tests may not change it).
    """

    repo: Path
    stdout: str
    params: dict


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory) -> PipelineRun:
    """The default pipeline (three modes, concurrency 1 and 4, the default rate points) with
    :data:`SMALL_BENCH`, run once for the session."""
    repo = scratch_repo(tmp_path_factory.mktemp("lab"), lambda p: p["bench"].update(SMALL_BENCH))
    proc = run_dvc(repo, "repro")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    params = yaml.safe_load((repo / "params.yaml").read_text())
    return PipelineRun(repo, proc.stdout, copy.deepcopy(params))
