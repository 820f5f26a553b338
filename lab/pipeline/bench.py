"""One mode end to end: prepare, engine lifetime, measure each point, aggregate, record.

:func:`run_mode` is what ``notebooks/bench.ipynb`` calls. It only sequences the concerns
(guidellm ``benchmark/benchmarker.py`` shape); each step lives in its own module and fills
in one :class:`lab.measure.result.ModeResult`:

1. prepare (:mod:`lab.pipeline.lifetime`): results dir writable (under the stage, its new
   attempt directory: :mod:`lab.pipeline.staging`), dataset, MLflow run opened with the
   mode's params (through the stage's :class:`lab.tracking.tracker.Tracker`), stale engines
   stopped, preflight (:mod:`lab.engine.preflight`: GPUs, SGLang, the argv through SGLang's
   parser, weights, port, disk), environment captured;
2. engine lifetime (:func:`lab.pipeline.lifetime.engine`): started in its own process group,
   ready, effective configuration read back, warmed up; stopped however the block is left
   (SIGTERM included);
3. measure each point (:func:`lab.measure.point.measure_point`) of
   :func:`lab.measure.point.measurement_points`, each repeat: scrapes, streamed requests
   (flushed to ``requests.jsonl`` per request), GPU telemetry, cross-checks, hygiene;
4. aggregate (:mod:`lab.analysis.aggregate`): per-point means and intervals, headline,
   the emulator's ground truth, hygiene warnings, the regression sentinel;
5. record (:func:`lab.tracking.record.record`): ``runs.json``/``result.json``/
   ``metrics.json`` written atomically, the MLflow run logged and its run record
   (``mlflow_run.json``) saved, on success and on failure alike. A failure leaves
   ``metrics.json`` with ``"status": "failed"``, what was measured so far (``partial``,
   ``levels_partial``), the server log, and a FAILED MLflow run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lab.analysis import sentinel
from lab.analysis.aggregate import aggregate_levels, ground_truth, headline
from lab.analysis.load import load_settings
from lab.config import BenchParams, LabParams, ModelParams, ModeParams, ServerParams, repo_root
from lab.engine.command import launch_command
from lab.engine.ports import port_for
from lab.engine.registry import Engine, engine_for, provenance
from lab.measure import hygiene
from lab.measure.goodput import DEFINITION_VERSION as GOODPUT_DEFINITION
from lab.measure.point import measure_point, measurement_points
from lab.measure.result import ModeResult
from lab.pipeline.lifetime import capture_trace, check_writable, engine, prepare, warm_up
from lab.tracking.grouping import mode_run_name
from lab.tracking.params_log import mode_run_params
from lab.tracking.record import log_engine, record
from lab.tracking.runs import TrackingError, run_tags
from lab.tracking.tracker import Tracker
from lab.workload.sources import check_prompt_count, dataset_params, emulator_prompt_file, load_bench_prompts
from lab.engine.tokenizer import served_counter

__all__ = ["run_mode", "launch_setup", "setup_of"]


def run_mode(params: LabParams, mode_name: str, results_dir: str | os.PathLike[str], *,
             launch: int = 1, log=print) -> dict[str, Any]:
    """Benchmark one mode and record it.

    :param params: validated params (a papermill-injected mode slice already merged).
    :param mode_name: key in ``params.modes``.
    :param results_dir: ``results/<mode>`` (relative paths resolve against the repo root), or
        :func:`lab.config.launch_results_dir` of a later launch.
    :param launch: which of ``bench.launches`` this engine start is (``result.json`` ``launch``,
        the MLflow tag ``launch`` and the run name say it).
    :returns: the ``result.json`` content (``status`` ``ok``); ``metrics.json`` holds its
        flat headline for DVC.
    :raises BenchError, ServerError, TrackingError, DatasetError, ParamsError, PreflightError:
        with ``metrics.json`` marked failed and the MLflow run FAILED where one was opened; a
        TrackingError after a complete measurement leaves ``status`` ``ok`` on disk, the
        run record beside it for ``lab log``.
    """
    root = repo_root()
    out = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    mode = params.mode(mode_name)  # unknown mode: fail before anything else
    # the engine resolved once; each callee gets it and the sections it reads, not the whole params
    eng = engine_for(params.engine)
    model, server, bench, own = params.model, params.server, params.bench, eng.own_section(params)
    check_writable(out)
    prompts, dataset_info = load_bench_prompts(bench, root)  # file or HF id (lab/workload/sources.py)
    check_prompt_count(bench, len(prompts))  # no silent cycling past the dataset
    tracker = Tracker.from_params(params, root)  # this stage's MLflow client and parent run
    of = bench.launches
    run = tracker.open_run(mode_run_name(params, mode_name) + (f" | launch {launch}/{of}" if of > 1 else ""),
                           {**run_tags(params, mode=mode_name), "launch": str(launch)}, base=out)
    truth_path = out / "ground_truth.jsonl" if eng.ground_truth else None
    cmd = launch_command(eng, mode_name, mode, model=model, server=server, own=own, ground_truth_file=truth_path,
                         port=port_for(server, eng),
                         prompt_file=emulator_prompt_file(bench, prompts, root, out) if eng.modelled else None)
    res = ModeResult(mode=mode_name, engine=params.engine, provenance=provenance(params, mode_name), launch=launch,
                     launches=of, mlflow_run_id=run.run_id, server_command=cmd.display(), dataset=dataset_info)
    try:
        # every params.yaml leaf of this mode, and which content the dataset had (HF fingerprint)
        run.log_params({**mode_run_params(params, mode_name), **dataset_params(dataset_info)})
        prepare(eng, {mode_name: mode}, cmd, out, res, log, model=model, server=server, bench=bench, own=own)
        count = served_counter(eng, model=model, mode=mode)  # bench.context_tokens in the served model's tokens, before launch
        with engine(server, cmd, out, res, log) as srv:
            log_engine(run, res)
            warm_up(srv, bench, prompts, out, res, log, count)
            # the SLO the compare stage judges goodput by, and the definition it was computed with
            res.load = {**load_settings(bench), "goodput_definition": GOODPUT_DEFINITION}
            with open(out / "requests.jsonl", "a") as req_file:
                for point in measurement_points(bench):
                    for rep in range(bench.repeats):
                        res.runs.append(measure_point(
                            srv, point, rep, bench=bench, prompts=prompts, out=out, req_file=req_file,
                            speculative=mode.is_speculative, result=res, log=log, count=count))
            capture_trace(srv, bench, prompts, out, res, log, modelled=eng.modelled)
        _aggregate(eng, mode, tracker, res, truth_path, log, model=model, server=server, bench=bench, own=own)
    except BaseException as exc:
        res.fail(exc, levels_partial=aggregate_levels(res.runs))
        try:
            record(res, out, run, "FAILED", log)
        except TrackingError:
            pass  # said by record; the measurement's own failure is the error to raise
        raise
    record(res, out, run, "FINISHED", log)  # TrackingError: the results are on disk, `lab log` re-logs
    return res.to_dict()


def _aggregate(eng: Engine, mode: ModeParams, tracker: Tracker, res: ModeResult, truth_path: Path | None, log, *,
               model: ModelParams, server: ServerParams, bench: BenchParams, own: Any) -> None:
    """The measured repeats into ``res``: per-point aggregates, the emulator's ground truth,
    the headline, hygiene warnings (logged), ``status = "ok"``, then the sentinel (which
    compares this launch with earlier ones in MLflow; it never raises)."""
    res.levels = aggregate_levels(res.runs)
    if truth_path is not None and truth_path.exists():
        res.ground_truth = ground_truth(truth_path, res.records)
    res.headline = headline(res.levels)
    from lab.analysis.position_acceptance import acceptance_by_position  # per draft position, from SGLang's histograms

    adaptive = "--speculative-adaptive" in mode.extra_args  # /server_info's effective config may not say it
    res.acceptance_by_position = acceptance_by_position(
        res.records, {**(res.effective_config or {}), **({"speculative_adaptive": True} if adaptive else {})},
        (res.dataset or {}).get("categories"), simulated=mode.simulate_accept_length is not None)
    res.warnings = hygiene.hygiene_warnings(res.runs, res.warmup)
    for w in res.warnings:
        log(f"[lab] WARNING {res.mode}: {w}")
    res.status = "ok"
    setup = setup_of(eng, mode, model=model, server=server, bench=bench, own=own, root=repo_root())
    res.sentinel = sentinel.check(res.to_dict(), bench=bench, setup=setup,
                                  run_id=res.mlflow_run_id, root=repo_root(), tracker=tracker, log=log)


def launch_setup(params: LabParams, mode_name: str | None) -> dict[str, Any]:
    """What besides the server's resolved arguments and the workload shapes a launch: the
    mode's flags, the model, the server's environment and extra args (credentials
    redacted), for the emulator the cost profile's name and its fault list, and the path and
    SHA-256 of every file a param points at (``param_files``: :func:`lab.inputs.file_digests`):
    what the regression sentinel hashes beside the workload (:func:`lab.analysis.sentinel.check`).
    ``mode`` is None when ``mode_name`` is None or not in ``params.modes`` (:func:`setup_of`)."""
    eng = engine_for(params.engine)
    mode = params.mode(mode_name) if mode_name and mode_name in params.modes else None
    return setup_of(eng, mode, model=params.model, server=params.server, bench=params.bench,
                    own=eng.own_section(params), root=repo_root())


def setup_of(eng: Engine, mode: ModeParams | None, *, model: ModelParams, server: ServerParams, bench: BenchParams,
             own: Any, root: Path) -> dict[str, Any]:
    """:func:`launch_setup` from the engine and the sections it reads.

    :param eng: the :class:`lab.engine.registry.Engine`; ``mode``: the mode's ``ModeParams`` (None: no mode);
        ``model``, ``server``, ``bench``: those params.yaml sections (``bench`` for the files it names);
        ``own``: ``eng.own_section(params)``.
    :param root: the repository root the files' paths are shown relative to.
    :returns: ``{"mode", "model", "server_env", "server_extra_args", "server_limits", <the engine's own>,
        "param_files"}``.
    """
    from lab.inputs import file_digests, launch_files
    from lab.redact import redact_argv, redact_env

    setup: dict[str, Any] = {
        "mode": mode.model_dump() if mode is not None else None,
        "model": model.model_dump(),
        "server_env": redact_env(dict(server.env or {})),
        "server_extra_args": redact_argv(list(server.extra_args or [])),
        "server_limits": {k: getattr(server, k, None) for k in
                          ("mem_fraction_static", "max_running_requests", "cuda_graph_max_bs_decode", "context_length")},
    }
    setup.update(eng.launch_setup(own))  # the emulator: its profile's name, its faults
    setup["param_files"] = file_digests(launch_files(eng, own=own, bench=bench, server=server, root=root), root)
    return setup
