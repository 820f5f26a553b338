"""One mode end to end: validate, launch the engine, benchmark, record, log.

:func:`run_mode` is what ``notebooks/bench.ipynb`` calls. It wires the other modules
together and owns no measurement logic (guidellm ``benchmark/benchmarker.py`` shape):

1. checks that can fail fast (results dir writable, dataset, MLflow reachable, then
   :mod:`lab.engine.preflight`: GPUs, SGLang, the argv through SGLang's parser, weights, port,
   disk) run before any server starts; the environment is captured (:mod:`lab.engine.envcapture`);
2. the engine starts in its own process group (:mod:`lab.engine.server`), its startup phases
   followed in its log (:mod:`lab.engine.startup`); its effective configuration is read back from
   ``/server_info`` (:mod:`lab.engine.effective`);
3. warm-up requests, then for each concurrency level and repeat: ``/metrics`` and
   ``/server_info`` scraped before and after, requests streamed (:mod:`lab.measure.client`),
   GPUs sampled (:mod:`lab.engine.telemetry`), summarised (:mod:`lab.measure.metrics`) and cross-checked
   against the server's own timing and log window (:mod:`lab.measure.crosscheck`);
4. results are written atomically under ``results/<mode>/`` and logged to MLflow
   (:mod:`lab.tracking.runs`). A failure leaves ``metrics.json`` with ``"status": "failed"``,
   what was measured so far, the server log, and a FAILED MLflow run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lab import atomic
from lab.measure import client
from lab.measure import hygiene
from lab.measure import metrics as M
from lab.analysis import sentinel
from lab.analysis import stats
from lab.config import LabParams, repo_root
from lab.workload.context import pad_prompt
from lab.workload.dataset import output_lengths, workload
from lab.workload.sources import dataset_params, emulator_prompt_file, load_bench_prompts
from lab.measure.crosscheck import LogWindow, add_cross_checks, window_server_timing
from lab.engine.effective import effective_config
from lab.engine.envcapture import capture_environment
from lab.engine.preflight import format_table, run_preflight
from lab.engine.server import ServerProcess, build_server_command, stop_stale_servers
from lab.tracking.params_log import mode_run_params
from lab.engine.startup import StartupTracker
from lab.tracking.versions import version_tags
from lab.engine.telemetry import GpuSampler
from lab.tracking.runs import RunHandle, TrackingError, flatten_params, open_run, run_tags

__all__ = ["run_mode", "HEADLINE_METRICS", "BY_CONCURRENCY", "BenchError", "write_json_atomic", "level_key"]

# Per-run metrics aggregated over repeats (mean and 95 % CI) and shown as headlines.
HEADLINE_METRICS: tuple[str, ...] = (
    "decode_tok_s", "output_tok_s", "accept_length", "cycle_ms", "verify_ms", "draft_ms",
    "decode_ms", "verify_graph_fraction", "p50_ttft_ms", "p50_itl_ms", "p50_icl_ms",
    "p50_tpot_ms", "p99_itl_ms", "server_step_ms", "error_rate", "p50_dispatch_delay_ms",
    "gpu_cycle_ms", "log_verify_graph_fraction", "crosscheck_disagreements",
    "p99_dispatch_delay_ms",
)

#: MLflow prefix of the per-level step metrics (``by_concurrency.decode_tok_s`` at step =
#: concurrency). The unprefixed names are the headline: the lowest concurrency's mean.
BY_CONCURRENCY = "by_concurrency"

#: GPU telemetry sampling period, seconds (DESIGN: 1 s or faster).
TELEMETRY_INTERVAL_S = 0.5


class BenchError(RuntimeError):
    """The benchmark could not complete (engine died, all requests failed...)."""


def level_key(concurrency: int, context_tokens: int | None = None, output_tokens: int | None = None) -> str:
    """``"c8"``: the key of a concurrency level in metrics.json and MLflow metric names.

    A point off the primary context/output length (``bench.context_tokens[0]``,
    ``bench.output_levels[0]``) gets ``"c8_ctx4096_out64"``; pass ``None`` for the primary.
    """
    if context_tokens is None and output_tokens is None:
        return f"c{concurrency}"
    return f"c{concurrency}_ctx{context_tokens}_out{output_tokens}"


def _point_key(b, c: int, ctx: int, out_len: int) -> str:
    primary = ctx == b.context_tokens[0] and out_len == b.output_levels[0]
    return level_key(c) if primary else level_key(c, ctx, out_len)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` via a temp file and rename (never a half-written file)."""
    atomic.write_json_atomic(path, obj)


