"""MLflow grouping: one parent run per pipeline *invocation*, mode and comparison runs nested under it.

DVC runs each stage as its own process, so no process sees the whole pipeline run. The
parent is created on first use (by the first stage of a ``dvc repro`` that logs a run) and
found again by the later stages of the same invocation through a small file,
``.cache/mlflow_parent.json`` in the checkout the stage runs in (for a queued DVC
experiment: its temporary copy). The file maps a *pipeline-run key* to the parent's run id:

    key = sha256(invocation, git HEAD commit, DVC experiment name ($DVC_EXP_NAME,
          "workspace" outside an experiment), tracking URI, experiment name,
          the params sections of :data:`PIPELINE_KEY_SECTIONS`)[:16]

The *invocation* (:data:`INVOCATION_ENV`, set by :mod:`lab.pipeline.stage` and inherited by
the notebook kernel) is the ``dvc`` process that runs the stages: its pid and start time
(:func:`process_id`); a stage run by hand is its own invocation. So every stage of one
``dvc repro`` / ``dvc exp run`` lands under one parent, and a later ``dvc repro`` never
touches an earlier one's parent: a FINISHED parent stays as it was (a port-busy or crashed
re-run makes its own, FAILED, parent). A ``dvc repro`` after editing one mode re-runs only
that mode and ``compare``: the new parent holds those runs, and the comparison run tags the
ids of every mode run it compared (``mode_run.<mode>``), including those under an earlier
parent. The key reads only the sections every ``bench@<mode>`` stage declares in
``dvc.yaml`` (no mode's own section, no ``sweep``, no ``physics``), so a stage never depends
on params it does not declare; the stages that also create or finish the parent (``compare``,
``physics``) declare those sections too. The parent is named with its mode count when ``compare``
finishes it (:meth:`lab.tracking.tracker.Tracker.finish_parent`): only ``compare`` reads
every mode. The comparison marks the parent FINISHED and copies the headline metrics onto
it, so the MLflow compare view of several parents shows pipeline runs side by side, and of
the nested runs shows modes side by side (each mode run carries ``decode_tok_s``,
``accept_length``, ``verify_ms``... at its lowest concurrency).

A fleet sweep (:mod:`lab.fleet`) runs each stage as a Slurm job in its own checkout, so no
file is shared between stages: ``lab fleet submit`` creates the sweep's parent and each job
names it in ``$LAB_MLFLOW_PARENT_RUN_ID`` (:data:`PARENT_RUN_ENV`, :func:`fleet_parent`), which
then takes the place of the invocation's key and the file (:class:`lab.tracking.tracker.Tracker`).
Jobs of one sweep run at the same time, so a failed stage ends only its own job's runs (tag
``slurm_job_id``) and leaves the parent to the sweep (the fleet marks it FAILED, ``compare``
FINISHED).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from lab.atomic import write_json_atomic
from lab.config import LabParams, repo_root
from lab.tracking.runs import git_commit

__all__ = ["pipeline_key", "mode_run_name", "PARENT_FILE", "PIPELINE_KEY_SECTIONS", "INVOCATION_ENV",
           "invocation", "process_id", "invocation_alive", "known_parent", "remember_parent", "PARENT_RUN_ENV",
           "fleet_parent", "PIPELINE_KEY_ENV", "started_key"]

PARENT_FILE = Path(".cache") / "mlflow_parent.json"
#: Pipeline invocations the parent file remembers (the oldest are dropped).
PARENT_FILE_KEEP = 200

#: Set by a fleet job (:mod:`lab.fleet.job`): the sweep's parent run id (module docstring).
PARENT_RUN_ENV = "LAB_MLFLOW_PARENT_RUN_ID"


def fleet_parent() -> str | None:
    """The parent run a fleet job was given (:data:`PARENT_RUN_ENV`), or None."""
    return os.environ.get(PARENT_RUN_ENV) or None


#: params.yaml sections in the pipeline-run key: those every ``bench@<mode>`` stage declares
#: (with ``mlflow``, which enters through the tracking URI and experiment name).
PIPELINE_KEY_SECTIONS = ("engine", "model", "server", "emulator", "bench")

#: The pipeline invocation a stage belongs to (``<pid>-<start ms>`` of the ``dvc`` process).
INVOCATION_ENV = "LAB_INVOCATION"

#: The pipeline key a stage computed at its start (:mod:`lab.pipeline.stage` sets it for itself
#: and the kernel it starts): the stage finds its parent by it at its end, whatever params.yaml
#: says by then (issue 34: an edit during the stage made the end recompute another key, miss the
#: parent and leave it RUNNING).
PIPELINE_KEY_ENV = "LAB_PIPELINE_KEY"


def started_key() -> str | None:
    """The pipeline key this stage recorded at its start (:data:`PIPELINE_KEY_ENV`), or None."""
    return os.environ.get(PIPELINE_KEY_ENV) or None


def process_id(proc=None) -> str:
    """``"<pid>-<start time, epoch ms>"`` of ``proc`` (a :class:`psutil.Process`, default this
    process): unique on a machine, a reused pid has another start time."""
    import psutil

    p = proc or psutil.Process()
    return f"{p.pid}-{int(p.create_time() * 1000)}"


def invocation() -> str:
    """This process's pipeline invocation: ``$LAB_INVOCATION``, else this process itself."""
    return os.environ.get(INVOCATION_ENV) or process_id()


def invocation_alive(inv: str) -> bool:
    """True while the process named by ``inv`` (:func:`process_id`) still runs."""
    import psutil

    try:
        pid, start = (int(x) for x in inv.split("-", 1))
        return abs(int(psutil.Process(pid).create_time() * 1000) - start) <= 1
    except (ValueError, psutil.Error):
        return False


def pipeline_key(params: LabParams, root: Path | None = None, inv: str | None = None) -> str:
    """The pipeline-run key (module docstring): 16 hex digits. Reads the validated
    :data:`PIPELINE_KEY_SECTIONS` and ``mlflow``, never the rest of params.yaml.

    :param inv: the invocation (default :func:`invocation`).
    """
    root = root or repo_root()
    h = hashlib.sha256()
    for part in (inv or invocation(), git_commit(root), os.environ.get("DVC_EXP_NAME", "workspace"),
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


def _parents(root: Path) -> dict[str, str]:
    path = root / PARENT_FILE
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}
    return known if isinstance(known, dict) else {}


def known_parent(root: Path, key: str) -> str | None:
    """The parent run id recorded for pipeline key ``key`` in ``root``'s parent file, or None."""
    return _parents(root).get(key)


def remember_parent(root: Path, key: str, run_id: str) -> None:
    """Record ``key -> run_id`` in the parent file (atomically; the newest
    :data:`PARENT_FILE_KEEP` invocations are kept)."""
    known = {k: v for k, v in _parents(root).items() if k != key}
    known[key] = run_id
    path = root / PARENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    known = dict(list(known.items())[-PARENT_FILE_KEEP:])
    write_json_atomic(path, known, indent=1)
