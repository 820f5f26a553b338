"""MLflow grouping: one parent run per pipeline run, mode and comparison runs nested under it.

DVC runs each stage as its own process, so no process sees the whole pipeline run. The
parent is created on first use (by the first ``bench@<mode>`` or ``compare`` stage that
runs) and found again by the later stages through a small file,
``.cache/mlflow_parent.json`` in the checkout the stage runs in (for a queued DVC
experiment: its temporary copy). The file maps a *pipeline-run key* to the parent's run id:

    key = sha256(git HEAD commit, DVC experiment name ($DVC_EXP_NAME, "workspace" outside
          an experiment), tracking URI, experiment name,
          the params sections of :data:`PIPELINE_KEY_SECTIONS`)[:16]

So every stage of one ``dvc repro`` / ``dvc exp run`` (same commit, same params) lands under
the same parent; a new commit (``-dirty`` after any edit of a tracked file, params.yaml
included), a changed engine/model/server/emulator/bench section or a new experiment starts a
new parent. The key reads only the sections every ``bench@<mode>`` stage declares in
``dvc.yaml`` (no mode's own section, no ``sweep``, no ``physics``), so a stage never depends on
params it does not declare; the stages that also create or finish the parent (``compare``,
``physics``) declare those sections too. The parent's name gets its mode count when
``compare`` finishes it (:func:`finish_parent`): only ``compare`` reads every mode. A ``dvc repro`` after editing one mode re-runs only that mode and ``compare``: the
new parent then holds those runs, and the comparison run tags the ids of every mode run it
compared (``mode_run.<mode>``), including those recorded under an earlier parent.
The comparison marks the parent FINISHED and copies the headline metrics onto it, so the
MLflow compare view of several parents shows pipeline runs side by side, and of the nested
runs shows modes side by side (each mode run carries ``decode_tok_s``, ``accept_length``,
``verify_ms``... at its lowest concurrency).

A fleet sweep (:mod:`lab.fleet`) runs each stage as a Slurm job in its own checkout, so no
file is shared between stages: ``lab fleet submit`` creates the sweep's parent and each job
names it in ``$LAB_MLFLOW_PARENT_RUN_ID`` (:data:`PARENT_RUN_ENV`), which then takes the place
of the key and the file. Jobs of one sweep run at the same time, so a failed stage ends only
its own job's runs (tag ``slurm_job_id``) and leaves the parent to the sweep (the fleet marks
it FAILED, ``compare`` FINISHED).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from lab.atomic import write_json_atomic
from lab.config import LabParams, repo_root
from lab.tracking.runs import TrackingError, git_commit, open_run, run_tags

__all__ = ["pipeline_key", "pipeline_parent", "mode_run_name", "PARENT_FILE", "PIPELINE_KEY_SECTIONS"]

PARENT_FILE = Path(".cache") / "mlflow_parent.json"

#: Set by a fleet job (:mod:`lab.fleet.job`): the sweep's parent run id (module docstring).
PARENT_RUN_ENV = "LAB_MLFLOW_PARENT_RUN_ID"


def _fleet_parent() -> str | None:
    """The parent run a fleet job was given (:data:`PARENT_RUN_ENV`), or None."""
    return os.environ.get(PARENT_RUN_ENV) or None


#: params.yaml sections in the pipeline-run key: those every ``bench@<mode>`` stage declares
#: (with ``mlflow``, which enters through the tracking URI and experiment name).
PIPELINE_KEY_SECTIONS = ("engine", "model", "server", "emulator", "bench")


def pipeline_key(params: LabParams, root: Path | None = None) -> str:
    """The pipeline-run key (module docstring): 16 hex digits. Reads the validated
    :data:`PIPELINE_KEY_SECTIONS` and ``mlflow``, never the rest of params.yaml."""
    root = root or repo_root()
    h = hashlib.sha256()
    for part in (git_commit(root), os.environ.get("DVC_EXP_NAME", "workspace"),
                 params.mlflow.resolved_tracking_uri(root), params.mlflow.experiment):
        h.update(part.encode() + b"\0")
    sections = params.model_dump(mode="json", include=set(PIPELINE_KEY_SECTIONS))
    h.update(json.dumps(sections, sort_keys=True).encode())
    return h.hexdigest()[:16]


def mode_run_name(params: LabParams, mode: str) -> str:
    """``"eagle3_decode | emulator | EAGLE3 s2 k1 d3 decode"``: mode, engine, key params."""
    m = params.mode(mode)
    if not m.is_speculative:
        desc = "no speculation"
    else:
        desc = f"{m.algorithm} s{m.num_steps} k{m.eagle_topk} d{m.num_draft_tokens} {m.attention_mode or 'prefill'}"
        for label, v in (("prefill", m.prefill_attention_backend), ("decode", m.decode_attention_backend)):
            if v:
                desc += f" {label}={v}"
        if m.simulate_accept_length is not None:
            desc += f" acc={m.simulate_accept_length:g}"
    return f"{mode} | {params.engine} | {desc}"


def _client(params: LabParams):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=params.mlflow.resolved_tracking_uri())


def pipeline_parent(params: LabParams, root: Path | None = None) -> str:
    """The run id of this pipeline run's parent, created (RUNNING) on first use.

    :raises TrackingError: MLflow unreachable (same contract as :func:`lab.tracking.runs.open_run`).
    """
    if _fleet_parent():
        return _fleet_parent()
    root = root or repo_root()
    key = pipeline_key(params, root)
    path = root / PARENT_FILE
    known: dict[str, str] = {}
    if path.is_file():
        try:
            known = json.loads(path.read_text())
        except ValueError:
            known = {}
    run_id = known.get(key)
    if run_id:
        try:
            if _client(params).get_run(run_id).info.lifecycle_stage == "active":
                return run_id
        except Exception:  # deleted run or another database: make a new parent
            pass
    exp = os.environ.get("DVC_EXP_NAME")
    label = f"exp {exp}" if exp else f"git {git_commit(root)[:8]}"
    tags = {**run_tags(params, mode=None), "pipeline_key": key, "lab_role": "pipeline"}
    handle = open_run(params, run_name=f"pipeline | {params.engine} | {label}", tags=tags)
    path.parent.mkdir(parents=True, exist_ok=True)
    known[key] = handle.run_id
    write_json_atomic(path, known, indent=1)
    return handle.run_id


def finish_parent(params: LabParams, run_id: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
    """Copy the headline metrics and tags onto the parent, add the mode count to its name
    (``pipeline | emulator | 3 modes | git 1a2b3c4d``) and mark it FINISHED.

    :raises TrackingError: MLflow rejected a call.
    """
    from lab.tracking.runs import RunHandle

    handle = RunHandle(_client(params), run_id, params.mlflow.resolved_tracking_uri())
    handle.log_metrics(metrics)
    handle.set_tags(tags)
    # Named with its mode count here, not at creation: only compare declares every mode.
    run = _client(params).get_run(run_id)
    name = run.data.tags.get("mlflow.runName") or run.info.run_name or ""
    head, sep, label = name.rpartition(" | ")
    if sep and head == f"pipeline | {params.engine}":
        handle.set_tags({"mlflow.runName": f"{head} | {len(params.modes)} modes | {label}"})
    handle.finish("FINISHED")


def known_parent(params: LabParams, root: Path | None = None) -> str | None:
    """This pipeline run's parent id if a stage already created it (never creates one)."""
    if _fleet_parent():
        return _fleet_parent()
    root = root or repo_root()
    path = root / PARENT_FILE
    try:
        return json.loads(path.read_text()).get(pipeline_key(params, root)) if path.is_file() else None
    except ValueError:
        return None


