"""The columns MLflow's runs table opens with under ``lab ui``.

The runs table shows no metric or param column until a user picks them. MLflow's "share view"
state (an experiment tag ``mlflow.sharedViewState.<key>`` holding the table's ``selectedColumns``,
opened by ``&viewStateShareKey=<key>`` on the experiment's ``/runs`` route,
:func:`lab.tracking.mlflow_view.runs_table_url`; the UI ignores it when the URL carries search
facets such as ``orderByKey``, so the order goes in the state too) opens it with the headline
metric, the key params and the provenance tags. Only ``lab ui`` imports this module (the stages
do not: it reads the metric catalog).
"""

from __future__ import annotations

from typing import Any

from lab.config import LabParams

__all__ = ["RUNS_VIEW_KEY", "KEY_PARAMS", "KEY_TAGS", "runs_table_columns", "runs_table_view", "install_runs_view"]


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
