"""Command-line options of the physics stack, shared by ``python -m lab.physics`` (:mod:`lab.physics.stack_cli`)
and ``python -m lab.physics.kernel_traces``: one ``--kebab-case`` option per :class:`PhysicsConfig`
field, and the config they give over a ``params.yaml``'s ``physics:`` section. No pydantic,
no torch: it runs on the device machine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from lab.config.physics_config import DTYPE_BYTES, INT_FIELDS, PHYSICS_DEFAULTS, PhysicsConfig

__all__ = ["build_parser", "config_from_args", "parse"]


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return vals


def build_parser(prog: str = "python -m lab.physics", description: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser: ``--out``, ``--params``, one ``--kebab-case`` option per integer
    :class:`PhysicsConfig` field, ``--tokens``, ``--dtype``, ``--cpu``, ``--no-figures`` and
    ``--profile-iters``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", required=True, type=Path, help="results folder (metrics.json, figures)")
    p.add_argument("--params", type=Path, default=None,
                   help="a params.yaml whose physics: section gives the defaults (else the built-in ones)")
    for name in INT_FIELDS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None,
                       help=f"default {PHYSICS_DEFAULTS[name]}")
    p.add_argument("--tokens", type=_int_list, default=None, help="comma-separated T values, default 1,...,8")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default=None, help="default bfloat16")
    p.add_argument("--cpu", action="store_true", help="without CUDA, run eager on the CPU (smoke test) instead of 'not run'")
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the figures")
    p.add_argument("--profile-iters", type=int, default=5,
                   help="torch-profiler forwards per case after the timing (lab.physics.kernel_traces; 0: skip)")
    return p


def config_from_args(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> PhysicsConfig:
    """The :class:`PhysicsConfig` of parsed options: ``--params FILE``'s ``physics:`` section
    (read with pyyaml), else :data:`PHYSICS_DEFAULTS`, with the given options over it.

    :raises SystemExit: (``parser.error``, exit code 2) an unreadable ``--params`` file or a
        value :class:`PhysicsConfig` rejects; the message names the key.
    """
    base: dict[str, Any] = {}
    if ns.params is not None:
        import yaml

        try:
            base = (yaml.safe_load(ns.params.read_text()) or {}).get("physics") or {}
        except (OSError, yaml.YAMLError) as exc:
            parser.error(f"--params {ns.params}: {exc}")
    overrides = {k: getattr(ns, k) for k in (*INT_FIELDS, "tokens", "dtype")}
    try:
        return PhysicsConfig.from_mapping(base, **overrides)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def parse(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with ``config`` set by :func:`config_from_args`."""
    ns = parser.parse_args(argv)
    ns.config = config_from_args(parser, ns)
    return ns

