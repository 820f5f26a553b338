"""The physics stage's entry point: measure, write ``metrics.json`` and the figures.

``run_physics`` is what the notebook and the CLI call. It never pretends: without torch or
without a CUDA device it writes ``metrics.json`` with a ``"not run: ..."`` status and no
numbers, removes any figures an earlier run left in the folder, and returns. A measurement
that raises leaves ``"failed: ..."`` in ``metrics.json`` and re-raises.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.physics.shapes import (
    PhysicsConfig,
    bytes_moved,
    compute_ratios,
    floor_ms,
    kv_bytes_per_layer,
    weight_bytes,
    weight_bytes_per_layer,
)

__all__ = ["STATUS_OK", "STATUS_NO_TORCH", "STATUS_NO_CUDA", "WHAT", "run_physics", "write_metrics"]

STATUS_OK = "ok"
STATUS_NO_TORCH = "not run: torch not installed"
STATUS_NO_CUDA = "not run: no CUDA device"

WHAT = ("wall time of one forward of T new tokens through a per-GPU shard of a Kimi-K2.5-shaped layer "
        "stack (PyTorch only, random weights, plain multi-head attention standing in for MLA), eager "
        "PyTorch vs CUDA-graph replay; with tp > 1 one process per GPU and an NCCL all-reduce after "
        "attention and after the MLP of each layer")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def headline(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The stage's few words for ``dvc metrics show`` (``headline.json``, the keys every headline
    file has, :mod:`lab.report.tables`): ``headline`` (the status, or the verify/decode forward
    ratios) and ``source`` (what ran: the device, PyTorch's layer stack with random weights)."""
    if metrics.get("status") != STATUS_OK:
        return {"headline": f"physics stage {metrics.get('status')}", "source": "-"}
    r = metrics.get("ratios") or {}
    t = (metrics.get("params") or {}).get("verify_tokens")
    parts = [f"{label} {r[k]:.2f}x" for k, label in (("verify_over_decode_graph", "graph"),
                                                      ("eager_verify_over_graph_decode", "eager vs graph decode"))
             if r.get(k) is not None]
    dev = (metrics.get("device") or {}).get("name") or (metrics.get("device") or {}).get("type") or "?"
    return {"headline": f"verify {t} tokens over decode 1: " + (", ".join(parts) or "no ratio"),
            "source": f"physics: {dev}, random weights, layer stack (not the served model)"}


