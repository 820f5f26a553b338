"""MLflow logging of the physics stage: one run per GPU measurement, nested under the pipeline's
parent run. Kept apart from :mod:`lab.tracking.runs` because it needs the parent run from
:mod:`lab.tracking.grouping`, which itself builds on ``runs`` (one direction, no import cycle)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from lab.atomic import write_text_atomic
from lab.config import LabParams
from lab.tracking.grouping import pipeline_parent
from lab.tracking.runs import TrackingError, flatten_params, open_run, run_tags

__all__ = ["log_physics", "record_physics"]


def log_physics(params: LabParams, metrics: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> str | None:
    """Log the GPU stage's result as one MLflow run, nested under the pipeline's parent run
    (:func:`lab.tracking.grouping.pipeline_parent`); returns its id (None if MLflow failed).

    Per-T medians go in as step metrics (step = T tokens per forward): ``eager_ms_p50``,
    ``graph_ms_p50``, ``floor_ms``; the verify/decode ratios and the copy bandwidth as plain
    metrics. A "not run" status is logged as such, with no numbers.
    """
    out = Path(out_dir)
    status = str(metrics.get("status", "unknown"))
    device = metrics.get("device") or {}
    tags = {**run_tags(params, mode=None), "engine": "pytorch-physics", "stage": "physics",
            "status": status, "gpu": str(device.get("name", "none"))}
    tags.pop("emulator_profile", None)
    tags.pop("sglang_version", None)
    try:
        run = open_run(params, run_name=f"physics | tp={metrics.get('tp', params.physics.tp)} | "
                       f"{device.get('name', status)}", tags=tags, parent_run_id=pipeline_parent(params))
        run.log_params(flatten_params({"physics": params.physics.model_dump()}))
        for row in metrics.get("rows") or []:
            run.log_metrics({k: row.get(k) for k in ("eager_ms_p50", "eager_ms_p90", "graph_ms_p50",
                                                     "graph_ms_p90", "floor_ms")}, step=int(row["T"]))
        flat = {f"ratio_{k}": v for k, v in (metrics.get("ratios") or {}).items()}
        flat["copy_bandwidth_gb_s"] = metrics.get("copy_bandwidth_gb_s")
        run.log_metrics(flat)
        run.log_artifact(out / "metrics.json")
        for name in metrics.get("figures") or []:
            run.log_artifact(out / name, "figures")
        prof = metrics.get("profile") or {}  # lab.physics.kernel_traces: traces (Perfetto), table, figure
        for path in sorted(Path(prof["dir"]).glob("*")) if prof.get("dir") and Path(prof["dir"]).is_dir() else []:
            run.log_artifact(path, "profile")
        run.log_metrics({f"profile.{n}.{k}": v for n, c in (prof.get("cases") or {}).items() for k, v in c.items()
                         if k.endswith("_p50") and isinstance(v, (int, float))})
        run.finish("FINISHED" if status == "ok" or status.startswith("not run") else "FAILED")
        return run.run_id
    except TrackingError as exc:
        print(f"[lab] MLflow logging of the physics stage failed ({exc}); results are in {out}")
        return None


def record_physics(params: LabParams, metrics: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> str | None:
    """:func:`log_physics`, then ``<out_dir>/mlflow_run.json`` (``{"mlflow_run_id": id}``,
    written atomically) so the stage can attach its executed notebook to the run. Returns
    the run id, or None (and no file) when MLflow failed."""
    run_id = log_physics(params, metrics, out_dir)
    if run_id:
        write_text_atomic(Path(out_dir) / "mlflow_run.json", json.dumps({"mlflow_run_id": run_id}))
    return run_id
