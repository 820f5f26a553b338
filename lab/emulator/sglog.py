"""SGLang-format logging: the ``[YYYY-MM-DD HH:MM:SS TP0] message`` lines the lab parses.

Formats copied from SGLang 0.5.23: logger format ``[%(asctime)s TP0] %(message)s`` with
``%Y-%m-%d %H:%M:%S`` (``sglang/srt/utils/common.py:configure_logger``); "Decode batch" and
"Prefill batch" lines from ``scheduler_components/metrics_reporter.py`` (usage parts from
``pool_stats_observer.py``); startup lines from ``model_executor/model_runner.py``,
``model_runner_components/cuda_graph_setup.py``, ``model_loader/weight_utils.py`` (tqdm
``BAR_FORMAT``) and ``entrypoints/http_server.py``.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["setup_logging", "decode_batch_line", "prefill_batch_line", "startup_lines", "occupancy_suffix"]


def setup_logging() -> logging.Logger:
    """Configure the ``sglang`` logger on line-buffered stdout and return it."""
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except AttributeError:
        pass
    log = logging.getLogger("sglang")
    log.handlers.clear()
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(logging.Formatter("[%(asctime)s TP0] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


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
                  num_tokens_per_req: int, num_shards: int = 64, verify_graph: bool = True) -> list[tuple[float, str]]:
    """Startup log lines as ``(fraction of the startup delay at which to log, message)``.

    ``verify_graph`` False (a profile whose verify runs eagerly in this attention mode, e.g.
    the seeds' older build in prefill mode): no "Capture target verify CUDA graph" lines,
    only the draft's ("Capture draft decode CUDA graph", ``speculative/eagle_worker_v2.py``
    ~515-537), since the emulator then never replays a verify graph.
    """
    lines: list[tuple[float, str]] = [(0.0, "Load weight begin. avail mem=139.31 GB")]
    for k in range(1, 5):
        n = num_shards * k // 4
        lines.append((0.15 * k, f"Loading safetensors checkpoint shards: {100 * n // num_shards:3d}% Completed | {n}/{num_shards} [00:00<00:00, emulated]"))
    lines.append((0.62, "Load weight end. elapsed=0.00 s, type=DeepseekV3ForCausalLM, avail mem=63.20 GB, mem usage=76.11 GB."))
    if not disable_cuda_graph and speculative and not verify_graph:
        lines.append((0.7, f"Capture draft decode CUDA graph begin. backend={backend}, num_tokens_per_req=1, "
                           f"bs={graph_bs}, avail mem=20.10 GB"))
        lines.append((0.95, "Capture draft decode CUDA graph end. elapsed=0.00 s, mem usage=0.20 GB, avail mem=19.90 GB."))
    elif not disable_cuda_graph:
        name = "target verify" if speculative else "target decode"
        lines.append((0.7, f"Capture {name} CUDA graph begin. backend={backend}, num_tokens_per_req={num_tokens_per_req}, avail mem=20.10 GB"))
        lines.append((0.95, f"Capture {name} CUDA graph end. bs={graph_bs}, elapsed=0.00 s, mem usage=1.20 GB, avail mem=18.90 GB."))
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
