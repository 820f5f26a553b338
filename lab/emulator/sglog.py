"""SGLang-format logging: the ``[YYYY-MM-DD HH:MM:SS TP0] message`` lines the lab parses.

Formats copied from SGLang 0.5.23: logger format ``[%(asctime)s{prefix}] %(message)s`` with
``%Y-%m-%d %H:%M:%S`` (``sglang/srt/utils/common.py:configure_logger``), where the scheduler's
prefix is `` TP<rank>`` only with ``tp_size > 1`` (``managers/scheduler.py`` ~6279-6290; 0.5.16
alike, ~4540-4549: a TP-1 server logs ``[2026-12-01 19:03:09] Decode batch, ...``) and the HTTP
server's main process has none (its "fired up" line, :func:`main_logger`); "Decode batch" and
"Prefill batch" lines from ``scheduler_components/metrics_reporter.py`` (usage parts from
``pool_stats_observer.py``); startup lines from ``model_executor/model_runner.py``,
``model_runner_components/cuda_graph_setup.py``, ``model_loader/weight_utils.py`` (tqdm
``BAR_FORMAT``) and ``entrypoints/http_server.py``.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["setup_logging", "main_logger", "log_prefix", "decode_batch_line", "prefill_batch_line", "startup_lines", "occupancy_suffix"]


def log_prefix(tp_size: int) -> str:
    """The scheduler's logger prefix: ``" TP0"`` with tensor parallelism, else ``""`` (rank 0 is
    the one that logs batch lines; ``managers/scheduler.py`` ~6279-6290)."""
    return " TP0" if tp_size > 1 else ""


def _stdout_logger(name: str, prefix: str) -> logging.Logger:
    log = logging.getLogger(name)
    log.handlers.clear()
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(logging.Formatter(f"[%(asctime)s{prefix}] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def setup_logging(tp_size: int = 1) -> logging.Logger:
    """Configure the ``sglang`` logger (the scheduler's lines, prefix :func:`log_prefix`) and
    :func:`main_logger` on line-buffered stdout; returns the former."""
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except AttributeError:
        pass
    _stdout_logger("sglang.http_server", "")
    return _stdout_logger("sglang", log_prefix(tp_size))


def main_logger() -> logging.Logger:
    """The HTTP server process's logger (``entrypoints/http_server.py``: no rank prefix), set up
    by :func:`setup_logging`."""
    return logging.getLogger("sglang.http_server")


def occupancy_suffix(occupancy: tuple[float, float] | None) -> str:
    """The device-timer suffix SGLang appends to both batch lines when
    ``SGLANG_ENABLE_METRICS_DEVICE_TIMER`` is on (``metrics_reporter.py`` ~800-802, ~1065-1068;
    ``_ForwardOccupancyLogWindow.log_string`` ~211-225): ``occupancy`` = (forward %, forward +
    idle %) of the window's wall time; None: no suffix (timer off)."""
    if occupancy is None:
        return ""
    fwd, fwd_idle = (min(max(v, 0.0), 100.0) for v in occupancy)
    return f", fwd occupancy: {fwd:.2f}%, fwd+idle occupancy: {fwd_idle:.2f}%"


def decode_batch_line(*, running: int, num_tokens: int, token_usage: float, accept_len: float | None,
                      accept_rate: float | None, cuda_graph: bool, gen_throughput: float, queue: int,
                      occupancy: tuple[float, float] | None = None) -> str:
    """The "Decode batch" message (accept fields only when speculative, i.e. not None;
    the occupancy suffix only with the device timer, :func:`occupancy_suffix`)."""
    msg = f"Decode batch, #running-req: {running}, #token: {num_tokens}, token usage: {token_usage:.2f}, "
    if accept_len is not None:
        msg += f"accept len: {accept_len:.2f}, accept rate: {accept_rate or 0.0:.2f}, "
    msg += f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}"
    return msg + occupancy_suffix(occupancy)


def prefill_batch_line(*, new_seq: int, new_token: int, token_usage: float, running: int, queue: int,
                       cuda_graph: bool, input_throughput: float,
                       occupancy: tuple[float, float] | None = None) -> str:
    """The "Prefill batch" message (occupancy suffix as in :func:`decode_batch_line`)."""
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: 0, "
        f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
        f"#pending-token: 0, cuda graph: {cuda_graph}, input throughput (token/s): {input_throughput:.2f}"
    ) + occupancy_suffix(occupancy)