def write_metrics(metrics: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write ``metrics`` as ``<out_dir>/metrics.json`` (indented, NaN as null) and its
    :func:`headline` as ``<out_dir>/headline.json`` (the stage's DVC metrics); returns the path
    of ``metrics.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def clean(v: Any) -> Any:
        if isinstance(v, float) and v != v:
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    p = out / "metrics.json"
    from lab.atomic import write_text_atomic

    write_text_atomic(p, json.dumps(clean(dict(metrics)), indent=1) + "\n")
    write_text_atomic(out / "headline.json", json.dumps(headline(metrics), indent=1) + "\n")
    return p


def _shapes(cfg: PhysicsConfig) -> dict[str, Any]:
    per = weight_bytes_per_layer(cfg)
    return {
        "weight_bytes_per_layer": per,
        "weight_bytes": weight_bytes(cfg),
        "kv_bytes_per_layer_context": kv_bytes_per_layer(cfg, cfg.kv_context),
        "kv_bytes_context": cfg.num_layers * kv_bytes_per_layer(cfg, cfg.kv_context),
    }


def _probe_torch() -> tuple[bool, bool, int]:
    """(torch importable, CUDA available, CUDA device count)."""
    try:
        import torch
    except ImportError:
        return False, False, 0
    has_cuda = bool(torch.cuda.is_available())
    return True, has_cuda, (torch.cuda.device_count() if has_cuda else 0)


def _remove_figures(out: Path) -> None:
    from lab.physics.stack_report import FIGURE_FILES

    for name in FIGURE_FILES:
        (out / name).unlink(missing_ok=True)


def _profile(cfg: PhysicsConfig, out: Path, iters: int, allow_cpu: bool, log: Callable[[str], Any]) -> dict[str, Any]:
    """Per-case summaries of :func:`lab.physics.kernel_traces.capture_profiles` (traces in ``out``)."""
    if cfg.tp != 1:
        return {"status": f"not run: the profiler capture runs at tp 1 (tp={cfg.tp})"}
    try:
        from lab.physics.kernel_traces import capture_profiles, plot_cases

        res = capture_profiles(cfg, out, iters=iters, allow_cpu=allow_cpu, log=log)
        if res.get("cases") and res.get("device", {}).get("type") == "cuda":
            plot_cases(res, out / "profile.png")
    except Exception as exc:  # noqa: BLE001 - the timing results above stand on their own
        log(f"[physics] profiler capture failed: {type(exc).__name__}: {exc}")
        return {"status": f"failed: {type(exc).__name__}: {exc}"[:500]}
    return {"status": res["status"], "dir": str(out), "cases": {
        n: {"T": c["T"], "graph": c["graph"], "trace": c["trace"], "unprofiled_wall_ms_p50": c["unprofiled_wall_ms_p50"],
            **{k: c["summary"].get(k) for k in ("wall_ms_p50", "gpu_busy_ms_p50", "idle_share_p50",
                                                 "host_gap_share_p50", "kernels_p50", "eager_launches_p50",
                                                 "graph_launches_p50")}}
        for n, c in res.get("cases", {}).items()}}


def run_physics(params: PhysicsConfig | Mapping[str, Any], out_dir: str | Path, *, allow_cpu: bool = False,
                figures: bool = True, profile_iters: int = 5, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Measure eager vs CUDA-graph forwards for each T and write the results.

    :param params: a :class:`PhysicsConfig` or a mapping of its fields (``params.yaml``'s
        ``physics:`` section, e.g. ``PhysicsParams.model_dump()``).
    :param out_dir: results folder; gets ``metrics.json`` and, when measured,
        ``time_per_forward.png`` and ``ratios.png``.
    :param allow_cpu: without CUDA, run eager forwards on the CPU (gloo for tp > 1) instead
        of returning "not run" (a smoke test of the code path, labelled ``device.type=cpu``;
        use tiny shapes).
    :param figures: draw the figures (only for status ``ok``).
    :param profile_iters: after a measured run at tp 1, capture ``profile_iters`` forwards per
        case under torch.profiler (:mod:`lab.physics.kernel_traces`: T=1 graph and eager, T=3 eager
        and graph) into ``<out_dir>/profile/``; its per-case summary goes to
        ``metrics["profile"]`` (a failure there is recorded, not raised). 0 skips it.
    :returns: the metrics dict also written to ``metrics.json``:
        ``status`` (``"ok"``, ``"not run: torch not installed"``, ``"not run: no CUDA device"``,
        ``"not run: tp=N needs N CUDA devices, found M"``), ``what``, ``written_at`` (UTC),
        ``params``, ``rows`` (empty unless ok), ``ratios``, ``figures``; when ok also ``measured_at``, ``device`` (name, driver, torch, CUDA, NCCL versions),
        ``shapes`` (bytes), ``copy_bandwidth_gb_s``, ``rows`` (per T: ``eager_ms_p50``,
        ``eager_ms_p90``, ``graph_ms_p50``, ``graph_ms_p90``, ``floor_ms``, ``bytes_moved``,
        ``graph_vs_eager_rel_err``) and ``ratios`` (:func:`compute_ratios`).
    :raises ValueError: invalid parameters (before anything runs).
    :raises Exception: whatever the measurement raised, after ``metrics.json`` records
        ``status: "failed: ..."``.
    """
    cfg = params if isinstance(params, PhysicsConfig) else PhysicsConfig.from_mapping(params)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from lab.physics.stack_bench import set_nccl_safety_env

    set_nccl_safety_env()  # before any process group, in this process and the ranks it spawns
    metrics: dict[str, Any] = {"status": None, "what": WHAT, "written_at": _now(), "params": cfg.as_dict()}

    def not_run(status: str) -> dict[str, Any]:
        metrics.update(status=status, rows=[], ratios={}, figures=[],
                       notice=f"nothing measured and no figures drawn ({status})")
        _remove_figures(out)
        write_metrics(metrics, out)
        log(f"[physics] {status}: wrote {out / 'metrics.json'} without numbers; figures skipped")
        return metrics

    has_torch, has_cuda, n_gpu = _probe_torch()
    if not has_torch:
        return not_run(STATUS_NO_TORCH)
    if not has_cuda and not allow_cpu:
        return not_run(STATUS_NO_CUDA)
    if has_cuda and cfg.tp > n_gpu:
        return not_run(f"not run: tp={cfg.tp} needs {cfg.tp} CUDA devices, found {n_gpu}")

    try:
        from lab.physics import stack_bench as bench

        if cfg.tp > 1:
            res = bench.measure_tp(cfg, backend="nccl" if has_cuda else "gloo")
        else:
            res = bench.measure(cfg, "cuda" if has_cuda else "cpu", log=log)
    except Exception as exc:
        metrics.update(status=f"failed: {type(exc).__name__}: {exc}"[:1000], rows=[], ratios={}, figures=[])
        _remove_figures(out)
        write_metrics(metrics, out)
        raise

    bw = res["copy_bandwidth_gb_s"]
    for row in res["rows"]:
        row["bytes_moved"] = bytes_moved(cfg, row["T"])
        row["floor_ms"] = floor_ms(row["bytes_moved"], bw)
    metrics.update(
        status=STATUS_OK,
        measured_at=metrics["written_at"],
        device=res["device"],
        tp=cfg.tp,
        shapes=_shapes(cfg),
        copy_bandwidth_gb_s=bw,
        rows=res["rows"],
        ratios=compute_ratios(res["rows"], cfg.verify_tokens),
        env={k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")},
    )
    if "all_reduce_check" in res:
        metrics["all_reduce_check"] = res["all_reduce_check"]
    if profile_iters > 0:
        metrics["profile"] = _profile(cfg, out / "profile", profile_iters, allow_cpu, log)
    metrics["figures"] = []
    write_metrics(metrics, out)
    if figures:
        from lab.physics.stack_report import make_figures

        metrics["figures"] = make_figures(metrics, out)
        write_metrics(metrics, out)
    log(f"[physics] ok: wrote {out / 'metrics.json'}" + (f" and {', '.join(metrics['figures'])}" if metrics["figures"] else ""))
    return metrics
