"""MLflow logging of the physics stage: one run per GPU measurement, nested under the invocation's
parent run (:class:`lab.tracking.tracker.Tracker`), its run record in ``results/physics/mlflow_run.json``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from lab.config import LabParams
from lab.tracking.runs import RECORD_FILE, TrackingError, flatten_params, results_safe, run_tags
from lab.tracking.tracker import Tracker

__all__ = ["log_physics", "record_physics"]


def log_physics(tracker: Tracker, params: LabParams, metrics: Mapping[str, Any],
                out_dir: str | os.PathLike[str]) -> str | None:
    """Log the GPU stage's result as one MLflow run, nested under the invocation's parent run;
    returns its id (None if MLflow failed before it was opened).

    Per-T medians go in as step metrics (step = T tokens per forward): ``eager_ms_p50``,
    ``graph_ms_p50``, ``floor_ms``; the verify/decode ratios and the copy bandwidth as plain
    metrics. A "not run" status is logged as such, with no numbers. The run record goes to
    ``out_dir/mlflow_run.json`` (the stage attaches its executed notebook through it).

    :raises TrackingError: an MLflow call failed; the message says the results are safe in
        ``out_dir`` and names ``lab log`` (when the run was opened).
    """
    out = Path(out_dir)
    status = str(metrics.get("status", "unknown"))
    device = metrics.get("device") or {}
    tags = {**run_tags(params, mode=None), "engine": "pytorch-physics", "stage": "physics",
            "status": status, "gpu": str(device.get("name", "none"))}
    tags.pop("emulator_profile", None)
    tags.pop("sglang_version", None)
    run = None
    try:
        run = tracker.open_run(f"physics | tp={metrics.get('tp', params.physics.tp)} | "
                               f"{device.get('name', status)}", tags, base=out)
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
        run.finish("FINISHED" if status == "ok" or status.startswith("not run") else "FAILED", save_to=out / RECORD_FILE)
        return run.run_id
    except TrackingError as exc:
        raise (results_safe(exc, out, "the results") if run else exc) from exc


def record_physics(params: LabParams, metrics: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> str | None:
    """:func:`log_physics` with this stage's tracker (:meth:`lab.tracking.tracker.Tracker.from_params`).

    :raises TrackingError: as :func:`log_physics`.
    """
    return log_physics(Tracker.from_params(params), params, metrics, out_dir)