def close_pipeline_runs(params: LabParams, ok: bool, root: Path | None = None) -> list[str]:
    """At the end of every stage: end this pipeline's parent run (``FINISHED`` when the stage
    succeeded, else ``FAILED``; end time now) and, after a failure, any of its child runs
    still RUNNING (a kernel killed before its ``finally``). Returns the ids changed.

    The parent is therefore never left RUNNING between stages (``dvc repro bench@baseline``
    alone, or a failed stage); the next stage of the same pipeline run reuses it and ends it
    again. Does nothing when no stage created the parent. DVC runs one pipeline's stages one
    at a time, so no RUNNING child belongs to a live stage.

    :raises TrackingError: MLflow rejected a call.
    """
    import time

    parent = known_parent(params, root)
    if not parent:
        return []
    fleet = _fleet_parent()
    if fleet and ok:
        return []  # the sweep's parent outlives this job (module docstring)
    try:
        client = _client(params)
        run = client.get_run(parent)
        own = f" and tags.slurm_job_id = '{os.environ.get('SLURM_JOB_ID', '')}'" if fleet else ""
        changed = [] if ok else [r.info.run_id for r in client.search_runs(
            [run.info.experiment_id], f"tags.mlflow.parentRunId = '{parent}' and attributes.status = 'RUNNING'{own}")]
        for run_id in changed:
            client.set_terminated(run_id, "FAILED")
        if fleet:
            return changed
        client.set_terminated(parent, "FINISHED" if ok else "FAILED", end_time=int(time.time() * 1000))
        return changed + ([parent] if run.info.status == "RUNNING" else [])
    except Exception as exc:  # MlflowException, sqlalchemy, requests...
        raise TrackingError(f"MLflow at {params.mlflow.resolved_tracking_uri()}: {exc}") from exc


__all__ += ["finish_parent", "TrackingError", "known_parent", "close_pipeline_runs", "PARENT_RUN_ENV"]
