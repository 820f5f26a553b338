"""Coverage of the headline speedup interval when launches differ: which design (launches x repeats) reaches it.

    python benchmarks/launch_coverage.py            # ~30 s; --trials N, --launch-cv, --repeat-cv

Each mode's launch has its own speed (a log-normal launch effect, CV ``--launch-cv``, default
2.2 %: the launch-to-launch spread docs/measurement.md measured for the default profile) and
each repeat inside a launch a little more (``--repeat-cv``, default 0.3 %). The true speedup is
1.15. For each design the lab's own estimator (:func:`lab.analysis.launches.welch_speedup`, what
the compare stage prints) is applied and the share of trials whose 95 % interval covers 1.15 is
counted, with the median half-width of the interval (relative) and the cost in launches per
mode. "1 launch + 5 earlier" is one launch per mode with the launch spread borrowed from five
earlier launches of each configuration (the regression sentinel's MLflow history).

The second table is the paired per-prompt interval at concurrency 8, where the 8 requests of a
repeat share batch iterations (a shift per repeat, SD ``--repeat-shift``, default 3 %): the unit
"prompt" (before issue 22) against "repeat" (:func:`lab.analysis.paired.paired_speedup`).

Statistics only (no timing, no engine); seeded, so the output is the same on every machine.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.analysis.launches import Spread, welch_speedup  # noqa: E402
from lab.analysis.paired import paired_speedup  # noqa: E402

TRUE = 1.15
DESIGNS = [(1, 3, 0), (1, 10, 0), (1, 3, 5), (2, 3, 0), (3, 1, 0), (3, 3, 0), (5, 1, 0), (5, 3, 0)]


def _launch(rng, mean, repeats, launch_cv, repeat_cv):
    return list(mean * np.exp(rng.normal(0.0, launch_cv) + rng.normal(0.0, repeat_cv, repeats)))


def _spread(rng, mean, k, repeats, launch_cv, repeat_cv):
    h = [float(np.mean(_launch(rng, mean, repeats, launch_cv, repeat_cv))) for _ in range(k)]
    return Spread(float(np.std(h, ddof=1) / np.mean(h)), k)


def designs(trials: int, launch_cv: float, repeat_cv: float, rng) -> list[str]:
    out = ["| design (per mode) | launches per mode | coverage of 1.15 | median half-width | scope printed |",
           "| --- | ---: | ---: | ---: | --- |"]
    for launches, repeats, history in DESIGNS:
        hits, widths, scope = 0, [], ""
        for _ in range(trials):
            base = [_launch(rng, 82.0, repeats, launch_cv, repeat_cv) for _ in range(launches)]
            other = [_launch(rng, 82.0 * TRUE, repeats, launch_cv, repeat_cv) for _ in range(launches)]
            spreads = ((_spread(rng, 82.0, history, repeats, launch_cv, repeat_cv),
                        _spread(rng, 82.0 * TRUE, history, repeats, launch_cv, repeat_cv)) if history else None)
            r = welch_speedup(base, other, spreads=spreads)
            scope = r.scope
            if r.ci95_lo is not None:
                hits += r.ci95_lo <= TRUE <= r.ci95_hi
                widths.append((r.ci95_hi - r.ci95_lo) / 2 / r.ratio)
        name = f"{launches} launch{'es' if launches > 1 else ''} x {repeats} repeat{'s' if repeats > 1 else ''}"
        name += f" + {history} earlier" if history else ""
        width = f"{np.median(widths):.1%}" if widths else "no interval"
        out.append(f"| {name} | {launches} | {hits / trials:.3f} | {width} | {scope} |")
    return out


def paired(trials: int, repeat_shift: float, rng) -> list[str]:
    out = ["| paired unit at c8 | coverage of 1.10 | median half-width |", "| --- | ---: | ---: |"]
    res = {"prompt": [0, []], "repeat": [0, []]}
    for _ in range(trials):
        speed = rng.uniform(60, 110, 8)
        base, spec = [], []
        for rep in range(3):
            shift = rng.normal(0, repeat_shift)
            for slot, p in enumerate(rng.permutation(8)):
                b = speed[p] * math.exp(rng.normal(0, 0.01))
                row = {"launch": 1, "point": "c8", "repeat": rep, "slot": slot, "prompt_index": int(p)}
                base.append({**row, "decode_tok_s": b})
                spec.append({**row, "decode_tok_s": b * 1.1 * math.exp(shift + rng.normal(0, 0.005))})
        for unit, acc in res.items():
            r = paired_speedup(base, spec, "c8", unit=unit)
            if r["ci95_lo"] is not None:
                acc[0] += r["ci95_lo"] <= 1.1 <= r["ci95_hi"]
                acc[1].append((r["ci95_hi"] - r["ci95_lo"]) / 2 / r["ratio"])
    for unit, (hits, widths) in res.items():
        out.append(f"| {unit} ({'before issue 22' if unit == 'prompt' else 'now'}) | {hits / trials:.3f} | "
                   f"{np.median(widths):.1%} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--launch-cv", type=float, default=0.022)
    ap.add_argument("--repeat-cv", type=float, default=0.003)
    ap.add_argument("--repeat-shift", type=float, default=0.03)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2022)
    print(f"command: python benchmarks/launch_coverage.py --trials {args.trials} --launch-cv {args.launch_cv} "
          f"--repeat-cv {args.repeat_cv} --repeat-shift {args.repeat_shift}")
    print("\n".join(designs(args.trials, args.launch_cv, args.repeat_cv, rng)))
    print()
    print("\n".join(paired(args.trials // 4, args.repeat_shift, rng)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
