"""`.venv/bin/dvc repro` without activating the environment: dvc.yaml's `python` is then the system's,
which lacks the lab's packages (issue 34, item 5: a raw `ModuleNotFoundError: psutil`). Importing `lab.pipeline`
re-runs a stage under the project's `.venv` (lab/interpreter.py, called by lab/pipeline/__init__.py), or stops at once
with the fix."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scratch import ROOT, scratch_repo

VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A Python with none of the lab's packages (a venv without pip): the "system python" a shell finds."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    out = subprocess.run([str(venv / "bin/python"), "-c", "import psutil"], capture_output=True, text=True)
    assert out.returncode != 0 and "psutil" in out.stderr  # really bare
    return venv / "bin"


def _env(bare_bin: Path) -> dict[str, str]:
    """PATH as an unactivated shell has it: the bare python first, no .venv/bin."""
    path = [str(bare_bin)] + [p for p in os.environ.get("PATH", "").split(os.pathsep)
                              if p and Path(p).resolve() != VENV_BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    return {**env, "PATH": os.pathsep.join(path), "DVC_NO_ANALYTICS": "1"}


def _stage_modules() -> dict[str, str]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name, st in stages.items():
        cmd = (st.get("do") or st)["cmd"]
        m = re.match(r"python -m ([\w.]+)", cmd)
        assert m, f"stage {name}: {cmd!r}"
        out[name] = m.group(1)
    return out


def _project(tmp: Path, with_venv: bool) -> Path:
    shutil.copytree(ROOT / "lab", tmp / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    if with_venv:
        (tmp / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return tmp


@pytest.mark.parametrize("stage", sorted(_stage_modules()))
def test_every_stage_command_runs_under_the_system_python(stage, bare_python, tmp_path):
    project = _project(tmp_path, with_venv=True)
    cmd = f"python -m {_stage_modules()[stage]} --help"  # dvc.yaml's command, as its shell resolves `python`
    proc = subprocess.run(["sh", "-c", cmd], cwd=project, env=_env(bare_python), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: python -m lab.pipeline."), proc.stdout


def test_without_a_project_environment_it_stops_with_the_fix(bare_python, tmp_path):
    project = _project(tmp_path, with_venv=False)
    proc = subprocess.run(["sh", "-c", "python -m lab.pipeline.compare_stage"], cwd=project,
                          env=_env(bare_python), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "is not the lab's Python" in line and "psutil" in line, line
    assert "Fix: `uv sync --frozen`" in line and "source .venv/bin/activate" in line, line


def test_a_library_import_is_never_replaced(bare_python, tmp_path):
    """`import lab.pipeline` from some other program under that python raises (naming the fix); it does not exec."""
    project = _project(tmp_path, with_venv=True)
    proc = subprocess.run(["python", "-c", "import os, lab.pipeline; print('still', os.getpid())"], cwd=project,
                          env=_env(bare_python), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "still" not in proc.stdout
    assert "LabPythonError" in proc.stderr and "Fix:" in proc.stderr, proc.stderr[-2000:]


def test_dvc_repro_without_activation(bare_python, tmp_path):
    """The user's command itself: `.venv/bin/dvc repro physics` from an unactivated shell (no CUDA here:
    the stage records "not run", through the whole stage runner and its notebook)."""
    repo = scratch_repo(tmp_path / "repo")
    (repo / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    proc = subprocess.run([str(VENV_BIN / "dvc"), "repro", "physics"], cwd=repo, env=_env(bare_python),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (repo / "results/physics/metrics.json").is_file()
    assert "ModuleNotFoundError" not in proc.stdout + proc.stderr


def test_dvc_repro_without_activation_uses_the_dvcs_own_environment(bare_python, tmp_path):
    """No `.venv` in the checkout (a GPU node's `.venv-node/bin/dvc repro`): the stage re-runs under the
    interpreter of the dvc that runs it (lab.interpreter.launcher_python, from /proc)."""
    repo = scratch_repo(tmp_path / "repo")
    assert not (repo / ".venv").exists()
    proc = subprocess.run([str(VENV_BIN / "dvc"), "repro", "physics"], cwd=repo, env=_env(bare_python),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (repo / "results/physics/metrics.json").is_file()
    assert "ModuleNotFoundError" not in proc.stdout + proc.stderr
