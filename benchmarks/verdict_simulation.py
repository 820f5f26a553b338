"""Wrong verdicts and coverage of the default run's speedup, with the profile's launch spread (issue 32).

    python benchmarks/verdict_simulation.py           # ~20 s; --trials N, --launch-cv, --repeat-cv

The default run (``bench.launches: 1``, 3 repeats per mode) measures each mode in one engine
launch. Each launch has its own speed (a log-normal launch effect, CV ``--launch-cv``, default
2.2 %: the launch-to-launch spread of decode tok/s that docs/measurement.md section 4 measured for
the default profile ``kimi_k25_tp8_pcie``) and each repeat a little more (``--repeat-cv``, 0.3 %).
For each design the lab's own estimator (:func:`lab.analysis.launches.welch_speedup`, what the
compare stage calls, with the documented prior :func:`lab.analysis.launches.prior_spread` where the
compare stage passes it) is applied to simulated launches and two things are counted:

- **wrong verdicts**: the true ratio is 1 (the modes are equally fast) and "faster" or "slower"
  is printed; the target is <= 5 % of runs;
- **coverage**: the true ratio is 1.15 and the printed 95 % interval contains it; the target is
  >= 93 %, with the median relative half-width beside it (an interval that covers everything
  covers 100 % and is useless: the width says which one it is).

Rows: the lab before issue 32 (one launch, its repeats' interval, a verdict word); the default
now (one launch: no word, the interval widened with the documented 2.2 %); one launch with the
regression sentinel's history of k earlier launches of the same configuration (a word again:
the spread is this configuration's); ``bench.launches: 3``; and, to show what the assumed spread
costs when it is wrong, the default with a true launch spread of 4 % against the assumed 2.2 %.

Statistics only (no timing, no engine); seeded, so the output is the same on every machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.analysis.estimates import Ratio  # noqa: E402
from lab.analysis.launches import Spread, prior_spread, welch_speedup  # noqa: E402

TRUE = 1.15
PROFILE = "kimi_k25_tp8_pcie"  # params.yaml's default emulator.profile


def _launch(rng, mean: float, repeats: int, launch_cv: float, repeat_cv: float) -> list[float]:
    return list(mean * np.exp(rng.normal(0.0, launch_cv) + rng.normal(0.0, repeat_cv, repeats)))


def _history(rng, mean: float, k: int, repeats: int, launch_cv: float, repeat_cv: float) -> Spread:
    h = [float(np.mean(_launch(rng, mean, repeats, launch_cv, repeat_cv))) for _ in range(k)]
    return Spread(float(np.std(h, ddof=1) / np.mean(h)), k)


def one_run(rng, true: float, *, design: str, launch_cv: float, repeat_cv: float, repeats: int = 3,
            history: int = 0, launches: int = 1) -> Ratio:
    """One simulated comparison at true ratio ``true`` under ``design`` (``"old"``, ``"default"``,
    ``"history"``, ``"launches"``): the :class:`lab.analysis.estimates.Ratio` the lab would print."""
    base = [_launch(rng, 82.0, repeats, launch_cv, repeat_cv) for _ in range(launches)]
    other = [_launch(rng, 82.0 * true, repeats, launch_cv, repeat_cv) for _ in range(launches)]
    if design == "old":  # before issue 32: the one launch's repeats, a word
        return Ratio.welch(base[0], other[0], scope="within one launch")
    spreads = None
    if design == "history":
        spreads = (_history(rng, 82.0, history, repeats, launch_cv, repeat_cv),
                   _history(rng, 82.0 * true, history, repeats, launch_cv, repeat_cv))
    return welch_speedup(base, other, spreads=spreads, prior=prior_spread("emulator", PROFILE))


def rates(rng, trials: int, **kw) -> dict[str, float]:
    """``{"wrong", "said", "coverage", "half_width", "scope"}`` over ``trials`` runs at true 1 and at
    :data:`TRUE`: the share of true-1 runs printing "faster"/"slower", the share printing any word,
    the share of true-1.15 intervals covering 1.15 and their median relative half-width."""
    wrong = said = 0
    for _ in range(trials):
        v = one_run(rng, 1.0, **kw).verdict
        wrong += v in ("faster", "slower")
        said += v is not None
    hits, widths, scope = 0, [], ""
    for _ in range(trials):
        r = one_run(rng, TRUE, **kw)
        scope = r.scope or ""
        if r.ci95_lo is not None and r.ci95_hi is not None:
            hits += r.ci95_lo <= TRUE <= r.ci95_hi
            widths.append((r.ci95_hi - r.ci95_lo) / 2 / r.ratio)
    return {"wrong": wrong / trials, "said": said / trials, "coverage": hits / trials,
            "half_width": float(np.median(widths)) if widths else float("nan"), "scope": scope}


def table(trials: int, launch_cv: float, repeat_cv: float, seed: int = 32) -> list[str]:
    rng = np.random.default_rng(seed)
    rows = [("before issue 32: 1 launch x 3, repeats' interval", dict(design="old", launch_cv=launch_cv)),
            ("default now: 1 launch x 3, documented 2.2 % assumed, no word", dict(design="default", launch_cv=launch_cv)),
            ("1 launch x 3 + 2 earlier launches (sentinel)", dict(design="history", history=2, launch_cv=launch_cv)),
            ("1 launch x 3 + 5 earlier launches (sentinel)", dict(design="history", history=5, launch_cv=launch_cv)),
            ("bench.launches: 3 (x 3 repeats)", dict(design="launches", launches=3, launch_cv=launch_cv)),
            ("default now, true launch CV 4 % (assumed 2.2 %)", dict(design="default", launch_cv=0.04))]
    out = ["| design | wrong verdicts at true 1 | any word at true 1 | coverage of 1.15 | median half-width | scope printed |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, kw in rows:
        r = rates(rng, trials, repeat_cv=repeat_cv, **kw)
        out.append(f"| {name} | {r['wrong']:.3f} | {r['said']:.3f} | {r['coverage']:.3f} | {r['half_width']:.1%} | {r['scope']} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=2000, help="simulated runs per design and true ratio (default 2000)")
    ap.add_argument("--launch-cv", type=float, default=0.022, help="launch-to-launch CV (default 0.022, the profile's)")
    ap.add_argument("--repeat-cv", type=float, default=0.003, help="repeat-to-repeat CV inside a launch (default 0.003)")
    a = ap.parse_args(argv)
    if a.trials < 10 or not 0 < a.launch_cv < 1 or not 0 <= a.repeat_cv < 1:
        ap.error("--trials >= 10, 0 < --launch-cv < 1, 0 <= --repeat-cv < 1")
    print(f"trials {a.trials} per design and true ratio; launch CV {a.launch_cv:.1%}, repeat CV {a.repeat_cv:.1%}; "
          f"binomial SE of a 5 % rate: {np.sqrt(0.05 * 0.95 / a.trials):.3f}, of a 95 % coverage the same")
    print("\n".join(table(a.trials, a.launch_cv, a.repeat_cv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
