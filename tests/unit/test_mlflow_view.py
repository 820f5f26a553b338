"""How lab runs read in MLflow: artifacts beside a SQLite store (never in the project's
mlruns/), intervals and warnings on mode runs, the runs-table URL. The UI in Chromium is
tests/e2e/test_mlflow_view_e2e.py, its stop on a signal tests/component/test_lab_ui.py.
"""

from __future__ import annotations

import math

from lab.tracking.mlflow_view import interval_metrics, runs_table_url, warning_tags



def test_interval_metrics_and_warning_tags():
    levels = {"c1": {"concurrency": 1, "decode_tok_s": {"mean": 82.0, "ci95_lo": 81.0, "ci95_hi": 83.0},
                     "crosscheck_flags": ["repeat 0: icl vs cycle 9 %"]},
              "c8": {"concurrency": 8, "decode_tok_s": {"mean": 77.0, "ci95_lo": math.nan, "ci95_hi": math.nan}}}
    m = interval_metrics(levels)
    assert m == {"c1.decode_tok_s_ci95_lo": 81.0, "c1.decode_tok_s_ci95_hi": 83.0,
                 "decode_tok_s_ci95_lo": 81.0, "decode_tok_s_ci95_hi": 83.0}
    tags = warning_tags({"warnings": ["c=8: one wave"], "levels": levels})
    assert tags["warnings"] == "c=8: one wave" and tags["warnings_count"] == "2"
    assert tags["crosscheck_flags"] == "c1: repeat 0: icl vs cycle 9 %"
    assert "- c=8: one wave" in tags["mlflow.note.content"] and "icl vs cycle" in tags["mlflow.note.content"]
    clean = warning_tags({"warnings": [], "levels": {}})
    assert clean["warnings"] == "none" and clean["warnings_count"] == "0"


def test_runs_table_url():
    assert runs_table_url("http://127.0.0.1:5000/", "3") == "http://127.0.0.1:5000/#/experiments/3?workflowType=machine_learning"
    assert runs_table_url("http://127.0.0.1:5000", "3", "k") == \
        "http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=k"


def test_runs_table_view_shows_the_headline_metric_key_params_and_provenance():
    """`lab ui`'s shared view (lab.tracking.runs_view.install_runs_view): the catalog's headline
    metric and its interval first, the answer's other metrics, each speculative mode's headline
    speedup (the compare run's metric), the mode's key params and the provenance tags, in MLflow's
    canonical column keys; written as the experiment tag the UI reads for ?viewStateShareKey=."""
    import json

    from lab.config import load_params
    from lab.tracking.runs_view import RUNS_VIEW_KEY, install_runs_view, runs_table_columns

    params = load_params()
    cols = runs_table_columns(params)
    assert cols[:3] == ["metrics.`decode_tok_s`", "metrics.`decode_tok_s_ci95_lo`", "metrics.`decode_tok_s_ci95_hi`"]
    assert "metrics.`accept_length`" in cols and "metrics.`verify_ms`" in cols
    assert "metrics.`eagle3_decode.c1.speedup_decode_tok_s`" in cols
    assert "metrics.`baseline.c1.speedup_decode_tok_s`" not in cols
    assert {"params.`mode.attention_mode`", "tags.`engine`", "tags.`weights`", "tags.`acceptance`"} <= set(cols)

    class Client:
        tags = {}

        def set_experiment_tag(self, exp, key, value):
            self.tags[(exp, key)] = value

    client = Client()
    assert install_runs_view(client, "7", params) == RUNS_VIEW_KEY
    view = json.loads(client.tags[("7", f"mlflow.sharedViewState.{RUNS_VIEW_KEY}")])
    assert view["selectedColumns"] == cols and view["orderByKey"] == "attributes.start_time"
