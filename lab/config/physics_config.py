"""The physics stage's parameters: the one schema of ``params.yaml``'s ``physics:`` section.

Standard library only: :mod:`lab.physics` imports it on the device machine, where pydantic is
absent (``lab/config/__init__.py`` resolves its names lazily, so importing this module runs no
other module of :mod:`lab.config`), and :mod:`lab.config.physics_model` builds
:class:`lab.config.PhysicsParams` from :class:`PhysicsConfig`, so a change here is a change to
every stage's params validation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

__all__ = ["DTYPE_BYTES", "INT_FIELDS", "PHYSICS_DEFAULTS", "PhysicsConfig"]

#: Bytes per element of the dtypes the stage accepts (float32 only for CPU checks).
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}

@dataclass(frozen=True)
class PhysicsConfig:
    """The physics stage's parameters as a plain frozen dataclass: the one schema of
    ``params.yaml``'s ``physics:`` section (names, types, defaults).

    :class:`lab.config.PhysicsParams` (which validates ``params.yaml``) is built from these
    fields, adding its lower bounds; this dataclass itself needs no pydantic, so the stage
    runs where pydantic is absent (the device machine). Convert with
    ``PhysicsConfig.from_mapping(params.physics.model_dump())``.

    Units: sizes in elements, ``kv_context`` and ``tokens`` in tokens, iterations as counts.

    :raises ValueError: from :meth:`from_mapping` / construction for an unknown key, a
        non-positive size, an empty or non-positive ``tokens`` list or an unknown dtype.
    """

    hidden_size: int = 7168
    num_layers: int = 61
    heads_per_gpu: int = 8
    head_dim: int = 128
    mlp_intermediate_per_gpu: int = 2304
    kv_context: int = 2048
    tokens: tuple[int, ...] = field(default=(1, 2, 3, 4, 5, 6, 7, 8))
    tp: int = 1
    warmup_iters: int = 10
    timed_iters: int = 50
    dtype: str = "bfloat16"
    verify_tokens: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        for name in INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"physics.{name}: must be a positive integer, got {value!r}")
        if not self.tokens or any(t < 1 for t in self.tokens):
            raise ValueError(f"physics.tokens: must be a non-empty list of positive integers, got {list(self.tokens)}")
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError(f"physics.tokens: duplicate entries in {list(self.tokens)}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"physics.dtype: one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None = None, **overrides: Any) -> "PhysicsConfig":
        """Build from a dict (e.g. ``params.yaml``'s ``physics:`` section) plus overrides.

        Missing keys take :data:`PHYSICS_DEFAULTS`; ``None`` overrides are ignored.

        :raises ValueError: an unknown key (named in the message) or an invalid value.
        """
        merged: dict[str, Any] = dict(values or {})
        merged.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ValueError(f"physics: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**merged)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``tokens`` as a list)."""
        d = asdict(self)
        d["tokens"] = list(self.tokens)
        return d

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of :attr:`dtype` (2 for bf16)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def attn_width(self) -> int:
        """``heads_per_gpu * head_dim``: the per-GPU width of q, k, v and o's input."""
        return self.heads_per_gpu * self.head_dim


#: The integer fields of :class:`PhysicsConfig` (one CLI option each, each must be >= 1).
INT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PhysicsConfig) if f.type in (int, "int"))

#: The defaults of ``params.yaml``'s ``physics:`` section (= ``PhysicsConfig().as_dict()``).
PHYSICS_DEFAULTS: dict[str, Any] = PhysicsConfig().as_dict()
