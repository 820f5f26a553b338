"""A stage refuses a dependency that git does not track inside a DVC experiment (in a scratch
git repository; the break-even model and sweeps: tests/unit/test_sweep_theory.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lab.config import ParamsError

ROOT = Path(__file__).resolve().parents[2]


def test_stage_refuses_untracked_dependency_inside_an_experiment(tmp_path, monkeypatch):
    from lab.pipeline.stage import check_deps_tracked

    for name in ("lab", "notebooks", "data"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    # a new module the bench stage imports: listed in its deps (tests/unit/test_dvc_deps.py), not yet git-added
    dvc_yaml = tmp_path / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text().replace("        - notebooks/bench.ipynb\n",
                                                     "        - notebooks/bench.ipynb\n        - lab/new_helper.py\n", 1))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=tmp_path, check=True)
    (tmp_path / "lab" / "new_helper.py").write_text("X = 1\n")
    check_deps_tracked(tmp_path, "bench")  # plain dvc repro: not checked
    monkeypatch.setenv("DVC_EXP_NAME", "exp-1")
    with pytest.raises(ParamsError, match=r"lab/new_helper.py.*untracked by git.*git add"):
        check_deps_tracked(tmp_path, "bench")
    subprocess.run(["git", "add", "lab/new_helper.py"], cwd=tmp_path, check=True)
    check_deps_tracked(tmp_path, "bench")
    check_deps_tracked(tmp_path, "compare")
