"""The cross-check flags of every mode, gathered for the answer and the report.

The bench stage compares three clocks of one decode iteration per run (the client's cycle, the
scheduler's step, the GPU's device time) and the CUDA-graph share measured two ways, and flags a
disagreement above its tolerance (:mod:`lab.measure.crosscheck`); each level of ``result.json``
keeps the flags of its repeats (``levels.<point>.crosscheck_flags``: ``"repeat 0: cycle_ms=12.92
and server_step_ms=15.06 disagree by 14.2% (limit 10%)"``). Until issue 22 they reached MLflow
tags only. :func:`crosscheck_summary` counts them per mode and point and keeps the largest
disagreement and which clocks disagreed; :func:`crosscheck_sentence` says it in one sentence per
mode. The answer's verdicts use the client's decode tok/s; a flag says that a server-side timing
at that point (verify ms, step ms, the graph share) does not agree with the client, so read it
with care there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["crosscheck_summary", "crosscheck_sentence", "CLOCK_NAMES"]

#: Short names of the compared quantities (lab.measure.crosscheck.cross_checks).
CLOCK_NAMES = {"cycle_ms": "client cycle", "server_step_ms": "scheduler step", "gpu_cycle_ms": "GPU time"}

_PAIR = re.compile(r"(?:repeat (?P<rep>\d+): )?(?P<a>\w+)=[-\d.]+ and (?P<b>\w+)=[-\d.]+ disagree by (?P<d>[\d.]+)%")
_GRAPH = re.compile(r"(?:repeat (?P<rep>\d+): )?CUDA-graph share .* disagree by (?P<d>[\d.]+)")


def crosscheck_summary(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{mode: {point: {"count", "repeats", "max_disagreement", "checks", "flags"}}}`` for every
    point with a flag: ``count`` flags over the ``repeats`` (sorted repeat indices), the largest
    relative disagreement (a fraction; the graph share's is an absolute difference of shares),
    ``checks`` (which quantities disagreed, :data:`CLOCK_NAMES`) and the ``flags`` themselves.

    :param results: ``mode -> result.json`` (its ``levels``).
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mode, res in results.items():
        for point, lv in (res.get("levels") or {}).items():
            flags = list((lv or {}).get("crosscheck_flags") or [])
            if not flags:
                continue
            reps: set[int] = set()
            worst, checks = 0.0, []
            for f in flags:
                if m := _PAIR.search(f):
                    name = f"{CLOCK_NAMES.get(m['a'], m['a'])} vs {CLOCK_NAMES.get(m['b'], m['b'])}"
                    worst = max(worst, float(m["d"]) / 100)
                elif m := _GRAPH.search(f):
                    name = "CUDA-graph share (counters vs log)"
                    worst = max(worst, float(m["d"]))
                else:
                    name = "other"
                if m and m["rep"] is not None:
                    reps.add(int(m["rep"]))
                if name not in checks:
                    checks.append(name)
            out.setdefault(mode, {})[point] = {"count": len(flags), "repeats": sorted(reps),
                                               "max_disagreement": worst, "checks": checks, "flags": flags}
    return out


def crosscheck_sentence(points: Mapping[str, Mapping[str, Any]]) -> str:
    """One mode's flags in a sentence: ``"c8: 4 flags in 2 repeats, up to 17 % (client cycle vs
    scheduler step, scheduler step vs GPU time); r4: ..."``; "" without flags."""
    parts = []
    for point, p in points.items():
        n, reps = p.get("count", 0), p.get("repeats") or []
        if not n:
            continue
        where = f" in {len(reps)} repeat{'s' if len(reps) != 1 else ''}" if reps else ""
        parts.append(f"{point}: {n} flag{'s' if n != 1 else ''}{where}, up to {100 * p.get('max_disagreement', 0):.0f} % "
                     f"({', '.join(p.get('checks') or [])})")
    return "; ".join(parts)
