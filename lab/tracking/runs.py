"""MLflow tracking: runs, tags, params and artifacts, each run also written down as a record.

Runs carry params (flattened ``params.yaml`` slices, values as strings), metrics (units in
the names), tags (mode, engine, git commit, SGLang version or ``emulator``, DVC experiment
name) and artifacts (executed notebook, server log, requests.jsonl, figures). Runs are opened
through the stage's :class:`lab.tracking.tracker.Tracker`, which holds the MLflow client and
the pipeline's parent run.

A :class:`RunHandle` records everything it logs (:data:`RECORD_FILE` beside the results,
:meth:`RunHandle.save`), so ``lab log <dir>`` (:mod:`lab.tracking.relog`) can log the same run
again, every param, metric (with its timestamp and step), tag, artifact and its parent, after
the tracking store failed mid-stage. After its first failed call a handle stops calling
MLflow and only records; :meth:`RunHandle.finish` then raises the first error, so the stage
fails, with the results safe on disk.

No value is cut without saying so (:func:`long_value_marker`): a param longer than MLflow's
limit (``MAX_PARAM_VAL_LENGTH``, 6,000 characters in MLflow 3.17) or a tag longer than
``MAX_TAG_VAL_LENGTH`` (8,000) is logged in full as an artifact under ``long_values/``, and
the param or tag holds its start, its length, its SHA-256 and that artifact's path.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.config import LabParams, repo_root
from lab.engine.registry import engine_for, provenance
from lab.redact import REDACTED, is_secret_name, redact_argv, redact_url

__all__ = ["TrackingError", "RunHandle", "flatten_params", "run_tags", "git_commit", "RECORD_FILE", "LOGGED_TAG",
           "long_value_marker", "load_record", "results_safe", "tracking_cause"]

#: The run record beside a run's results (``results/<mode>/``, ``reports/``, ``results/physics/``).
RECORD_FILE = "mlflow_run.json"
#: Tag set last, just before a run is ended: the run holds everything its record lists.
LOGGED_TAG = "lab_logged"
#: Characters of a long value kept in front of its marker.
LONG_PREVIEW = 300


class TrackingError(RuntimeError):
    """MLflow is unreachable or rejected a call; the message names the URI and the fix."""


def results_safe(cause: object, where: os.PathLike[str] | str, what: str = "the measured results") -> TrackingError:
    """The error a stage raises when MLflow failed after its results were written:
    ``MLflow logging failed (<cause>); <what> are safe in <where>. Fix the tracking store,
    then run: lab log <where>`` (:func:`tracking_cause` reads the cause back)."""
    return TrackingError(f"MLflow logging failed ({cause}); {what} are safe in {where}. "
                         f"Fix the tracking store, then run: lab log {where}")


def tracking_cause(message: str, limit: int = 240) -> str:
    """The underlying MLflow error of a :func:`results_safe` message (else the message),
    cut after ``limit`` characters with a marker (the executed notebook has it whole)."""
    import re

    m = re.match(r"MLflow logging failed \((?P<cause>.*)\); .+? are safe in ", message, re.S)
    cause = m.group("cause") if m else message
    return cause if len(cause) <= limit else cause[:limit] + " ... (cut here; the whole error is in the executed notebook)"


def flatten_params(obj: Any, prefix: str = "") -> dict[str, str]:
    """``{"server": {"port": 30000}}`` -> ``{"server.port": "30000"}``.

    Lists become their JSON-ish ``str``, ``None`` becomes ``"null"``, booleans ``"true"``/
    ``"false"``; keys that name a credential (:func:`lab.redact.is_secret_name`: ``HF_TOKEN``,
    ``*_API_KEY``; not ``num_draft_tokens``) are redacted, and so are secret flags' values in lists of strings (``extra_args``). Values are kept whole: a value over MLflow's limit is
    logged as an artifact by :meth:`RunHandle.log_params`.
    """
    out: dict[str, str] = {}
    if isinstance(obj, Mapping) and obj:  # an empty mapping (server.env: {}) is logged as "{}"
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if is_secret_name(str(k)) and not isinstance(v, Mapping):
                out[key] = REDACTED
            else:
                out.update(flatten_params(v, key))
        return out
    if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
        obj = redact_argv(obj)  # extra_args: ["--api-key", "sk-..."] -> ["--api-key", "***"]
    if obj is None:
        value = "null"
    elif isinstance(obj, bool):
        value = "true" if obj else "false"
    else:
        value = str(obj)
    out[prefix] = value
    return out


#: What the pipeline itself writes into tracked files (DVC metrics committed under results/
#: and reports/, dvc.lock): a change there is a run's output, not a change of the code or params.
PIPELINE_OUTPUTS = ("results", "reports", "dvc.lock")


def git_commit(root: Path | None = None) -> str:
    """``<sha>`` of HEAD, with ``-dirty`` when tracked files other than the pipeline's own
    outputs (:data:`PIPELINE_OUTPUTS`) have changes; ``unknown`` outside git.

    The outputs are left out so that one ``dvc repro`` has one identity from its first stage
    to its last: the first stage rewriting a committed ``results/<mode>/metrics.json`` must
    not turn the later stages' commit into ``-dirty`` (and so into another pipeline run).
    """
    cwd = str(root or repo_root())
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude,top){p}" for p in PIPELINE_OUTPUTS)], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_tags(params: LabParams, *, mode: str | None, engine_version: str | None = None) -> dict[str, str]:
    """Standard tags of a lab run (mode, engine, git commit, SGLang version, DVC experiment,
    Slurm job id inside a Slurm job)."""
    eng = engine_for(params.engine)
    tags = {
        "engine": params.engine,
        "git_commit": git_commit(),
        "sglang_version": engine_version or ("emulator" if eng.modelled else "unknown"),
    }
    if mode:
        tags["mode"] = mode
    # timing modelled/measured, weights emulated/random/real, acceptance emulated/simulated/real
    tags.update({k: v for k, v in provenance(params, mode if mode in params.modes else None).items() if k != "engine"})
    if (profile := eng.cost_profile(eng.own_section(params))) is not None:  # timings from a cost profile: which one
        tags["emulator_profile"] = profile
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc_exp_name"] = os.environ["DVC_EXP_NAME"]
    if os.environ.get("SLURM_JOB_ID"):  # a fleet job (lab/fleet): which job produced the run
        tags["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    return tags


def long_value_marker(kind: str, key: str, value: str) -> tuple[str, str]:
    """What MLflow gets for a value over its limit, and the artifact that holds it whole.

    :param kind: ``"params"`` or ``"tags"``.
    :returns: ``(marker, artifact_dir)``: the marker is the value's first :data:`LONG_PREVIEW`
        characters, then ``... [cut by the lab: N characters, sha256 <12 hex>; full value in
        artifact long_values/<kind>/<key>.txt]``; the artifact is ``<artifact_dir>/<key>.txt``.
    """
    import hashlib

    where = f"long_values/{kind}"
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    return (f"{value[:LONG_PREVIEW]} ... [cut by the lab: {len(value)} characters, sha256 {digest}; "
            f"full value in artifact {where}/{key}.txt]"), where


def new_record(run_id: str, *, run_name: str, experiment: str, uri: str, parent_run_id: str | None,
               start_time: int | None) -> dict[str, Any]:
    """An empty run record: what :class:`RunHandle` fills in and ``lab log`` replays."""
    return {"format": 1, "run_id": run_id, "run_name": run_name, "experiment": experiment,
            "tracking_uri": redact_url(uri), "parent_run_id": parent_run_id, "start_time": start_time,
            "end_time": None, "status": "RUNNING", "params": {}, "tags": {}, "metrics": [], "artifacts": []}


def load_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run record written by :meth:`RunHandle.save`.

    :raises FileNotFoundError: no record there (the message names the fix).
    :raises ValueError: not a run record.
    """
    import json

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: results written by this lab keep their MLflow run there. "
                                f"Fix: pass the directory of a run's results (results/<mode>, reports, results/physics)")
    rec = json.loads(p.read_text())
    if not isinstance(rec, dict) or rec.get("format") != 1 or not rec.get("run_id"):
        raise ValueError(f"{p} is not a run record of this lab (format 1 with a run_id)")
    return rec