@contextmanager
def _sigterm_as_exit():
    """Turn SIGTERM into SystemExit so ``finally`` blocks stop the engine group."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _check_writable(d: Path) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BenchError(f"results directory {d} is not writable ({exc}). Fix: check its "
                         "permissions or free disk space") from exc


def _appender(req_file, records_all: list[dict[str, Any]], **fields: Any):
    """``on_record`` for the client: append each finished request (with ``fields`` added) to
    ``requests.jsonl`` at once (flushed), so an interrupted or killed run keeps every request
    it measured."""
    def append(rec: dict[str, Any]) -> None:
        rec.update(fields)
        req_file.write(json.dumps(rec) + "\n")
        req_file.flush()
        records_all.append(rec)
    return append


def _check_alive(srv: ServerProcess, where: str, out: Path, recs: list[dict[str, Any]] | None = None) -> None:
    """Liveness = the engine process plus request outcomes (``/health`` is not polled: a
    busy server may answer it slowly). Raises :class:`BenchError` at once if the engine
    exited, or if requests were refused and it exits within 2 s (the client stops sending
    as soon as connections are refused, so a crash never waits out request timeouts)."""
    refused = any((r.get("error") or "").startswith((client.NOT_SENT_PREFIX, "connection failed"))
                  for r in recs or ())
    deadline = time.monotonic() + (2.0 if refused else 0.0)
    while srv.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not srv.alive():
        from lab.engine.server import log_tail

        code = srv.proc.returncode if srv.proc is not None else None
        raise BenchError(f"engine died (exit code {code}) during {where}; requests measured so far are "
                         f"kept in {out / 'requests.jsonl'}. Log tail ({out / 'server.log'}):\n"
                         f"{log_tail(out / 'server.log', 15)}")
    if refused:
        raise BenchError(f"engine refused connections during {where} but its process runs; "
                         f"see {out / 'server.log'}")


def _aggregate(runs: list[dict[str, Any]], level: int, point: str | None = None) -> dict[str, Any]:
    """Mean and 95 % interval over the repeats of one level (and point key), per headline metric
    (:func:`lab.analysis.stats.metric_ci`: Student-t; exact Poisson for counts)."""
    out: dict[str, Any] = {"concurrency": level, "repeats": 0}
    rows = [r for r in runs if r["concurrency"] == level and r.get("point", level_key(level)) == (point or level_key(level))]
    if rows and "context_tokens" in rows[0]:
        out.update(context_tokens=rows[0]["context_tokens"], max_new_tokens=rows[0]["max_new_tokens"])
    out["repeats"] = len(rows)
    for key in HEADLINE_METRICS:
        values = [r.get(key) for r in rows if r.get(key) is not None]
        if values:
            mean, lo, hi = stats.metric_ci(key, values)  # t-interval; exact Poisson for counts
            out[key] = {"mean": mean, "ci95_lo": lo, "ci95_hi": hi, "values": values}
    out["token_accounting_ok"] = all(r.get("token_accounting_ok", True) for r in rows)
    out["crosscheck_flags"] = [f"repeat {r.get('repeat')}: {f}" for r in rows
                               for f in (r.get("crosscheck") or {}).get("flags", [])]
    out["gpu_telemetry"] = _telemetry_level([r.get("gpu_telemetry") for r in rows])
    # Errored requests are counted, never dropped: totals over the level's repeats.
    out["requests"] = sum(r.get("requests", 0) for r in rows)
    out["errors"] = sum(r.get("errors", 0) for r in rows)
    out["degenerate_output"] = any((r.get("hygiene") or {}).get("degenerate", {}).get("degenerate") for r in rows)
    return out


def _telemetry_level(summaries: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Per GPU over the level's repeats: mean SM clock, lowest clock/max ratio, mean power,
    peak memory; or the "no GPU telemetry" note."""
    got = [s for s in summaries if s and s.get("available")]
    if not got:
        notes = {s.get("note") for s in summaries if s}
        return {"available": False, "note": "; ".join(sorted(n for n in notes if n)) or "no GPU telemetry"}
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    for s in got:
        for g in s["gpus"]:
            per_gpu.setdefault(g["gpu"], []).append(g)

    def agg(rows, key, fn):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return fn(vals) if vals else None

    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"available": True, "gpus": [
        {"gpu": i, "name": rows[0].get("name"), "sm_clock_mhz_mean": agg(rows, "sm_clock_mhz_mean", mean),
         "sm_clock_frac_of_max_min": agg(rows, "sm_clock_frac_of_max", min),
         "gpu_util_pct_mean": agg(rows, "gpu_util_pct_mean", mean), "power_w_mean": agg(rows, "power_w_mean", mean),
         "mem_used_gib_max": agg(rows, "mem_used_gib_max", max)} for i, rows in sorted(per_gpu.items())]}


