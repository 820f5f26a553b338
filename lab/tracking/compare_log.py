"""MLflow logging of the compare stage: one comparison run nested under the invocation's parent,
then the parent marked FINISHED with the headline numbers (:meth:`lab.tracking.tracker.Tracker.finish_parent`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lab.config import LabParams
from lab.tracking.params_log import compare_run_params
from lab.tracking.runs import RECORD_FILE, TrackingError, results_safe, run_tags
from lab.tracking.tracker import Tracker

__all__ = ["log_comparison"]


def log_comparison(tracker: Tracker, params: LabParams, modes: list[str], results: Mapping[str, Mapping[str, Any]],
                   metrics: Mapping[str, float], figures: Mapping[str, str | Path], rep_dir: Path, *,
                   run_metrics: Mapping[str, float] | None = None) -> tuple[str | None, TrackingError | None]:
    """Log the comparison as one MLflow run under the invocation's parent and finish the parent.

    The run is named ``compare | <engine> | <N> modes``, tagged with the modes and the id of
    every mode run it compared (``mode_run.<mode>``); it holds the ``sweep`` params
    (:func:`lab.tracking.params_log.compare_run_params`), ``metrics`` (the flat numbers of
    :func:`lab.analysis.comparison.lean_numbers`), ``report.html``, the ``figures`` (under
    ``figures/``) and ``summary.csv`` from ``rep_dir``. The parent then gets the same metrics
    and a ``modes`` tag, and is marked FINISHED. ``run_metrics`` go to the comparison run only
    (the per-category numbers of :func:`lab.analysis.taskmix.taskmix_metrics`), with
    ``categories.csv`` when ``rep_dir`` has it. The run record goes to ``rep_dir/mlflow_run.json``.

    :returns: ``(run id or None, the tracking error or None)``: the run id is kept when only
        a later call failed; the error says the files are safe and names ``lab log``.
    """
    run_id: str | None = None
    try:
        tags = run_tags(params, mode=None)
        tags["modes"] = ",".join(modes)
        tags.update({f"mode_run.{m}": str(r.get("mlflow_run_id")) for m, r in results.items()})
        run = tracker.open_run(f"compare | {params.engine} | {len(modes)} modes", tags, base=rep_dir)
        run_id = run.run_id
        run.log_params(compare_run_params(params))
        run.log_metrics(dict(metrics))
        run.log_artifact(rep_dir / "report.html")
        for fig in figures.values():
            run.log_artifact(fig, "figures")
        run.log_artifact(rep_dir / "summary.csv")
        if run_metrics:
            run.log_metrics(dict(run_metrics))
        if (rep_dir / "categories.csv").is_file():
            run.log_artifact(rep_dir / "categories.csv")
        run.finish("FINISHED", save_to=rep_dir / RECORD_FILE)
        tracker.finish_parent(dict(metrics), {"modes": ",".join(modes)}, len(params.modes))
    except TrackingError as exc:
        err = results_safe(exc, rep_dir, "the report, summary and figures") if run_id else exc
        print(f"[lab] {err}")
        return run_id, err
    return run_id, None
