"""Command line: ``python -m lab.physics --out DIR [--tp N] [--tokens 1,2,3] [...]``.

Runs :func:`lab.physics.run_physics` with the defaults of ``params.yaml``'s ``physics:``
section (read with pyyaml from ``--params FILE``, else :data:`PHYSICS_DEFAULTS`) and any
overrides given as options. Needs no pydantic, so it runs on the device machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from lab.physics.shapes import DTYPE_BYTES, PHYSICS_DEFAULTS, PhysicsConfig

__all__ = ["build_parser", "parse_args", "main"]

_INT_FIELDS = ("hidden_size", "num_layers", "heads_per_gpu", "head_dim", "mlp_intermediate_per_gpu",
               "kv_context", "tp", "warmup_iters", "timed_iters", "verify_tokens")


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return vals


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (one ``--kebab-case`` option per :class:`PhysicsConfig` field)."""
    p = argparse.ArgumentParser(prog="python -m lab.physics", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="results folder (metrics.json, figures)")
    p.add_argument("--params", type=Path, default=None,
                   help="a params.yaml whose physics: section gives the defaults (else the built-in ones)")
    for name in _INT_FIELDS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None,
                       help=f"default {PHYSICS_DEFAULTS[name]}")
    p.add_argument("--tokens", type=_int_list, default=None, help="comma-separated T values, default 1,...,8")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default=None, help="default bfloat16")
    p.add_argument("--cpu", action="store_true", help="without CUDA, run eager on the CPU (smoke test) instead of 'not run'")
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the figures")
    p.add_argument("--profile-iters", type=int, default=5,
                   help="torch-profiler forwards per case after the timing (lab.physics.profile; 0: skip)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; the result carries ``config`` (a :class:`PhysicsConfig`), ``out``,
    ``cpu`` and ``figures``.

    :raises SystemExit: bad options (argparse), or parameters :class:`PhysicsConfig`
        rejects (exit code 2, message names the key).
    """
    parser = build_parser()
    ns = parser.parse_args(argv)
    base: dict[str, Any] = {}
    if ns.params is not None:
        import yaml

        try:
            base = (yaml.safe_load(ns.params.read_text()) or {}).get("physics") or {}
        except (OSError, yaml.YAMLError) as exc:
            parser.error(f"--params {ns.params}: {exc}")
    overrides = {k: getattr(ns, k) for k in (*_INT_FIELDS, "tokens", "dtype")}
    try:
        ns.config = PhysicsConfig.from_mapping(base, **overrides)
    except ValueError as exc:
        parser.error(str(exc))
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stage; exit code 0 for ``ok`` and ``not run: ...``, 1 for ``failed``."""
    from lab.physics.run import run_physics

    ns = parse_args(argv)
    m = run_physics(ns.config, ns.out, allow_cpu=ns.cpu, figures=ns.figures, profile_iters=ns.profile_iters)
    rows = m.get("rows") or []
    if rows:
        print(f"{'T':>3} {'eager p50':>10} {'eager p90':>10} {'graph p50':>10} {'graph p90':>10} {'floor':>8}  (ms)")
        for r in rows:
            f = lambda v: f"{v:10.3f}" if v is not None else f"{'n/a':>10}"  # noqa: E731
            print(f"{r['T']:>3} {f(r['eager_ms_p50'])} {f(r['eager_ms_p90'])} {f(r.get('graph_ms_p50'))} "
                  f"{f(r.get('graph_ms_p90'))} {r['floor_ms']:8.3f}")
        print("ratios:", {k: (round(v, 3) if v is not None else None) for k, v in m["ratios"].items()})
    print("status:", m["status"])
    return 0 if m["status"] == "ok" or m["status"].startswith("not run") else 1
