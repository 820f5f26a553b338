"""Coverage of the lab's 95 % intervals in simulation, beside the percentile bootstrap they replaced.

    python benchmarks/interval_coverage.py            # ~1 min; --trials N to change

For n = 3, 5, 8 repeats per side, draws baseline (mean 100, CV 5 %) and mode (mean 170,
CV 5 % or 15 %) samples, normal or log-normal with those means, and counts how often each
interval contains the true ratio of means 1.7:

- ``welch log-ratio``: :func:`lab.analysis.stats.ratio_ci` (what the lab prints);
- ``percentile bootstrap``: the interval the lab printed before (2000 resamples of each side,
  ratio of resampled means, 2.5/97.5 percentiles);
- ``t mean``: :func:`lab.analysis.stats.mean_ci` on the mode sample, covering its mean 170.

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

from lab.analysis.stats import mean_ci, ratio_ci  # noqa: E402


def _draw(rng, dist, mean, cv, size):
    if dist == "normal":
        return rng.normal(mean, mean * cv, size)
    sigma = math.sqrt(math.log1p(cv * cv))
    return rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size)


def _bootstrap(b, o, rng, n_boot=2000):
    bm = b[rng.integers(0, b.size, (n_boot, b.size))].mean(axis=1)
    om = o[rng.integers(0, o.size, (n_boot, o.size))].mean(axis=1)
    return np.quantile(om / bm, [0.025, 0.975])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2024)
    print(f"command: python benchmarks/interval_coverage.py --trials {args.trials}")
    print("| data | mode CV | n | welch log-ratio | percentile bootstrap | t mean |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for dist in ("normal", "lognormal"):
        for cv in (0.05, 0.15):
            for n in (3, 5, 8):
                w = bs = t = 0
                for _ in range(args.trials):
                    b, o = _draw(rng, dist, 100.0, 0.05, n), _draw(rng, dist, 170.0, cv, n)
                    _, lo, hi = ratio_ci(b, o)
                    w += lo <= 1.7 <= hi
                    blo, bhi = _bootstrap(b, o, rng)
                    bs += blo <= 1.7 <= bhi
                    _, tlo, thi = mean_ci(o)
                    t += tlo <= 170.0 <= thi
                k = args.trials
                print(f"| {dist} | {cv:.0%} | {n} | {w / k:.3f} | {bs / k:.3f} | {t / k:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
