"""Scratch copies of the lab for tests that run DVC stages (pipeline, experiments,
interruption, PostgreSQL-backed MLflow), and the helpers they share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from lab.engine.ports import free_port  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parents[1]


#: The small bench of the session's shared `dvc repro` (tests/e2e/conftest.py ``pipeline_run``).
# 3 repeats: the default profile's acceptance depends on the prompt's category
# (acceptance.per_category), so repeats that draw different prompts differ in accept length;
# with 2 the accept-length interval (t with 1 df) is too wide for the break-even verdict.
# The default params.yaml's open-loop points (request_rates, slo) stay as they are.
SMALL_BENCH = {"num_prompts": 4, "max_new_tokens": 40, "concurrency": [1, 4], "warmup_requests": 1,
               "repeats": 3}


def dvc_env() -> dict[str, str]:
    """Environment for DVC: dvc.yaml runs `python -m lab.pipeline.<stage>_stage`, so the lab's interpreter
    must come first on PATH."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_dvc(repo: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the lab's `dvc` in ``repo``; returns the completed process (output captured)."""
    dvc = Path(sys.executable).with_name("dvc")
    return subprocess.run([str(dvc), *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, env=dvc_env())


def scratch_repo(repo: Path, edit: Callable[[dict], None] | None = None,
                 extra_files: tuple[str, ...] = ()) -> Path:
    """Copy the lab (code, notebooks, data, DVC config) into ``repo`` and ``git init`` it.

    :param edit: changes the loaded params.yaml dict in place; the server port is always
        set to a free one first, and ``bench.context_tokens`` to ``[0]`` (one context length, as
        the tests were written for; params.yaml's default sweeps two: a test of that axis sets it).
    :param extra_files: more top-level files to copy (e.g. ``.gitignore``).
    """
    repo.mkdir(parents=True, exist_ok=True)
    for name in ("lab", "notebooks", "data"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore", *extra_files):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["server"]["port"] = free_port()
    params["bench"]["context_tokens"] = [0]
    if edit is not None:
        edit(params)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def repro_scratch(repo: Path, modes: tuple[str, ...], bench: dict) -> tuple[Path, str]:
    """A scratch repo (:func:`scratch_repo`) with only ``modes`` and ``bench`` merged over the
    ``bench`` section, after one ``dvc repro`` that must succeed; returns it and that stdout."""
    def edit(p):
        p["modes"] = {k: v for k, v in p["modes"].items() if k in modes}
        p["bench"].update(bench)

    scratch_repo(repo, edit)
    proc = run_dvc(repo, "repro")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return repo, proc.stdout


def orphan_server_record(records_dir: Path, pgid: int) -> int:
    """Make an engine group's on-disk record look like its owner (a notebook kernel) died
    without stopping it: point ``owner_pid`` at a pid that has exited. Returns that pid."""
    import json

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rec_path = records_dir / f"{pgid}.json"
    rec = json.loads(rec_path.read_text())
    rec["owner_pid"] = dead.pid
    rec_path.write_text(json.dumps(rec))
    return dead.pid


def wait_until_measuring(repo: Path, proc: subprocess.Popen, mode: str = "baseline", timeout: float = 240) -> Path:
    """Wait until the running stage of ``mode`` (``proc``: its ``dvc repro``) has recorded a
    measured request in its attempt directory (``results/<mode>/partial/<time>/requests.jsonl``);
    returns that directory. :raises AssertionError: the stage ended first or took too long."""
    import time

    deadline = time.monotonic() + timeout
    partial = repo / "results" / mode / "partial"
    while time.monotonic() < deadline and proc.poll() is None:
        for req in partial.glob("*/requests.jsonl"):
            if req.stat().st_size > 0:
                return req.parent
        time.sleep(0.1)
    out = proc.communicate()[0] if proc.poll() is not None else ""
    raise AssertionError(f"the stage never measured (exit {proc.poll()}): {(out or '')[-3000:]}")
