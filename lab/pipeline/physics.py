"""The physics stage end to end (what ``notebooks/physics.ipynb`` calls): validate the
``physics:`` parameters, measure (:func:`lab.physics.run_physics`), and record the MLflow run
(:func:`lab.tracking.physics_log.record_physics`). :mod:`lab.physics` itself stays free of
pydantic and MLflow so it runs on the device machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lab.config import load_params, repo_root

__all__ = ["run_physics_stage"]


def run_physics_stage(physics: Mapping[str, Any] | None = None, results_dir: str | Path = "results/physics",
                      params_file: str | Path | None = None) -> tuple[dict[str, Any], Path]:
    """Run the physics stage once and record it.

    :param physics: the ``physics:`` section papermill injects (None: the params file's own).
    :param results_dir: where ``metrics.json``, the figures and ``mlflow_run.json`` go; a
        relative path resolves against the repository root (:func:`lab.config.repo_root`).
    :param params_file: the params file (None: ``<repo root>/params.yaml``); its ``mlflow:``
        section says where the run is logged.
    :returns: ``(metrics, out_dir)``: the metrics of :func:`lab.physics.run_physics` (status
        ``ok``, ``not run: ...`` or ``failed: ...``) and the absolute results folder.
    :raises lab.config.ParamsError: an invalid ``physics`` key or value (names it and the fix).
    :raises Exception: whatever the measurement raised, after ``metrics.json`` recorded it.
    """
    from lab.physics.run import run_physics
    from lab.tracking.physics_log import record_physics

    root = repo_root()
    params = load_params(params_file, overrides={"physics": dict(physics)} if physics is not None else None)
    out_dir = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    metrics = run_physics(params.physics.model_dump(mode="json"), out_dir)
    run_id = record_physics(params, metrics, out_dir)
    if run_id:
        print("MLflow run:", run_id)
    return metrics, out_dir