def _ground_truth(truth_path: Path, records: list[dict[str, Any]], levels: list[int]) -> dict[str, Any]:
    """What the emulator actually delivered, aggregated exactly like the client's figures.

    Per (level, repeat): median ground-truth decode_tok_s over requests, accept length over
    the repeat's requests, mean phase times over the repeat's window; then the mean over
    repeats. Read from the emulator's side file after the run; the client never reads it.
    """
    import statistics

    from lab.emulator.truth import load_truth

    truth = load_truth(truth_path)
    out: dict[str, Any] = {}
    points = list(dict.fromkeys(r.get("point", level_key(r["concurrency"])) for r in records))
    for point in points:
        per_repeat: list[dict[str, float | None]] = []
        mine = [r for r in records if r.get("point", level_key(r["concurrency"])) == point]
        for rep in sorted({r["repeat"] for r in mine}):
            recs = [r for r in mine if r["repeat"] == rep and r["ok"] and r["rid"] in truth.requests]
            if not recs:
                continue
            tok_s = [v for v in (truth.decode_tok_s(r["rid"]) for r in recs) if v is not None]
            phases = truth.mean_phase_s(min(r["t_send"] for r in recs), max(r["t_end"] for r in recs))
            per_repeat.append({
                "decode_tok_s": statistics.median(tok_s) if tok_s else None,
                "accept_length": truth.accept_length([r["rid"] for r in recs]),
                **{k[:-2] + "_ms": (v * 1e3 if v is not None else None) for k, v in phases.items()},
            })
        if per_repeat:
            out[point] = {
                k: (statistics.fmean(vals) if (vals := [p[k] for p in per_repeat if p[k] is not None]) else None)
                for k in per_repeat[0]
            }
    out["fidelity"] = {k: vars(f) for k, f in truth.fidelity().items()}
    return out


