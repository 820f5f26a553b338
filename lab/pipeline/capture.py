"""``lab capture``: record what an engine really serves, for contract tests and fixtures.

For each mode of a params file, one launch through the lab's own engine path
(:func:`lab.engine.command.build_server_command`, :class:`lab.engine.process.ServerProcess`,
:class:`lab.engine.startup.StartupTracker`), then the raw surfaces the lab reads, as files:

- ``server_info.before.json`` / ``metrics.before.txt``: ``/server_info`` and ``/metrics`` once
  ready, before any request of the lab's;
- ``generate.stream.txt``: the raw ``text/event-stream`` bytes of one streamed ``/generate``;
- ``generate.json``: one non-streamed ``/generate`` response (its ``meta_info``);
- ``requests.jsonl``: ``requests`` streamed requests at each of ``concurrency`` and each of
  ``context_tokens`` through the lab's client (:func:`lab.measure.client.run_requests_sync`),
  prompts padded to the context length with the served model's tokenizer
  (:func:`lab.workload.context.pad_prompt`, :func:`lab.engine.tokenizer.token_counter`; each
  record keeps ``context_tokens`` and the lab's own ``counted_prompt_tokens`` beside the server's
  ``prompt_tokens``), the first pass at each (concurrency, context) shape a warm-up whose records
  are kept and marked ``warmup: true`` (so a first-use kernel compile lands there);
- ``server_info.after.json`` / ``metrics.after.txt``, ``server.log`` (the engine's own log),
  ``launch.json`` (argv and environment, secrets redacted; startup phases; seconds);
- ``window.json``: per measured window (``c<N>``, or ``c<N>_ctx<T>`` off context 0) the lab's
  server-side readout (:func:`lab.measure.crosscheck.window_server_timing`) and client summary
  (:func:`lab.measure.records.summarize_run`): what a bench stage would compute.

It needs no MLflow, DVC or papermill, so it runs on a node where only the engine's packages are
installed (the first part of an offline bundle, :mod:`lab.offline`). A mode is skipped, with a
line saying so, when less than ``launch_budget_s`` remains before ``deadline_s``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from lab.config import ParamsError, load_params, repo_root
from lab.engine.command import build_server_command
from lab.engine.registry import engine_for
from lab.engine.ports import launch_port
from lab.engine.process import ServerError, ServerProcess, stop_stale_servers
from lab.engine.startup import StartupTracker
from lab.engine.synthetic import write_model
from lab.engine.telemetry import GpuSampler, energy_per_token_mj
from lab.measure import client
from lab.measure.crosscheck import LogWindow, window_server_timing
from lab.measure.records import measured_window_s, summarize_run
from lab.redact import redact_argv, redact_env
from lab.workload.context import pad_prompt
from lab.workload.dataset import workload
from lab.workload.sources import load_bench_prompts
from lab.engine.tokenizer import token_counter

__all__ = ["capture_mode", "main", "unpack"]


def _raw_stream(base_url: str, text: str, max_new_tokens: int, timeout_s: float) -> bytes:
    """The raw SSE body of one streamed ``/generate`` (as SGLang wrote it)."""
    body = json.dumps({"text": text, "stream": True, "rid": "capture-raw-stream",
                       "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                           "ignore_eos": True}}).encode()
    req = urllib.request.Request(base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.read()


def _generate_json(base_url: str, text: str, max_new_tokens: int, timeout_s: float) -> Any:
    body = json.dumps({"text": text, "rid": "capture-json", "sampling_params": {
        "max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}}).encode()
    req = urllib.request.Request(base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def unpack(tarball: Path, dest: Path) -> Path:
    """Unpack a committed capture archive (``.tar.xz``, one top folder holding ``<mode>/``, as
    ``tar -cJf`` of ``lab capture --out``'s folder makes it) into ``dest``; returns that folder.
    Python >= 3.11.4 extracts with ``filter="data"`` (no absolute paths, links out of ``dest`` or
    device files); older 3.11 (Debian 12's 3.11.2) has no filter argument.

    :raises ValueError: the archive holds more than one top folder, or none.
    """
    import tarfile

    with tarfile.open(tarball) as t:
        t.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        top = {Path(n).parts[0] for n in t.getnames()}
    if len(top) != 1:
        raise ValueError(f"{tarball}: expected one top folder, found {sorted(top)}")
    return Path(dest) / top.pop()


def window_key(concurrency: int, context_tokens: int) -> str:
    """``window.json`` key of one measured window: ``c<N>`` at context 0, else ``c<N>_ctx<T>``."""
    return f"c{concurrency}" if not context_tokens else f"c{concurrency}_ctx{context_tokens}"


def capture_mode(params, mode: str, out: Path, *, requests: int = 8, concurrency: tuple[int, ...] = (1,),
                 context_tokens: tuple[int, ...] = (0,), log=print) -> dict[str, Any]:
    """Launch ``mode``, record its surfaces into ``out`` (see the module docstring), stop it.

    :param requests: streamed requests per level and phase, at least ``2 * concurrency`` (so that
        every level fills its batch twice: a level of 64 gets 128).
    :param context_tokens: prompt lengths in tokens of the served model (0: the prompts as they are).

    :returns: the ``launch.json`` content plus ``window`` (per-level readout).
    :raises ServerError: the engine did not become ready (its log is in ``out``).
    """
    out.mkdir(parents=True, exist_ok=True)
    b = params.bench
    prompts, _ = load_bench_prompts(b, repo_root())
    cmd = build_server_command(params, mode, port=launch_port(params))
    why = engine_for(params).launch_refusal(cmd.flags)  # before the GPU spends minutes on a launch SGLang would refuse
    if why:
        raise ValueError(why)
    launch: dict[str, Any] = {"mode": mode, "argv": redact_argv(cmd.argv), "env": redact_env(cmd.env),
                              "engine": params.engine}
    t0 = time.perf_counter()
    srv = ServerProcess(cmd, out / "server.log", stop_grace_s=params.server.stop_grace_s)
    try:
        srv.start()
        tracker = StartupTracker(out / "server.log", show=False)
        try:
            launch["startup_s"] = srv.wait_ready(params.server.startup_timeout_s, on_poll=tracker.poll)
        finally:
            launch["startup"] = tracker.finish(time.perf_counter() - (srv.started_at or t0))
        base = srv.base_url
        info0 = client.fetch_json(base + "/server_info")
        (out / "server_info.before.json").write_text(json.dumps(info0, indent=1, default=str) + "\n")
        prom0 = client.fetch_text(base + "/metrics")
        (out / "metrics.before.txt").write_text(prom0)
        text = workload(prompts, 1, b.seed)[0][1]
        (out / "generate.stream.txt").write_bytes(_raw_stream(base, text, b.max_new_tokens, b.request_timeout_s))
        (out / "generate.json").write_text(json.dumps(_generate_json(base, text, b.max_new_tokens,
                                                                     b.request_timeout_s), indent=1) + "\n")
        windows = {}
        count = token_counter(params, mode)
        with open(out / "requests.jsonl", "w") as req_file:
            for c, ctx in ((c, ctx) for c in concurrency for ctx in context_tokens):
                for phase in ("warmup", "measured"):
                    texts = [(i, pad_prompt(t, ctx, count)) for i, t in
                             workload(prompts, max(requests, 2 * c), b.seed + (0 if phase == "measured" else 10_000) + c)]
                    counted = {i: count(t) for i, t in texts}
                    p_before = client.fetch_text(base + "/metrics")
                    i_before = client.fetch_json(base + "/server_info")
                    lw = LogWindow(out / "server.log")
                    with GpuSampler(0.5) as gpu:
                        recs = client.run_requests_sync(base, texts, concurrency=c, max_new_tokens=b.max_new_tokens,
                                                        temperature=b.temperature, timeout_s=b.request_timeout_s,
                                                        rid_prefix=f"{mode}-{window_key(c, ctx)}-{phase}",
                                                        progress_desc=None, mode=mode, repeat=0)
                    for r in recs:
                        req_file.write(json.dumps({**r.to_json(), "concurrency": c, "context_tokens": ctx,
                                                   "counted_prompt_tokens": counted.get(r.prompt_index),
                                                   "warmup": phase == "warmup"}) + "\n")
                    if phase == "measured":
                        server = window_server_timing(p_before, client.fetch_text(base + "/metrics"), i_before,
                                                      client.fetch_json(base + "/server_info"), lw.read(),
                                                      speculative=params.mode(mode).is_speculative)
                        summ = summarize_run(recs, wall_s=measured_window_s(recs) or 0.0, server=server).to_dict()
                        summ["gpu_telemetry"] = tel = gpu.summary()
                        summ["energy_mj_per_output_token"] = energy_per_token_mj(tel, summ.get("completion_tokens_total") or 0)
                        summ["context_tokens"] = ctx
                        windows[window_key(c, ctx)] = summ
                        log(f"[capture] {mode} {window_key(c, ctx)}: decode {summ.get('decode_tok_s')} tok/s, verify "
                            f"{summ.get('verify_ms')} ms, draft {summ.get('draft_ms')} ms, decode step "
                            f"{summ.get('decode_ms')} ms, accept {summ.get('accept_length')}")
        (out / "window.json").write_text(json.dumps(windows, indent=1, default=str) + "\n")
        (out / "server_info.after.json").write_text(
            json.dumps(client.fetch_json(base + "/server_info"), indent=1, default=str) + "\n")
        (out / "metrics.after.txt").write_text(client.fetch_text(base + "/metrics"))
        launch["window"] = windows
    finally:
        srv.stop()
        launch["seconds"] = round(time.perf_counter() - t0, 1)
        (out / "launch.json").write_text(json.dumps(launch, indent=1, default=str) + "\n")
    return launch


def main(argv: list[str] | None = None) -> int:
    """``lab capture --params FILE --out DIR [--mode M ...]``: exit 0 when every mode captured
    (skips for time included), 1 when a mode failed (its log kept), 2 on bad params."""
    ap = argparse.ArgumentParser(prog="lab capture", description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", required=True, help="params file (engine, model, server, modes, bench)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mode", action="append", default=None, help="capture this mode (repeatable; default all)")
    ap.add_argument("--requests", type=int, default=8, help="streamed requests per level and phase (at least 2 x the level)")
    ap.add_argument("--concurrency", type=int, action="append", default=None, help="levels (default: 1)")
    ap.add_argument("--context-tokens", type=int, action="append", default=None,
                    help="prompt lengths in the served model's tokens (repeatable; default: 0, the prompts as they are)")
    ap.add_argument("--deadline-s", type=float, default=None, help="skip modes that would start after this")
    ap.add_argument("--launch-budget-s", type=float, default=90.0, help="time one mode needs, to judge the deadline")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        params = load_params(a.params)
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if params.model.synthetic:
        print(f"[capture] synthetic model {params.model.synthetic}: {write_model(params.model.synthetic, repo_root())}")
    stop_stale_servers()
    rc = 0
    for mode in a.mode or list(params.modes):
        left = (a.deadline_s - (time.perf_counter() - t0)) if a.deadline_s else None
        if left is not None and left < a.launch_budget_s:
            print(f"[capture] {mode}: SKIPPED, {left:.0f} s left before the deadline")
            continue
        d = a.out / mode
        if d.exists():
            shutil.rmtree(d)
        try:
            res = capture_mode(params, mode, d, requests=a.requests, concurrency=tuple(a.concurrency or [1]),
                               context_tokens=tuple(a.context_tokens or [0]))
            print(f"[capture] {mode}: ready in {res.get('startup_s', 0):.1f} s, {res['seconds']} s in all -> {d}")
        except (ServerError, OSError, ValueError) as exc:
            rc = 1
            print(f"[capture] {mode}: FAILED: {str(exc)[:2000]}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
