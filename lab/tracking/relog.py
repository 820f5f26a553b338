"""``lab log <dir>``: log a run again from its run record, after the tracking store failed.

Every run the lab logs is written down beside its results (:data:`lab.tracking.runs.RECORD_FILE`:
``results/<mode>/``, ``reports/``, ``results/physics/``), with every param, metric (value,
timestamp, step), tag, artifact (relative to that directory), its parent, status, start and
end. :func:`relog` replays it:

- the run exists in the store and was logged to the end (tag ``lab_logged`` and ended):
  nothing is changed (a finished run is never rewritten), except that a recorded artifact the
  store lacks is uploaded (the executed notebook, when the store failed just after the kernel
  ended the run);
- the run exists but was left RUNNING or ended half-logged (the store failed mid-stage; the
  stage then marked it FAILED): it is completed in place, so the ids that ``result.json``,
  the comparison's ``mode_run.<mode>`` tags and the parent hold stay valid; it ends with its
  recorded status and end time, tagged ``lab_relogged`` (when) and ``lab_relogged_from``;
- the store has no such run (another store, a recreated database): a new run with the same
  content, under the recorded parent when that parent exists there.

A parent left RUNNING by the failed stage is ended FAILED once its invocation (the ``dvc``
process) is gone: that invocation did fail (a fleet sweep's parent is left to ``lab fleet``). MLflow drops metric rows it already holds, and a
param it already holds with the same value, so completing a half-logged run adds nothing twice.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.redact import redact_url
from lab.tracking.grouping import invocation_alive
from lab.tracking.runs import LOGGED_TAG, RECORD_FILE, RunHandle, TrackingError, load_record
from lab.tracking.tracker import Tracker

__all__ = ["relog"]


def _replay(handle: RunHandle, rec: dict[str, Any], tags: dict[str, str], base: Path) -> None:
    handle.set_tags({**tags, "lab_relogged": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "lab_relogged_from": str(base)})
    handle.log_params(rec["params"])
    handle._log_metric_rows([list(row) for row in rec["metrics"]])
    for path, artifact_path in rec["artifacts"]:
        handle.log_artifact(path if os.path.isabs(path) else base / path, artifact_path)
    handle.finish(rec["status"], end_time=rec.get("end_time"))


def relog(tracker: Tracker, directory: str | os.PathLike[str], log=print) -> tuple[str, str]:
    """Log the run recorded in ``directory`` again (module docstring).

    :returns: ``(run_id, what)``, ``what`` one of ``"already logged"`` (possibly with the
        artifacts it added), ``"completed"``, ``"created"``.
    :raises FileNotFoundError: no run record in ``directory`` (the message names the fix).
    :raises TrackingError: the store is still unreachable or rejected a call.
    :raises ValueError: the record is not a run record (:func:`lab.tracking.runs.load_record`).
    """
    base = Path(directory)
    rec = load_record(base / RECORD_FILE)
    if rec.get("tracking_uri") and rec["tracking_uri"] != redact_url(tracker.uri):
        log(f"[lab] the run was recorded for {rec['tracking_uri']}; logging it to {redact_url(tracker.uri)}")
    run_id = rec["run_id"]
    info = tracker.run_info(run_id)
    tags = dict(rec["tags"])
    if info is not None:
        status, held = info
        if held.get(LOGGED_TAG) == "complete" and status != "RUNNING":
            return run_id, _missing_artifacts(tracker, rec, base)
        what = "completed"
    else:
        parent = rec.get("parent_run_id")
        if parent and tracker.run_info(parent) is None:
            tags.pop("mlflow.parentRunId", None)
            log(f"[lab] its parent run {parent} is not in this store either: the run is logged without a parent")
        try:
            run = tracker.client.create_run(tracker.experiment_id(), tags=tags, run_name=rec.get("run_name") or None,
                                            start_time=rec.get("start_time") or int(time.time() * 1000))
        except Exception as exc:
            raise TrackingError(f"MLflow create run failed at {tracker.uri}: {exc}") from exc
        run_id, what = run.info.run_id, "created"
    handle = RunHandle(tracker.client, run_id, tracker.uri, base=base)
    _replay(handle, rec, tags, base)
    _end_orphaned_parent(tracker, rec.get("parent_run_id"), log)
    return run_id, what


def _missing_artifacts(tracker: Tracker, rec: dict[str, Any], base: Path) -> str:
    """For a run logged to the end: upload the recorded artifacts the store lacks (the executed
    notebook, attached by the stage after the kernel had ended the run, when the store failed
    just then); nothing else of the run is touched."""
    try:
        held = {a.path for d in {art for _, art in rec["artifacts"]}
                for a in tracker.client.list_artifacts(rec["run_id"], d)}
    except Exception as exc:
        raise TrackingError(f"MLflow list artifacts failed at {tracker.uri}: {exc}") from exc
    added = []
    for path, artifact_path in rec["artifacts"]:
        name = "/".join(x for x in (artifact_path, Path(path).name) if x)
        local = Path(path) if os.path.isabs(path) else base / path
        if name not in held and local.is_file():
            tracker.attach(rec["run_id"], local, artifact_path)  # TrackingError naming the store
            added.append(name)
    return f"already logged; added its missing artifacts {', '.join(added)}" if added else "already logged"


def _end_orphaned_parent(tracker: Tracker, parent: str | None, log) -> None:
    """End a parent left RUNNING by a failed stage as FAILED, once its invocation is gone."""
    info = tracker.run_info(parent) if parent else None
    if info is None or info[0] != "RUNNING" or invocation_alive(info[1].get("lab_invocation", "")):
        return
    if info[1].get("fleet_sweep"):  # a fleet sweep's parent: lab fleet status/submit end or re-open it
        return
    try:
        tracker.client.set_terminated(parent, "FAILED")
    except Exception as exc:
        raise TrackingError(f"MLflow end run failed at {tracker.uri}: {exc}") from exc
    log(f"[lab] parent run {parent} was left RUNNING by the failed invocation: ended FAILED")

