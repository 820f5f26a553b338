"""The measured layer stack: eager forwards vs CUDA-graph replays (PyTorch only).

torch is imported inside functions, so this module imports where torch is absent.

What runs, per GPU (Megatron-style tensor parallelism, one process per GPU when tp > 1):
``num_layers`` layers of RMSNorm -> fused q/k/v projection -> write the T new K/V rows into
a preallocated KV cache of ``kv_context`` filled positions -> scaled-dot-product attention
of the T queries over ``kv_context + T`` positions (bottom-right causal among the new
tokens, the mask of a chain verify with topk 1; T=1 needs no mask) -> output projection ->
all-reduce (tp > 1) -> residual -> RMSNorm -> fused gate/up -> SiLU * up -> down ->
all-reduce (tp > 1) -> residual. q/k/v and gate/up are fused as SGLang's
``QKVParallelLinear`` / ``MergedColumnParallelLinear`` do; the bytes are those of
:mod:`lab.physics.shapes`. Weights are random (normal, std 1/sqrt(fan_in)), never zeros,
and every layer has its own, so each forward reads all of them from device memory.

Timing (METHOD.md): for each T, ``warmup_iters`` untimed runs; then ``timed_iters`` rounds
that each time one eager forward and one graph replay of every T (interleaved, see
:func:`measure`), each run with fresh random input copied into the static input buffer, the
device synchronized (and on tp > 1 the ranks barriered) before it, and CUDA events around
the forward alone.
The synchronization before each run makes the eager time include the host's kernel-launch
time whenever the GPU waits for it, as at batch 1 in serving. The graph is captured once
per T after a warm-up on a side stream (torch.cuda.graphs docs) and includes the
all-reduces; its output is checked against the eager output on the same input.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from lab.physics.shapes import PhysicsConfig, percentiles_ms

__all__ = [
    "NCCL_SAFETY_ENV",
    "set_nccl_safety_env",
    "build_layers",
    "shard_layers",
    "attention_mask",
    "stack_forward",
    "measure_copy_bandwidth_gb_s",
    "device_info",
    "measure",
    "measure_tp",
    "tp_reference_check",
]

#: NVLink multicast off in NCCL, PyTorch symmetric memory and NVSHMEM (KINDS.md: a program
#: that uses it can put a shared host's GPUs out of service). Set before any process group.
NCCL_SAFETY_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

_RMS_EPS = 1e-6


def set_nccl_safety_env() -> None:
    """Force :data:`NCCL_SAFETY_ENV` into ``os.environ`` (inherited by spawned ranks)."""
    os.environ.update(NCCL_SAFETY_ENV)


def _dtype(torch: Any, name: str) -> Any:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def build_layers(cfg: PhysicsConfig, device: Any, *, seed: int = 0, max_new_tokens: int | None = None,
                 heads: int | None = None, intermediate: int | None = None) -> list[dict[str, Any]]:
    """Random weights and an empty-but-random KV cache for every layer.

    :param cfg: shapes and dtype.
    :param device: a ``torch.device`` (or string).
    :param seed: generator seed (each TP rank passes its own).
    :param max_new_tokens: cache room beyond ``kv_context`` (default ``max(cfg.tokens)``).
    :param heads, intermediate: override the per-GPU head count / MLP width (to build the
        unsharded model for :func:`tp_reference_check`).
    :returns: one dict per layer: ``norm1`` [H], ``wqkv`` [3*A, H] (q rows, then k, then v),
        ``wo`` [H, A], ``norm2`` [H], ``wgu`` [2*I, H] (gate rows, then up), ``wd`` [H, I],
        ``k_cache``/``v_cache`` [1, heads, kv_context + max_new_tokens, head_dim]; the first
        ``kv_context`` cache positions hold random values (the "cached context").
    """
    import torch

    dev = torch.device(device)
    dt = _dtype(torch, cfg.dtype)
    nh = heads or cfg.heads_per_gpu
    h, d, i = cfg.hidden_size, cfg.head_dim, intermediate or cfg.mlp_intermediate_per_gpu
    a = nh * d
    cache_len = cfg.kv_context + (max_new_tokens or max(cfg.tokens))
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    def rand(*shape: int, std: float) -> Any:
        return torch.empty(*shape, device=dev, dtype=dt).normal_(0.0, std, generator=gen)

    layers = []
    for _ in range(cfg.num_layers):
        layers.append({
            "norm1": 1.0 + rand(h, std=0.02),
            "wqkv": rand(3 * a, h, std=1 / math.sqrt(h)),
            "wo": rand(h, a, std=1 / math.sqrt(a)),
            "norm2": 1.0 + rand(h, std=0.02),
            "wgu": rand(2 * i, h, std=1 / math.sqrt(h)),
            "wd": rand(h, i, std=1 / math.sqrt(i)),
            "k_cache": rand(1, nh, cache_len, d, std=1.0),
            "v_cache": rand(1, nh, cache_len, d, std=1.0),
        })
    return layers


def shard_layers(full: list[dict[str, Any]], rank: int, tp: int, heads_per_gpu: int, head_dim: int,
                 intermediate_per_gpu: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s Megatron shard of unsharded layers from :func:`build_layers`.

    Column-parallel (split output rows): q, k and v by heads, gate and up by intermediate
    columns; row-parallel (split input columns): o and down; KV cache by heads; norms
    replicated. Summing the row-parallel outputs over ranks (the all-reduce) restores the
    unsharded layer (Shoeybi et al. 2019, Megatron-LM, section 3).
    """
    import torch

    a, i = heads_per_gpu * head_dim, intermediate_per_gpu
    full_a, full_i = a * tp, i * tp
    out = []
    for L in full:
        q, k, v = L["wqkv"].split(full_a, dim=0)
        g, u = L["wgu"].split(full_i, dim=0)
        rs, hs = slice(rank * a, (rank + 1) * a), slice(rank * heads_per_gpu, (rank + 1) * heads_per_gpu)
        ri = slice(rank * i, (rank + 1) * i)
        out.append({
            "norm1": L["norm1"].clone(),
            "wqkv": torch.cat([q[rs], k[rs], v[rs]]).contiguous(),
            "wo": L["wo"][:, rs].contiguous(),
            "norm2": L["norm2"].clone(),
            "wgu": torch.cat([g[ri], u[ri]]).contiguous(),
            "wd": L["wd"][:, ri].contiguous(),
            "k_cache": L["k_cache"][:, hs].contiguous(),
            "v_cache": L["v_cache"][:, hs].contiguous(),
        })
    return out


