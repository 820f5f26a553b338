"""DVC entry point of the ``physics`` stage: ``python -m lab.pipeline.physics_stage``.

Imports only what the GPU microbenchmark stage runs (:mod:`lab.physics`, its MLflow logging,
the runner in :mod:`lab.pipeline.stage`); the notebook ``notebooks/physics.ipynb`` imports
the rest. ``dvc.yaml`` lists exactly that code as the stage's deps, checked by
``tests/unit/test_dvc_deps.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.config import LabParams
from lab.pipeline.stage import Stage, stage_main

__all__ = ["physics_stage", "physics_without_cuda", "main"]


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


def _physics_not_run(params: LabParams, root: Path, out_dir: Path) -> Path | None:
    """The physics stage without a kernel: :func:`lab.physics.run_physics` records the
    ``not run`` status (it probes torch itself), the output notebook is the committed one
    with a first cell saying it was not executed and why, and the run is logged to MLflow.
    Returns that notebook's path, or None when torch and a GPU are present (the notebook runs)."""
    if not physics_without_cuda():
        return None  # torch and a GPU: the notebook runs and decides
    import json

    from lab.physics.run import run_physics
    from lab.tracking.physics_log import record_physics

    metrics = run_physics(params.physics.model_dump(mode="json"), out_dir)
    nb = json.loads((root / "notebooks" / "physics.ipynb").read_text())
    nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "id": "lab-not-executed",
                           "source": [f"**Not executed: {metrics['status']}.** `lab.pipeline.physics_stage` found no CUDA device "
                                      "(or no PyTorch) before starting a kernel, recorded the status in "
                                      "`metrics.json` and drew nothing."]})
    output = out_dir / "physics.ipynb"
    from lab.atomic import write_text_atomic

    write_text_atomic(output, json.dumps(nb, indent=1) + "\n")
    record_physics(params, metrics, out_dir)
    return output


def physics_stage(params: LabParams) -> Stage:
    """The ``physics`` stage: notebook ``physics`` with the ``physics`` params, outputs in
    ``results/physics``; without CUDA (or torch) no kernel starts (:func:`physics_without_cuda`)."""
    from lab.physics.stack_report import FIGURE_FILES

    return Stage(dvc_name="physics", notebook="physics", results_dir="results/physics",
                 parameters={"physics": params.physics.model_dump(mode="json")}, complete=_physics_complete,
                 owned=("metrics.json", "headline.json", "physics.ipynb", "mlflow_run.json", "profile", "profile.png", *FIGURE_FILES),
                 without_kernel=_physics_not_run)


def _physics_complete(work: Path) -> bool:
    """``metrics.json`` written with status ``ok`` or ``not run: ...`` (a failed measurement is partial)."""
    import json

    try:
        status = str(json.loads((work / "metrics.json").read_text()).get("status", ""))
    except (OSError, ValueError, AttributeError):
        return False
    return status == "ok" or status.startswith("not run")


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m lab.pipeline.physics_stage [--params FILE]``; exit code as
    :func:`lab.pipeline.stage.stage_main`."""
    ap = argparse.ArgumentParser(prog="python -m lab.pipeline.physics_stage", description="run the physics DVC stage (\"not run\" without CUDA, else the notebook)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    return stage_main("physics", physics_stage, args.params)


if __name__ == "__main__":
    sys.exit(main())
