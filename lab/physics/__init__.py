"""GPU "physics" stage: does a multi-token verify forward cost more than a decode forward,
and how much of that is eager launch overhead that a CUDA graph removes?

The seeds measured 12 ms for a graph-captured decode step against 29 ms for a 3-token
verify forward run outside CUDA graphs (SGLang, Kimi-K2.5, TP 8 on PCIe GPUs; DESIGN.md)
and blamed kernel-launch and NCCL all-reduce launch overhead. This package measures that
mechanism directly, with PyTorch alone (no SGLang, no weights): a per-GPU shard of a
Kimi-K2.5-shaped layer stack, timed for T = 1..8 new tokens eagerly and as a CUDA-graph
replay, against the bytes-moved floor.

Modules: :mod:`~lab.physics.shapes` (parameters and byte arithmetic, pure Python),
:mod:`~lab.physics.bench` (the torch stack and timing; torch imported lazily),
:mod:`~lab.physics.report` (figures, Markdown), :mod:`~lab.physics.run`
(:func:`run_physics`), :mod:`~lab.physics.args` (the options shared by both command lines),
:mod:`~lab.physics.cli` (``python -m lab.physics``), :mod:`~lab.physics.profile` (torch-profiler
traces, ``python -m lab.physics.profile``).

Importing this package needs only the standard library; figures need matplotlib and
seaborn, the CLI's ``--params`` needs pyyaml, and measuring needs torch. It never imports
:mod:`lab.config` (pydantic is absent on the device machine): :class:`PhysicsConfig` is the
one schema of ``params.yaml``'s ``physics:`` section, and :class:`lab.config.PhysicsParams` is
built from it; :mod:`lab.pipeline.physics` validates, runs and records the stage.
"""

from lab.physics.report import FIGURE_FILES, make_figures, markdown_report, plot_overview
from lab.physics.run import STATUS_NO_CUDA, STATUS_NO_TORCH, STATUS_OK, run_physics, write_metrics
from lab.physics.shapes import (
    DTYPE_BYTES,
    PHYSICS_DEFAULTS,
    PhysicsConfig,
    bytes_moved,
    compute_ratios,
    floor_ms,
    kv_bytes_per_layer,
    percentiles_ms,
    weight_bytes,
    weight_bytes_per_layer,
)

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
