"""One stage's MLflow side: the client, the experiment and this invocation's parent run.

A stage process (and the notebook kernel it starts) builds one :class:`Tracker` from the
validated params (:meth:`Tracker.from_params`) and hands it to what logs: the mode run
(:mod:`lab.pipeline.bench`), the comparison (:mod:`lab.tracking.compare_log`), the physics run
(:mod:`lab.tracking.physics_log`), the regression sentinel's history query, the stage
runner (:mod:`lab.pipeline.stage`: executed notebook, parent closed), ``lab log`` /
``lab ui`` (:mod:`lab.cli`) and, through :meth:`Tracker.for_store`, the fleet's head node
and job runner (:mod:`lab.fleet`: the sweep's parent). It is the one place an MLflow client
is made.

Inside a fleet job (:data:`lab.tracking.grouping.PARENT_RUN_ENV` set) the parent is the
sweep's, named by the job's environment, not this invocation's: the stage never creates,
finishes on success or fails it, and after a failure ends only its own job's RUNNING runs
(tag ``slurm_job_id``; :meth:`Tracker.close_pipeline`).

The tracking URI is params.yaml's ``mlflow.tracking_uri`` (a DVC param: every stage, ``lab
log``, ``lab ui`` and the sentinel's history agree on it). ``MLFLOW_TRACKING_URI`` in the
environment, when set to anything else, is refused with the fix (:func:`tracking_uri`),
never silently ignored.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from lab.config import LabParams, repo_root
from lab.config.tracking_uri import resolve_tracking_uri
from lab.redact import redact_url
from lab.tracking.grouping import fleet_parent, invocation, known_parent, pipeline_key, remember_parent, started_key
from lab.tracking.runs import (RunHandle, TrackingError, artifact_location, git_commit, new_record, run_tags,
                               stage_started_ms)

__all__ = ["Tracker", "tracking_uri", "URI_ENV"]

#: MLflow's own environment variable for the tracking URI.
URI_ENV = "MLFLOW_TRACKING_URI"


def _same_uri(env: str, uri: str) -> bool:
    prefix = "sqlite:///"
    if env.startswith(prefix) and not env[len(prefix):].startswith("/"):  # MLflow resolves it against the cwd
        env = prefix + str(Path(env[len(prefix):]).resolve())
    return env.rstrip("/") == uri.rstrip("/")


def _no_such_run(exc: Exception) -> bool:
    """Whether an MLflow client error says the run does not exist (``RESOURCE_DOES_NOT_EXIST``)."""
    return "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(exc).lower()


def tracking_uri(params: LabParams, root: Path | None = None) -> str:
    """params.yaml's tracking URI, resolved (:meth:`lab.config.MlflowParams.resolved_tracking_uri`).

    :raises TrackingError: ``MLFLOW_TRACKING_URI`` is set to another store (message: both
        URIs, passwords hidden, and the two fixes).
    """
    uri = params.mlflow.resolved_tracking_uri(root)
    env = os.environ.get(URI_ENV, "").strip()
    # the same text as params.yaml's names the same store, also where the working directory is not
    # the main checkout (`dvc exp run --temp` runs in .dvc/tmp/exps/...: a relative sqlite path
    # resolved against that cwd would differ); the lab resolves both by one rule
    same_text = env.rstrip("/") == str(params.mlflow.tracking_uri).strip().rstrip("/")
    if env and not same_text and not _same_uri(env, uri) \
            and resolve_tracking_uri(env, root).rstrip("/") != uri.rstrip("/"):
        raise TrackingError(
            f"{URI_ENV}={redact_url(env)} is set, but params.yaml's mlflow.tracking_uri is {redact_url(uri)}: "
            "the lab logs only where params.yaml says (a DVC param, so every stage, `lab log` and the sentinel's "
            f"history use one store). Fix: set mlflow.tracking_uri: {redact_url(env)} in params.yaml "
            f"(or dvc exp run -S mlflow.tracking_uri=...), or unset {URI_ENV}")
    return uri


class Tracker:
    """The MLflow client of one stage, its experiment and this invocation's parent run.

    :ivar uri: the resolved tracking URI. :ivar experiment: the experiment's name.
    :ivar key: this invocation's pipeline key (:func:`lab.tracking.grouping.pipeline_key`).
    """

    def __init__(self, uri: str, experiment: str, *, root: Path, key: str, base_tags: Mapping[str, str],
                 engine: str) -> None:
        self.uri = uri
        self.experiment = experiment
        self.root = root
        self.key = key
        self.base_tags = dict(base_tags)
        self.engine = engine
        self._client = None
        self._experiment_id: str | None = None

    @classmethod
    def from_params(cls, params: LabParams, root: Path | None = None) -> "Tracker":
        """The stage's tracker: URI and experiment from ``params.mlflow``, the pipeline key
        the stage recorded at its start (:func:`lab.tracking.grouping.started_key`; inside a
        stage's kernel too) or else from the key sections, the standard tags
        (:func:`lab.tracking.runs.run_tags`).

        :raises TrackingError: a conflicting ``MLFLOW_TRACKING_URI`` (:func:`tracking_uri`).
        """
        root = root or repo_root()
        return cls(tracking_uri(params, root), params.mlflow.experiment, root=root,
                   key=started_key() or pipeline_key(params, root), base_tags=run_tags(params, mode=None),
                   engine=params.engine)

    @classmethod
    def for_store(cls, uri: str, experiment: str, root: Path | None = None) -> "Tracker":
        """A tracker of a store and experiment named outright (the fleet's sweep record), outside
        any stage: no invocation key, no standard tags. Use it for :attr:`client`,
        :meth:`experiment_id`, :meth:`open_run` with ``nested=False``, :meth:`run_info` and
        :meth:`search_runs`; it has no parent of its own."""
        return cls(uri, experiment, root=root or Path.cwd(), key="", base_tags={}, engine="")

    @property
    def client(self):
        """The ``mlflow.tracking.MlflowClient`` (made on first use)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            if self.uri.startswith(("http://", "https://")):  # an unreachable server fails in seconds
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _wrap(self, what: str, exc: Exception) -> TrackingError:
        return TrackingError(f"MLflow {what} failed at {self.uri}: {type(exc).__name__}: {exc}")

    def experiment_id(self, create: bool = True) -> str | None:
        """The experiment's id (created when missing and ``create``; else None).

        :raises TrackingError: the store is unreachable or unusable, with the fix.
        """
        if self._experiment_id is None:
            try:
                exp = self.client.get_experiment_by_name(self.experiment)
                if exp is None and not create:
                    return None
                self._experiment_id = exp.experiment_id if exp else self.client.create_experiment(
                    self.experiment, artifact_location=artifact_location(self.uri))
            except Exception as exc:
                raise TrackingError(
                    f"cannot use MLflow tracking URI {self.uri!r}: {exc}. Fix: start the tracking server or "
                    "set mlflow.tracking_uri in params.yaml (default sqlite:///mlflow.db)") from exc
        return self._experiment_id

    def open_run(self, run_name: str, tags: Mapping[str, str], *, nested: bool = True,
                 base: Path | None = None) -> RunHandle:
        """Create a run (start time: the stage's, :func:`lab.tracking.runs.stage_started_ms`),
        nested under this invocation's parent unless ``nested`` is False.

        :param base: the directory its record will live in (artifact paths relative to it).
        :raises TrackingError: the store is unreachable or unusable (fail fast: before any engine).
        """
        exp_id = self.experiment_id()
        parent = self.parent_run_id() if nested else None
        all_tags = {"mlflow.runName": run_name, **{k: str(v) for k, v in tags.items()}}
        if parent:
            all_tags["mlflow.parentRunId"] = parent
        start = stage_started_ms() or int(time.time() * 1000)
        try:
            run = self.client.create_run(exp_id, tags=all_tags, run_name=run_name, start_time=start)
        except Exception as exc:
            raise TrackingError(f"cannot create an MLflow run at {self.uri!r}: {exc}. Fix: check that the "
                                "tracking store is writable and reachable") from exc
        record = new_record(run.info.run_id, run_name=run_name, experiment=self.experiment, uri=self.uri,
                            parent_run_id=parent, start_time=start)
        record["tags"].update(all_tags)
        return RunHandle(self.client, run.info.run_id, self.uri, record=record, base=base)

    def run_info(self, run_id: str):
        """``(status, tags)`` of a run, or None when the store has no such run.

        :raises TrackingError: the store is unreachable.
        """
        try:
            run = self.client.get_run(run_id)
        except Exception as exc:
            if _no_such_run(exc):
                return None
            raise self._wrap("get run", exc) from exc
        return run.info.status, dict(run.data.tags)

    # ------------------------------------------------------------------ the parent run
    def known_parent(self) -> str | None:
        """This invocation's parent id if a stage already created it (never creates one); in a
        fleet job, the sweep's parent (:func:`lab.tracking.grouping.fleet_parent`)."""
        return fleet_parent() or (known_parent(self.root, self.key) if self.key else None)

    def parent_run_id(self) -> str:
        """This invocation's parent run, created (RUNNING) on first use
        (:mod:`lab.tracking.grouping`); in a fleet job the sweep's parent, as given.

        :raises TrackingError: MLflow unreachable.
        """
        if fleet_parent():
            return fleet_parent()
        run_id = self.known_parent()
        if run_id:
            run = self._get_parent(run_id)
            if run is not None and run.info.lifecycle_stage == "active" and run.data.tags.get("pipeline_key") == self.key:
                return run_id
        exp = os.environ.get("DVC_EXP_NAME")
        label = f"exp {exp}" if exp else f"git {git_commit(self.root)[:8]}"
        name = f"pipeline | {self.engine} | {label}"
        tags = {**self.base_tags, "mlflow.runName": name, "pipeline_key": self.key, "lab_role": "pipeline",
                "lab_invocation": invocation()}
        try:
            run = self.client.create_run(self.experiment_id(), tags=tags, run_name=name,
                                         start_time=stage_started_ms() or int(time.time() * 1000))
        except Exception as exc:
            raise self._wrap("create the pipeline's parent run", exc) from exc
        remember_parent(self.root, self.key, run.info.run_id)
        return run.info.run_id

    def _get_parent(self, run_id: str, attempts: int = 4):
        """The recorded parent run, or None when the store has no such run (deleted, another
        database). Any other failure (a busy SQLite store: ``database is locked``) is retried
        ``attempts`` times, 1, 2, 4 s apart, before it raises: a transient failure must not make
        a second parent, splitting one ``dvc repro`` across two pipeline runs.

        :raises TrackingError: the store kept failing.
        """
        for attempt in range(attempts):
            try:
                return self.client.get_run(run_id)
            except Exception as exc:
                if _no_such_run(exc):
                    return None
                if attempt == attempts - 1:
                    raise self._wrap("get the pipeline's parent run", exc) from exc
                time.sleep(2 ** attempt)
        return None

    def finish_parent(self, metrics: Mapping[str, float], tags: Mapping[str, str], n_modes: int) -> None:
        """Copy the headline metrics and tags onto this invocation's parent, add the mode
        count to its name (``pipeline | emulator | 3 modes | git 1a2b3c4d``) and mark it FINISHED.

        :raises TrackingError: MLflow rejected a call.
        """
        parent = self.parent_run_id()
        handle = RunHandle(self.client, parent, self.uri)
        handle.log_metrics(metrics)
        handle.set_tags(tags)
        try:
            run = self.client.get_run(parent)
        except Exception as exc:
            raise self._wrap("get the parent run", exc) from exc
        name = run.data.tags.get("mlflow.runName") or run.info.run_name or ""
        head, sep, label = name.rpartition(" | ")
        if sep and head == f"pipeline | {self.engine}":
            handle.set_tags({"mlflow.runName": f"{head} | {n_modes} modes | {label}"})
        handle.finish("FINISHED")

    def close_pipeline(self, ok: bool) -> list[str]:
        """At the end of every stage: end this invocation's parent (``FINISHED`` when the stage
        succeeded, else ``FAILED``; end time now) and, after a failure, its child runs still
        RUNNING (a kernel killed before its ``finally``, a store that failed mid-stage).
        Returns the ids changed. Nothing when no stage of this invocation made a parent.

        The parent is never left RUNNING between stages; the next stage of the same
        invocation reuses it and ends it again. DVC runs one pipeline's stages one at a
        time, so no RUNNING child belongs to a live stage. In a fleet job the sweep's parent
        outlives the stage (other jobs log under it at the same time): nothing is done after
        a success, and a failure ends only this job's RUNNING children (tag ``slurm_job_id``).

        :raises TrackingError: MLflow rejected a call.
        """
        parent = self.known_parent()
        fleet = fleet_parent()
        if not parent or (fleet and ok):
            return []
        try:
            client = self.client
            run = client.get_run(parent)
            own = f" and tags.slurm_job_id = '{os.environ.get('SLURM_JOB_ID', '')}'" if fleet else ""
            changed = [] if ok else [r.info.run_id for r in client.search_runs(
                [run.info.experiment_id],
                f"tags.mlflow.parentRunId = '{parent}' and attributes.status = 'RUNNING'{own}")]
            for run_id in changed:
                client.set_terminated(run_id, "FAILED")
            if fleet:
                return changed
            client.set_terminated(parent, "FINISHED" if ok else "FAILED", end_time=int(time.time() * 1000))
            return changed + ([parent] if run.info.status == "RUNNING" else [])
        except Exception as exc:  # MlflowException, sqlalchemy, requests...
            raise self._wrap("end the pipeline's runs", exc) from exc

    # ------------------------------------------------------------------ finished runs of this stage
    def attach(self, run_id: str, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload one file to a run of this stage (possibly ended already).

        :raises TrackingError: MLflow unreachable or the run unknown.
        """
        try:
            self.client.log_artifact(run_id, str(path), artifact_path)
        except Exception as exc:
            raise self._wrap("log artifact", exc) from exc

    def end_run_now(self, run_id: str) -> None:
        """Set an ended run's end time to now, keeping its status (a RUNNING run is left
        alone): a stage's run lasts until its executed notebook is attached.

        :raises TrackingError: MLflow rejected a call.
        """
        try:
            status = self.client.get_run(run_id).info.status
            if status in ("FINISHED", "FAILED", "KILLED"):
                self.client.set_terminated(run_id, status, end_time=int(time.time() * 1000))
        except Exception as exc:
            raise self._wrap("end run", exc) from exc

    def search_runs(self, filter_string: str, **kwargs: Any) -> list:
        """``MlflowClient.search_runs`` in this experiment ([] when it does not exist yet).

        :raises Exception: whatever MLflow raises (callers record it).
        """
        exp_id = self.experiment_id(create=False)
        return self.client.search_runs([exp_id], filter_string=filter_string, **kwargs) if exp_id else []

