"""DVC stage entry point: run one notebook through papermill's Python API.

``dvc.yaml`` calls ``python -m lab.pipeline.stage bench --mode <name>``, ``python -m lab.pipeline.stage
compare`` and ``python -m lab.pipeline.stage physics``. The stage validates ``params.yaml`` first
(a bad key fails here, before any server starts), then executes the notebook with that
stage's slice of the params as papermill parameters. The Python API keeps their types:
papermill's CLI ``-p flag false`` would inject the truthy string ``"false"``.

The executed notebook is written to ``results/<stage>/<notebook>.ipynb``; committed
notebooks under ``notebooks/`` stay output-free.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lab.config import LabParams, ParamsError, load_params, repo_root

__all__ = ["stage_parameters", "run_stage", "main", "PreflightFailed", "physics_without_cuda"]


def stage_parameters(params: LabParams, stage: str, mode: str | None = None) -> tuple[str, dict[str, Any], str]:
    """(notebook name, papermill parameters, results dir) for a stage.

    :param stage: ``bench`` (needs ``mode``), ``compare`` or ``physics``.
    :raises ParamsError: unknown stage or mode.
    """
    if stage == "bench":
        if mode is None:
            raise ParamsError("stage bench needs --mode. Fix: python -m lab.pipeline.stage bench --mode baseline")
        slice_ = params.mode(mode).model_dump(mode="json")
        return "bench", {"mode_name": mode, "mode": slice_, "results_dir": f"results/{mode}"}, f"results/{mode}"
    if stage == "compare":
        return "compare", {"modes": list(params.modes), "results_dir": "results", "reports_dir": "reports"}, "reports"
    if stage == "physics":
        return "physics", {"physics": params.physics.model_dump(mode="json"), "results_dir": "results/physics"}, "results/physics"
    raise ParamsError(f"unknown stage {stage!r}. Fix: use bench, compare or physics")


class PreflightFailed(RuntimeError):
    """A check before the notebook failed; the message is the table or error to show."""


def _preflight(params: LabParams, stage: str, mode: str | None, root: Path, out_dir: Path) -> None:
    """Seconds-long checks before papermill starts a kernel (issue 11: a stage that cannot
    start fails fast, shows the short table, deletes nothing and leaves no MLflow run).

    - ``bench``: :func:`lab.engine.preflight.run_preflight` without the SGLang argv parse (the
      notebook's own preflight does it): port, disk, dataset, emulator profile; with
      ``engine: sglang`` also GPUs, SGLang importable and the weights.
    - ``compare``: every mode's ``result.json`` exists and says ``ok``.

    :raises PreflightFailed: with the table or the error.
    """
    if stage == "bench":
        from lab.engine.preflight import format_table, run_preflight
        from lab.engine.server import build_server_command, stop_stale_servers

        stop_stale_servers(log=lambda m: print(m, file=sys.stderr, flush=True))  # ours would hold the port
        python = build_server_command(params, mode).argv[0]
        report = run_preflight(params, [mode], python=python, results_dir=out_dir, check_argv=False)
        if not report.ok:
            raise PreflightFailed(f"stage bench {mode}: preflight failed before any engine started; "
                                  f"nothing was deleted ({out_dir} keeps its previous results)\n"
                                  + format_table(report))
    elif stage == "compare":
        from lab.analysis.compare import CompareError, load_results

        try:
            load_results(root / "results", list(params.modes))
        except CompareError as exc:
            raise PreflightFailed(f"stage compare: {exc}") from None


def physics_without_cuda() -> str | None:
    """Why the physics stage cannot measure here, found without importing torch: the
    ``not run`` status of :mod:`lab.physics.run`, or None when torch and an NVIDIA GPU are
    both present (then the notebook runs and decides)."""
    import importlib.util

    from lab.physics.run import STATUS_NO_CUDA, STATUS_NO_TORCH

    if importlib.util.find_spec("torch") is None:
        return STATUS_NO_TORCH
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no CUDA device for torch either
        return STATUS_NO_CUDA
    return None if n else STATUS_NO_CUDA


def _physics_not_run(params: LabParams, out_dir: Path, root: Path) -> Path:
    """The physics stage without a kernel: :func:`lab.physics.run_physics` records the
    ``not run`` status (it probes torch itself), the output notebook is the committed one
    with a first cell saying it was not executed and why, and the run is logged to MLflow."""
    import json

    from lab.physics.run import run_physics
    from lab.tracking.physics_log import record_physics

    metrics = run_physics(params.physics.model_dump(mode="json"), out_dir)
    nb = json.loads((root / "notebooks" / "physics.ipynb").read_text())
    nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "id": "lab-not-executed",
                           "source": [f"**Not executed: {metrics['status']}.** `lab.pipeline.stage` found no CUDA device "
                                      "(or no PyTorch) before starting a kernel, recorded the status in "
                                      "`metrics.json` and drew nothing."]})
    output = out_dir / "physics.ipynb"
    from lab.atomic import write_text_atomic

    write_text_atomic(output, json.dumps(nb, indent=1) + "\n")
    record_physics(params, metrics, out_dir)
    _log_executed_notebook(params, output)
    return output


def run_stage(stage: str, mode: str | None = None, params_file: str | None = None) -> Path:
    """Validate params, run the stage's fast checks, then execute its notebook; returns the
    executed copy's path.

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
    _check_sweep_current(Path(params_file) if params_file else root / "params.yaml")
    check_deps_tracked(root, stage)
    name, parameters, results_dir = stage_parameters(params, stage, mode)
    out_dir = root / results_dir
    _preflight(params, stage, mode, root, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{name}.ipynb"
    if params_file:
        parameters["params_file"] = str(Path(params_file).resolve())
    if stage == "physics" and physics_without_cuda():
        return _physics_not_run(params, out_dir, root)
    import papermill as pm

    from lab.pipeline.interrupt import forward_signals
    from lab.engine.server import stop_stale_servers

    received: list[int] = []
    try:
        with forward_signals() as received:
            pm.execute_notebook(
                str(root / "notebooks" / f"{name}.ipynb"),
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
        # A kernel killed hard ran no `finally`: stop the engine group it left (its owner,
        # the kernel, is dead), saying so.
        stop_stale_servers(log=lambda m: print(m, file=sys.stderr, flush=True))
        _log_executed_notebook(params, output)
    if received:
        raise KeyboardInterrupt(f"stage interrupted by signal {received[0]}")
    return output


def _log_executed_notebook(params: LabParams, notebook: Path) -> None:
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


def _check_sweep_current(path: Path) -> None:
    import yaml

    from lab.pipeline.sweep import check_current

    check_current(yaml.safe_load(path.read_text()) or {})


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


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m lab.pipeline.stage {bench,compare,physics} [--mode NAME] [--params FILE]``."""
    ap = argparse.ArgumentParser(prog="python -m lab.pipeline.stage", description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["bench", "compare", "physics"])
    ap.add_argument("--mode", help="mode name from params.yaml (stage bench)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    from lab.pipeline.interrupt import die_with_launcher

    die_with_launcher()  # dvc killed -> SIGTERM here -> forwarded to the kernel
    where = f"{args.stage}{' ' + args.mode if args.mode else ''}"
    try:
        out = run_stage(args.stage, args.mode, args.params)
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        _close_pipeline_runs(args.params, ok=False)
        return 2
    except PreflightFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        _close_pipeline_runs(args.params, ok=False)
        return 2
    except KeyboardInterrupt as exc:
        print(f"error: stage {args.stage} interrupted ({exc}); no engine left running", file=sys.stderr)
        _close_pipeline_runs(args.params, ok=False)
        return 130
    except Exception as exc:  # papermill's error already printed the failing cell
        _close_pipeline_runs(args.params, ok=False)
        name = type(exc).__name__
        print(f"error: stage {where} failed ({name}: {exc}); "
              f"see the executed notebook under results/ and the server log", file=sys.stderr)
        return 1
    _close_pipeline_runs(args.params, ok=True)
    print(f"[lab] executed notebook: {out}")
    if args.stage == "compare":  # the last stage: `dvc repro` ends with the answer
        from lab.report.answer import load_answer

        print("\n" + load_answer(out.parent), flush=True)
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
