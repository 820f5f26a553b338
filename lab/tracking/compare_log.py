"""MLflow logging of the compare stage: one comparison run nested under the pipeline's parent,
then the parent marked FINISHED with the headline numbers (:mod:`lab.tracking.grouping`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lab.config import LabParams
from lab.tracking.grouping import finish_parent, pipeline_parent
from lab.tracking.runs import TrackingError, open_run, run_tags

__all__ = ["log_comparison"]


def log_comparison(params: LabParams, modes: list[str], results: Mapping[str, Mapping[str, Any]],
                   metrics: Mapping[str, float], figures: Mapping[str, str | Path], rep_dir: Path, *,
                   run_metrics: Mapping[str, float] | None = None) -> str | None:
    """Log the comparison as one MLflow run under the pipeline's parent and finish the parent.

    The run is named ``compare | <engine> | <N> modes``, tagged with the modes and the id of
    every mode run it compared (``mode_run.<mode>``); it holds ``metrics`` (the flat numbers
    of :func:`lab.analysis.comparison.lean_numbers`), ``report.html``, the ``figures`` (under
    ``figures/``) and ``summary.csv`` from ``rep_dir``. The parent then gets the same metrics
    and a ``modes`` tag, and is marked FINISHED. ``run_metrics`` go to the comparison run only
    (the per-category numbers of :func:`lab.analysis.taskmix.taskmix_metrics`), with
    ``categories.csv`` when ``rep_dir`` has it.

    :returns: the comparison run's id (kept when only finishing the parent failed), or None
        when MLflow failed before the run was opened; a failure prints where the files are
        and is not raised.
    """
    run_id: str | None = None
    try:
        tags = run_tags(params, mode=None)
        tags["modes"] = ",".join(modes)
        parent = pipeline_parent(params)
        tags.update({f"mode_run.{m}": str(r.get("mlflow_run_id")) for m, r in results.items()})
        with open_run(params, run_name=f"compare | {params.engine} | {len(modes)} modes", tags=tags,
                      parent_run_id=parent) as run:
            run.log_metrics(dict(metrics))
            run.log_artifact(rep_dir / "report.html")
            for fig in figures.values():
                run.log_artifact(fig, "figures")
            run.log_artifact(rep_dir / "summary.csv")
            if run_metrics:
                run.log_metrics(dict(run_metrics))
            if (rep_dir / "categories.csv").is_file():
                run.log_artifact(rep_dir / "categories.csv")
            run_id = run.run_id
        finish_parent(params, parent, dict(metrics), {"modes": ",".join(modes)})
    except TrackingError as exc:
        print(f"[lab] MLflow logging of the comparison failed ({exc}); the summary and figures "
              f"are in {rep_dir}")
    return run_id
