"""Parse a torch-profiler Chrome trace into per-step and per-cycle rows (standard library only).

Input: the JSON that ``torch.profiler.profile(...).export_chrome_trace(path)`` writes (SGLang
0.5.23 writes it gzipped as ``<profile_id>-TP-<rank>.trace.json.gz``,
``sglang/srt/managers/scheduler_components/profiler_manager.py:352-368``), or the emulator's
trace in the same format (:mod:`lab.emulator.modelled_trace`). The events used (Chrome trace "X"
complete events, ``ts``/``dur`` in microseconds):

- ``cat == "kernel"`` (and ``gpu_memcpy`` / ``gpu_memset``): work on a GPU stream, with
  ``args.correlation`` naming the host call that launched it;
- ``cat in {"cuda_runtime", "cuda_driver"}``: host-side launch calls (``cudaLaunchKernel``,
  ``cudaLaunchKernelExC``, ``cuLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``,
  ``cudaMemsetAsync``: eager launches; ``cudaGraphLaunch``/``cuGraphLaunch``: CUDA-graph
  replays), same ``args.correlation``;
- ``cat == "user_annotation"``: ``torch.profiler.record_function`` spans. SGLang 0.5.23 wraps
  every ``ModelRunner.forward`` in one named ``step[<STAGE> bs=<n> ...]``
  (``sglang/srt/utils/profile_utils.py:462-505``, used at
  ``sglang/srt/model_executor/model_runner.py:1831-1838``): STAGE is ``VERIFY`` for the
  target-verify forward, ``DRAFT`` for every draft-model forward, else the forward mode's name
  (``DECODE``, ``EXTEND``, ...). The physics stage and the emulator use the same names.

A **step** is one such span. Its GPU work is the kernels whose launch call (matched by
correlation id) lies inside the span on the span's thread. Its wall time runs from the span's
start to the later of the span's end and its last kernel's end. GPU-busy time is the union of
its kernels' (and copies') intervals; idle = wall - busy. An idle gap before a kernel counts as
a **host launch gap** when the host had not yet issued that kernel when the GPU went idle (its
launch call started after the previous GPU op ended, or after the step began for the first):
the GPU was waiting for the CPU.

A **cycle** runs from the start of one anchor step to the start of the next (anchor:
``VERIFY`` in speculative modes, else ``DECODE``), so it includes the draft forwards and the
scheduler's host time between forwards. Its GPU work is every GPU op that starts inside it.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import statistics
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = [
    "STEP_SPAN_RE",
    "EAGER_LAUNCH_NAMES",
    "GRAPH_LAUNCH_NAMES",
    "ATTENTION_RE",
    "ALLREDUCE_RE",
    "NCCL_RE",
    "TraceError",
    "load_trace",
    "TraceIndex",
    "index_trace",
    "step_rows",
    "cycle_rows",
    "summarize_rows",
    "analyze_trace",
    "short_kernel_name",
]

#: A step span: ``step[<STAGE> ...]`` (SGLang 0.5.23 ``utils/profile_utils.py:495-505``).
STEP_SPAN_RE = re.compile(r"^step\[(?P<stage>[A-Z_]+)\b")
#: Host calls that launch one piece of GPU work eagerly.
EAGER_LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync",
    "cuMemsetD8Async", "cuMemsetD32Async",
})
#: Host calls that replay a captured CUDA graph.
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
#: Attention kernels, by name: FlashAttention 2/3 (``flash_fwd``, ``FlashAttn``), PyTorch's SDPA
#: back ends (``pytorch_flash::``, ``fmha``, ``efficient_attention``, cuDNN ``sdpa``),
#: FlashInfer (``BatchPrefill``/``BatchDecode``), MLA kernels, Triton ``_fwd_kernel``-style
#: attention (names containing ``attn``/``attention``).
ATTENTION_RE = re.compile(r"flash|fmha|attn|attention|sdpa|mla|BatchPrefill|BatchDecode|paged_", re.IGNORECASE)
#: NCCL kernels (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``ncclKernel_...``).
NCCL_RE = re.compile(r"nccl", re.IGNORECASE)
#: All-reduce kernels: NCCL's and SGLang's custom all-reduce (``cross_device_reduce_*``,
#: ``sgl-kernel`` ``custom_all_reduce``), and one-shot/two-shot symmetric-memory variants.
ALLREDUCE_RE = re.compile(r"all_?reduce|cross_device_reduce|one_?shot|two_?shot", re.IGNORECASE)

_EPS_US = 1e-3  # 1 ns: Chrome-trace timestamps carry no finer resolution
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})


class TraceError(ValueError):
    """The file is not a Chrome trace the analysis can read (message says what is missing)."""


def load_trace(source: str | Path | Mapping[str, Any] | list[Any]) -> dict[str, Any]:
    """Read a Chrome trace: a path to ``.json`` or ``.json.gz`` (gzip detected by magic bytes),
    or an already-parsed dict. A bare list of events is wrapped as ``{"traceEvents": list}``.

    :raises TraceError: unreadable file, not JSON, or no ``traceEvents`` list.
    """
    if isinstance(source, Mapping):
        data: Any = dict(source)
    elif isinstance(source, list):
        data = source
    else:
        p = Path(source)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise TraceError(f"trace {p}: cannot read ({exc})") from None
        try:
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            data = json.loads(raw)
        except (OSError, ValueError) as exc:
            raise TraceError(f"trace {p}: not a (gzipped) JSON file ({exc}); expected torch.profiler's "
                             "export_chrome_trace output") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError("trace: no 'traceEvents' list; expected torch.profiler's export_chrome_trace output")
    return data


@dataclass
class _Ev:
    ts: float  # us
    end: float  # us
    name: str
    cat: str
    pid: Any
    tid: Any
    corr: int | None


@dataclass
class TraceIndex:
    """Events of one trace, sorted by start time (microseconds).

    ``gpu``: kernels, copies and memsets; ``runtime``: host launch calls; ``spans``: step spans
    (``user_annotation`` events matching the step pattern); ``launch_by_corr``: runtime event
    per correlation id; ``gpu_by_corr``: GPU ops per correlation id (a graph replay has many).
    """

    gpu: list[_Ev] = field(default_factory=list)
    runtime: list[_Ev] = field(default_factory=list)
    spans: list[_Ev] = field(default_factory=list)
    launch_by_corr: dict[int, _Ev] = field(default_factory=dict)
    gpu_by_corr: dict[int, list[_Ev]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_starts(self) -> list[float]:
        return [e.ts for e in self.gpu]


def _corr(args: Any) -> int | None:
    if not isinstance(args, dict):
        return None
    c = args.get("correlation", args.get("correlation id"))
    try:
        return int(c) if c is not None else None
    except (TypeError, ValueError):
        return None


def index_trace(trace: Mapping[str, Any], span_re: re.Pattern[str] = STEP_SPAN_RE) -> TraceIndex:
    """Sort a loaded trace's complete events into :class:`TraceIndex` (see the module doc)."""
    idx = TraceIndex(metadata={k: v for k, v in trace.items() if k != "traceEvents"})
    for e in trace["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            ts = float(e["ts"])
            dur = float(e.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        cat, name = str(e.get("cat", "")), str(e.get("name", ""))
        ev = _Ev(ts, ts + max(dur, 0.0), name, cat, e.get("pid"), e.get("tid"), _corr(e.get("args")))
        if cat in _GPU_CATS:
            idx.gpu.append(ev)
        elif cat in _RUNTIME_CATS:
            idx.runtime.append(ev)
        elif cat == "user_annotation" and span_re.match(name):
            idx.spans.append(ev)
    for lst in (idx.gpu, idx.runtime, idx.spans):
        lst.sort(key=lambda ev: ev.ts)
    for r in idx.runtime:
        if r.corr is not None:
            idx.launch_by_corr[r.corr] = r
    for g in idx.gpu:
        if g.corr is not None:
            idx.gpu_by_corr.setdefault(g.corr, []).append(g)
    return idx


def short_kernel_name(name: str, limit: int = 80) -> str:
    """A kernel name without template arguments and parameter lists, cut to ``limit`` chars
    (``void flash::flash_fwd_kernel<Traits, ...>(Params)`` -> ``flash::flash_fwd_kernel``)."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    depth, out = 0, []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip() or name
    return s[:limit]


def _union_ms(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Length in ms of the union of [a, b) us intervals clipped to [lo, hi)."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total / 1e3


def _host_gap_ms(ops: list[_Ev], start: float, launch_ts: dict[int, float]) -> float:
    """Idle GPU time (ms) spent waiting for the host: before each op whose launch call began
    after the GPU had gone idle (previous op's end, or ``start`` for the first)."""
    busy_until, gap = start, 0.0
    for op in sorted(ops, key=lambda e: e.ts):
        if op.ts > busy_until:
            lt = launch_ts.get(id(op))
            if lt is not None and lt >= busy_until - _EPS_US:
                gap += op.ts - busy_until
        busy_until = max(busy_until, op.end)
    return gap / 1e3


@functools.lru_cache(maxsize=8192)
def _kernel_kind(name: str) -> tuple[bool, bool, str | None]:
    """What :func:`_kernel_stats` asks of one kernel name, asked once per distinct name (a
    trace repeats a few hundred names across tens of thousands of kernels):
    ``(is an all-reduce, is an NCCL kernel, short attention-kernel name or None)``."""
    nccl = bool(NCCL_RE.search(name))
    allreduce = bool(ALLREDUCE_RE.search(name)) and (nccl or "reduce" in name.lower())
    attention = short_kernel_name(name) if ATTENTION_RE.search(name) and not nccl else None
    return allreduce, nccl, attention


def _kernel_stats(ops: list[_Ev], launches: list[_Ev]) -> dict[str, Any]:
    kernels = [o for o in ops if o.cat == "kernel"]
    kinds = [_kernel_kind(k.name) for k in kernels]
    ar = [k for k, (is_ar, _, _) in zip(kernels, kinds) if is_ar]
    nccl = [k for k, (_, is_nccl, _) in zip(kernels, kinds) if is_nccl]
    attn: dict[str, int] = {}
    for _, _, n in kinds:
        if n is not None:
            attn[n] = attn.get(n, 0) + 1
    return {
        "kernels": len(kernels),
        "copies": len(ops) - len(kernels),
        "eager_launches": sum(1 for r in launches if r.name in EAGER_LAUNCH_NAMES),
        "graph_launches": sum(1 for r in launches if r.name in GRAPH_LAUNCH_NAMES),
        "allreduce_count": len(ar),
        "allreduce_ms": sum(k.end - k.ts for k in ar) / 1e3,
        "nccl_kernels": len(nccl),
        "attention_kernels": dict(sorted(attn.items())),
    }


def step_rows(idx: TraceIndex, span_re: re.Pattern[str] = STEP_SPAN_RE) -> list[dict[str, Any]]:
    """One row per step span, in time order (units: ms; shares in 0..1).

    Fields: ``stage`` (``DECODE``, ``VERIFY``, ``DRAFT``, ...), ``name`` (the span's full
    name), ``start_us``, ``wall_ms``, ``host_ms`` (the span itself: the host's time in the
    forward), ``gpu_busy_ms``, ``idle_ms``, ``idle_share``, ``host_gap_ms``,
    ``host_gap_share``, ``kernels``, ``copies``, ``eager_launches``, ``graph_launches``,
    ``allreduce_count``, ``allreduce_ms``, ``nccl_kernels``, ``attention_kernels``
    (``{short name: count}``).

    A span nested in another step span of the same thread is skipped (its work is counted
    in the outer one).
    """
    rows = []
    rt_starts = [r.ts for r in idx.runtime]
    outer: list[_Ev] = []
    for s in idx.spans:
        if any(o.tid == s.tid and o.pid == s.pid and o.ts <= s.ts and s.end <= o.end for o in outer[-4:]):
            continue
        outer.append(s)
    for s in outer:
        lo, hi = bisect_left(rt_starts, s.ts), bisect_left(rt_starts, s.end)  # launches in [start, end)
        launches = [r for r in idx.runtime[lo:hi] if r.tid == s.tid and r.pid == s.pid]
        ops: list[_Ev] = []
        launch_ts: dict[int, float] = {}
        for r in launches:
            if r.corr is None:
                continue
            for g in idx.gpu_by_corr.get(r.corr, ()):
                ops.append(g)
                launch_ts[id(g)] = r.ts
        end = max([s.end] + [g.end for g in ops])
        wall = (end - s.ts) / 1e3
        busy = _union_ms(((g.ts, g.end) for g in ops), s.ts, end)
        gap = _host_gap_ms(ops, s.ts, launch_ts)
        m = span_re.match(s.name)
        row = {
            "stage": m.group("stage") if m else s.name,
            "name": s.name,
            "start_us": s.ts,
            "wall_ms": wall,
            "host_ms": (s.end - s.ts) / 1e3,
            "gpu_busy_ms": busy,
            "idle_ms": max(wall - busy, 0.0),
            "idle_share": (max(wall - busy, 0.0) / wall) if wall > 0 else None,
            "host_gap_ms": gap,
            "host_gap_share": (gap / wall) if wall > 0 else None,
        }
        row.update(_kernel_stats(ops, launches))
        rows.append(row)
    return rows


def cycle_rows(idx: TraceIndex, steps: list[dict[str, Any]], anchor: str | None = None) -> list[dict[str, Any]]:
    """One row per cycle: from one anchor step's start to the next one's (see the module doc).

    :param anchor: the stage that starts a cycle; default ``VERIFY`` if any step has it,
        else ``DECODE``. A trace with fewer than two anchors has no cycles. A cycle holding a
        step other than the anchor and ``DRAFT`` (a prefill at a request boundary, say) is
        left out: cycles are the steady decode loop.
    :returns: rows with ``anchor``, ``start_us``, ``wall_ms``, ``gpu_busy_ms``, ``idle_ms``,
        ``idle_share``, ``host_gap_ms``, ``host_gap_share`` (gaps clipped to the cycle's end
        are not counted), ``stages`` (``{stage: count}`` of the steps inside), the kernel
        statistics of :func:`step_rows` over every GPU op that starts in the cycle and every
        launch call inside it, and ``forward_ms`` (sum of the steps' wall times).
    """
    stages = {r["stage"] for r in steps}
    anchor = anchor or ("VERIFY" if "VERIFY" in stages else "DECODE")
    allowed = {anchor, "DRAFT"}
    starts = [r["start_us"] for r in steps if r["stage"] == anchor]
    gpu_starts = idx.gpu_starts
    rt_starts = [r.ts for r in idx.runtime]
    out = []
    for a, b in zip(starts, starts[1:]):
        inside = [r for r in steps if a <= r["start_us"] < b]
        if any(r["stage"] not in allowed for r in inside):
            continue  # a request boundary (EXTEND) or other forward: not a steady cycle
        ops = idx.gpu[bisect_left(gpu_starts, a):bisect_left(gpu_starts, b)]
        launches = idx.runtime[bisect_left(rt_starts, a):bisect_left(rt_starts, b)]
        wall = (b - a) / 1e3
        busy = _union_ms(((g.ts, g.end) for g in ops), a, b)
        launch_ts = {id(g): idx.launch_by_corr[g.corr].ts for g in ops if g.corr in idx.launch_by_corr}
        gap = _host_gap_ms(ops, a, launch_ts)
        row = {
            "anchor": anchor,
            "start_us": a,
            "wall_ms": wall,
            "gpu_busy_ms": busy,
            "idle_ms": max(wall - busy, 0.0),
            "idle_share": max(wall - busy, 0.0) / wall if wall > 0 else None,
            "host_gap_ms": gap,
            "host_gap_share": gap / wall if wall > 0 else None,
            "stages": {st: sum(1 for r in inside if r["stage"] == st) for st in sorted({r["stage"] for r in inside})},
            "forward_ms": sum(r["wall_ms"] for r in inside),
        }
        row.update(_kernel_stats(ops, launches))
        out.append(row)
    return out


_NUMERIC = ("wall_ms", "host_ms", "gpu_busy_ms", "idle_ms", "idle_share", "host_gap_ms", "host_gap_share",
            "kernels", "copies", "eager_launches", "graph_launches", "allreduce_count", "allreduce_ms",
            "nccl_kernels", "forward_ms")


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric fields of ``rows`` (step or cycle rows), plus ``n`` and the union
    of ``attention_kernels`` (counts summed over the rows, and per row on median).

    :returns: ``{"n": int, "<field>_p50": float | None, ..., "attention_kernels": {...}}``.
    """
    out: dict[str, Any] = {"n": len(rows)}
    for k in _NUMERIC:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[f"{k}_p50"] = statistics.median(vals) if vals else None
    attn: dict[str, int] = {}
    for r in rows:
        for n, c in (r.get("attention_kernels") or {}).items():
            attn[n] = attn.get(n, 0) + c
    out["attention_kernels"] = dict(sorted(attn.items()))
    return out


def analyze_trace(source: str | Path | Mapping[str, Any], mode: str | None = None, *,
                  anchor: str | None = None, span_re: re.Pattern[str] = STEP_SPAN_RE) -> dict[str, Any]:
    """Everything this module computes for one trace (one mode).

    :param source: a trace path (``.json`` / ``.json.gz``) or a loaded dict.
    :param mode: the label to carry (e.g. ``baseline``, ``eagle3_prefill``).
    :param anchor: cycle anchor stage (see :func:`cycle_rows`).
    :returns: ``{"mode", "source", "steps": [...], "cycles": [...], "by_stage": {stage:
        summary}, "cycle_summary": summary, "events": {"gpu", "runtime", "spans"}}``; summaries
        from :func:`summarize_rows`.
    :raises TraceError: unreadable trace, or one with no step span (the message says which
        spans were expected).
    """
    trace = load_trace(source)
    idx = index_trace(trace, span_re)
    if not idx.spans:
        raise TraceError(f"trace {source if not isinstance(source, Mapping) else '<dict>'}: no step spans "
                         f"matching {span_re.pattern!r} (user_annotation events); SGLang 0.5.23 emits them "
                         "around every ModelRunner.forward when CPU activity is profiled")
    steps = step_rows(idx, span_re)
    cycles = cycle_rows(idx, steps, anchor)
    by_stage: dict[str, Any] = {}
    for st in sorted({r["stage"] for r in steps}):
        by_stage[st] = summarize_rows([r for r in steps if r["stage"] == st])
    return {
        "mode": mode,
        "source": None if isinstance(source, Mapping) else str(source),
        "steps": steps,
        "cycles": cycles,
        "by_stage": by_stage,
        "cycle_summary": summarize_rows(cycles),
        "events": {"gpu": len(idx.gpu), "runtime": len(idx.runtime), "spans": len(idx.spans)},
    }