def attention_mask(cfg: PhysicsConfig, T: int, device: Any) -> Any:
    """The attention mask for T new tokens after ``kv_context`` cached ones, or ``None``.

    T=1 (decode): ``None``. T>1: query i sees cache positions ``0 .. kv_context + i``
    (bottom-right causal), as ``torch.nn.attention.bias.causal_lower_right(T, S)`` where
    available (PyTorch >= 2.3), else as a boolean [T, S] tensor; S = kv_context + T.
    """
    import torch

    if T == 1:
        return None
    s = cfg.kv_context + T
    try:
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(T, s)
    except ImportError:  # pragma: no cover - old torch
        dev = torch.device(device)
        return torch.arange(s, device=dev)[None, :] <= (cfg.kv_context + torch.arange(T, device=dev))[:, None]


def stack_forward(x: Any, layers: list[dict[str, Any]], cfg: PhysicsConfig, mask: Any,
                  all_reduce: Callable[[Any], None] | None = None) -> Any:
    """One forward of the stack for ``x`` [T, hidden] (T new tokens); returns [T, hidden].

    Writes each layer's new K/V into cache positions ``kv_context .. kv_context+T-1``
    (overwritten by the next forward of the same T, as a fixed decode slot would be).
    ``all_reduce(t)`` (in place, sum over TP ranks) runs after attention and after the MLP.
    Head count and MLP width are read off the weights, so unsharded layers work too.
    """
    import torch.nn.functional as F

    T, h = x.shape
    d, ctx = cfg.head_dim, cfg.kv_context
    s = ctx + T
    for L in layers:
        a = L["wo"].shape[1]
        nh = a // d
        y = F.rms_norm(x, (h,), L["norm1"], _RMS_EPS)
        q, k, v = F.linear(y, L["wqkv"]).split(a, dim=-1)
        L["k_cache"][0, :, ctx:s].copy_(k.view(T, nh, d).transpose(0, 1))
        L["v_cache"][0, :, ctx:s].copy_(v.view(T, nh, d).transpose(0, 1))
        q = q.view(T, nh, d).transpose(0, 1).unsqueeze(0)
        o = F.scaled_dot_product_attention(q, L["k_cache"][:, :, :s], L["v_cache"][:, :, :s], attn_mask=mask)
        o = F.linear(o[0].transpose(0, 1).reshape(T, a), L["wo"])
        if all_reduce is not None:
            all_reduce(o)
        x = x + o
        y = F.rms_norm(x, (h,), L["norm2"], _RMS_EPS)
        g, u = F.linear(y, L["wgu"]).chunk(2, dim=-1)
        m = F.linear(F.silu(g) * u, L["wd"])
        if all_reduce is not None:
            all_reduce(m)
        x = x + m
    return x


