"""Torch-profiler traces of the physics layer stack: where an eager verify forward's time goes.

``python -m lab.physics.kernel_traces --out DIR [--iters 5] [stack options of python -m lab.physics]``

Captures, for each case of :data:`CASES` (T = 1 in a CUDA graph, T = 1 eager, T = 3 eager,
T = 3 in a CUDA graph), ``iters`` forwards of the stack of :mod:`lab.physics.stack_bench` under
``torch.profiler`` (CPU + CUDA activity), each forward wrapped in a
``record_function("step[<STAGE> bs=1 T=<T> <graph|eager>]")`` span named like SGLang 0.5.23's
step spans (``sglang/srt/utils/profile_utils.py:462-505``: ``DECODE`` for T = 1, ``VERIFY``
for T = 3), with the device synchronized and a fresh input copied in before each. Each case's
trace goes to ``DIR/<case>.trace.json.gz`` and is analysed by :func:`lab.profiling.trace.analyze_trace`;
``DIR/profile.json`` holds the per-case summaries, ``DIR/profile.md`` the table.

The profiler itself slows eager launches (CUPTI's callback per launch call), so the same
cases are also timed unprofiled with CUDA events (``timed_iters`` each, interleaved) and both
are reported: ``unprofiled_wall_ms_p50`` next to the traced wall time.

How this stack differs from Kimi-K2.5 under SGLang: no MoE routing (one dense MLP of the
active experts' per-GPU width stands in for the router, the top-k dispatch and the expert
GEMMs), no MLA (plain multi-head attention through PyTorch's SDPA instead of MLA's low-rank
projections and FlashAttention-3/FlashMLA kernels), no TP all-reduce at TP 1 (Kimi-K2.5 on
8 GPUs all-reduces across its 61 layers: the seeds count 61 NCCL all-reduce launches per verify), no embedding,
LM head, sampling or SGLang scheduler. Its kernel count per forward is therefore lower
than a real verify forward's, and every gap measured here is launch overhead of PyTorch
eager ops alone.

On a machine without CUDA it runs eager cases on the CPU (``--cpu``; a smoke test of the
code path: CPU ops only, no kernels, ``device.type = cpu``), else writes a "not run" status.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.physics.shapes import PhysicsConfig, percentiles_ms

__all__ = ["CASES", "STATUS_OK", "capture_profiles", "markdown_table", "markdown_report", "case_rows", "plot_cases",
           "main", "DIFFERENCES_FROM_KIMI"]

#: (case name, T, CUDA graph, stage label of the step span).
CASES: tuple[tuple[str, int, bool, str], ...] = (
    ("decode_graph_T1", 1, True, "DECODE"),
    ("decode_eager_T1", 1, False, "DECODE"),
    ("verify_eager_T3", 3, False, "VERIFY"),
    ("verify_graph_T3", 3, True, "VERIFY"),
)

STATUS_OK = "ok"

DIFFERENCES_FROM_KIMI = (
    "no MoE routing (a dense MLP of the active experts' per-GPU width stands in for router, "
    "top-k dispatch and expert GEMMs); no MLA (plain multi-head attention through PyTorch SDPA "
    "instead of MLA's low-rank projections and FA3/FlashMLA kernels); no TP all-reduce at TP 1 "
    "(Kimi-K2.5 at TP 8 all-reduces across its 61 layers: the seeds count 61 NCCL all-reduce "
    "launches per verify forward); no embedding, LM head, sampling or SGLang scheduler")

_SUMMARY_KEYS = ("wall_ms_p50", "host_ms_p50", "gpu_busy_ms_p50", "idle_ms_p50", "idle_share_p50",
                 "host_gap_ms_p50", "host_gap_share_p50", "kernels_p50", "copies_p50", "eager_launches_p50",
                 "graph_launches_p50", "allreduce_count_p50", "allreduce_ms_p50")


def _gzip_file(src: Path, dst: Path) -> None:
    with src.open("rb") as fi, gzip.open(dst, "wb", compresslevel=9) as fo:
        shutil.copyfileobj(fi, fo)
    src.unlink()


def capture_profiles(cfg: PhysicsConfig, out_dir: str | Path, *, iters: int = 5, cases: Sequence[str] | None = None,
                     allow_cpu: bool = False, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Capture and analyse one trace per case; write traces, ``profile.json`` and ``profile.md``.

    :param cfg: the stack (``tp`` must be 1: the traced cases run in this process).
    :param out_dir: output folder.
    :param iters: profiled forwards per case (keep small: a 61-layer eager forward is ~1,000
        kernels and ~0.2 MB of gzipped trace).
    :param cases: subset of :data:`CASES` names (default all).
    :param allow_cpu: without CUDA, run the eager cases on the CPU instead of "not run".
    :returns: ``{"status", "params", "device", "iters", "cases": {name: {"T", "graph",
        "stage", "trace", "summary" (step summary of :func:`lab.profiling.trace.summarize_rows`),
        "steps" (per-forward rows), "unprofiled_wall_ms_p50"}}, "differences_from_kimi"}``.
    :raises ValueError: ``cfg.tp != 1``, ``iters < 1`` or an unknown case name.
    """
    from lab.profiling.trace import analyze_trace

    if cfg.tp != 1:
        raise ValueError(f"physics profile: tp must be 1 (got {cfg.tp}); traces are captured in one process")
    if iters < 1:
        raise ValueError(f"physics profile: iters must be >= 1, got {iters}")
    known = {c[0] for c in CASES}
    chosen = [c for c in CASES if cases is None or c[0] in cases]
    if cases is not None and set(cases) - known:
        raise ValueError(f"physics profile: unknown case(s) {sorted(set(cases) - known)}; known: {sorted(known)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"status": None, "params": cfg.as_dict(), "iters": iters,
                              "differences_from_kimi": DIFFERENCES_FROM_KIMI, "cases": {}}
    try:
        import torch
    except ImportError:
        result["status"] = "not run: torch not installed"
        return _write(result, out, log)
    is_cuda = bool(torch.cuda.is_available())
    if not is_cuda and not allow_cpu:
        result["status"] = "not run: no CUDA device"
        return _write(result, out, log)
    if not is_cuda:
        chosen = [c for c in chosen if not c[2]]

    from torch.profiler import ProfilerActivity, profile, record_function

    from lab.physics.stack_bench import _dtype, attention_mask, build_layers, device_info, stack_forward

    dev = torch.device("cuda" if is_cuda else "cpu")
    dt = _dtype(torch, cfg.dtype)
    result["device"] = device_info(dev)
    t_needed = sorted({c[1] for c in chosen})
    layers = build_layers(cfg, dev, seed=1000, max_new_tokens=max(t_needed))
    gen = torch.Generator(device=dev)
    gen.manual_seed(2000)

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize()

    runs: dict[str, dict[str, Any]] = {}
    for name, T, graph, stage in chosen:
        x = torch.empty(T, cfg.hidden_size, device=dev, dtype=dt)
        mask = attention_mask(cfg, T, dev)
        fresh = (lambda x=x, T=T: x.copy_(torch.randn(T, cfg.hidden_size, device=dev, dtype=dt, generator=gen)))
        eager = (lambda x=x, mask=mask: stack_forward(x, layers, cfg, mask, None))
        for _ in range(cfg.warmup_iters):
            fresh()
            eager()
        run = eager
        if graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    eager()
            torch.cuda.current_stream().wait_stream(side)
            sync()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                eager()
            for _ in range(cfg.warmup_iters):
                fresh()
                g.replay()
            run = g.replay
            runs[name] = {"graph_obj": g}
        runs.setdefault(name, {}).update(T=T, graph=graph, stage=stage, run=run, fresh=fresh)
        sync()

    # Unprofiled timing, interleaved across cases (as lab.physics.stack_bench.measure does).
    samples: dict[str, list[float]] = {n: [] for n in runs}
    names = list(runs)
    for it in range(cfg.timed_iters):
        k = it % len(names)
        for n in names[k:] + names[:k]:
            r = runs[n]
            r["fresh"]()
            sync()
            if is_cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                r["run"]()
                e.record()
                e.synchronize()
                samples[n].append(s.elapsed_time(e))
            else:
                t0 = time.perf_counter()
                r["run"]()
                samples[n].append((time.perf_counter() - t0) * 1e3)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda else [])
    for n, r in runs.items():
        label = f"step[{r['stage']} bs=1 T={r['T']} {'graph' if r['graph'] else 'eager'}]"
        with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
            for _ in range(iters):
                r["fresh"]()
                sync()
                with record_function(label):
                    r["run"]()
                sync()
        raw = out / f"{n}.trace.json"
        prof.export_chrome_trace(str(raw))
        gz = out / f"{n}.trace.json.gz"
        _gzip_file(raw, gz)
        ana = analyze_trace(gz, mode=n)
        steps = ana["steps"]
        summary = ana["by_stage"].get(r["stage"], {})
        result["cases"][n] = {
            "T": r["T"], "graph": r["graph"], "stage": r["stage"], "span": label,
            "trace": gz.name, "trace_bytes": gz.stat().st_size,
            "summary": summary, "steps": steps,
            "unprofiled_wall_ms_p50": percentiles_ms(samples[n])[0] if samples[n] else None,
            "unprofiled_samples_ms": samples[n],
        }
        log(f"[physics profile] {n}: traced wall p50 {summary.get('wall_ms_p50') or 0:.3f} ms, GPU busy "
            f"{summary.get('gpu_busy_ms_p50') or 0:.3f} ms, idle {100 * (summary.get('idle_share_p50') or 0):.1f} %, "
            f"host launch gaps {100 * (summary.get('host_gap_share_p50') or 0):.1f} %, kernels "
            f"{summary.get('kernels_p50')}, eager launches {summary.get('eager_launches_p50')}, graph launches "
            f"{summary.get('graph_launches_p50')}; unprofiled {result['cases'][n]['unprofiled_wall_ms_p50']:.3f} ms")
    for r in runs.values():
        r.clear()
    sync()
    result["status"] = STATUS_OK
    return _write(result, out, log)


