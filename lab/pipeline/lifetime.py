"""The engine's lifetime around one mode's measurement: prepare, start, warm up, stop.

What :func:`lab.pipeline.bench.run_mode` does before and around measuring, each step a small
function that fills in the mode's :class:`lab.measure.result.ModeResult`:

- :func:`check_writable`: the results dir can be written (the first check, in seconds);
- :func:`prepare`: stale engines stopped, preflight (:mod:`lab.engine.preflight`), the
  environment captured (:mod:`lab.engine.envcapture`); the results directory is the
  stage's new attempt directory (:mod:`lab.pipeline.staging`), so nothing earlier is removed;
- :func:`engine`: a context manager: SIGTERM turned into ``SystemExit`` so ``finally`` runs,
  the engine started in its own process group (:mod:`lab.engine.command`, :mod:`lab.engine.process`), its startup phases
  followed in its log (:mod:`lab.engine.startup`), its effective configuration and version
  read back from ``/server_info`` (:mod:`lab.engine.effective`, :mod:`lab.tracking.versions`);
  the engine group is stopped on leaving, however it is left;
- :func:`warm_up` until the engine's speed is stable (:mod:`lab.measure.hygiene`);
- :func:`capture_trace`: the optional torch-profiler trace (:mod:`lab.measure.trace_capture`).

It lives in ``pipeline/`` (not ``engine/``) because it wires engine, measure and workload
modules together; the engine modules it calls know nothing of a mode's result.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from lab.config import BenchParams, ModelParams, ModeParams, ServerParams
from lab.engine.effective import effective_config
from lab.engine.envcapture import capture_environment
from lab.engine.preflight import format_table, preflight_report
from lab.engine.command import ServerCommand
from lab.engine.process import ServerProcess, stop_stale_servers
from lab.engine.registry import Engine
from lab.engine.startup import StartupTracker
from lab.measure import client, hygiene
from lab.measure.point import BenchError, check_alive
from lab.measure.result import ModeResult
from lab.pipeline.staging import check_output_dir
from lab.tracking.versions import version_tags
from lab.workload.dataset import workload

__all__ = ["check_writable", "prepare", "engine", "warm_up", "capture_trace", "sigterm_as_exit"]


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so ``finally`` blocks stop the engine group (main thread
    only; elsewhere nothing is installed)."""
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


def check_writable(d: Path) -> None:
    """Create ``d`` and write a probe file in it (:func:`lab.pipeline.staging.check_output_dir`).

    :raises BenchError: it cannot be written (a file in the way, permissions, disk), with the fix.
    """
    problem = check_output_dir(d)
    if problem:
        raise BenchError(problem)


def prepare(eng: Engine, modes: dict[str, ModeParams], cmd: ServerCommand, out: Path, result: ModeResult,
            log=print, *, model: ModelParams, server: ServerParams, bench: BenchParams, own: Any = None) -> None:
    """Everything before the engine starts: stale engines stopped (one on our port would
    fail the port check), preflight (``result.preflight``, its table logged), then the
    environment captured (``result.environment_tags``, files under ``out/environment``).

    :param eng: the :class:`lab.engine.registry.Engine` ``cmd`` launches; ``modes``: ``{name: ModeParams}``
        of the mode(s) checked; ``model``, ``server``, ``bench``: those params.yaml sections; ``own``:
        ``eng.own_section(params)`` (:func:`lab.engine.preflight.preflight_report`).
    :raises lab.engine.preflight.PreflightError: a preflight check failed.
    """
    stop_stale_servers(log=log)
    pre = preflight_report(eng, modes, model=model, server=server, bench=bench, own=own, python=cmd.argv[0],
                           results_dir=out)
    result.preflight = pre.to_dict()
    log(f"[lab] {result.mode}: preflight\n{format_table(pre)}")
    pre.raise_if_failed()
    result.environment_tags = capture_environment(out / "environment", python=cmd.argv[0],
                                                  server_env=cmd.env, engine=eng.name)


@contextmanager
def engine(server: ServerParams, cmd: ServerCommand, out: Path, result: ModeResult, log=print) -> Iterator[ServerProcess]:
    """Start the engine ``cmd`` launches (``cmd.engine``), wait until it is ready, read back what it
    resolved; yield it; stop its process group on leaving (also on SIGTERM, KeyboardInterrupt or
    an error).

    :param server: ``params.server`` (``stop_grace_s``, ``startup_timeout_s``, both s).

    Fills ``result.startup`` (phases; also when startup fails), ``startup_s`` (s),
    ``engine_version``, ``version_tags`` and ``effective_config``.

    :raises lab.engine.process.ServerError: the engine exited or was not ready in
        ``server.startup_timeout_s``.
    """
    with sigterm_as_exit(), ServerProcess(cmd, out / "server.log", stop_grace_s=server.stop_grace_s) as srv:
        log(f"[lab] {result.mode}: starting {cmd.engine}: {cmd.display()}")
        tracker = StartupTracker(out / "server.log", desc=f"{result.mode} startup")
        try:
            startup_s = srv.wait_ready(server.startup_timeout_s, on_poll=tracker.poll)
        finally:
            result.startup = tracker.finish(time.perf_counter() - (srv.started_at or time.perf_counter()))
        result.startup["startup_s"] = result.startup_s = startup_s
        info = client.fetch_json(srv.base_url + "/server_info")
        result.engine_version = str(info.get("version", "unknown"))
        result.version_tags = version_tags(cmd.engine, info, cmd.argv[0])
        result.effective_config = effective_config(info, (out / "server.log").read_text(errors="replace"))
        yield srv


