"""Command line: ``python -m lab.physics --out DIR [--tp N] [--tokens 1,2,3] [...]``.

Runs :func:`lab.physics.run_physics` with the defaults of ``params.yaml``'s ``physics:``
section (read with pyyaml from ``--params FILE``, else :data:`PHYSICS_DEFAULTS`) and any
overrides given as options. Needs no pydantic, so it runs on the device machine.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from lab.physics import stack_options as args

__all__ = ["build_parser", "parse_args", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m lab.physics`` (:func:`lab.physics.stack_options.build_parser`)."""
    return args.build_parser("python -m lab.physics", __doc__.split("\n\n")[0])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; the result carries ``config`` (a :class:`PhysicsConfig`), ``out``,
    ``cpu`` and ``figures``.

    :raises SystemExit: bad options (argparse), or parameters :class:`PhysicsConfig`
        rejects (exit code 2, message names the key).
    """
    return args.parse(argv, build_parser())


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