def markdown_table(result: dict[str, Any]) -> str:
    """The per-case table (Markdown) of a :func:`capture_profiles` result."""
    lines = ["| case | T | CUDA graph | unprofiled wall p50 (ms) | traced wall p50 (ms) | GPU busy p50 (ms) "
             "| idle share | host launch gap share | kernels / forward | eager launches | graph launches "
             "| all-reduces | attention kernels |",
             "| --- | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]

    def f(v: Any, fmt: str = "{:.3f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    for n, c in result.get("cases", {}).items():
        s = c["summary"]
        attn = ", ".join(f"`{k}` x{v // max(s.get('n') or 1, 1)}" for k, v in s.get("attention_kernels", {}).items()) or "none"
        lines.append(f"| {n} | {c['T']} | {'yes' if c['graph'] else 'no'} | {f(c.get('unprofiled_wall_ms_p50'))} "
                     f"| {f(s.get('wall_ms_p50'))} | {f(s.get('gpu_busy_ms_p50'))} "
                     f"| {f(s.get('idle_share_p50'), '{:.1%}')} | {f(s.get('host_gap_share_p50'), '{:.1%}')} "
                     f"| {f(s.get('kernels_p50'), '{:.0f}')} | {f(s.get('eager_launches_p50'), '{:.0f}')} "
                     f"| {f(s.get('graph_launches_p50'), '{:.0f}')} | {f(s.get('allreduce_count_p50'), '{:.0f}')} | {attn} |")
    return "\n".join(lines) + "\n"


def case_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per case for :func:`lab.profiling.report.plot_time_breakdown`: the case's step
    summary plus ``mode`` (case name), ``stage`` (``T=<T> graph|eager``),
    ``unprofiled_wall_ms_p50`` and ``unprofiled_idle_share_est`` = 1 - GPU busy (traced) /
    unprofiled wall, which assumes the kernels take as long without the profiler (the graph
    cases check it: their GPU-busy time is within 0.4 ms of their unprofiled wall time)."""
    rows = []
    for n, c in result.get("cases", {}).items():
        s = dict(c["summary"])
        s.update(mode=n, stage=f"T={c['T']} {'graph' if c['graph'] else 'eager'}",
                 unprofiled_wall_ms_p50=c.get("unprofiled_wall_ms_p50"))
        uw, busy = c.get("unprofiled_wall_ms_p50"), s.get("gpu_busy_ms_p50")
        s["unprofiled_idle_share_est"] = (max(uw - busy, 0.0) / uw) if uw and busy is not None else None
        rows.append(s)
    return rows


def plot_cases(result: dict[str, Any], path: str | Path) -> Path:
    """The time-breakdown figure of a :func:`capture_profiles` result (PNG at ``path``)."""
    from lab.profiling.report import plot_time_breakdown

    dev = (result.get("device") or {}).get("name", "?")
    return plot_time_breakdown(
        case_rows(result), path,
        title=f"Physics layer stack on {dev}: where one forward's time goes (torch profiler)",
        caption=("Measured on the GPU with torch.profiler (python -m lab.physics.kernel_traces); bars: traced medians, "
                 "black tick: CUDA-event wall time without the profiler. Stack: " + DIFFERENCES_FROM_KIMI + "."))


def markdown_report(result: dict[str, Any]) -> str:
    """The generated part of ``docs/benchmarks/physics-h200-profile.md``: device line, per-case
    table, the unprofiled idle-share estimate and the one-sentence comparison of eager verify
    (T = 3) against graph decode (T = 1)."""
    from lab.profiling.report import where_time_goes

    dev = result.get("device") or {}
    cases = result.get("cases", {})
    lines = [f"- GPU: {dev.get('name')} (driver {dev.get('driver')}), torch {dev.get('torch')}, CUDA {dev.get('cuda')}",
             f"- {result.get('iters')} profiled forwards per case (CPU + CUDA activity), "
             f"{result['params'].get('timed_iters')} unprofiled (CUDA events) per case, interleaved",
             "", markdown_table(result), "",
             "| case | unprofiled wall p50 (ms) | traced GPU busy p50 (ms) | idle share without the profiler (est.) |",
             "| --- | ---: | ---: | ---: |"]
    for r in case_rows(result):
        est = r["unprofiled_idle_share_est"]
        lines.append(f"| {r['mode']} | {r['unprofiled_wall_ms_p50']:.3f} | {r['gpu_busy_ms_p50']:.3f} | "
                     + ("n/a" if est is None else f"{est:.1%}") + " |")
    v, d = cases.get("verify_eager_T3"), cases.get("decode_graph_T1")
    if v and d:
        sent = where_time_goes(v["summary"], d["summary"], verify_label="eager verify (T=3)",
                               decode_label="graph decode (T=1)")
        lines += ["", f"Traced: {sent}"]
    return "\n".join(lines) + "\n"


def _write(result: dict[str, Any], out: Path, log: Callable[[str], Any]) -> dict[str, Any]:
    from lab.atomic import write_text_atomic

    write_text_atomic(out / "profile.json", json.dumps(result, indent=1, default=str) + "\n")
    md = f"status: {result['status']}\n\n" + (markdown_table(result) if result.get("cases") else "")
    write_text_atomic(out / "profile.md", md)
    log(f"[physics profile] {result['status']}: wrote {out / 'profile.json'}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """CLI; exit 0 for ``ok`` and ``not run: ...``, 1 otherwise."""
    from lab.physics.stack_options import build_parser, parse

    parser = build_parser("python -m lab.physics.kernel_traces", __doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=5, help="profiled forwards per case (default 5)")
    parser.add_argument("--cases", default=None, help="comma-separated subset of " + ",".join(c[0] for c in CASES))
    ns = parse(argv, parser)
    cfg = ns.config
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    res = capture_profiles(cfg, ns.out, iters=ns.iters, allow_cpu=ns.cpu,
                           cases=ns.cases.split(",") if ns.cases else None)
    print(markdown_table(res) if res.get("cases") else "")
    print("status:", res["status"])
    return 0 if res["status"] == STATUS_OK or str(res["status"]).startswith("not run") else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

