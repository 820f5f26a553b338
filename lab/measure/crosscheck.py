"""Server-side timing from the run's window of ``server.log``, and cross-checks per run.

Three independent clocks measure one speculative cycle (DESIGN.md "Measurement
definitions"):

- the client: ``cycle_ms`` = per-request decode time / ``spec_verify_ct`` (median);
- the scheduler's wall clock: ``server_step_ms`` from ``step_time_dict``
  (``SGLANG_RECORD_STEP_TIME=1``: mean iteration time per decode-log interval);
- the device timer: ``gpu_cycle_ms`` = ``verify_ms + draft_ms`` (or ``decode_ms``), GPU time
  per decode iteration from ``/metrics`` deltas.

They should agree within a few percent at concurrency 1 (GPU time <= iteration time <=
client cycle, up to CPU overhead and streaming). A disagreement above
:data:`TOLERANCE` (10 %) is flagged in ``result.json`` so that a broken measurement is never
read as a finding. Likewise the CUDA-graph share of decode iterations is measured twice:
from the ``cuda_graph_passes_total`` counter split and from the "Decode batch" lines
(``cuda graph: True/False``) logged during the window.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.measure.decode_log import parse_decode_log, summarize_decode_log
from lab.measure.prometheus import server_timing
from lab.measure.server_info import step_time_ms

__all__ = ["TOLERANCE", "LogWindow", "log_window_timing", "cross_checks", "window_server_timing",
           "add_cross_checks"]

#: Relative disagreement above which two measurements of one quantity are flagged.
TOLERANCE = 0.10
#: Absolute disagreement of the two CUDA-graph fractions that is flagged.
GRAPH_FRACTION_TOLERANCE = 0.10


class LogWindow:
    """Byte offsets of ``server.log`` around a measured window.

    ``w = LogWindow(path); ... run ...; text = w.read()`` returns what the server logged
    between construction and :meth:`read` (decoded leniently; tqdm's ``\\r`` kept).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.start = self._size()

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def read(self) -> str:
        """The log text written since construction ('' if none or the file is gone)."""
        end = self._size()
        if end <= self.start:
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read(end - self.start).decode(errors="replace")


def log_window_timing(text: str) -> dict[str, Any]:
    """"Decode batch" statistics of one window's log text.

    :returns: ``log_decode_lines`` (count), ``log_verify_graph_fraction`` (share of logged
        decode iterations with ``cuda graph: True``; a sample of one iteration per
        ``--decode-log-interval``), ``log_accept_len`` (mean of the lines' ``accept len``,
        SGLang's windowed value), ``log_gen_throughput_tok_s``; None where no line has it.
    """
    s = summarize_decode_log(parse_decode_log(text))
    return {
        "log_decode_lines": s["lines"],
        "log_verify_graph_fraction": s["cuda_graph_fraction"],
        "log_accept_len": s["mean_accept_len"],
        "log_gen_throughput_tok_s": s["mean_gen_throughput_tok_s"],
    }


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b))


def cross_checks(summary: Mapping[str, Any], *, tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Compare the independent measurements of one run (:func:`lab.measure.records.summarize_run`
    output, with the :func:`log_window_timing` keys merged in).

    Pairs compared (relative difference ``|a - b| / max(a, b)``):

    - ``cycle_vs_step``: client ``cycle_ms`` vs ``server_step_ms``;
    - ``step_vs_gpu``: ``server_step_ms`` vs ``gpu_cycle_ms``;
    - ``cycle_vs_gpu``: client ``cycle_ms`` vs ``gpu_cycle_ms``;
    - ``graph_fraction``: counter ``verify_graph_fraction`` vs ``log_verify_graph_fraction``
      (absolute difference, :data:`GRAPH_FRACTION_TOLERANCE`).

    A pair with a missing side is reported ``"ok": None`` (not checked), never as agreement.

    :returns: ``{"checks": {name: {"a", "b", "diff", "ok"}}, "flags": [sentence, ...],
        "disagreements": int}``.
    """
    pairs = {
        "cycle_vs_step": ("cycle_ms", "server_step_ms"),
        "step_vs_gpu": ("server_step_ms", "gpu_cycle_ms"),
        "cycle_vs_gpu": ("cycle_ms", "gpu_cycle_ms"),
    }
    checks: dict[str, Any] = {}
    flags: list[str] = []
    for name, (ka, kb) in pairs.items():
        a, b = summary.get(ka), summary.get(kb)
        if a is None or b is None or max(abs(a), abs(b)) == 0:
            checks[name] = {"a": a, "b": b, "diff": None, "ok": None}
            continue
        d = _rel(a, b)
        ok = d <= tolerance
        checks[name] = {"a": a, "b": b, "diff": d, "ok": ok}
        if not ok:
            flags.append(f"{ka}={a:.2f} and {kb}={b:.2f} disagree by {d:.1%} (limit {tolerance:.0%})")
    ga, gb = summary.get("verify_graph_fraction"), summary.get("log_verify_graph_fraction")
    if ga is None or gb is None:
        checks["graph_fraction"] = {"a": ga, "b": gb, "diff": None, "ok": None}
    else:
        d = abs(ga - gb)
        ok = d <= GRAPH_FRACTION_TOLERANCE
        checks["graph_fraction"] = {"a": ga, "b": gb, "diff": d, "ok": ok}
        if not ok:
            flags.append(f"CUDA-graph share from counters {ga:.2f} and from Decode batch lines "
                         f"{gb:.2f} disagree by {d:.2f} (limit {GRAPH_FRACTION_TOLERANCE:.2f})")
    return {"checks": checks, "flags": flags, "disagreements": len(flags)}


def window_server_timing(prom_before: str, prom_after: str, info_before: Mapping[str, Any] | None,
                         info_after: Mapping[str, Any], log_text: str, *, speculative: bool) -> dict[str, Any]:
    """Everything the server says about one measured window, for ``summarize_run(server=...)``.

    :func:`lab.measure.prometheus.server_timing` of the ``/metrics`` scrapes (keys not applicable to the
    mode set to None: ``decode_ms`` under speculation, where eager draft steps booked as
    ``decode`` count as ``draft_ms``; ``verify_ms``/``draft_ms`` without),
    ``step_time_ms`` from the ``/server_info`` pair, and :func:`log_window_timing` of the
    window's log text.
    """
    server = server_timing(prom_before, prom_after, speculative=speculative)
    for k in (("decode_ms",) if speculative else ("verify_ms", "draft_ms")):
        server[k] = None  # not applicable to this mode (0 would read as a measurement)
    parts = [server[k] for k in ("verify_ms", "draft_ms", "decode_ms") if server.get(k) is not None]
    server["gpu_cycle_ms"] = sum(parts) if parts else None
    v, cyc = server.get("verify_ms"), server["gpu_cycle_ms"]
    server["verify_share"] = v / cyc if v is not None and cyc else None
    server["step_time_ms"] = step_time_ms(info_before, info_after)
    server.update(log_window_timing(log_text))
    return server


def add_cross_checks(summary: dict[str, Any]) -> dict[str, Any]:
    """Copy the log keys of ``summary["server"]`` to the top level, then add
    ``crosscheck`` (:func:`cross_checks`) and ``crosscheck_disagreements``; returns ``summary``."""
    server = summary.get("server") or {}
    for k in ("log_decode_lines", "log_verify_graph_fraction", "log_accept_len", "log_gen_throughput_tok_s"):
        summary[k] = server.get(k)
    cc = cross_checks(summary)
    summary["crosscheck"] = cc
    summary["crosscheck_disagreements"] = cc["disagreements"]
    return summary
