"""The ``physics:`` section as a pydantic model, built from the physics stage's own schema
(:class:`lab.config.physics_config.PhysicsConfig`, standard library only, so the stage runs where
pydantic is absent) with the lower bounds ``params.yaml`` adds."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from lab.config.base import Strict

__all__ = ["PhysicsParams"]


# Bounds params.yaml puts on the physics fields beyond PhysicsConfig's own (every size >= 1).
_PHYSICS_BOUNDS = {"hidden_size": 64, "head_dim": 16, "mlp_intermediate_per_gpu": 16, "timed_iters": 5,
                   "verify_tokens": 2}


def _physics_params() -> type[Strict]:
    """:class:`PhysicsParams`: the fields and defaults of :class:`lab.config.physics_config.PhysicsConfig`
    (the one physics schema) as a strict pydantic model, with :data:`_PHYSICS_BOUNDS`."""
    from dataclasses import fields

    from pydantic import create_model

    from lab.config.physics_config import PhysicsConfig

    spec: dict[str, Any] = {}
    for f in fields(PhysicsConfig):
        if f.name == "tokens":
            spec[f.name] = (list[int], Field(default_factory=lambda: list(PhysicsConfig().tokens)))
        elif f.name == "dtype":  # float32 is for CPU checks only, not a params.yaml choice
            spec[f.name] = (Literal["bfloat16", "float16"], f.default)
        else:
            spec[f.name] = (int, Field(f.default, ge=_PHYSICS_BOUNDS.get(f.name, 1)))
    return create_model("PhysicsParams", __base__=Strict, __module__=__name__, __doc__=(
        """GPU stage: a per-GPU shard of the served model's layer stack (PyTorch only).

    Fields and defaults are :class:`lab.config.physics_config.PhysicsConfig`'s. Defaults are
    Kimi-K2.5 (DeepSeek-V3 shape) under TP 8: hidden 7168, 61 layers, 64 attention heads x
    128 / 8 = 8 heads per GPU, and the active experts' MLP width per GPU (8 routed + 1 shared
    expert x 2048 / 8 = 2304). Source: the model's config.json.
    """), **spec)


PhysicsParams = _physics_params()
