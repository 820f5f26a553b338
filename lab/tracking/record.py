"""Recording one mode: its result files and its MLflow run, from one result object.

:func:`record` is the only place a mode's results are written, to files and to MLflow; the
success and the failure path of :func:`lab.pipeline.bench.run_mode` both end in it.
:func:`log_engine` tags the run with the engine's version and logs its effective
configuration as soon as the engine is up (so a run that fails later carries them). Files
are written first and atomically (:mod:`lab.atomic`), then the run is logged, then its run
record (:data:`lab.tracking.runs.RECORD_FILE`) is saved beside them: an MLflow failure
keeps everything on disk, raises :class:`~lab.tracking.runs.TrackingError` naming the
``lab log`` command, and ``lab log`` (:mod:`lab.tracking.relog`) replays the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.analysis import sentinel
from lab.atomic import write_json_atomic
from lab.measure.point import level_key
from lab.measure.result import ModeResult
from lab.tracking.mlflow_view import interval_metrics, warning_tags
from lab.tracking.runs import RECORD_FILE, RunHandle, TrackingError, flatten_params, results_safe

__all__ = ["BY_CONCURRENCY", "record", "write_results", "log_mode_run", "log_engine", "ARTIFACTS"]

#: MLflow prefix of the per-level step metrics (``by_concurrency.decode_tok_s`` at step =
#: concurrency). The unprefixed names are the headline: the lowest concurrency's mean.
BY_CONCURRENCY = "by_concurrency"

#: Files of ``results/<mode>/`` logged as the run's artifacts (missing ones are skipped by
#: :meth:`lab.tracking.runs.RunHandle.log_artifact`).
ARTIFACTS = ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", "ground_truth.jsonl")


def record(result: ModeResult, out: Path, run: RunHandle, status: str, log=print) -> None:
    """Write ``runs.json``, ``result.json`` and ``metrics.json`` under ``out``, then log the
    run to MLflow, end it with ``status`` (``"FINISHED"`` or ``"FAILED"``) and save its run
    record (``out/mlflow_run.json``).

    :raises TrackingError: an MLflow call failed (now or earlier in the run): the files and
        the record are written; the message says so and names ``lab log <out>``.
    """
    data = result.to_dict()
    write_results(out, data, result.runs)
    for step, values in result.telemetry:  # GPU samples as step metrics gpu<i>.<field>
        run.log_metrics(values, step=step)
    try:
        log_mode_run(run, out, data, status)
    except TrackingError as exc:
        err = results_safe(exc, out)
        log(f"[lab] {err}")
        raise err from exc


def log_engine(run: RunHandle, result: ModeResult) -> None:
    """Once the engine is up: its version tags (``run_tags`` had no server yet) and its
    effective configuration as ``effective.*`` params.

    A tracking failure is kept by ``run`` (raised when it is finished).
    """
    run.set_tags(result.version_tags)
    run.log_params(flatten_params({"effective": result.effective_config or {}}))


def write_results(out: Path, result: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """``result.json`` (everything), ``runs.json`` (per level x repeat) and the lean
    ``metrics.json`` that DVC shows: status, engine, the flat headline numbers,
    ``startup_s`` and the effective configuration (plus ``error``, ``partial``,
    ``requests_recorded``, ``warnings``, ``sentinel`` when present)."""
    write_json_atomic(out / "runs.json", runs)
    write_json_atomic(out / "result.json", result)
    lean = {"status": result["status"], "engine": result["engine"], **result.get("headline", {})}
    if result.get("startup"):
        lean["startup_s"] = result["startup"].get("startup_s")
    if result.get("effective_config"):  # what the server resolved (DVC shows it beside the numbers)
        lean["effective"] = {k: (str(v) if isinstance(v, list) else v) for k, v in result["effective_config"].items()}
    if "error" in result:
        lean["error"] = result["error"]
    if "partial" in result:
        lean["partial"] = True
        lean["requests_recorded"] = result["partial"]["requests_recorded"]
    if result.get("warnings"):
        lean["warnings"] = "; ".join(result["warnings"])
    if result.get("sentinel"):
        lean["sentinel"] = result["sentinel"]["status"]
    write_json_atomic(out / "metrics.json", lean)


def log_mode_run(run: RunHandle, out: Path, result: dict[str, Any], status: str) -> None:
    """Log a mode's ``result.json`` content and its files to ``run``, end it with ``status``
    and save the run record to ``out/mlflow_run.json``.

    Tags (status, engine version, environment, sentinel, warnings), metrics (headline,
    95 % interval bounds, acceptance by draft position, startup phases, ``by_concurrency.*`` per level at step =
    concurrency, trace), artifacts (:data:`ARTIFACTS`, ``trace/``, ``environment/``).

    :raises TrackingError: the first MLflow call of ``run`` that failed (everything is recorded).
    """
    run.set_tags({"status": result["status"], "engine_version": result.get("engine_version", "unknown"),
                  **result.get("environment_tags", {})})
    sentinel.log_to_run(run, result)
    run.log_metrics(result.get("headline", {}))
    run.log_metrics(interval_metrics(result.get("levels") or {}))  # means' 95 % intervals
    from lab.analysis.position_acceptance import acceptance_metrics  # <point>.accept_rate_pos<k> (issue 33)

    run.log_metrics(acceptance_metrics(result.get("acceptance_by_position")))
    run.set_tags(warning_tags(result))  # one-wave, hygiene and cross-check warnings
    startup = result.get("startup") or {}
    run.log_metrics({"startup_s": startup.get("startup_s"),
                     **{f"startup.{k}": v for k, v in (startup.get("phases") or {}).items()}})
    # Per-level means as step metrics (step = concurrency) for MLflow's metric-vs-step
    # chart, under their own prefix: with the headline's names MLflow's runs table would
    # show the highest concurrency's value (its "latest" = largest step) as the headline.
    for key, agg in result.get("levels", {}).items():
        if key == level_key(agg["concurrency"]):  # primary points only: one step per level
            run.log_metrics({f"{BY_CONCURRENCY}.{m}": v["mean"] for m, v in agg.items()
                             if isinstance(v, dict) and "mean" in v}, step=agg["concurrency"])
    # The executed notebook is logged by the stage runner (lab.pipeline.stage) once papermill has written it.
    for name in ARTIFACTS:
        run.log_artifact(out / name)
    if (result.get("trace") or {}).get("file"):  # Chrome trace: opens in ui.perfetto.dev
        from lab.measure.trace_capture import trace_metrics

        run.log_artifact(out / "trace" / Path(result["trace"]["file"]).name, "trace")
        run.log_metrics(trace_metrics(result["trace"]))
    env_dir = out / "environment"
    for path in sorted(env_dir.glob("*")) if env_dir.is_dir() else []:
        run.log_artifact(path, "environment")
    run.finish(status, save_to=out / RECORD_FILE)