def startup_lines(*, speculative: bool, graph_bs: list[int], disable_cuda_graph: bool, backend: str,
                  num_tokens_per_req: int, num_shards: int = 64, verify_graph: bool = True, topk: int = 1,
                  draft_extend_graph: bool = True) -> list[tuple[float, str]]:
    """Startup log lines as ``(fraction of the startup delay at which to log, message)``.

    The target's weight load, then under speculation the draft's. With CUDA graphs: the target's capture (``Capture target verify|decode CUDA graph begin/end``,
    ``cuda_graph_setup.py`` ~758-799; 0.5.23 puts ``bs=[...]`` on the end line), then, under
    speculation, the draft's (``Capture draft decode CUDA graph`` with ``num_tokens_per_req`` =
    topk, then ``Capture draft extend CUDA graph`` with the draft-token count, each ``bs`` on its
    begin line: ``speculative/eagle_worker_v2.py`` ~513-537, ~632-658; a real 0.5.16 server logs
    the same three, ``tests/fixtures/sglang-0.5.16/tiny/eagle3_*/server.log``).
    ``verify_graph`` False (a profile whose verify runs eagerly in this attention mode, e.g.
    the seeds' older build in prefill mode): no target verify capture, since the emulator then
    never replays a verify graph. ``draft_extend_graph`` False
    (``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``): no draft-extend capture.
    """
    lines: list[tuple[float, str]] = [(0.0, "Load weight begin. avail mem=139.31 GB")]
    for k in range(1, 5):
        n = num_shards * k // 4
        lines.append((0.15 * k, f"Loading safetensors checkpoint shards: {100 * n // num_shards:3d}% Completed | {n}/{num_shards} [00:00<00:00, emulated]"))
    lines.append((0.62, "Load weight end. elapsed=0.00 s, type=DeepseekV3ForCausalLM, avail mem=63.20 GB, mem usage=76.11 GB."))
    if speculative:  # the draft model's own load (model_runner.py), as a real EAGLE-3 server logs it
        lines.append((0.64, "Load weight begin. avail mem=63.20 GB"))
        lines.append((0.66, "Load weight end. elapsed=0.00 s, type=LlamaForCausalLMEagle3, avail mem=62.10 GB, "
                            "mem usage=1.10 GB."))
    if disable_cuda_graph:
        return lines
    if verify_graph or not speculative:
        name = "target verify" if speculative else "target decode"
        lines.append((0.7, f"Capture {name} CUDA graph begin. backend={backend}, num_tokens_per_req={num_tokens_per_req}, avail mem=20.10 GB"))
        lines.append((0.8, f"Capture {name} CUDA graph end. bs={graph_bs}, elapsed=0.00 s, mem usage=1.20 GB, avail mem=18.90 GB."))
    if speculative:
        lines.append((0.82, f"Capture draft decode CUDA graph begin. backend={backend}, num_tokens_per_req={topk}, "
                            f"bs={graph_bs}, avail mem=18.90 GB"))
        lines.append((0.88, "Capture draft decode CUDA graph end. elapsed=0.00 s, mem usage=0.20 GB, avail mem=18.70 GB."))
        if draft_extend_graph:
            lines.append((0.9, f"Capture draft extend CUDA graph begin. backend={backend}, "
                               f"num_tokens_per_req={num_tokens_per_req}, bs={graph_bs}, avail mem=18.70 GB"))
            lines.append((0.95, "Capture draft extend CUDA graph end. elapsed=0.00 s, mem usage=0.10 GB, avail mem=18.60 GB."))
    return lines


def log_startup(log: logging.Logger, delay_s: float, **kw) -> None:
    """Log :func:`startup_lines` spread over ``delay_s`` seconds (blocking); weight-shard
    progress goes to stderr as tqdm writes it (``\r``-separated updates, no prefix)."""
    t0 = time.monotonic()
    for frac, msg in startup_lines(**kw):
        wait = t0 + frac * delay_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if msg.startswith("Loading safetensors"):
            # SGLang's tqdm bar: on stderr, no logger prefix, updates separated by \r
            sys.stderr.write("\r" + msg + ("\n" if "100%" in msg else ""))
            sys.stderr.flush()
        else:
            log.info(msg)
    rest = t0 + delay_s - time.monotonic()
    if rest > 0:
        time.sleep(rest)