def _headline(levels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Flat DVC/MLflow headline: each metric's mean at the lowest concurrency, and per level."""
    head: dict[str, Any] = {}
    first = True
    for key, agg in levels.items():
        for m in HEADLINE_METRICS:
            if m in agg:
                head[f"{key}.{m}"] = agg[m]["mean"]
                if first:
                    head[m] = agg[m]["mean"]
        first = False
    return head


def run_mode(params: LabParams, mode_name: str, results_dir: str | os.PathLike[str], *,
             log=print) -> dict[str, Any]:
    """Benchmark one mode and record it.

    :param params: validated params (a papermill-injected mode slice already merged).
    :param mode_name: key in ``params.modes``.
    :param results_dir: ``results/<mode>`` (relative paths resolve against the repo root).
    :returns: the ``result.json`` content (``status`` ``ok``); ``metrics.json`` holds its
        flat headline for DVC.
    :raises BenchError, ServerError, TrackingError, DatasetError, ParamsError: with
        ``metrics.json`` marked failed and the MLflow run FAILED where one was opened.
    """
    root = repo_root()
    out = Path(results_dir)
    out = out if out.is_absolute() else root / out
    params.mode(mode_name)  # unknown mode: fail before anything else
    _check_writable(out)
    prompts, dataset_info = load_bench_prompts(params.bench, root)  # file or HF id (lab/workload/sources.py)
    from lab.tracking.grouping import mode_run_name, pipeline_parent

    run = open_run(params, run_name=mode_run_name(params, mode_name), tags=run_tags(params, mode=mode_name),
                   parent_run_id=pipeline_parent(params))
    result_run_id = run.run_id
    b = params.bench
    spec = params.mode(mode_name).is_speculative
    levels = sorted(b.concurrency)
    truth_path = out / "ground_truth.jsonl" if params.engine == "emulator" else None
    cmd = build_server_command(params, mode_name, ground_truth_file=truth_path,
                               prompt_file=emulator_prompt_file(params, prompts, root, out))
    result: dict[str, Any] = {"status": "failed", "mode": mode_name, "engine": params.engine,
                              "mlflow_run_id": result_run_id, "server_command": cmd.display(),
                              "dataset": dataset_info}  # per-prompt categories, HF fingerprint
    runs: list[dict[str, Any]] = []
    records_all: list[dict[str, Any]] = []
    telemetry_step = 0
    try:
        # every params.yaml leaf of this mode, and which content the dataset had (HF fingerprint)
        run.log_params({**mode_run_params(params, mode_name), **dataset_params(dataset_info)})
        stop_stale_servers(log=log)  # a stale server on our port would fail the port check
        pre = run_preflight(params, [mode_name], python=cmd.argv[0], results_dir=out)
        result["preflight"] = pre.to_dict()
        log(f"[lab] {mode_name}: preflight\n{format_table(pre)}")
        pre.raise_if_failed()
        # Only now, with the engine about to start, do the previous results go.
        for stale in ("metrics.json", "result.json", "requests.jsonl", "runs.json", "server.log", "ground_truth.jsonl"):
            (out / stale).unlink(missing_ok=True)
        shutil.rmtree(out / "profile", ignore_errors=True)  # an earlier bench.profile trace
        result["environment_tags"] = capture_environment(out / "environment", python=cmd.argv[0],
                                                         server_env=cmd.env, engine=params.engine)
        with _sigterm_as_exit(), ServerProcess(cmd, out / "server.log",
                                               stop_grace_s=params.server.stop_grace_s) as srv:
            log(f"[lab] {mode_name}: starting {params.engine}: {cmd.display()}")
            tracker = StartupTracker(out / "server.log", desc=f"{mode_name} startup")
            try:
                startup_s = srv.wait_ready(params.server.startup_timeout_s, on_poll=tracker.poll)
            finally:
                result["startup"] = tracker.finish(time.perf_counter() - (srv.started_at or time.perf_counter()))
            result["startup"]["startup_s"] = result["startup_s"] = startup_s
            info = client.fetch_json(srv.base_url + "/server_info")
            result["engine_version"] = str(info.get("version", "unknown"))
            run.set_tags(version_tags(params.engine, info, cmd.argv[0]))  # run_tags had no server yet
            result["effective_config"] = effective_config(info, (out / "server.log").read_text(errors="replace"))
            run.log_params(flatten_params({"effective": result["effective_config"]}))
            if b.warmup_requests:
                result["warmup"] = hygiene.warmup_until_stable(
                    lambda i, n: client.run_requests_sync(
                        srv.base_url, workload(prompts, n, b.seed + 10_000 + i),
                        concurrency=min(levels[-1], n), max_new_tokens=b.max_new_tokens,
                        temperature=b.temperature, timeout_s=b.request_timeout_s,
                        rid_prefix=f"{mode_name}-warmup{i}", progress_desc=None, mode=mode_name),
                    batch=b.warmup_requests, cv_threshold=b.warmup_cv_threshold, window=b.warmup_window,
                    max_requests=max(b.warmup_max_requests, b.warmup_requests), log=log)
                _check_alive(srv, f"{mode_name} warm-up", out)
            points = [(c, ctx, n) for c in levels for ctx in b.context_tokens for n in b.output_levels]
            with open(out / "requests.jsonl", "a") as req_file:
                for c, ctx, out_len in points:
                    point = _point_key(b, c, ctx, out_len)
                    for rep in range(b.repeats):
                        texts = [(i, pad_prompt(t, ctx)) for i, t in workload(prompts, b.num_prompts, b.seed + rep)]
                        lengths = output_lengths(len(texts), out_len, b.output_tokens_spread, b.seed + rep)
                        prom0 = client.fetch_text(srv.base_url + "/metrics")
                        info0 = client.fetch_json(srv.base_url + "/server_info")
                        log_window = LogWindow(out / "server.log")
                        with GpuSampler(TELEMETRY_INTERVAL_S) as gpu:
                            recs = client.run_requests_sync(
                                srv.base_url, texts, concurrency=c, max_new_tokens=lengths,
                                temperature=b.temperature, timeout_s=b.request_timeout_s,
                                rid_prefix=f"{mode_name}-{point}-r{rep}",
                                progress_desc=f"{mode_name} {point} repeat {rep + 1}/{b.repeats}",
                                mode=mode_name, repeat=rep,
                                on_record=_appender(req_file, records_all, concurrency=c, context_tokens=ctx,
                                                    max_new_tokens=out_len, point=point))
                        _log_telemetry(run, gpu, telemetry_step, log)
                        telemetry_step += len(gpu.step_metrics())
                        _check_alive(srv, f"{mode_name} c={c} repeat {rep}", out, recs)
                        server = window_server_timing(
                            prom0, client.fetch_text(srv.base_url + "/metrics"), info0,
                            client.fetch_json(srv.base_url + "/server_info"), log_window.read(),
                            speculative=spec)
                        window = M.measured_window_s(recs)
                        if not window or not any(r["ok"] for r in recs):
                            # all failed: a summary would read as a (zero-throughput) result
                            raise BenchError(
                                f"no request succeeded at c={c}{'' if point == level_key(c) else ' (' + point + ')'} "
                                f"repeat {rep} ({len(recs)} sent): "
                                f"{recs[0].get('error') if recs else 'no requests'}. Fix: see "
                                f"{out / 'requests.jsonl'} and {out / 'server.log'}; raise "
                                "bench.request_timeout_s if requests timed out")
                        summary = add_cross_checks(M.summarize_run(recs, wall_s=window, server=server))
                        summary.update(concurrency=c, repeat=rep, context_tokens=ctx, max_new_tokens=out_len,
                                       point=point, gpu_telemetry=gpu.summary())
                        for flag in summary["crosscheck"]["flags"]:
                            log(f"[lab] {mode_name} {point} repeat {rep}: CROSS-CHECK: {flag}")
                        summary["hygiene"] = hygiene.run_hygiene(
                            recs, ngram_n=b.ngram_n, ngram_threshold=b.ngram_repeat_threshold,
                            degenerate_max_fraction=b.degenerate_max_fraction)
                        runs.append(summary)
            if b.profile:  # torch-profiler trace via SGLang's /start_profile (lab/profiling/capture.py)
                from lab.profiling.capture import capture_profile

                result["profile"] = capture_profile(
                    srv.base_url, out / "profile", mode=mode_name, modelled=params.engine == "emulator",
                    texts=workload(prompts, b.profile_requests, b.seed + 20_000), max_new_tokens=b.profile_max_new_tokens,
                    temperature=b.temperature, request_timeout_s=b.request_timeout_s, log=log)
        result["levels"] = {p: _aggregate(runs, c, p) for p, c in dict.fromkeys(
            (r["point"], r["concurrency"]) for r in runs)}
        if truth_path is not None and truth_path.exists():
            result["ground_truth"] = _ground_truth(truth_path, records_all, levels)
        result["headline"] = _headline(result["levels"])
        result["warnings"] = hygiene.hygiene_warnings(runs, result.get("warmup"))
        for w in result["warnings"]:
            log(f"[lab] WARNING {mode_name}: {w}")
        result["status"] = "ok"
        result["sentinel"] = sentinel.check(params, result, run_id=result_run_id, log=log)
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        if records_all:  # requests.jsonl keeps what was measured; the run is incomplete
            result["partial"] = {"requests_recorded": len(records_all),
                                 "runs_completed": [f"{r['point']} repeat {r['repeat']}" for r in runs]}
        result["levels_partial"] = {p: _aggregate(runs, c, p) for p, c in dict.fromkeys(
            (r["point"], r["concurrency"]) for r in runs)}
        _write_results(out, result, runs)
        _finish_tracking(run, out, result, "FAILED", log)
        raise
    _write_results(out, result, runs)
    _finish_tracking(run, out, result, "FINISHED", log)
    return result


def _log_telemetry(run: RunHandle, gpu: GpuSampler, step0: int, log) -> None:
    """GPU samples of one window as MLflow step metrics ``gpu<i>.<field>`` (steps continue
    across windows); a tracking failure is reported, the run goes on."""
    try:
        for step, values in gpu.step_metrics():
            run.log_metrics(values, step=step0 + step)
    except TrackingError as exc:
        log(f"[lab] MLflow telemetry logging failed ({exc}); the summary stays in result.json")


def _write_results(out: Path, result: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """``result.json`` (everything), ``runs.json`` (per level x repeat) and the lean
    ``metrics.json`` that DVC shows: status, engine, the flat headline numbers,
    ``startup_s`` and the effective configuration."""
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


def _finish_tracking(run: RunHandle, out: Path, result: dict[str, Any], status: str, log) -> None:
    """Log metrics and artifacts; a tracking failure keeps the results and says how to re-log."""
    try:
        run.set_tags({"status": result["status"], "engine_version": result.get("engine_version", "unknown"),
                      **result.get("environment_tags", {})})
        sentinel.log_to_run(run, result)
        run.log_metrics(result.get("headline", {}))
        from lab.tracking.mlflow_view import interval_metrics, warning_tags

        run.log_metrics(interval_metrics(result.get("levels") or {}))  # means' 95 % intervals
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
        # The executed notebook is logged by lab.pipeline.stage once papermill has written it.
        for name in ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", "ground_truth.jsonl"):
            run.log_artifact(out / name)
        if (result.get("profile") or {}).get("trace"):  # Chrome trace: opens in ui.perfetto.dev
            from lab.profiling.capture import profile_metrics

            run.log_artifact(Path(result["profile"]["trace"]), "profile")
            run.log_metrics(profile_metrics(result["profile"]))
        env_dir = out / "environment"
        for path in sorted(env_dir.glob("*")) if env_dir.is_dir() else []:
            run.log_artifact(path, "environment")
        run.finish(status)
    except TrackingError as exc:
        log(f"[lab] MLflow logging failed ({exc}); results are safe in {out}. "
            f"Fix the tracking server, then run: lab log {out}")


def levels_table(result: dict[str, Any]):
    """A pandas table of one mode's results: one row per level, ``mean [lo, hi]`` per metric.

    Emulator runs get ``truth_*`` columns: what the emulator actually delivered.
    """
    import pandas as pd

    rows = []
    for key, agg in result.get("levels", {}).items():
        row: dict[str, Any] = {"point": key, "repeats": agg["repeats"]}
        for m in HEADLINE_METRICS:
            if m in agg:
                v = agg[m]
                row[m] = (f"{v['mean']:.2f} [{v['ci95_lo']:.2f}, {v['ci95_hi']:.2f}]"
                          if v["ci95_lo"] == v["ci95_lo"] else f"{v['mean']:.2f}")
        row["token_accounting_ok"] = agg.get("token_accounting_ok")
        row["degenerate_output"] = agg.get("degenerate_output")
        truth = result.get("ground_truth", {}).get(key, {})
        for m in ("decode_tok_s", "accept_length", "verify_ms"):
            if truth.get(m) is not None:
                row[f"truth_{m}"] = round(truth[m], 2)
        rows.append(row)
    return pd.DataFrame(rows).set_index("point").T
