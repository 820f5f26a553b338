"""How a lab run reads in the MLflow UI: intervals beside means, warnings on the run,
durations that are the stage's, and the URL that opens an experiment on its runs table.

- :func:`interval_metrics`: each headline mean's 95 % interval as two more metrics,
  ``<name>_ci95_lo`` / ``<name>_ci95_hi`` (same names as ``reports/summary.csv``), so the
  runs table and the compare view show them next to ``<name>``.
- :func:`warning_tags`: the measurement warnings (one-wave levels, accounting, looping
  outputs) and the cross-check flags as tags (``warnings``, ``crosscheck_flags``,
  ``warnings_count``) and as the run's description (``mlflow.note.content``, shown at
  the top of the run page).
- :func:`end_run_now`: re-terminate a run with its status at the current time; ``lab.pipeline.stage``
  calls it when the notebook is done, so a run's duration spans its whole stage (its start
  comes from :func:`lab.tracking.runs.stage_started_ms`).
- :func:`runs_table_url`: MLflow 3.17's UI picks the experiment page from a *workflow
  type* ("GenAI" by default, kept in the browser's local storage), not from the
  experiment: the GenAI default opens on a traces overview. The URL parameter
  ``workflowType=machine_learning`` opens the runs table (checked in the bundled UI of
  mlflow 3.17.2: ``server/js/build/static/js/main.*.js`` reads ``workflowType`` from the
  query string before local storage).
- :func:`install_runs_view`: the runs table shows no metric or param column until a user picks
  them; MLflow's "share view" state (an experiment tag ``mlflow.sharedViewState.<key>`` holding
  the table's ``selectedColumns``, opened by ``&viewStateShareKey=<key>`` in the URL; the UI
  ignores it when the URL carries search facets such as ``orderByKey``, so the order goes in
  the state too) opens it with the headline metric, the key params and the provenance tags.
"""

from __future__ import annotations

import math
from typing import Any

from lab.config import LabParams

__all__ = ["interval_metrics", "warning_tags", "end_run_now", "runs_table_url", "TAG_LIMIT", "RUNS_VIEW_KEY",
           "runs_table_columns", "runs_table_view", "install_runs_view"]

#: MLflow's tag value limit is 8000 characters (3.x); longer text is cut with a pointer.
TAG_LIMIT = 7500