class RunHandle:
    """An MLflow run that records what it logs (module docstring). End it with :meth:`finish`.

    Logging calls never raise: the first failure is kept in :attr:`error`, and from then on
    calls are only recorded. :meth:`finish` raises it.

    :ivar record: the run record (``params``, ``tags``, ``metrics`` as ``[key, value,
        timestamp_ms, step]``, ``artifacts`` as ``[path, artifact_dir]``, ``status``...).
    :ivar base: artifact paths under it are recorded relative to it (the record's directory;
        results move from a run's working directory to their final place as a whole).
    """

    def __init__(self, client, run_id: str, uri: str, *, record: dict[str, Any] | None = None,
                 base: str | os.PathLike[str] | None = None) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self.base = Path(base) if base is not None else None
        self.record = record if record is not None else new_record(
            run_id, run_name="", experiment="", uri=uri, parent_run_id=None, start_time=None)
        self.error: TrackingError | None = None

    def _call(self, what: str, fn, *args, **kwargs):
        if self.error is not None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # mlflow raises many types (MlflowException, requests, sqlalchemy)
            self.error = TrackingError(f"MLflow {what} failed at {self.uri}: {type(exc).__name__}: {exc}")
            self.error.__cause__ = exc
            return None

    def _log_long(self, kind: str, key: str, value: str) -> str:
        """Upload ``value`` whole as ``long_values/<kind>/<key>.txt``; returns its marker."""
        import tempfile

        marker, where = long_value_marker(kind, key, value)
        with tempfile.TemporaryDirectory(prefix="lab-long-") as tmp:
            path = Path(tmp) / f"{key}.txt"
            path.write_text(value)
            self._call("log artifact", self.client.log_artifact, self.run_id, str(path), where)
        return marker

    def _batches(self, what: str, kind: str, items: list, size: int) -> None:
        """``client.log_batch(run, <kind>=...)`` in chunks of ``size`` (MLflow's batch limits)."""
        for i in range(0, len(items), size):
            self._call(what, self.client.log_batch, self.run_id, **{kind: items[i:i + size]})

    def _text_values(self, kind: str, values: Mapping[str, object], entity, limit: int) -> None:
        """Params or tags: recorded whole; a value over ``limit`` goes in as an artifact, its
        marker in MLflow (:func:`long_value_marker`)."""
        from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH

        values = {k: str(v) for k, v in values.items()}
        self.record[kind].update(values)
        items = [entity(k, v if len(v) <= limit else self._log_long(kind, k, v)) for k, v in values.items()]
        self._batches(f"log {kind}", kind, items, MAX_PARAMS_TAGS_PER_BATCH)

    def log_params(self, params: Mapping[str, str]) -> None:
        """Log string params (use :func:`flatten_params`); a value over MLflow's limit goes in
        whole as an artifact, the param saying where (:func:`long_value_marker`)."""
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        self._text_values("params", params, Param, MAX_PARAM_VAL_LENGTH)

    def log_metrics(self, metrics: Mapping[str, float | None], step: int = 0) -> None:
        """Log numeric metrics; ``None`` and NaN values are skipped (never logged as 0)."""
        import math
        import time

        ts = int(time.time() * 1000)
        self._log_metric_rows([[k, float(v), ts, step] for k, v in metrics.items()
                               if v is not None and not (isinstance(v, float) and math.isnan(v))])

    def _log_metric_rows(self, rows: list[list]) -> None:
        """Metrics as recorded, ``[key, value, timestamp_ms, step]`` (a replay logs the same
        rows again; MLflow drops exact repeats)."""
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        self.record["metrics"].extend(rows)
        self._batches("log metrics", "metrics", [Metric(k, v, ts, step) for k, v, ts, step in rows],
                      MAX_METRICS_PER_BATCH)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set string tags; a value over MLflow's limit goes in whole as an artifact, the tag
        saying where (:func:`long_value_marker`)."""
        from mlflow.entities import RunTag
        from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

        self._text_values("tags", tags, RunTag, MAX_TAG_VAL_LENGTH)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload a file if it exists (missing files are skipped silently, and not recorded)."""
        p = Path(path)
        if not p.exists():
            return
        shown = str(p)
        if self.base is not None:
            try:
                shown = p.resolve().relative_to(self.base.resolve()).as_posix()
            except ValueError:
                pass
        if [shown, artifact_path] not in self.record["artifacts"]:
            self.record["artifacts"].append([shown, artifact_path])
        self._call("log artifact", self.client.log_artifact, self.run_id, str(p), artifact_path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the run record to ``path`` (atomically; :func:`load_record` reads it)."""
        from lab.atomic import write_json_atomic

        write_json_atomic(Path(path), self.record, indent=1)

    def finish(self, status: str = "FINISHED", *, save_to: str | os.PathLike[str] | None = None,
               end_time: int | None = None) -> None:
        """End the run as ``FINISHED``, ``FAILED`` or ``KILLED``: the status and end time
        (``end_time``, epoch ms, default now) go into the record (written to ``save_to`` when
        given), the tag :data:`LOGGED_TAG` and the end to MLflow.

        :raises TrackingError: the first MLflow call of this handle that failed (the record
            still holds everything, for ``lab log``).
        """
        import time

        end = end_time or int(time.time() * 1000)
        self.record.update(status=status, end_time=end)
        if save_to is not None:
            self.save(save_to)
        self._call("set tag", self.client.set_tag, self.run_id, LOGGED_TAG, "complete")
        self._call("end run", self.client.set_terminated, self.run_id, status, end_time=end)
        if self.error is not None:
            raise self.error

    def __enter__(self) -> "RunHandle":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish("FINISHED")
        else:  # the error in flight is what the caller sees; a tracking error here is secondary
            try:
                self.finish("FAILED")
            except TrackingError:
                pass

#: Set by :mod:`lab.pipeline.stage` (epoch ms) for the notebook it runs: a stage's MLflow run starts
#: when the stage started, not when its notebook reached the logging cell.
STAGE_STARTED_ENV = "LAB_STAGE_STARTED_MS"


def stage_started_ms() -> int | None:
    """The running stage's start (epoch ms) from ``$LAB_STAGE_STARTED_MS``, or None."""
    v = os.environ.get(STAGE_STARTED_ENV, "")
    return int(v) if v.isdigit() else None


def artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: ``mlruns/`` beside a local SQLite
    database (MLflow's default, ``./mlruns``, is relative to the *current directory*: a
    test's tmp database would drop its artifacts into the project); None (the server's
    default) for other stores."""
    if uri.startswith("sqlite:///") and ":memory:" not in uri:
        return (Path(uri[len("sqlite:///"):]).resolve().parent / "mlruns").as_uri()
    return None
