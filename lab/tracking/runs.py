"""MLflow tracking: one run per mode per pipeline run, and one comparison run.

Runs carry params (flattened ``params.yaml`` slices, values as strings), metrics (units in
the names), tags (mode, engine, git commit, SGLang version or ``emulator``, DVC experiment
name) and artifacts (executed notebook, server log, requests.jsonl, figures). The tracking
URI is checked *before* a server starts (:func:`open_run`), so an unreachable server fails
in seconds, not after a benchmark. If logging fails after a benchmark, the results stay on
disk and ``lab log results/<mode>`` logs them again.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.config import LabParams, repo_root
from lab.redact import REDACTED, is_secret_name, redact_argv
from lab.engine.registry import engine_for, provenance

__all__ = ["TrackingError", "RunHandle", "open_run", "attach_artifact", "flatten_params", "run_tags", "git_commit"]


class TrackingError(RuntimeError):
    """MLflow is unreachable or rejected a call; the message names the URI and the fix."""


def flatten_params(obj: Any, prefix: str = "") -> dict[str, str]:
    """``{"server": {"port": 30000}}`` -> ``{"server.port": "30000"}``.

    Lists become their JSON-ish ``str``, ``None`` becomes ``"null"``, booleans ``"true"``/
    ``"false"``; keys that name a credential (:func:`lab.redact.is_secret_name`: ``HF_TOKEN``,
    ``*_API_KEY``; not ``num_draft_tokens``) are redacted, and so are secret flags' values in lists of strings (``extra_args``). Values are cut to MLflow's 6000-character limit.
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
    out[prefix] = value[:6000]
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
    """Standard tags of a lab run (mode, engine, git commit, SGLang version, DVC experiment)."""
    tags = {
        "engine": params.engine,
        "git_commit": git_commit(),
        "sglang_version": engine_version or ("emulator" if engine_for(params).modelled else "unknown"),
    }
    if mode:
        tags["mode"] = mode
    # timing modelled/measured, weights emulated/random/real, acceptance emulated/simulated/real
    tags.update({k: v for k, v in provenance(params, mode if mode in params.modes else None).items() if k != "engine"})
    if (sec := engine_for(params).params_section) == "emulator":
        tags["emulator_profile"] = params.emulator.profile
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc_exp_name"] = os.environ["DVC_EXP_NAME"]
    return tags


class RunHandle:
    """An open MLflow run. Use :meth:`finish` (or the context manager) to end it.

    Every call raises :class:`TrackingError` on failure so callers can keep their results.
    """

    def __init__(self, client, run_id: str, uri: str) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # mlflow raises many types (MlflowException, requests, sqlalchemy)
            raise TrackingError(f"MLflow {what} failed at {self.uri}: {exc}") from exc

    def log_params(self, params: Mapping[str, str]) -> None:
        """Log string params (use :func:`flatten_params`)."""
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self._call("log params", self.client.log_batch, self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: Mapping[str, float | None], step: int = 0) -> None:
        """Log numeric metrics; ``None`` and NaN values are skipped (never logged as 0)."""
        import math
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step) for k, v in metrics.items()
                 if v is not None and not (isinstance(v, float) and math.isnan(v))]
        for i in range(0, len(items), 500):
            self._call("log metrics", self.client.log_batch, self.run_id, metrics=items[i:i + 500])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set string tags."""
        for k, v in tags.items():
            self._call("set tag", self.client.set_tag, self.run_id, k, str(v))

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload a file if it exists (missing files are skipped silently)."""
        if Path(path).exists():
            self._call("log artifact", self.client.log_artifact, self.run_id, str(path), artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        """End the run as ``FINISHED``, ``FAILED`` or ``KILLED``."""
        self._call("end run", self.client.set_terminated, self.run_id, status)

    def __enter__(self) -> "RunHandle":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish("FINISHED" if exc_type is None else "FAILED")


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


def open_run(params: LabParams, *, run_name: str, tags: Mapping[str, str],
             parent_run_id: str | None = None) -> RunHandle:
    """Create a run in ``params.mlflow.experiment`` (creating the experiment if needed).

    :raises TrackingError: the tracking URI is unreachable or unusable; says how to fix it.
    """
    from mlflow.tracking import MlflowClient

    uri = params.mlflow.resolved_tracking_uri()
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(params.mlflow.experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(
            params.mlflow.experiment, artifact_location=artifact_location(uri))
        all_tags = {"mlflow.runName": run_name, **tags}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = client.create_run(exp_id, tags=all_tags, run_name=run_name, start_time=stage_started_ms())
    except Exception as exc:
        raise TrackingError(
            f"cannot use MLflow tracking URI {uri!r}: {exc}. Fix: start the tracking server or "
            "set mlflow.tracking_uri in params.yaml (default sqlite:///mlflow.db)"
        ) from exc
    return RunHandle(client, run.info.run_id, uri)


def attach_artifact(params: LabParams, run_id: str, path: str | os.PathLike[str]) -> None:
    """Upload one file to an existing (possibly finished) run.

    :raises TrackingError: MLflow unreachable or the run unknown.
    """
    from mlflow.tracking import MlflowClient

    uri = params.mlflow.resolved_tracking_uri()
    try:
        MlflowClient(tracking_uri=uri).log_artifact(run_id, str(path))
    except Exception as exc:
        raise TrackingError(f"MLflow log artifact failed at {uri}: {exc}") from exc
