"""One mode end to end: validate, launch the engine, benchmark, record, log.

:func:`run_mode` is what ``notebooks/bench.ipynb`` calls. It wires the other modules
together and owns no measurement logic (guidellm ``benchmark/benchmarker.py`` shape):

1. checks that can fail fast (results dir writable, dataset, MLflow reachable) run
   before any server starts;
2. the engine starts in its own process group (:mod:`lab.server`); its effective
   configuration is read back from ``/server_info`` (:mod:`lab.effective`);
3. warm-up requests, then for each concurrency level and repeat: ``/metrics`` and
   ``/server_info`` scraped before and after, requests streamed (:mod:`lab.client`),
   summarised (:mod:`lab.metrics`);
4. results are written atomically under ``results/<mode>/`` and logged to MLflow
   (:mod:`lab.tracking`). A failure leaves ``metrics.json`` with ``"status": "failed"``,
   what was measured so far, the server log, and a FAILED MLflow run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lab import client, hygiene, metrics as M, sentinel, stats
from lab.config import LabParams, repo_root
from lab.dataset import load_prompts, workload
from lab.effective import effective_config
from lab.server import ServerProcess, build_server_command
from lab.tracking import RunHandle, TrackingError, flatten_params, open_run, run_tags

__all__ = ["run_mode", "HEADLINE_METRICS", "BenchError", "write_json_atomic", "level_key"]

# Per-run metrics aggregated over repeats (mean and 95 % CI) and shown as headlines.
HEADLINE_METRICS: tuple[str, ...] = (
    "decode_tok_s", "output_tok_s", "accept_length", "cycle_ms", "verify_ms", "draft_ms",
    "decode_ms", "verify_graph_fraction", "p50_ttft_ms", "p50_itl_ms", "p50_icl_ms",
    "p50_tpot_ms", "p99_itl_ms", "server_step_ms", "error_rate", "p50_dispatch_delay_ms",
    "p99_dispatch_delay_ms",
)


class BenchError(RuntimeError):
    """The benchmark could not complete (engine died, all requests failed...)."""


def level_key(concurrency: int) -> str:
    """``"c8"``: the key of a concurrency level in metrics.json and MLflow metric names."""
    return f"c{concurrency}"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` via a temp file and rename (never a half-written file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


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


def _aggregate(runs: list[dict[str, Any]], level: int) -> dict[str, Any]:
    """Mean and 95 % t-interval over the repeats of one level, per headline metric."""
    out: dict[str, Any] = {"concurrency": level, "repeats": 0}
    rows = [r for r in runs if r["concurrency"] == level]
    out["repeats"] = len(rows)
    for key in HEADLINE_METRICS:
        values = [r.get(key) for r in rows if r.get(key) is not None]
        if values:
            mean, lo, hi = stats.mean_ci(values)
            out[key] = {"mean": mean, "ci95_lo": lo, "ci95_hi": hi, "values": values}
    out["token_accounting_ok"] = all(r.get("token_accounting_ok", True) for r in rows)
    out["degenerate_output"] = any((r.get("hygiene") or {}).get("degenerate", {}).get("degenerate") for r in rows)
    return out


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
    for c in levels:
        per_repeat: list[dict[str, float | None]] = []
        for rep in sorted({r["repeat"] for r in records if r["concurrency"] == c}):
            recs = [r for r in records if r["concurrency"] == c and r["repeat"] == rep
                    and r["ok"] and r["rid"] in truth.requests]
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
            out[level_key(c)] = {
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
    prompts = load_prompts(root / params.bench.dataset)
    for stale in ("metrics.json", "result.json", "requests.jsonl", "runs.json", "server.log", "ground_truth.jsonl"):
        (out / stale).unlink(missing_ok=True)
    run = open_run(params, run_name=f"{mode_name} | {params.engine}", tags=run_tags(params, mode=mode_name))
    result_run_id = run.run_id
    b = params.bench
    spec = params.mode(mode_name).is_speculative
    levels = sorted(b.concurrency)
    truth_path = out / "ground_truth.jsonl" if params.engine == "emulator" else None
    cmd = build_server_command(params, mode_name, ground_truth_file=truth_path)
    result: dict[str, Any] = {"status": "failed", "mode": mode_name, "engine": params.engine,
                              "mlflow_run_id": result_run_id, "server_command": cmd.display()}
    runs: list[dict[str, Any]] = []
    records_all: list[dict[str, Any]] = []
    try:
        run.log_params(flatten_params({"engine": params.engine, "mode_name": mode_name,
                                       "model": params.model.model_dump(), "server": params.server.model_dump(),
                                       "mode": params.mode(mode_name).model_dump(), "bench": b.model_dump(),
                                       **({"emulator": params.emulator.model_dump()} if params.engine == "emulator" else {})}))
        with _sigterm_as_exit(), ServerProcess(cmd, out / "server.log") as srv:
            log(f"[lab] {mode_name}: starting {params.engine}: {cmd.display()}")
            result["startup_s"] = srv.wait_ready(params.server.startup_timeout_s)
            info = client.fetch_json(srv.base_url + "/server_info")
            result["engine_version"] = str(info.get("version", "unknown"))
            result["effective_config"] = effective_config(info)
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
            with open(out / "requests.jsonl", "a") as req_file:
                for c in levels:
                    for rep in range(b.repeats):
                        texts = workload(prompts, b.num_prompts, b.seed + rep)
                        prom0 = client.fetch_text(srv.base_url + "/metrics")
                        info0 = client.fetch_json(srv.base_url + "/server_info")
                        recs = client.run_requests_sync(
                            srv.base_url, texts, concurrency=c, max_new_tokens=b.max_new_tokens,
                            temperature=b.temperature, timeout_s=b.request_timeout_s,
                            rid_prefix=f"{mode_name}-c{c}-r{rep}",
                            progress_desc=f"{mode_name} c={c} repeat {rep + 1}/{b.repeats}",
                            mode=mode_name, repeat=rep)
                        for r in recs:
                            r["concurrency"] = c
                            req_file.write(json.dumps(r) + "\n")
                        req_file.flush()
                        records_all += recs
                        if not srv.alive():
                            raise BenchError(f"engine died during {mode_name} c={c} repeat {rep}; "
                                             f"see {out / 'server.log'}")
                        server = M.server_timing(prom0, client.fetch_text(srv.base_url + "/metrics"))
                        for k in (("decode_ms",) if spec else ("verify_ms", "draft_ms")):
                            server[k] = None  # not applicable to this mode (0 would read as a measurement)
                        server["step_time_ms"] = M.step_time_ms(info0, client.fetch_json(srv.base_url + "/server_info"))
                        window = M.measured_window_s(recs)
                        if not window:
                            raise BenchError(f"no request succeeded at c={c} repeat {rep}: "
                                             f"{recs[0].get('error') if recs else 'no requests'}")
                        summary = M.summarize_run(recs, wall_s=window, server=server)
                        summary.update(concurrency=c, repeat=rep)
                        summary["hygiene"] = hygiene.run_hygiene(
                            recs, ngram_n=b.ngram_n, ngram_threshold=b.ngram_repeat_threshold,
                            degenerate_max_fraction=b.degenerate_max_fraction)
                        runs.append(summary)
        result["levels"] = {level_key(c): _aggregate(runs, c) for c in levels}
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
        result["levels_partial"] = {level_key(c): _aggregate(runs, c) for c in levels if any(r["concurrency"] == c for r in runs)}
        _write_results(out, result, runs)
        _finish_tracking(run, out, result, "FAILED", log)
        raise
    _write_results(out, result, runs)
    _finish_tracking(run, out, result, "FINISHED", log)
    return result


def _write_results(out: Path, result: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """``result.json`` (everything), ``runs.json`` (per level x repeat) and the lean
    ``metrics.json`` that DVC shows: status, engine and the flat headline numbers."""
    write_json_atomic(out / "runs.json", runs)
    write_json_atomic(out / "result.json", result)
    lean = {"status": result["status"], "engine": result["engine"], **result.get("headline", {})}
    if "error" in result:
        lean["error"] = result["error"]
    if result.get("warnings"):
        lean["warnings"] = "; ".join(result["warnings"])
    if result.get("sentinel"):
        lean["sentinel"] = result["sentinel"]["status"]
    write_json_atomic(out / "metrics.json", lean)


def _finish_tracking(run: RunHandle, out: Path, result: dict[str, Any], status: str, log) -> None:
    """Log metrics and artifacts; a tracking failure keeps the results and says how to re-log."""
    try:
        run.set_tags({"status": result["status"], "engine_version": result.get("engine_version", "unknown")})
        sentinel.log_to_run(run, result)
        run.log_metrics(result.get("headline", {}))
        for key, agg in result.get("levels", {}).items():
            run.log_metrics({m: v["mean"] for m, v in agg.items() if isinstance(v, dict)},
                            step=agg["concurrency"])
        # The executed notebook is logged by lab.stage once papermill has written it.
        for name in ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", "ground_truth.jsonl"):
            run.log_artifact(out / name)
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
        row: dict[str, Any] = {"concurrency": agg["concurrency"], "repeats": agg["repeats"]}
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
    return pd.DataFrame(rows).set_index("concurrency").T
