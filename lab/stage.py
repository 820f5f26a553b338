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
    _check_sweep_current(Path(params_file) if params_file else root / "params.yaml")
    check_deps_tracked(root, stage)
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


def _check_sweep_current(path: Path) -> None:
    import yaml

    from lab.sweep import check_current

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
    """CLI: ``python -m lab.stage {bench,compare,physics} [--mode NAME] [--params FILE]``."""
    ap = argparse.ArgumentParser(prog="python -m lab.stage", description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["bench", "compare", "physics"])
    ap.add_argument("--mode", help="mode name from params.yaml (stage bench)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    from lab.interrupt import die_with_launcher

    die_with_launcher()  # dvc killed -> SIGTERM here -> forwarded to the kernel
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
