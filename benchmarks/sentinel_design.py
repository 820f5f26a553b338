"""The sentinel's design in simulation: one value per launch against pooled repeats.

    python benchmarks/sentinel_design.py                  # 4,000 trials, ~5 s
    python benchmarks/sentinel_design.py --trials 20000 --seed 1

Each trial draws 5 earlier launches and one new launch of an unchanged configuration, 3 repeats
each, with a launch effect (sd ``--launch-sd``, the server process, warm state, clocks) plus
repeat noise (sd ``--repeat-sd``), around 85 tok/s. Nothing changed, so every flag is a false
alarm. Prints the false-alarm rate of :func:`lab.analysis.sentinel.launch_delta` (the launch
means against a t prediction interval of the earlier launch means, the lab's design) and of
the old design (Welch's t-test on the repeats pooled over the earlier launches), both at
``--alpha``. The lab's should be near alpha; the pooled one far above it, because it treats
the launch effect as noise it can average away. ``tests/unit/test_sentinel.py`` runs a small
seeded version of the same study. Numbers from a simulation, not a measurement.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats as st

from lab.analysis.sentinel import launch_delta


def launches(rng: np.random.Generator, k: int, launch_sd: float, repeat_sd: float, repeats: int = 3,
             mean: float = 85.0) -> list[np.ndarray]:
    """``k`` launches of ``repeats`` values each: a launch effect plus repeat noise (tok/s)."""
    effects = rng.normal(0.0, launch_sd, k)
    return [mean + e + rng.normal(0.0, repeat_sd, repeats) for e in effects]


def false_alarms(trials: int, seed: int, alpha: float = 0.05, launch_sd: float = 1.0,
                 repeat_sd: float = 0.3, history: int = 5) -> tuple[float, float]:
    """(the lab's false-alarm rate, the pooled-repeats design's) over ``trials`` simulated trials.

    :raises ValueError: ``trials`` < 1 or ``history`` < 2.
    """
    if trials < 1 or history < 2:
        raise ValueError(f"trials >= 1 and history >= 2, got {trials}, {history}")
    rng = np.random.default_rng(seed)
    ours = pooled = 0
    for _ in range(trials):
        hist = launches(rng, history, launch_sd, repeat_sd)
        now = launches(rng, 1, launch_sd, repeat_sd)[0]
        ours += bool(launch_delta(now.mean(), [h.mean() for h in hist], alpha=alpha, min_effect=0.0)["outside_noise"])
        pooled += bool(st.ttest_ind(now, np.concatenate(hist), equal_var=False).pvalue < alpha)
    return ours / trials, pooled / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--launch-sd", type=float, default=1.0)
    ap.add_argument("--repeat-sd", type=float, default=0.3)
    a = ap.parse_args()
    ours, pooled = false_alarms(a.trials, a.seed, a.alpha, a.launch_sd, a.repeat_sd)
    print(f"{a.trials} trials, alpha {a.alpha}, launch sd {a.launch_sd}, repeat sd {a.repeat_sd} (tok/s):")
    print(f"  one value per launch (the lab's sentinel): false-alarm rate {ours:.3f}")
    print(f"  pooled repeats, Welch t (the old design):  false-alarm rate {pooled:.3f}")


if __name__ == "__main__":
    main()
