"""Shape arithmetic of the physics stage (pure Python, no torch); its parameters are
:class:`lab.config.physics_config.PhysicsConfig` (re-exported here).

The layer stack measured by :mod:`lab.physics.stack_bench` is the per-GPU shard of a
Kimi-K2.5-shaped decoder under Megatron-style tensor parallelism. This module turns its
parameters into bytes (weights, KV cache) and into the bytes-moved floor: the time one
forward needs if it did nothing but read those bytes once at the measured device copy
bandwidth (METHOD.md's "two numbers first").

Model of one layer (per GPU), every matrix a plain dense projection in ``dtype``:

- attention: q, k, v projections ``hidden -> heads_per_gpu * head_dim`` and the output
  projection ``heads_per_gpu * head_dim -> hidden`` (``4 * hidden * heads * head_dim``
  elements). Kimi-K2.5 uses DeepSeek-V3's multi-head latent attention (MLA: low-rank
  q/kv projections, a compressed KV cache of 512 + 64 values per token); this plain
  multi-head layout is an approximation with the same head count and head dim, so its
  weight and KV bytes differ from MLA's;
- MLP: gate and up ``hidden -> mlp_intermediate_per_gpu``, down back to ``hidden``
  (``3 * hidden * intermediate`` elements; the intermediate stands for the active experts'
  width per GPU, see :class:`lab.config.PhysicsParams`);
- two RMSNorm weight vectors of ``hidden`` elements.

Embedding, LM head and the MoE router are left out.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lab.config.physics_config import DTYPE_BYTES, INT_FIELDS, PHYSICS_DEFAULTS, PhysicsConfig

__all__ = [
    "DTYPE_BYTES",
    "INT_FIELDS",
    "PHYSICS_DEFAULTS",
    "PhysicsConfig",
    "weight_bytes_per_layer",
    "weight_bytes",
    "kv_bytes_per_layer",
    "bytes_moved",
    "floor_ms",
    "percentiles_ms",
    "compute_ratios",
]

def weight_bytes_per_layer(cfg: PhysicsConfig) -> dict[str, int]:
    """Weight bytes of one layer's per-GPU shard, by part.

    :returns: ``{"attention": 4*H*A*b, "mlp": 3*H*I*b, "norm": 2*H*b, "total": sum}`` with
        ``H = hidden_size``, ``A = heads_per_gpu*head_dim``, ``I = mlp_intermediate_per_gpu``
        and ``b`` bytes per element. Kimi defaults (bf16): attention 58,720,256,
        MLP 99,090,432, norm 28,672, total 157,839,360 bytes.

    Source: the dense-projection model in this module's docstring (an approximation of MLA).
    """
    h, a, i, b = cfg.hidden_size, cfg.attn_width, cfg.mlp_intermediate_per_gpu, cfg.dtype_bytes
    parts = {"attention": 4 * h * a * b, "mlp": 3 * h * i * b, "norm": 2 * h * b}
    parts["total"] = sum(parts.values())
    return parts


def weight_bytes(cfg: PhysicsConfig) -> int:
    """Weight bytes of the whole per-GPU stack: ``num_layers * weight_bytes_per_layer.total``.

    Kimi defaults: 61 x 157,839,360 = 9,628,200,960 bytes (9.63 GB).
    """
    return cfg.num_layers * weight_bytes_per_layer(cfg)["total"]


def kv_bytes_per_layer(cfg: PhysicsConfig, tokens: int) -> int:
    """Bytes of K and V for ``tokens`` positions in one layer's per-GPU cache.

    ``2 * tokens * heads_per_gpu * head_dim * dtype_bytes`` (plain multi-head KV; MLA's
    compressed cache holds 576 values per token for all heads instead).
    Kimi defaults, 2048 tokens: 8,388,608 bytes.

    :raises ValueError: ``tokens`` negative.
    """
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return 2 * tokens * cfg.attn_width * cfg.dtype_bytes


def bytes_moved(cfg: PhysicsConfig, T: int) -> int:
    """Fewest bytes one forward of ``T`` new tokens must read from device memory.

    Every weight once plus every layer's K and V for ``kv_context + T`` positions (the
    cached context and the T new tokens). Activations (``T * hidden`` elements per step)
    and the TP all-reduce traffic are left out: a lower bound.

    :raises ValueError: ``T < 1``.
    """
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    return weight_bytes(cfg) + cfg.num_layers * kv_bytes_per_layer(cfg, cfg.kv_context + T)


def floor_ms(nbytes: int | float, bandwidth_gb_s: float) -> float:
    """Time to move ``nbytes`` at ``bandwidth_gb_s`` (decimal GB/s), in milliseconds.

    ``nbytes / (bandwidth_gb_s * 1e9) * 1e3``. The bandwidth is the device-to-device copy
    rate counting bytes read plus bytes written (METHOD.md).

    :raises ValueError: bandwidth not positive or bytes negative.
    """
    if not bandwidth_gb_s or bandwidth_gb_s <= 0 or math.isnan(bandwidth_gb_s):
        raise ValueError(f"bandwidth_gb_s must be > 0, got {bandwidth_gb_s}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    return nbytes / (bandwidth_gb_s * 1e9) * 1e3


def percentiles_ms(samples_ms: list[float]) -> tuple[float, float]:
    """Median and 90th percentile (linear interpolation, numpy's default) of samples in ms.

    :raises ValueError: no samples.
    """
    if not samples_ms:
        raise ValueError("no samples")
    s = sorted(float(x) for x in samples_ms)

    def q(p: float) -> float:
        pos = (len(s) - 1) * p
        lo = math.floor(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return q(0.5), q(0.9)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def compute_ratios(rows: list[Mapping[str, Any]], verify_tokens: int) -> dict[str, float | None]:
    """Cost of a verify forward relative to a decode forward, from median times.

    :param rows: per-T rows with ``T``, ``eager_ms_p50`` and ``graph_ms_p50`` (ms; a
        missing or ``None`` time gives a ``None`` ratio).
    :param verify_tokens: tokens per verify forward (num_draft_tokens; 3 in the seeds).
    :returns: ``verify_over_decode_eager`` = eager(T=v)/eager(T=1),
        ``verify_over_decode_graph`` = graph(T=v)/graph(T=1) (what a break-even model of
        speculative decoding needs when both steps run the same way), and
        ``eager_verify_over_graph_decode`` = eager(T=v)/graph(T=1) (the seeds' comparison:
        verify outside CUDA graphs against a graph-captured decode, 29 ms / 12 ms = 2.42 on
        8 PCIe GPUs). Each is ``None`` when T=1 or T=v was not measured.
    """
    by_t = {int(r["T"]): r for r in rows}
    d, v = by_t.get(1, {}), by_t.get(int(verify_tokens), {})
    return {
        "verify_over_decode_eager": _ratio(v.get("eager_ms_p50"), d.get("eager_ms_p50")),
        "verify_over_decode_graph": _ratio(v.get("graph_ms_p50"), d.get("graph_ms_p50")),
        "eager_verify_over_graph_decode": _ratio(v.get("eager_ms_p50"), d.get("graph_ms_p50")),
    }