def measure_copy_bandwidth_gb_s(device: Any, nbytes: int = 2 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (1e9 B/s), bytes read plus bytes written.

    Copies a random ``nbytes`` buffer into another ``iters`` times after 3 warm-ups and
    returns ``2 * nbytes / median time`` (CUDA events; host clock on CPU). KINDS.md saw
    about 4,300 GB/s on an H200 this way.
    """
    import torch

    dev = torch.device(device)
    n = max(nbytes // 2, 1)
    src = torch.empty(n, device=dev, dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = _time_runs(lambda: dst.copy_(src), lambda: None, iters, dev.type == "cuda", None)
    med, _ = percentiles_ms(times)
    return 2 * n * 2 / (med * 1e-3) / 1e9


def _time_one(run: Callable[[], Any], fresh: Callable[[], Any], is_cuda: bool,
              barrier: Callable[[], Any] | None, events: tuple[Any, Any] | None) -> tuple[float, float]:
    """One timed run of ``run`` after ``fresh()`` and a sync (and barrier).

    :returns: (device time in ms between events around ``run``, or host time on CPU;
        host time in ms that issuing ``run`` took, i.e. until it returned).
    """
    import torch

    fresh()
    if is_cuda:
        torch.cuda.synchronize()
    if barrier is not None:
        barrier()
        if is_cuda:
            torch.cuda.synchronize()
    if is_cuda and events is not None:
        start, end = events
        start.record()
        t0 = time.perf_counter()
        run()
        host = (time.perf_counter() - t0) * 1e3
        end.record()
        end.synchronize()
        return start.elapsed_time(end), host
    t0 = time.perf_counter()
    run()
    host = (time.perf_counter() - t0) * 1e3
    return host, host


def _time_runs(run: Callable[[], Any], fresh: Callable[[], Any], iters: int, is_cuda: bool,
               barrier: Callable[[], Any] | None) -> list[float]:
    """Times ``run`` ``iters`` times in ms (see :func:`_time_one`); returns device times."""
    import torch

    events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if is_cuda else None
    return [_time_one(run, fresh, is_cuda, barrier, events)[0] for _ in range(iters)]


def _count_kernels(run: Callable[[], Any]) -> int | None:
    """GPU kernels (and memcpy/memset) one call of ``run`` launches, by torch.profiler; None if it fails."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    except Exception:
        return None


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except Exception:
        return None


def device_info(device: Any) -> dict[str, Any]:
    """Name, memory, multiprocessors, driver and library versions of ``device``."""
    import torch

    dev = torch.device(device)
    info: dict[str, Any] = {"type": dev.type, "torch": torch.__version__, "cuda": torch.version.cuda,
                            "python": platform.python_version(), "host_cpu": platform.processor() or platform.machine()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(name=p.name, count=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
                    multiprocessors=p.multi_processor_count, total_memory_gib=round(p.total_memory / 2**30, 1),
                    driver=_driver_version())
        try:
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            info["nccl"] = None
    else:
        info.update(name=f"cpu ({os.cpu_count()} cores)", count=1, driver=None, nccl=None)
    return info


def _rel_err(out: Any, ref: Any) -> float:
    import torch

    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return float("nan")
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def measure(cfg: PhysicsConfig, device: Any, *, rank: int = 0, all_reduce: Callable[[Any], None] | None = None,
            barrier: Callable[[], Any] | None = None, graphs: bool | None = None, copy_bytes: int | None = None,
            count_kernels: bool | None = None, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Time eager forwards and CUDA-graph replays of the stack for each T in ``cfg.tokens``.

    Set-up per T: ``warmup_iters`` eager forwards, one reference forward, graph capture
    (after 3 warm-up forwards on a side stream), one replay checked against the reference,
    ``warmup_iters`` replays. Then ``timed_iters`` rounds, each timing one eager forward and
    one replay of every T (the T order rotating from round to round), so that slow phases
    of the host (eager time is mostly host launch time) fall on every T alike rather than
    on whichever T was being timed in a block.

    :param device: ``"cuda"``, ``"cuda:N"`` or ``"cpu"`` (CPU: eager only).
    :param rank, all_reduce, barrier: this process's TP rank and its collectives (``None``
        for one GPU).
    :param graphs: capture CUDA graphs (default: on CUDA devices).
    :param copy_bytes: buffer size of the bandwidth copy (default 2 GiB on CUDA, 64 MiB on CPU).
    :param count_kernels: count the kernels of one eager forward per T with torch.profiler
        (default: on CUDA with one GPU; off under TP, where a rank whose profiler failed
        would leave the others waiting in an all-reduce).
    :returns: ``{"device": device_info, "copy_bandwidth_gb_s": float, "rows": [...]}``, one
        row per T with ``eager_ms_p50/p90/min``, ``graph_ms_p50/p90/min`` (``None`` when not
        captured), ``eager_host_ms_p50`` (host time to issue one eager forward),
        ``kernels_per_forward``, ``graph_vs_eager_rel_err`` (0 expected: same kernels),
        ``output_finite`` and ``samples_ms`` (every timed sample). A graph that fails to
        capture leaves ``graph_error`` in its row instead of stopping the other T.
    """
    import torch

    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    graphs = is_cuda if graphs is None else graphs
    count_kernels = (is_cuda and all_reduce is None) if count_kernels is None else count_kernels
    dt = _dtype(torch, cfg.dtype)
    info = device_info(dev)
    bw = measure_copy_bandwidth_gb_s(dev, copy_bytes or ((2 << 30) if is_cuda else (64 << 20)))
    log(f"[physics rank {rank}] {info.get('name')}: copy bandwidth {bw:.0f} GB/s")
    layers = build_layers(cfg, dev, seed=1000 + rank)
    gen = torch.Generator(device=dev)
    gen.manual_seed(2000)  # same inputs on every rank: hidden states are replicated under TP

    def sync_barrier() -> None:
        if barrier is not None:
            if is_cuda:
                torch.cuda.synchronize()
            barrier()

    setups: dict[int, dict[str, Any]] = {}
    for T in cfg.tokens:
        x = torch.empty(T, cfg.hidden_size, device=dev, dtype=dt)
        mask = attention_mask(cfg, T, dev)
        st: dict[str, Any] = {
            "fresh": (lambda x=x, T=T: x.copy_(torch.randn(T, cfg.hidden_size, device=dev, dtype=dt, generator=gen))),
            "eager": (lambda x=x, mask=mask: stack_forward(x, layers, cfg, mask, all_reduce)),
            "graph": None,
            "row": {"T": T, "graph_ms_p50": None, "graph_ms_p90": None, "graph_ms_min": None,
                    "graph_vs_eager_rel_err": None},
        }
        setups[T] = st
        for _ in range(cfg.warmup_iters):
            st["fresh"]()
            st["eager"]()
        st["fresh"]()
        ref = st["eager"]().float()
        st["row"]["output_finite"] = bool(torch.isfinite(ref).all())
        if graphs:
            try:
                sync_barrier()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        st["eager"]()
                torch.cuda.current_stream().wait_stream(side)
                sync_barrier()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = st["eager"]()
                graph.replay()  # x still holds ref's input
                torch.cuda.synchronize()
                st["row"]["graph_vs_eager_rel_err"] = _rel_err(out, ref)
                for _ in range(cfg.warmup_iters):
                    st["fresh"]()
                    graph.replay()
                st["graph"] = graph
                st["graph_out"] = out
            except Exception as exc:  # keep the other T's numbers; say what failed
                st["row"]["graph_error"] = f"{type(exc).__name__}: {exc}"[:500]
                log(f"[physics rank {rank}] T={T}: graph capture failed: {st['row']['graph_error']}")
        del ref
    log(f"[physics rank {rank}] set up {len(setups)} token counts; timing {cfg.timed_iters} interleaved rounds")

    events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if is_cuda else None
    samples = {T: {"eager": [], "eager_host": [], "graph": []} for T in cfg.tokens}
    order = list(cfg.tokens)
    for it in range(cfg.timed_iters):
        k = it % len(order)
        for T in order[k:] + order[:k]:
            st = setups[T]
            dev_ms, host_ms = _time_one(st["eager"], st["fresh"], is_cuda, barrier, events)
            samples[T]["eager"].append(dev_ms)
            samples[T]["eager_host"].append(host_ms)
            if st["graph"] is not None:
                samples[T]["graph"].append(_time_one(st["graph"].replay, st["fresh"], True, barrier, events)[0])

    rows = []
    for T in cfg.tokens:
        st, sm = setups[T], samples[T]
        row = st["row"]
        e = percentiles_ms(sm["eager"])
        row.update(eager_ms_p50=e[0], eager_ms_p90=e[1], eager_ms_min=min(sm["eager"]),
                   eager_host_ms_p50=percentiles_ms(sm["eager_host"])[0])
        if sm["graph"]:
            g = percentiles_ms(sm["graph"])
            row.update(graph_ms_p50=g[0], graph_ms_p90=g[1], graph_ms_min=min(sm["graph"]))
        row["kernels_per_forward"] = _count_kernels(st["eager"]) if count_kernels else None
        row["samples_ms"] = {"eager": sm["eager"], "graph": sm["graph"]}
        log(f"[physics rank {rank}] T={T}: eager p50 {row['eager_ms_p50']:.3f} ms (host issue "
            f"{row['eager_host_ms_p50']:.3f} ms, {row['kernels_per_forward']} kernels)"
            + (f", graph p50 {row['graph_ms_p50']:.3f} ms" if row["graph_ms_p50"] is not None else ""))
        rows.append(row)
    for st in setups.values():
        st.pop("graph", None)
        st.pop("graph_out", None)
    if is_cuda:
        torch.cuda.synchronize()
    return {"device": info, "copy_bandwidth_gb_s": bw, "rows": rows}


def _init_group(rank: int, world: int, init_method: str, backend: str) -> None:
    import torch
    import torch.distributed as dist

    set_nccl_safety_env()
    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        torch.cuda.set_device(rank)
        kwargs["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, **kwargs)


def _tp_bench_worker(rank: int, world: int, cfg_dict: dict[str, Any], tmpdir: str, init_method: str,
                     backend: str, copy_bytes: int | None) -> None:
    """One TP rank of :func:`measure_tp` (a module-level function, so ``spawn`` can pickle it)."""
    import torch
    import torch.distributed as dist

    cfg = PhysicsConfig.from_mapping(cfg_dict)
    _init_group(rank, world, init_method, backend)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        warm = torch.ones(4, device=device)
        dist.all_reduce(warm)  # communicator up before any graph capture
        res = measure(cfg, device, rank=rank, all_reduce=dist.all_reduce, barrier=dist.barrier,
                      copy_bytes=copy_bytes, log=(print if rank == 0 else (lambda s: None)))
        res["all_reduce_check"] = float(warm[0].item())  # == world
        Path(tmpdir, f"rank{rank}.json").write_text(json.dumps(res))
    finally:
        dist.destroy_process_group()


def measure_tp(cfg: PhysicsConfig, *, backend: str = "nccl", copy_bytes: int | None = None) -> dict[str, Any]:
    """Run :func:`measure` on ``cfg.tp`` ranks, one process per GPU (or per CPU rank on gloo).

    Spawns ``cfg.tp`` processes (``torch.multiprocessing.spawn``) that join a process group
    through a file store; each builds its own random shard and all-reduces after attention
    and after the MLP of every layer, inside the CUDA graphs too. NVLink multicast stays off
    (:data:`NCCL_SAFETY_ENV`).

    :param backend: ``"nccl"`` (one CUDA device per rank) or ``"gloo"`` (CPU, eager only).
    :returns: rank 0's :func:`measure` result plus ``rank_eager_ms_p50_max`` /
        ``rank_graph_ms_p50_max`` per row (slowest rank) and ``all_reduce_check``.
    :raises RuntimeError: a rank failed (its traceback is in the message of the spawn error).
    """
    import torch.multiprocessing as mp

    set_nccl_safety_env()
    with tempfile.TemporaryDirectory(prefix="physics-tp-") as tmp:
        init = f"file://{tmp}/store"
        mp.spawn(_tp_bench_worker, args=(cfg.tp, cfg.as_dict(), tmp, init, backend, copy_bytes),
                 nprocs=cfg.tp, join=True)
        per_rank = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(cfg.tp)]
    res = per_rank[0]
    for i, row in enumerate(res["rows"]):
        for kind in ("eager", "graph"):
            vals = [pr["rows"][i][f"{kind}_ms_p50"] for pr in per_rank]
            row[f"rank_{kind}_ms_p50_max"] = None if any(v is None for v in vals) else max(vals)
    res["copy_bandwidth_gb_s"] = min(pr["copy_bandwidth_gb_s"] for pr in per_rank)
    return res


def _tp_check_worker(rank: int, world: int, tmpdir: str, init_method: str) -> None:
    import torch
    import torch.distributed as dist

    _init_group(rank, world, init_method, "gloo")
    try:
        job = torch.load(Path(tmpdir, f"shard{rank}.pt"), weights_only=False)
        cfg = PhysicsConfig.from_mapping(job["cfg"])
        out = stack_forward(job["x"], job["layers"], cfg, attention_mask(cfg, job["x"].shape[0], "cpu"), dist.all_reduce)
        if rank == 0:
            torch.save(out, Path(tmpdir, "out.pt"))
    finally:
        dist.destroy_process_group()


def tp_reference_check(cfg: PhysicsConfig, T: int = 3, seed: int = 0) -> float:
    """Check the TP math on the CPU: sharded forward + gloo all-reduce == unsharded forward.

    Builds the unsharded model (``heads_per_gpu * tp`` heads, ``mlp_intermediate_per_gpu *
    tp`` MLP width) in ``cfg.dtype`` (use float32 and tiny shapes), runs it in this process,
    shards it with :func:`shard_layers`, runs ``cfg.tp`` gloo ranks with all-reduces and
    returns ``||out_tp - out_full|| / ||out_full||`` (about 1e-6 in float32).
    """
    import torch
    import torch.multiprocessing as mp

    set_nccl_safety_env()
    full = build_layers(cfg, "cpu", seed=seed, max_new_tokens=T, heads=cfg.heads_per_gpu * cfg.tp,
                        intermediate=cfg.mlp_intermediate_per_gpu * cfg.tp)
    x = torch.randn(T, cfg.hidden_size, dtype=_dtype(torch, cfg.dtype), generator=torch.Generator().manual_seed(seed + 1))
    with tempfile.TemporaryDirectory(prefix="physics-tpcheck-") as tmp:
        for r in range(cfg.tp):
            shard = shard_layers(full, r, cfg.tp, cfg.heads_per_gpu, cfg.head_dim, cfg.mlp_intermediate_per_gpu)
            torch.save({"cfg": cfg.as_dict(), "x": x, "layers": shard}, Path(tmp, f"shard{r}.pt"))
        ref = stack_forward(x.clone(), full, cfg, attention_mask(cfg, T, "cpu"), None)
        mp.spawn(_tp_check_worker, args=(cfg.tp, tmp, f"file://{tmp}/store"), nprocs=cfg.tp, join=True)
        out = torch.load(Path(tmp, "out.pt"))
    return _rel_err(out, ref)
