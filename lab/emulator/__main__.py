"""``python -m lab.emulator <SGLang launch flags>``: run the emulator server.

Environment honoured like SGLang 0.5.23 (``sglang/srt/environ.py``):
``SGLANG_SIMULATE_ACC_LEN`` (float, <= 0 or unset: off), ``SGLANG_RECORD_STEP_TIME``
(fill ``step_time_dict``), ``SGLANG_ENABLE_METRICS_DEVICE_TIMER`` (feed
``sglang:forward_execution_seconds_total``). SIGTERM/SIGINT stop the engine, flush the
ground truth and exit 0 within ~1 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time

from aiohttp import web

from lab.emulator.args import parse_args, sglang_options, sglang_refuses
from lab.emulator.engine import Engine, draft_extend_graph_disabled
from lab.emulator.faults import FaultError, Faults, parse_faults
from lab.emulator.http import SGLANG_VERSION, AppState, build_app, dispatch_events, reported_version
from lab.emulator.metrics import EmulatorMetrics
from lab.emulator.profile import ProfileError, load_profile
from lab.emulator.proctree import CHILD_NAMES, spawn_children
from lab.emulator.sglog import log_startup, main_logger, setup_logging
from lab.emulator.truth import TruthWriter
from lab.redact import redact_argv

SWITCH_INTERVAL_S = 2e-4  # GIL hand-over latency bound, so the engine thread hits deadlines


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env_float(name: str) -> float | None:
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        raise SystemExit(f"{name}={v!r} is not a number") from None


async def _serve(args, profile, profile_path, truth: TruthWriter, metrics: EmulatorMetrics, log,
                 faults: Faults, categories=None) -> None:
    loop = asyncio.get_running_loop()

    def deliver(events):
        try:
            loop.call_soon_threadsafe(dispatch_events, events)
        except RuntimeError:  # loop closed during shutdown
            pass

    stop = asyncio.Event()

    def died(exc: BaseException) -> None:  # the engine thread ended: exit, as SGLang's server does
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # loop closed during shutdown
            pass

    sim = _env_float("SGLANG_SIMULATE_ACC_LEN")
    engine = Engine(args, profile, deliver=deliver, metrics=metrics, truth=truth, log=log,
                    simulate_acc_len=sim, record_step_time=_env_bool("SGLANG_RECORD_STEP_TIME"),
                    on_death=died)
    state = AppState(args=args, profile=profile, profile_path=profile_path, engine=engine, metrics=metrics,
                     startup_time=time.time(), faults=faults, categories=categories,
                     fixed_sim_tokens=bool(sim and sim > 0 and args.is_speculative
                                           and os.environ.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "fixed") != "real-draft-token"))
    runner = web.AppRunner(build_app(state), handle_signals=False, access_log=None)
    await runner.setup()
    if faults.wants_signal_handlers():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    engine.start()
    try:
        await web.TCPSite(runner, args.host, args.port).start()
    except OSError as exc:
        log.error(f"cannot bind {args.host}:{args.port}: {exc}")
        engine.stop()
        truth.close()
        raise SystemExit(1) from None
    if sim and sim > 0:
        log.info(f"SGLANG_SIMULATE_ACC_LEN={sim}: accept length pinned")
    main_logger().info("The server is fired up and ready to roll!")
    await stop.wait()
    if engine.error is not None:  # SGLang: "Received sigquit from a child process. It usually means the child failed."
        log.error(f"emulator engine thread died ({type(engine.error).__name__}: {engine.error}); the server exits "
                  f"(exit code 1) as SGLang's does when its scheduler dies, so no request waits for its timeout")
        try:
            truth.close()
        except OSError as exc:  # e.g. the same full disk
            log.error(f"ground-truth file not flushed: {exc}")
        for h in log.handlers:
            h.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    log.info("Received stop signal; shutting down emulator.")
    engine.stop(timeout=0.5)
    truth.close()
    try:
        await asyncio.wait_for(runner.cleanup(), timeout=0.2)
    except (asyncio.TimeoutError, Exception):  # in-flight streams are dropped
        pass
    # Everything worth keeping is flushed; skip the event loop's (unbounded) finalization of
    # in-flight streams so that the process exits within ~1 s of the signal.
    log.info("Emulator stopped; ground truth flushed.")
    for h in log.handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, unknown = parse_args(argv)
    log = setup_logging(args.tp_size)
    refused = sglang_refuses(unknown)
    if refused:  # SGLang's argparse: "launch_server.py: error: unrecognized arguments: ...", exit 2
        log.error(f"error: unrecognized arguments: {' '.join(refused)} (SGLang's launch_server parser, builds "
                  f"{', '.join(sglang_options())}, refuses them as it would on a GPU node). Fix: correct or remove "
                  f"them in params.yaml (server.extra_args or the mode's extra_args)")
        return 2
    if unknown:
        log.warning(f"emulator: SGLang flags it accepts but the emulator does not model (ignored): "
                    f"{' '.join(redact_argv(unknown))}")
    try:
        faults = parse_faults(args.emulator_faults)
    except FaultError as exc:
        log.error(str(exc))
        return 2
    # SGLang's process tree (scheduler per TP rank + detokenizer), forked before any thread
    children = spawn_children(args.tp_size, orphan_rank0=faults.orphan_child)
    log.info(f"emulator process tree: launcher pid {os.getpid()}, children {children} "
             f"({', '.join(CHILD_NAMES(args.tp_size))}) in process group {os.getpgid(0)}")
    faults.on_process_start(log)
    try:
        profile, profile_path = load_profile(args.emulator_profile)
    except ProfileError as exc:
        log.error(str(exc))
        return 2
    if profile.attention_backend and not any(a == "--attention-backend" or a.startswith("--attention-backend=")
                                             for a in argv):
        args = dataclasses.replace(args, attention_backend=profile.attention_backend)  # what its costs were measured on
    categories = None
    if args.emulator_prompt_categories:  # prompt text -> category, for acceptance.per_category
        from lab.emulator.categories import CategoryMap
        from lab.workload.dataset import DatasetError

        try:
            categories = CategoryMap.from_file(args.emulator_prompt_categories)
        except DatasetError as exc:
            log.error(f"--emulator-prompt-categories: {exc}")
            return 2
        listed = {c: profile.p_accept_for(c) for c in categories.categories}
        log.info(f"emulator: per-category accept probability (modelled, profile acceptance.per_category): {listed}")
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    log.info(f"engine=emulator profile={profile.name} v{profile.version} ({profile_path}); no GPU is used; "
             f"timing models SGLang build {profile.models_build.label!r} (reported version "
             f"{reported_version(profile)!r}); HTTP surfaces of SGLang {SGLANG_VERSION}")
    truth = TruthWriter(args.ground_truth_file)
    truth.write({"kind": "header", "profile": {**profile.model_dump(), "path": str(profile_path)},
                 "argv": redact_argv(argv), "pid": os.getpid(), "server_args": args.to_dict()}, flush=True)
    metrics = EmulatorMetrics(args.served_model_name, _env_bool("SGLANG_ENABLE_METRICS_DEVICE_TIMER"), args.tp_size)
    log_startup(log, args.emulator_startup_delay_s, speculative=args.is_speculative, graph_bs=args.decode_graph_bs,
                disable_cuda_graph=not args.decode_graph_bs, backend=args.cuda_graph_config["decode"]["backend"],
                num_tokens_per_req=args.speculative_num_draft_tokens or 1, topk=args.speculative_eagle_topk or 1,
                draft_extend_graph=not draft_extend_graph_disabled(),
                verify_graph=not args.is_speculative or profile.verify_graph_captured(args.speculative_attention_mode))
    faults.on_loaded(log)
    try:
        asyncio.run(_serve(args, profile, profile_path, truth, metrics, log, faults, categories))
    finally:
        truth.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
