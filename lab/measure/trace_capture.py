"""``bench.trace``: a torch-profiler trace of a few concurrency-1 cycles through SGLang's own
profiling endpoints, then the per-cycle analysis of :mod:`lab.profiling.trace`.

SGLang 0.5.23 (paths under ``sglang/srt/``, checked against the wheel's source):

- ``POST /start_profile`` with a JSON ``ProfileReq`` (``entrypoints/http_server.py:1221-1229``;
  fields ``managers/io_struct.py:2374-2400``). The lab sends ``output_dir`` (absolute: the
  server writes there), ``activities: ["CPU", "GPU"]`` (CPU for the ``step[...]`` spans and the
  launch calls, GPU for the kernels), ``with_stack: false`` and ``record_shapes: false`` (both
  default to true, ``managers/tokenizer_control_mixin.py:401-417``, and would bloat the trace),
  ``profile_id`` and ``profile_prefix``. No ``num_steps``: the lab stops the profiler itself.
  SGLang's own benchmark client sends the same kind of body (``benchmark/serving.py:879-905``).
  The body is validated as a typed dict of ``ProfileReq``'s fields, unknown keys ignored
  (``utils/msgspec_utils.py:70-100``).
- ``POST /stop_profile`` (``http_server.py:1232-1239``) returns once the scheduler has exported
  the trace (``managers/scheduler_components/profiler_manager.py:340-363`` runs
  ``export_chrome_trace`` before replying).
- The trace is ``<output_dir>/<profile_prefix>-<profile_id>-TP-<rank>.trace.json.gz``, one per
  TP rank (``profiler_manager.py:333-363``); the lab analyses rank 0's.

Between start and stop the lab sends ``requests`` requests one after another (concurrency 1,
``max_new_tokens`` each, the mode's own prompts), so the trace holds their prefill (EXTEND)
steps and some tens of decode steps or draft + verify cycles. It runs after the measured
levels, so it never disturbs them; a failure is recorded, never raised, so measured data are
never lost. The emulator serves the same endpoints (:mod:`lab.emulator.modelled_trace`, modelled).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

__all__ = ["TraceCaptureError", "start_profile_body", "post_profiler", "capture_trace", "trace_metrics",
           "TRACE_PREFIX"]

TRACE_PREFIX = "lab"


class TraceCaptureError(RuntimeError):
    """The server refused or failed a profiling request, or wrote no trace."""


def start_profile_body(output_dir: Path, profile_id: str) -> dict[str, Any]:
    """The ``/start_profile`` JSON body (``ProfileReq`` fields of SGLang 0.5.23)."""
    return {"output_dir": str(Path(output_dir).resolve()), "activities": ["CPU", "GPU"], "with_stack": False,
            "record_shapes": False, "profile_id": profile_id, "profile_prefix": TRACE_PREFIX}


def post_profiler(base_url: str, endpoint: str, body: dict[str, Any] | None, timeout_s: float) -> str:
    """POST ``body`` (JSON) to ``{base_url}/{endpoint}``; returns the response text.

    :raises TraceCaptureError: non-2xx status (with the server's message) or no answer.
    """
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(f"{base_url}/{endpoint}", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        msg = exc.read().decode(errors="replace")[:500]
        raise TraceCaptureError(f"/{endpoint} answered HTTP {exc.code}: {msg}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise TraceCaptureError(f"/{endpoint} failed: {exc}") from None


def capture_trace(base_url: str, out_dir: str | Path, *, mode: str, texts: list[tuple[int, str]],
                    max_new_tokens: int, temperature: float, request_timeout_s: float,
                    stop_timeout_s: float = 600.0, modelled: bool = False,
                    log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Profile ``len(texts)`` requests at concurrency 1 and analyse the trace.

    :param out_dir: the mode's trace folder (emptied first); the server writes the trace here.
    :param texts: ``(prompt_index, text)`` pairs, sent one at a time.
    :param modelled: the engine is the emulator (the result and captions say "modelled").
    :returns: ``{"status": "ok" | "failed: ...", "modelled", "file" (the trace's path), "file_bytes",
        "requests", "analysis": {"by_stage", "cycle_summary", "cycles", "steps", "events"}}``;
        never raises for a server-side failure (the measured levels stay intact).
    """
    from lab.measure import client
    from lab.profiling.trace import analyze_trace

    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    profile_id = f"{mode}-{int(time.time() * 1000)}"
    result: dict[str, Any] = {"status": "failed", "modelled": modelled, "profile_id": profile_id,
                              "requests": len(texts), "max_new_tokens": max_new_tokens}
    started = False
    try:
        post_profiler(base_url, "start_profile", start_profile_body(out, profile_id), 60.0)
        started = True
        recs = client.run_requests_sync(base_url, texts, concurrency=1, max_new_tokens=max_new_tokens,
                                        temperature=temperature, timeout_s=request_timeout_s,
                                        rid_prefix=f"{mode}-trace", progress_desc=None, mode=mode)
        result["requests_ok"] = sum(1 for r in recs if r.ok)
        started = False
        post_profiler(base_url, "stop_profile", None, stop_timeout_s)
        traces = sorted(out.glob(f"{TRACE_PREFIX}-{profile_id}-TP-0*.trace.json*"))
        if not traces:
            raise TraceCaptureError(f"no trace {TRACE_PREFIX}-{profile_id}-TP-0.trace.json.gz in {out} after "
                                      f"/stop_profile (found {sorted(p.name for p in out.iterdir())})")
        trace = traces[0]
        ana = analyze_trace(trace, mode=mode)
        result.update(status="ok", file=str(trace), file_bytes=trace.stat().st_size,
                      analysis={k: ana[k] for k in ("by_stage", "cycle_summary", "cycles", "steps", "events")})
        cs = ana["cycle_summary"]
        log(f"[lab] {mode}: profiled {len(texts)} request(s){' (modelled)' if modelled else ''}: "
            f"{cs['n']} cycles, wall p50 {cs['wall_ms_p50'] or 0:.2f} ms, idle {100 * (cs['idle_share_p50'] or 0):.1f} %, "
            f"kernels {cs['kernels_p50']}; trace {trace}")
    except Exception as exc:  # noqa: BLE001 - recorded; KeyboardInterrupt still propagates
        result["status"] = f"failed: {type(exc).__name__}: {exc}"[:1000]
        log(f"[lab] {mode}: profiling {result['status']} (the measured levels are kept)")
    finally:
        if started:  # requests failed mid-way: do not leave the server profiling
            try:
                post_profiler(base_url, "stop_profile", None, stop_timeout_s)
            except TraceCaptureError:
                pass
    return result


_METRIC_KEYS = ("wall_ms_p50", "gpu_busy_ms_p50", "idle_share_p50", "host_gap_share_p50", "kernels_p50",
                "eager_launches_p50", "graph_launches_p50", "allreduce_count_p50", "allreduce_ms_p50")


def trace_metrics(trace: dict[str, Any] | None) -> dict[str, float | None]:
    """Flat MLflow metrics of a :func:`capture_trace` result: ``trace.<step>.<median>`` per
    step stage (``trace.verify.wall_ms_p50``, ...) and ``trace.cycle.<median>``; ``{}`` unless ok."""
    if not trace or trace.get("status") != "ok":
        return {}
    ana = trace["analysis"]
    out: dict[str, float | None] = {}
    for stage, s in [*ana["by_stage"].items(), ("cycle", ana["cycle_summary"])]:
        for k in _METRIC_KEYS:
            out[f"trace.{stage.lower()}.{k}"] = s.get(k)
    return out
