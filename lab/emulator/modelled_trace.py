"""The emulator's answer to SGLang 0.5.23's profiling endpoints: a MODELLED Chrome trace.

SGLang 0.5.23 (paths under ``sglang/srt/``):

- ``entrypoints/http_server.py:1221-1239``: ``GET|POST /start_profile`` with an optional JSON
  body (``ProfileReq``, ``managers/io_struct.py:2374-2400``: ``output_dir``, ``start_step``,
  ``num_steps``, ``activities`` [CPU, GPU, MEM, RPD], ``with_stack``, ``record_shapes``,
  ``profile_id``, ``profile_prefix``, ...) answers ``Start profiling.\\n``; ``GET|POST
  /stop_profile`` answers ``Stop profiling. This will take some time.\\n`` once the trace is
  written. A refused request (``RuntimeError`` in ``managers/tokenizer_control_mixin.py:424-428``)
  is an HTTP 500.
- ``managers/scheduler_components/profiler_manager.py``: ``output_dir`` defaults to
  ``$SGLANG_TORCH_PROFILER_DIR`` or ``/tmp`` (line 131); a second start is refused with
  "Profiling is already in progress. Call /stop_profile first." (124), a stop without start
  with "Profiling is not in progress. Call /start_profile first." (328); ``num_steps`` without
  ``start_step`` stops by itself after that many scheduler iterations (157, 437-442); the
  trace is ``[<profile_prefix>-]<profile_id>-TP-<rank>.trace.json.gz`` in ``output_dir``
  (333-363); ``profile_id`` defaults to ``str(time.time())``
  (``tokenizer_control_mixin.py:416``).

What the emulator writes: one file, ``...-TP-0.trace.json.gz`` (one rank even when
``--tp-size`` > 1), in torch.profiler's Chrome-trace format, built from the iterations the
engine **actually ran** while profiling (their recorded start/end and per-phase durations,
the same numbers as its ground-truth file). Per forward phase: a ``user_annotation`` span
``step[<STAGE> bs=<n>]`` as SGLang names them (``utils/profile_utils.py:462-505``: EXTEND,
DECODE, VERIFY for target-verify, DRAFT for both draft phases) and, on a modelled GPU stream,
the phase's kernels with the host launch calls that issued them (``args.correlation``):

- counts from the cost profile's ``kernels`` section (each with its source):
  ``target_forward`` kernels per target forward (extend, decode, verify), of which
  ``attention_per_target_forward`` are attention kernels and, when ``--tp-size`` > 1,
  ``allreduce_per_target_forward`` are NCCL all-reduces; ``draft_forward`` per draft-model
  forward (``num_steps`` of them in the draft phase, one in the draft extend);
- a phase run in a CUDA graph: one ``cudaGraphLaunch`` at its start, the kernels back to back
  to its end (GPU busy all but the launch);
- an eager phase: the launches spread evenly over the phase (host-bound), each kernel taking
  ``busy_fraction`` of its slot, where ``busy_fraction`` is the profile's own graph/eager
  ratio (decode and draft: ``1 / decode.eager_over_graph``; verify: ``verify.graph_ms_ref /
  verify.eager_ms_ref``; extend: 1). This encodes the profile's assumption that eager time
  over graph time is host launch overhead (measured so for the physics stack:
  ``docs/benchmarks/physics-h200-profile.md``).

Everything in it is MODELLED: the file says so (``"modelled": true``, process names), and it
is never a GPU measurement.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["ProfileRequestError", "EmulatorProfiler", "trace_file_name", "STAGE_OF_PHASE", "build_trace",
           "add_profile_routes"]

#: Emulator phase (ground-truth category) -> SGLang step-span stage.
STAGE_OF_PHASE = {"extend": "EXTEND", "decode": "DECODE", "eagle_draft": "DRAFT", "target_verify": "VERIFY",
                  "eagle_draft_extend": "DRAFT"}

HOST_PID, GPU_PID, HOST_TID, GPU_STREAM = 1, 0, 1, 7
_KNOWN_FIELDS = {"req_type", "output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
                 "record_shapes", "profile_id", "merge_profiles", "profile_prefix", "profile_stages",
                 "detailed_annotations"}
_GRAPH_LAUNCH_US = 10.0


class ProfileRequestError(ValueError):
    """A /start_profile or /stop_profile request the emulator refuses; ``status`` is the HTTP code."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


