"""DVC stage entry point: run one notebook through papermill's Python API.

``dvc.yaml`` calls ``python -m lab.stage bench --mode <name>``, ``python -m lab.stage
compare`` and ``python -m lab.stage physics``. The stage validates ``params.yaml`` first
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

__all__ = ["stage_parameters", "run_stage", "main"]


def stage_parameters(params: LabParams, stage: str, mode: str | None = None) -> tuple[str, dict[str, Any], str]:
    """(notebook name, papermill parameters, results dir) for a stage.

    :param stage: ``bench`` (needs ``mode``), ``compare`` or ``physics``.
    :raises ParamsError: unknown stage or mode.
    """
    if stage == "bench":
        if mode is None:
            raise ParamsError("stage bench needs --mode. Fix: python -m lab.stage bench --mode baseline")
        slice_ = params.mode(mode).model_dump(mode="json")
        return "bench", {"mode_name": mode, "mode": slice_, "results_dir": f"results/{mode}"}, f"results/{mode}"
    if stage == "compare":
        return "compare", {"modes": list(params.modes), "results_dir": "results", "reports_dir": "reports"}, "reports"
    if stage == "physics":
        return "physics", {"physics": params.physics.model_dump(mode="json"), "results_dir": "results/physics"}, "results/physics"
    raise ParamsError(f"unknown stage {stage!r}. Fix: use bench, compare or physics")


def run_stage(stage: str, mode: str | None = None, params_file: str | None = None) -> Path:
    """Validate params, then execute the stage's notebook; returns the executed copy's path.

    :raises ParamsError: invalid params (before anything starts).
    :raises papermill.PapermillExecutionError: a notebook cell failed (the executed copy,
        with the traceback, is still written).
    """
    import papermill as pm

    root = repo_root()
    params = load_params(params_file or root / "params.yaml")
    name, parameters, results_dir = stage_parameters(params, stage, mode)
    out_dir = root / results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{name}.ipynb"
    if params_file:
        parameters["params_file"] = str(Path(params_file).resolve())
    from lab.interrupt import forward_signals
    from lab.server import stop_stale_servers

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

    from lab.tracking import TrackingError, attach_artifact

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
                except TrackingError as exc:
                    print(f"[lab] could not attach {notebook} to MLflow run {run_id}: {exc}", file=sys.stderr)
            return


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m lab.stage {bench,compare,physics} [--mode NAME] [--params FILE]``."""
    ap = argparse.ArgumentParser(prog="python -m lab.stage", description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["bench", "compare", "physics"])
    ap.add_argument("--mode", help="mode name from params.yaml (stage bench)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    from lab.interrupt import die_with_parent

    die_with_parent()  # dvc killed -> SIGTERM here -> forwarded to the kernel
    try:
        out = run_stage(args.stage, args.mode, args.params)
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"error: stage {args.stage} interrupted ({exc}); no engine left running", file=sys.stderr)
        return 130
    except Exception as exc:  # papermill's error already printed the failing cell
        name = type(exc).__name__
        print(f"error: stage {args.stage}{' ' + args.mode if args.mode else ''} failed ({name}: {exc}); "
              f"see the executed notebook under results/ and the server log", file=sys.stderr)
        return 1
    print(f"[lab] executed notebook: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
