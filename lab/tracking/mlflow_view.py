"""How a lab run reads in the MLflow UI: intervals beside means, warnings on the run (a list
longer than MLflow's tag limit goes in whole as an artifact, :class:`lab.tracking.runs.RunHandle`),
and the URL that opens an experiment on its runs table.

- :func:`interval_metrics`: each headline mean's 95 % interval as two more metrics,
  ``<name>_ci95_lo`` / ``<name>_ci95_hi`` (same names as ``reports/summary.csv``), so the
  runs table and the compare view show them next to ``<name>``.
- :func:`warning_tags`: the measurement warnings (one-wave levels, accounting, looping
  outputs) and the cross-check flags as tags (``warnings``, ``crosscheck_flags``,
  ``warnings_count``) and as the run's description (``mlflow.note.content``, shown at
  the top of the run page).
- :func:`runs_table_url`: MLflow 3.17's UI picks the experiment page from a *workflow
  type* ("GenAI" by default, kept in the browser's local storage), not from the
  experiment: the GenAI default opens on a traces overview. The URL parameter
  ``workflowType=machine_learning`` opens the runs table (checked in the bundled UI of
  mlflow 3.17.2: ``server/js/build/static/js/main.*.js`` reads ``workflowType`` from the
  query string before local storage).
- the columns the runs table opens with (``lab ui``): :mod:`lab.tracking.runs_view`.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["interval_metrics", "warning_tags", "runs_table_url"]


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


def warning_tags(result: dict[str, Any]) -> dict[str, str]:
    """Tags carrying a mode run's warnings and cross-check flags (module docstring)."""
    warnings = list(result.get("warnings") or [])
    flags = [f"{key}: {f}" for key, agg in (result.get("levels") or {}).items()
             for f in agg.get("crosscheck_flags") or []]
    tags = {"warnings_count": str(len(warnings) + len(flags)),
            "warnings": "; ".join(warnings) if warnings else "none",
            "crosscheck_flags": "; ".join(flags) if flags else "none"}
    lines = ([f"**{len(warnings)} measurement warning(s)**"] + [f"- {w}" for w in warnings] if warnings
             else ["No measurement warning."])
    lines += ([f"\n**{len(flags)} cross-check flag(s)**"] + [f"- {f}" for f in flags] if flags
              else ["No cross-check flag."])
    lines.append("\nEach headline metric `<name>` has its 95 % interval in `<name>_ci95_lo` / `<name>_ci95_hi`.")
    tags["mlflow.note.content"] = "\n".join(lines)
    return tags


def runs_table_url(base_url: str, experiment_id: str, view_key: str | None = None) -> str:
    """``<base>/#/experiments/<id>?workflowType=machine_learning``: the experiment's runs table;
    with ``view_key`` (:func:`lab.tracking.runs_view.install_runs_view`) ``<base>/#/experiments/<id>/runs?workflowType=
    machine_learning&viewStateShareKey=<key>``, which opens it with the lab's columns shown (the
    shared view is read on the ``/runs`` route only: without it the UI redirects and drops the key,
    seen in headless Chromium against mlflow 3.17.2)."""
    if view_key:
        return (f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
                f"&viewStateShareKey={view_key}")
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"