def trace_file_name(profile_id: str, prefix: str | None, tp_rank: int = 0) -> str:
    """SGLang 0.5.23's trace file name (``profiler_manager.py:333-358``, no DP/PP/EP ranks)."""
    return (f"{prefix}-" if prefix else "") + f"{profile_id}-TP-{tp_rank}.trace.json.gz"


class EmulatorProfiler:
    """Profiling state of one emulator process (thread-safe).

    :param profile: the :class:`~lab.emulator.profile.CostProfile` (its ``kernels`` section
        gives the modelled counts; without one, spans are written and no kernels).
    :param args: the resolved :class:`~lab.emulator.args.ServerArgs`.
    """

    def __init__(self, profile: Any, args: Any) -> None:
        self.profile, self.args = profile, args
        self._lock = threading.Lock()
        self._active: dict[str, Any] | None = None
        self._iterations: list[tuple[dict[str, Any], list[tuple[str, float]]]] = []
        self.written: list[Path] = []

    @property
    def active(self) -> bool:
        return self._active is not None

    def start(self, body: dict[str, Any] | None) -> None:
        """Begin recording iterations (the /start_profile request body, or None).

        :raises ProfileRequestError: already profiling (500, SGLang's message), an unknown
            field, or a field the emulator does not emulate (``start_step``,
            ``profile_by_stage``, ``merge_profiles``: 400).
        """
        body = dict(body or {})
        unknown = sorted(set(body) - _KNOWN_FIELDS)
        if unknown:
            raise ProfileRequestError(f"unknown ProfileReq field(s) {unknown} (SGLang 0.5.23 io_struct.py:2374-2400)", 400)
        for f in ("start_step", "profile_by_stage", "merge_profiles", "profile_stages"):
            if body.get(f):
                raise ProfileRequestError(f"the emulator does not emulate ProfileReq.{f}; leave it unset", 400)
        num_steps = body.get("num_steps")
        if num_steps is not None and (not isinstance(num_steps, int) or num_steps < 1):
            raise ProfileRequestError(f"num_steps must be a positive integer, got {num_steps!r}", 400)
        with self._lock:
            if self._active is not None:
                raise ProfileRequestError("Profiling is already in progress. Call /stop_profile first.")
            self._active = {
                "output_dir": Path(body.get("output_dir") or os.getenv("SGLANG_TORCH_PROFILER_DIR", "/tmp")).expanduser(),
                "profile_id": str(body.get("profile_id") or time.time()),
                "prefix": body.get("profile_prefix") or "",
                "activities": list(body.get("activities") or ["CPU", "GPU"]),
                "num_steps": num_steps,
                "started": time.perf_counter(),
            }
            self._iterations = []

    def on_iteration(self, it: dict[str, Any], actual: dict[str, float]) -> None:
        """Engine-thread hook: one finished iteration (its ground-truth dict and the measured
        phase durations in seconds, in run order). Cheap: appends, and with ``num_steps``
        reached hands the write to a background thread."""
        if self._active is None:
            return
        done = None
        with self._lock:
            if self._active is None:
                return
            self._iterations.append((dict(it), list(actual.items())))
            n = self._active["num_steps"]
            if n is not None and len(self._iterations) >= n:
                done = self._take()
        if done is not None:
            threading.Thread(target=self._write, args=done, name="emulator-profile-writer", daemon=True).start()

    def _take(self) -> tuple[dict[str, Any], list[Any]]:
        active, iters = self._active, self._iterations
        self._active, self._iterations = None, []
        return active, iters

    def stop(self) -> Path:
        """End recording and write the trace; returns its path.

        :raises ProfileRequestError: not profiling (500, SGLang's message).
        """
        with self._lock:
            if self._active is None:
                raise ProfileRequestError("Profiling is not in progress. Call /start_profile first.")
            active, iters = self._take()
        return self._write(active, iters)

    def _write(self, active: dict[str, Any], iters: list[Any]) -> Path:
        trace = build_trace(iters, self.profile, self.args, activities=active["activities"])
        out = Path(active["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        path = out / trace_file_name(active["profile_id"], active["prefix"])
        tmp = path.with_name(path.name + ".tmp")
        with gzip.open(tmp, "wt", compresslevel=6) as f:
            json.dump(trace, f, separators=(",", ":"))
        os.replace(tmp, path)
        self.written.append(path)
        return path


def _kernel_counts(profile: Any) -> dict[str, Any] | None:
    k = getattr(profile, "kernels", None)
    if k is None:
        return None
    return {name: (int(v.value), v.source) for name, v in k}


def _busy_fraction(profile: Any, cat: str) -> float:
    if cat == "extend":
        return 1.0
    if cat == "target_verify":
        v = profile.verify
        return min(1.0, v.graph_ms_ref.value / v.eager_ms_ref.value) if v.eager_ms_ref.value > 0 else 1.0
    eog = profile.decode.eager_over_graph.value
    return min(1.0, 1.0 / eog) if eog > 0 else 1.0


def _phase_kernels(cat: str, counts: dict[str, Any], args: Any) -> list[str]:
    """Kernel names of one phase, in launch order (attention and all-reduces spread over it)."""
    tp = int(getattr(args, "tp_size", 1) or 1)
    if cat in ("eagle_draft", "eagle_draft_extend"):
        n_fwd = (getattr(args, "speculative_num_steps", None) or 1) if cat == "eagle_draft" else 1
        per = counts["draft_forward"][0]
        names = []
        for _ in range(n_fwd):
            names += ["modelled::draft_gemm_or_elementwise"] * max(per - 1, 0) + ["modelled::draft_attention"]
        return names
    k = counts["target_forward"][0]
    n_attn = min(counts["attention_per_target_forward"][0], k)
    n_ar = min(counts["allreduce_per_target_forward"][0], k - n_attn) if tp > 1 else 0
    if cat == "target_verify":
        backend = f"{getattr(args, 'speculative_attention_mode', None) or 'prefill'} backend"
    else:
        backend = "prefill backend" if cat == "extend" else "decode backend"
    names = ["modelled::gemm_or_elementwise"] * k
    for j in range(n_attn):  # one per layer, spread evenly
        names[(j * k) // n_attn] = f"modelled::attention[{backend}]"
    for j in range(n_ar):
        idx = min(((j + 1) * k) // n_ar - 1, k - 1)
        if names[idx].startswith("modelled::attention"):
            idx = max(idx - 1, 0)
        names[idx] = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL (modelled)"
    return names


def build_trace(iterations: list[tuple[dict[str, Any], list[tuple[str, float]]]], profile: Any, args: Any, *,
                activities: list[str] | None = None) -> dict[str, Any]:
    """The Chrome trace (dict) of recorded iterations; see the module doc for the model.

    :param iterations: ``(ground-truth iteration dict with "start"/"end" in perf_counter
        seconds, "batch", "graph", "kind"; [(phase, seconds), ...] in run order)``.
    :param activities: ``CPU`` gives the step spans and launch calls, ``GPU`` the kernels.
    :returns: ``{"traceEvents": [...], "modelled": True, "emulator": {...}, ...}``; ``ts`` in
        microseconds of ``time.perf_counter()``.
    """
    acts = set(activities or ["CPU", "GPU"])
    cpu, gpu = "CPU" in acts, "GPU" in acts
    counts = _kernel_counts(profile)
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0,
         "args": {"name": "emulator scheduler TP-0 (modelled)"}},
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": "GPU 0 (modelled)"}},
        {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": GPU_STREAM, "args": {"name": f"stream {GPU_STREAM}"}},
    ]
    corr = 0

    def X(name: str, cat: str, ts: float, dur: float, pid: int, tid: int, **a: Any) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": max(dur, 0.0),
                   "args": a})

    for it, phases in iterations:
        total = sum(d for _, d in phases)
        t = (it["end"] - total) * 1e6  # phases run back to back and end at the iteration's end
        graph_iter = bool(it.get("graph"))
        for cat, dur_s in phases:
            dur = dur_s * 1e6
            p0 = t
            t = p0 + dur
            stage = STAGE_OF_PHASE.get(cat, cat.upper())
            if cpu:
                X(f"step[{stage} bs={it.get('batch', 1)}]", "user_annotation", p0, dur, HOST_PID, HOST_TID,
                  phase=cat, modelled=True)
            if counts is None or dur <= 0:
                continue
            names = _phase_kernels(cat, counts, args)
            k = len(names)
            if k == 0:
                continue
            if graph_iter and cat != "extend":
                corr += 1
                launch = min(_GRAPH_LAUNCH_US, 0.05 * dur)
                if cpu:
                    X("cudaGraphLaunch", "cuda_runtime", p0, launch, HOST_PID, HOST_TID, correlation=corr)
                if gpu:
                    step = (dur - launch) / k
                    for i, n in enumerate(names):
                        X(n, "kernel", p0 + launch + i * step, step, GPU_PID, GPU_STREAM, correlation=corr,
                          stream=GPU_STREAM, device=0, modelled=True)
            else:
                f = _busy_fraction(profile, cat)
                for i, n in enumerate(names):
                    corr += 1
                    s0 = p0 + dur * i / k  # slot i; the kernel runs in its last f share
                    s1 = p0 + dur * (i + 1) / k
                    if cpu:
                        X("cudaLaunchKernel", "cuda_runtime", s0, max((s1 - s0) * (1.0 - f), 0.0), HOST_PID, HOST_TID,
                          correlation=corr)
                    if gpu:
                        X(n, "kernel", s1 - (s1 - s0) * f, (s1 - s0) * f, GPU_PID, GPU_STREAM, correlation=corr,
                          stream=GPU_STREAM, device=0, modelled=True)
    return {
        "schemaVersion": 1,
        "traceName": "SGLang emulator (modelled)",
        "displayTimeUnit": "ms",
        "modelled": True,
        "emulator": {
            "profile": getattr(profile, "name", None),
            "kernel_counts": {k: {"value": v, "source": s} for k, (v, s) in (counts or {}).items()},
            "iterations": len(iterations),
            "note": "MODELLED by the SGLang emulator (lab/emulator/modelled_trace.py); not a GPU measurement"
                    + ("" if counts else "; the cost profile has no kernels section: step spans only, no kernels"),
        },
        "traceEvents": ev,
    }


def add_profile_routes(app: Any, state_key: Any) -> None:
    """Serve ``GET|POST /start_profile`` and ``/stop_profile`` (SGLang 0.5.23
    ``http_server.py:1221-1239``) on the emulator's aiohttp ``app``.

    The profiler hangs on the engine (``engine.tracer``, created on first use), which calls
    :meth:`EmulatorProfiler.on_iteration` for each finished iteration.
    """
    import asyncio

    from aiohttp import web

    def profiler(request: Any) -> EmulatorProfiler:
        st = request.app[state_key]
        if getattr(st.engine, "tracer", None) is None:
            st.engine.tracer = EmulatorProfiler(st.profile, st.args)
        return st.engine.tracer

    async def start_profile(request: Any) -> Any:
        body = None
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return web.Response(status=400, text="request body is not JSON (a ProfileReq object)")
            if body is not None and not isinstance(body, dict):
                return web.Response(status=400, text="request body must be a JSON object (a ProfileReq)")
        try:
            profiler(request).start(body)
        except ProfileRequestError as exc:
            return web.Response(status=exc.status, text=str(exc))
        return web.Response(text="Start profiling.\n")

    async def stop_profile(request: Any) -> Any:
        try:
            await asyncio.to_thread(profiler(request).stop)
        except ProfileRequestError as exc:
            return web.Response(status=exc.status, text=str(exc))
        return web.Response(text="Stop profiling. This will take some time.\n")

    for method in ("GET", "POST"):
        app.router.add_route(method, "/start_profile", start_profile)
        app.router.add_route(method, "/stop_profile", stop_profile)
