"""GPU "physics" stage: does a multi-token verify forward cost more than a decode forward,
and how much of that is eager launch overhead that a CUDA graph removes?

The seeds measured 12 ms for a graph-captured decode step against 29 ms for a 3-token
verify forward run outside CUDA graphs (SGLang, Kimi-K2.5, TP 8 on PCIe GPUs; DESIGN.md)
and blamed kernel-launch and NCCL all-reduce launch overhead. This package measures that
mechanism directly, with PyTorch alone (no SGLang, no weights): a per-GPU shard of a
Kimi-K2.5-shaped layer stack, timed for T = 1..8 new tokens eagerly and as a CUDA-graph
replay, against the bytes-moved floor.

Modules: :mod:`~lab.physics.shapes` (byte arithmetic, pure Python),
:mod:`~lab.physics.stack_bench` (the torch stack and timing; torch imported lazily),
:mod:`~lab.physics.stack_report` (figures, Markdown), :mod:`~lab.physics.run`
(:func:`run_physics`), :mod:`~lab.physics.stack_options` (the options shared by both command lines),
:mod:`~lab.physics.stack_cli` (``python -m lab.physics``), :mod:`~lab.physics.kernel_traces` (torch-profiler
traces, ``python -m lab.physics.kernel_traces``).

Importing this package needs only the standard library; figures need matplotlib and
seaborn, the CLI's ``--params`` needs pyyaml, and measuring needs torch. It imports only
:mod:`lab.config.physics_config` of :mod:`lab.config` (standard library; pydantic is absent on the
device machine): :class:`PhysicsConfig` is the one schema of ``params.yaml``'s ``physics:``
section, and :class:`lab.config.PhysicsParams` is built from it; :mod:`lab.pipeline.physics` validates, runs and records the stage.
"""

# Names resolve on first use (PEP 562), so importing one submodule does not run the others.
_WHERE = {
    "FIGURE_FILES": "stack_report", "make_figures": "stack_report", "markdown_report": "stack_report",
    "plot_overview": "stack_report",
    "STATUS_NO_CUDA": "run", "STATUS_NO_TORCH": "run", "STATUS_OK": "run", "run_physics": "run",
    "write_metrics": "run",
    "DTYPE_BYTES": "shapes", "PHYSICS_DEFAULTS": "shapes", "PhysicsConfig": "shapes",
    "bytes_moved": "shapes", "compute_ratios": "shapes", "floor_ms": "shapes", "kv_bytes_per_layer": "shapes",
    "percentiles_ms": "shapes", "weight_bytes": "shapes", "weight_bytes_per_layer": "shapes",
}


def __getattr__(name: str):
    """``lab.physics.<name>`` for the names of ``__all__``, imported from their submodule on first use."""
    if name not in _WHERE:
        raise AttributeError(f"module 'lab.physics' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"lab.physics.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DTYPE_BYTES",
    "FIGURE_FILES",
    "PHYSICS_DEFAULTS",
    "STATUS_NO_CUDA",
    "STATUS_NO_TORCH",
    "STATUS_OK",
    "PhysicsConfig",
    "bytes_moved",
    "compute_ratios",
    "floor_ms",
    "kv_bytes_per_layer",
    "make_figures",
    "markdown_report",
    "percentiles_ms",
    "plot_overview",
    "run_physics",
    "weight_bytes",
    "weight_bytes_per_layer",
    "write_metrics",
]