def warm_up(srv: ServerProcess, bench: BenchParams, prompts: list[str], out: Path, result: ModeResult,
            log=print, count=None) -> None:
    """Warm-up requests until the decode speed is stable (``bench.warmup_*``;
    :func:`lab.measure.hygiene.warmup_until_stable`) into ``result.warmup``; nothing when
    ``bench.warmup_requests`` is 0; ``count`` is the served model's prompt-length counter
    (:func:`lab.engine.tokenizer.token_counter`; None: the emulator's rule) that pads each
    point's warm-up to its context length. :raises BenchError: the engine died meanwhile."""
    b, mode = bench, result.mode
    if not b.warmup_requests:
        return
    result.warmup = hygiene.warmup_until_stable(
        lambda i, n: client.run_requests_sync(
            srv.base_url, workload(prompts, n, b.seed + 10_000 + i),
            concurrency=min(max(b.concurrency), n), max_new_tokens=b.max_new_tokens,
            temperature=b.temperature, timeout_s=b.request_timeout_s,
            rid_prefix=f"{mode}-warmup{i}", progress_desc=None, mode=mode),
        batch=b.warmup_requests, cv_threshold=b.warmup_cv_threshold, window=b.warmup_window,
        max_requests=max(b.warmup_max_requests, b.warmup_requests), log=log)
    result.warmup["points"] = warm_up_points(srv, b, prompts, mode, log, count)
    check_alive(srv, f"{mode} warm-up", out)


def warm_up_points(srv: ServerProcess, bench, prompts: list, mode: str, log=print, count=None) -> list[dict]:
    """One pass of every measured point before any is measured, with other prompts: its
    concurrency (one full batch), context and output length, or its arrival schedule. SGLang
    compiles some kernels on first use (tvm-ffi, Triton), once per new shape; the ICL-stable
    warm-up above runs one concurrency only, and on a real SGLang 0.5.16 the first batch of 8
    then paid 428 ms to its first token inside c=8's first measured repeat (250 ms in the later
    ones; :mod:`lab.measure.hygiene`, first-use rows).

    :returns: per point ``{"point", "requests", "max_ttft_ms", "stalls"}`` (the stalls the pass
        absorbed, :func:`lab.measure.hygiene.stall_check`).
    """
    from lab.measure.point import measurement_points
    from lab.workload.arrivals import arrival_times
    from lab.workload.context import estimate_tokens, pad_prompt
    from lab.workload.dataset import output_lengths

    rows = []
    for i, point in enumerate(measurement_points(bench)):
        n = max(point.concurrency, 2) if point.request_rate is None else bench.num_prompts
        seed = bench.seed + 30_000 + i
        texts = [(j, pad_prompt(t, point.context_tokens, count or estimate_tokens)) for j, t in workload(prompts, n, seed)]
        recs = client.run_requests_sync(
            srv.base_url, texts, concurrency=point.concurrency,
            max_new_tokens=output_lengths(len(texts), point.output_tokens, bench.output_tokens_spread, seed),
            temperature=bench.temperature, timeout_s=bench.request_timeout_s, rid_prefix=f"{mode}-warmup-{point.key}",
            progress_desc=None, mode=mode,
            arrivals=None if point.request_rate is None else arrival_times(len(texts), point.request_rate,
                                                                           bench.burstiness, seed))
        st = hygiene.stall_check(recs)
        rows.append({"point": point.key, "requests": n, "max_ttft_ms": st["max_ttft_ms"],
                     "stalls": [round(e["ms"], 1) for e in st["stalls"]]})
        log(f"[lab] warm-up {point.key}: {n} requests, first token within {st['max_ttft_ms'] or 0:.0f} ms"
            + (f", absorbed stalls of {rows[-1]['stalls']} ms" if st["stalls"] else ""))
    return rows


def capture_trace(srv: ServerProcess, bench: BenchParams, prompts: list[str], out: Path, result: ModeResult,
                    log=print, *, modelled: bool) -> None:
    """With ``bench.trace``: a torch-profiler trace via SGLang's ``/start_profile``
    (:func:`lab.measure.trace_capture.capture_trace`) into ``out/trace`` and ``result.trace``;
    ``modelled``: the engine is the emulator (its trace is a model, and says so)."""
    b = bench
    if not b.trace:
        return
    from lab.measure.trace_capture import capture_trace as capture

    result.trace = capture(
        srv.base_url, out / "trace", mode=result.mode, modelled=modelled,
        texts=workload(prompts, b.trace_requests, b.seed + 20_000), max_new_tokens=b.trace_max_new_tokens,
        temperature=b.temperature, request_timeout_s=b.request_timeout_s, log=log)