def interval_metrics(levels: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``{"c1.decode_tok_s_ci95_lo": ..., "decode_tok_s_ci95_lo": ...}`` from
    ``result.json``'s ``levels`` (each ``{metric: {"mean", "ci95_lo", "ci95_hi"}}``).

    The unprefixed names belong to the first (lowest-concurrency) level, like the headline
    means of :func:`lab.analysis.aggregate.headline`. NaN bounds (one repeat) are left out.
    """
    out: dict[str, float] = {}
    for i, (key, agg) in enumerate(levels.items()):
        for m, v in agg.items():
            if not isinstance(v, dict) or "ci95_lo" not in v:
                continue
            for bound in ("ci95_lo", "ci95_hi"):
                x = v.get(bound)
                if x is None or (isinstance(x, float) and math.isnan(x)):
                    continue
                out[f"{key}.{m}_{bound}"] = float(x)
                if i == 0:
                    out[f"{m}_{bound}"] = float(x)
    return out


def _cut(text: str) -> str:
    return text if len(text) <= TAG_LIMIT else text[:TAG_LIMIT] + " ... (cut; full list in result.json)"


def warning_tags(result: dict[str, Any]) -> dict[str, str]:
    """Tags carrying a mode run's warnings and cross-check flags (module docstring)."""
    warnings = list(result.get("warnings") or [])
    flags = [f"{key}: {f}" for key, agg in (result.get("levels") or {}).items()
             for f in agg.get("crosscheck_flags") or []]
    tags = {"warnings_count": str(len(warnings) + len(flags)),
            "warnings": _cut("; ".join(warnings)) if warnings else "none",
            "crosscheck_flags": _cut("; ".join(flags)) if flags else "none"}
    lines = ([f"**{len(warnings)} measurement warning(s)**"] + [f"- {w}" for w in warnings] if warnings
             else ["No measurement warning."])
    lines += ([f"\n**{len(flags)} cross-check flag(s)**"] + [f"- {f}" for f in flags] if flags
              else ["No cross-check flag."])
    lines.append("\nEach headline metric `<name>` has its 95 % interval in `<name>_ci95_lo` / `<name>_ci95_hi`.")
    tags["mlflow.note.content"] = _cut("\n".join(lines))
    return tags


def end_run_now(params: LabParams, run_id: str) -> None:
    """Set a finished run's end time to now, keeping its status (a RUNNING run is left alone).

    :raises lab.tracking.runs.TrackingError: MLflow rejected a call.
    """
    import time

    from mlflow.tracking import MlflowClient

    from lab.tracking.runs import TrackingError

    uri = params.mlflow.resolved_tracking_uri()
    try:
        client = MlflowClient(tracking_uri=uri)
        status = client.get_run(run_id).info.status
        if status in ("FINISHED", "FAILED", "KILLED"):
            client.set_terminated(run_id, status, end_time=int(time.time() * 1000))
    except Exception as exc:
        raise TrackingError(f"MLflow at {uri}: {exc}") from exc


def runs_table_url(base_url: str, experiment_id: str, view_key: str | None = None) -> str:
    """``<base>/#/experiments/<id>?workflowType=machine_learning``: the experiment's runs table;
    with ``view_key`` (:func:`install_runs_view`) ``<base>/#/experiments/<id>/runs?workflowType=
    machine_learning&viewStateShareKey=<key>``, which opens it with the lab's columns shown (the
    shared view is read on the ``/runs`` route only: without it the UI redirects and drops the key,
    seen in headless Chromium against mlflow 3.17.2)."""
    if view_key:
        return (f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
                f"&viewStateShareKey={view_key}")
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


#: The share key of the lab's runs-table view (experiment tag ``mlflow.sharedViewState.<key>``).
RUNS_VIEW_KEY = "eagle-verify-lab-runs-table"

#: The mode runs' params and tags shown as columns: what a mode is (algorithm, steps, draft tokens,
#: verify attention mode) and what its numbers stand on (lab.engine.registry.provenance).
KEY_PARAMS = ("mode.algorithm", "mode.num_steps", "mode.num_draft_tokens", "mode.attention_mode")
KEY_TAGS = ("mode", "engine", "weights", "acceptance", "warnings_count")


def _column(kind: str, name: str) -> str:
    """MLflow UI's canonical column key: ``metrics.`decode_tok_s```, ``params.`mode.algorithm```
    (``makeCanonicalSortKey`` in the bundled UI: ``type + ".`" + name + "`"``)."""
    return f"{kind}.`{name}`"


def runs_table_columns(params: LabParams) -> list[str]:
    """The runs table's columns, in order: the catalog's headline metric with its interval and
    the other metrics the answer states (:mod:`lab.catalog`; a mode run logs them unprefixed, at
    its lowest concurrency), each speculative mode's headline speedup at the lowest concurrency
    (the compare run's ``<mode>.c<N>.speedup_<metric>``), then :data:`KEY_PARAMS` and
    :data:`KEY_TAGS`."""
    from lab import catalog

    head = catalog.headline_metric()
    metrics = [head.name, f"{head.name}_ci95_lo", f"{head.name}_ci95_hi",
               *(m.name for m in catalog.shown_in(catalog.ANSWER) if m.name != head.name)]
    low = f"c{min(params.bench.concurrency)}"
    key = catalog.speedup_key(head.name, catalog.VERDICT_SPEEDUP)
    metrics += [f"{mode}.{low}.{key}" for mode, m in params.modes.items()
                if mode != params.baseline_mode and m.is_speculative]
    return ([_column("metrics", m) for m in metrics] + [_column("params", p) for p in KEY_PARAMS]
            + [_column("tags", t) for t in KEY_TAGS])


def runs_table_view(params: LabParams) -> dict[str, Any]:
    """The shared view state (MLflow 3.17's UI: the experiment tag it reads for
    ``?viewStateShareKey=``; ``useSharedExperimentViewState`` in the bundled
    ``server/js/build/static/js/3878.*.chunk.js`` picks the UI-state keys such as
    ``selectedColumns`` and the search facets such as ``orderByKey`` from its JSON): the
    :func:`runs_table_columns` shown, newest run first."""
    return {"selectedColumns": runs_table_columns(params), "orderByKey": "attributes.start_time",
            "orderByAsc": False}


def install_runs_view(client, experiment_id: str, params: LabParams) -> str:
    """Write :func:`runs_table_view` as the experiment's tag ``mlflow.sharedViewState.<key>`` and
    return the key (:data:`RUNS_VIEW_KEY`) for :func:`runs_table_url`.

    :raises lab.tracking.runs.TrackingError: MLflow rejected the tag.
    """
    import json

    from lab.tracking.runs import TrackingError

    try:
        client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{RUNS_VIEW_KEY}",
                                  json.dumps(runs_table_view(params)))
    except Exception as exc:
        raise TrackingError(f"MLflow: could not set the runs-table view on experiment {experiment_id}: {exc}") from exc
    return RUNS_VIEW_KEY
