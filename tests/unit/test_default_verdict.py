"""Issue 32, item 1: the default run (one launch per mode) prints a verdict word only where it holds
at its level including launch noise. A small seeded version of ``benchmarks/verdict_simulation.py``
with the profile's launch spread (2.2 %, docs/measurement.md section 4); the coverage check also
bounds the width, so an interval that covers everything fails it."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from lab.analysis.launches import NO_LAUNCH_SPREAD, Spread, prior_spread, welch_speedup, withhold
from lab.analysis.estimates import Ratio

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_CV = 0.022
#: the half-width an interval would have knowing the launch spread exactly: z * sqrt(2) * cv
ORACLE_HALF_WIDTH = 1.96 * math.sqrt(2) * LAUNCH_CV


def _sim():
    spec = importlib.util.spec_from_file_location("verdict_simulation", ROOT / "benchmarks" / "verdict_simulation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_coverage(r: dict, *, level: float = 0.93, max_half_width: float = 1.5 * ORACLE_HALF_WIDTH) -> None:
    """Coverage at ``level`` or better, with a median relative half-width no wider than
    ``max_half_width`` (1.5 x what knowing the launch spread exactly would give)."""
    assert r["coverage"] >= level, r
    assert math.isfinite(r["half_width"]) and r["half_width"] <= max_half_width, r


def test_default_run_prints_no_wrong_verdict_and_its_interval_covers():
    sim = _sim()
    r = sim.rates(np.random.default_rng(7), 300, design="default", launch_cv=LAUNCH_CV, repeat_cv=0.003)
    assert r["wrong"] <= 0.05 and r["said"] == 0.0  # no word from one launch
    check_coverage(r)
    assert r["scope"].startswith("launch spread assumed: 2.2% CV")


def test_before_issue_32_the_default_failed_both():
    """The reviewer's figures: ~19 % coverage and ~81 % wrong verdicts at true ratio 1."""
    sim = _sim()
    r = sim.rates(np.random.default_rng(8), 300, design="old", launch_cv=LAUNCH_CV, repeat_cv=0.003)
    assert r["wrong"] > 0.6 and r["coverage"] < 0.4


@pytest.mark.parametrize("kw", [dict(design="launches", launches=3), dict(design="history", history=5)])
def test_designs_that_say_a_word_hold_it_at_its_level(kw):
    sim = _sim()
    r = sim.rates(np.random.default_rng(9), 400, launch_cv=LAUNCH_CV, repeat_cv=0.003, **kw)
    assert r["said"] == 1.0
    assert r["wrong"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 400)  # at its level, binomial slack
    check_coverage(r, max_half_width=2.0 * ORACLE_HALF_WIDTH)


def test_an_interval_that_covers_everything_fails_the_coverage_check():
    everything = {"coverage": 1.0, "half_width": 1e9}
    with pytest.raises(AssertionError):
        check_coverage(everything)
    no_interval = {"coverage": 0.0, "half_width": float("nan")}
    with pytest.raises(AssertionError):
        check_coverage(no_interval)


def test_withhold_and_prior():
    r = Ratio.welch([80.0, 80.1, 80.2], [96.0, 96.1, 96.2], scope="within one launch")
    assert r.verdict == "faster"
    w = withhold(r)
    assert w.verdict is None and w.note == NO_LAUNCH_SPREAD and (w.ci95_lo, w.ci95_hi) == (r.ci95_lo, r.ci95_hi)
    p = withhold(r, Spread(0.022, 14))
    assert p.verdict is None and p.ci95_lo < r.ci95_lo and p.ci95_hi > r.ci95_hi
    assert p.extra["within_launch_ci95"] == [r.ci95_lo, r.ci95_hi] and "assumed" in p.scope
    # an interval across launches, or one borrowed, keeps its word
    three = welch_speedup([[80.0], [81.0], [79.0]], [[96.0], [97.0], [95.0]])
    assert three.verdict == "faster" and withhold(three) is three
    # the prior is documented for the emulator's profiles only; never for a real engine
    assert prior_spread("emulator", "kimi_k25_tp8_pcie") == Spread(0.022, 14)
    assert prior_spread("emulator", "lab/emulator/profiles/fast.json") == Spread(0.08, 28)
    assert prior_spread("sglang", "kimi_k25_tp8_pcie") is None and prior_spread("emulator", "edited") is None
    from lab.engine.registry import engine_named, engine_names

    priors = {(e, prof): v for e in engine_names() for prof, v in engine_named(e).launch_spread_priors.items()}
    assert priors and all(engine_named(engine).modelled and 0 < cv < 1 and n >= 2 and "docs/measurement.md" in src
               for (engine, _), (cv, n, src) in priors.items())
    # every profile named there exists
    assert all((ROOT / "lab" / "emulator" / "profiles" / f"{name}.json").is_file() for _, name in priors)
