"""DVC stage runner shared by the three stage entry points: validate params, run the stage's
fast checks, then execute its notebook through papermill's Python API.

``dvc.yaml`` calls one entry module per stage, each importing only its own stage's code so
that each stage's ``deps`` can list exactly the code it runs (``tests/unit/test_dvc_deps.py``):
``python -m lab.pipeline.bench_stage --mode <name>`` (:mod:`lab.pipeline.bench_stage`),
``python -m lab.pipeline.compare_stage`` (:mod:`lab.pipeline.compare_stage`) and
``python -m lab.pipeline.physics_stage`` (:mod:`lab.pipeline.physics_stage`). This module
holds what they share and imports no stage's own code: an entry module describes its stage
as a :class:`Stage` and hands it to :func:`stage_main`.

The stage validates ``params.yaml`` first (a bad key fails here, before any server starts),
then executes the notebook with that stage's slice of the params as papermill parameters.
The Python API keeps their types: papermill's CLI ``-p flag false`` would inject the truthy
string ``"false"``. The executed notebook is written to ``<results_dir>/<notebook>.ipynb``;
committed notebooks under ``notebooks/`` stay output-free.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import LabParams, ParamsError, load_params, repo_root

__all__ = ["Stage", "PreflightFailed", "run_stage", "stage_main", "stage_deps", "check_deps_tracked",
           "in_experiment", "log_executed_notebook"]


class PreflightFailed(RuntimeError):
    """A check before the notebook failed; the message is the table or error to show."""


@dataclass
class Stage:
    """One DVC stage as the runner sees it (built by its entry module from the validated params).

    :ivar dvc_name: the stage's name in ``dvc.yaml`` (``bench`` for every ``bench@<mode>``).
    :ivar notebook: ``notebooks/<notebook>.ipynb`` is executed.
    :ivar parameters: papermill parameters (``params_file`` is added when one was given).
    :ivar results_dir: where the executed notebook goes, relative to the repo root.
    :ivar preflight: ``(params, root, out_dir)``: seconds-long checks before any kernel;
        raises :class:`PreflightFailed`.
    :ivar without_kernel: ``(params, root, out_dir)``: the stage's outcome when no kernel can
        measure here (returns the written notebook's path), or None to run the notebook.
    :ivar cleanup: called after the notebook on every path (success, failure, interrupt).
    """

    dvc_name: str
    notebook: str
    parameters: dict[str, Any]
    results_dir: str
    preflight: Callable[[LabParams, Path, Path], None] | None = None
    without_kernel: Callable[[LabParams, Path, Path], Path | None] | None = None
    cleanup: Callable[[], None] | None = None


def run_stage(build: Callable[[LabParams], Stage], params_file: str | None = None) -> Path:
    """Validate params, build the stage, run its fast checks, then execute its notebook;
    returns the executed copy's path.

    :param build: the entry module's stage description from the validated params.
    :raises ParamsError: invalid params (before anything starts).
    :raises PreflightFailed: a check before the notebook failed (nothing started or deleted).
    :raises papermill.PapermillExecutionError: a notebook cell failed (the executed copy,
        with the traceback, is still written).
    """
    import os
    import time

    from lab.tracking.runs import STAGE_STARTED_ENV

    os.environ[STAGE_STARTED_ENV] = str(int(time.time() * 1000))  # the kernel inherits it
    root = repo_root()
    params = load_params(params_file or root / "params.yaml")
    stage = build(params)
    check_deps_tracked(root, stage.dvc_name)
    out_dir = root / stage.results_dir
    if stage.preflight is not None:
        stage.preflight(params, root, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{stage.notebook}.ipynb"
    parameters = dict(stage.parameters)
    if params_file:
        parameters["params_file"] = str(Path(params_file).resolve())
    if stage.without_kernel is not None:
        written = stage.without_kernel(params, root, out_dir)
        if written is not None:
            log_executed_notebook(params, written)
            return written
    import papermill as pm

    from lab.pipeline.interrupt import forward_signals

    received: list[int] = []
    try:
        with forward_signals() as received:
            pm.execute_notebook(
                str(root / "notebooks" / f"{stage.notebook}.ipynb"),
                str(output),
                parameters=parameters,
                cwd=str(root),
                kernel_name="python3",
                progress_bar=False,
                log_output=True,
            )
    except Exception:
        if received:  # the cell failed because we interrupted it
            raise KeyboardInterrupt(f"stage interrupted by signal {received[0]}") from None
        raise
    finally:
        if stage.cleanup is not None:
            stage.cleanup()
        log_executed_notebook(params, output)
    if received:
        raise KeyboardInterrupt(f"stage interrupted by signal {received[0]}")
    return output


def stage_main(where: str, build: Callable[[LabParams], Stage], params_file: str | None,
               on_success: Callable[[Path], None] | None = None) -> int:
    """Run a stage as a CLI: :func:`run_stage`, then end the pipeline's MLflow parent with the
    outcome. Exit codes: 0 ok, 2 bad params or preflight (nothing started), 130 interrupted,
    1 the notebook failed.

    :param where: the stage as named in messages (``bench baseline``).
    :param on_success: called with the executed notebook's path after success.
    """
    from lab.pipeline.interrupt import die_with_launcher

    die_with_launcher()  # dvc killed -> SIGTERM here -> forwarded to the kernel
    try:
        out = run_stage(build, params_file)
    except (ParamsError, PreflightFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        _close_pipeline_runs(params_file, ok=False)
        return 2
    except KeyboardInterrupt as exc:
        print(f"error: stage {where.split()[0]} interrupted ({exc}); no engine left running", file=sys.stderr)
        _close_pipeline_runs(params_file, ok=False)
        return 130
    except Exception as exc:  # papermill's error already printed the failing cell
        _close_pipeline_runs(params_file, ok=False)
        name = type(exc).__name__
        print(f"error: stage {where} failed ({name}: {exc}); "
              f"see the executed notebook under results/ and the server log", file=sys.stderr)
        return 1
    _close_pipeline_runs(params_file, ok=True)
    print(f"[lab] executed notebook: {out}")
    if on_success is not None:
        on_success(out)
    return 0


def log_executed_notebook(params: LabParams, notebook: Path) -> None:
    """Attach the executed notebook to the MLflow run its stage recorded (if any)."""
    import json

    from lab.tracking.runs import TrackingError, attach_artifact

    for candidate in ("result.json", "comparison.json", "mlflow_run.json"):
        rec = notebook.parent / candidate
        if rec.is_file() and notebook.is_file():
            try:
                run_id = json.loads(rec.read_text()).get("mlflow_run_id")
            except ValueError:
                return
            if run_id:
                try:
                    attach_artifact(params, run_id, notebook)
                    from lab.tracking.mlflow_view import end_run_now

                    end_run_now(params, run_id)  # the run's duration is the stage's
                except TrackingError as exc:
                    print(f"[lab] could not attach {notebook} to MLflow run {run_id}: {exc}", file=sys.stderr)
            return


def in_experiment(root: Path) -> bool:
    """True inside a DVC experiment: ``$DVC_EXP_NAME`` set or a temp copy under ``.dvc/tmp/exps``."""
    import os

    return bool(os.environ.get("DVC_EXP_NAME")) or ".dvc/tmp/exps" in root.resolve().as_posix()


def stage_deps(root: Path, stage: str) -> list[str]:
    """The paths ``dvc.yaml`` lists as deps of ``stage`` (``${...}`` resolved from params.yaml)."""
    import re

    import yaml

    dvc = yaml.safe_load((root / "dvc.yaml").read_text()) or {}
    params = yaml.safe_load((root / "params.yaml").read_text()) or {}
    spec = (dvc.get("stages") or {}).get(stage) or {}
    deps = (spec.get("do") or spec).get("deps") or []

    def resolve(m: re.Match) -> str:
        node: object = params
        for part in m.group(1).split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return str(node) if node is not None else m.group(0)

    paths = [re.sub(r"\$\{([\w.]+)\}", resolve, d) for d in deps if isinstance(d, str) and "${key}" not in d]
    # results/ and reports/ are other stages' outputs (DVC's cache), not git's.
    return [p for p in paths if p.split("/")[0] not in ("results", "reports")]


def check_deps_tracked(root: Path, stage: str) -> None:
    """Refuse to run inside a DVC experiment when a dependency of the stage is missing or untracked.

    ``dvc exp run --queue`` runs in a temporary copy made from git: files git does not
    track never reach it, and an experiment's commit would not contain them either. Outside
    experiments (plain ``dvc repro``) nothing is checked.

    :raises ParamsError: naming the files and the fix (``git add`` + ``git commit``).
    """
    import subprocess

    if not in_experiment(root):
        return
    deps = stage_deps(root, stage)
    missing = [d for d in deps if not (root / d).exists()]
    untracked: list[str] = []
    try:
        out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", *deps], cwd=root,
                             capture_output=True, text=True, timeout=30)
        untracked = [ln for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        pass
    if missing or untracked:
        raise ParamsError(
            f"stage {stage} runs in a DVC experiment, and its dependencies "
            f"{sorted(set(missing + untracked))} are {'missing from this copy' if missing else 'untracked by git'}: "
            "queued experiments run in a temporary copy made from git, so untracked files do not reach it "
            "(and the experiment's commit would not record them). Fix: git add them and git commit, "
            "then queue the experiment again")


def _close_pipeline_runs(params_file: str | None, ok: bool) -> None:
    """End the pipeline's parent run with this stage's outcome (and, after a failure, its
    children left RUNNING): :func:`lab.tracking.grouping.close_pipeline_runs`. Never raises."""
    try:
        from lab.tracking.grouping import close_pipeline_runs

        params = load_params(params_file or repo_root() / "params.yaml")
        changed = close_pipeline_runs(params, ok)
        if not ok and changed:
            print(f"[lab] MLflow runs marked FAILED (this stage failed): {', '.join(changed)}", file=sys.stderr)
    except ParamsError:
        pass  # the stage's own error said what is wrong; no stage could open a run with these params
    except Exception as exc:  # MLflow down: the stage's own outcome is what matters
        print(f"[lab] could not end the pipeline's MLflow run: {exc}", file=sys.stderr)
