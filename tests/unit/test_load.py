"""Open-loop load: seeded arrivals (lab.workload.arrivals), goodput, Pareto frontier and the
answer's "beats up to N req/s" sentence (lab.analysis.load), bench.slo validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.analysis.load import beats_sentence, beats_up_to, goodput_speedup, pareto_front
from lab.measure.goodput import is_good, run_load_metrics, ttft_from_schedule_ms
from lab.config import ParamsError, load_params
from lab.report.answer import answer_markdown, answer_text
from lab.workload.arrivals import arrival_times, interarrival_cv, rate_key


# ------------------------------------------------------------------ arrivals

def test_arrivals_seeded_same_for_every_mode_and_differ_by_repeat():
    a = arrival_times(8, 4.0, 1.0, seed=0)
    assert a == arrival_times(8, 4.0, 1.0, seed=0)  # what every mode's bench stage computes
    assert a != arrival_times(8, 4.0, 1.0, seed=1)  # next repeat: seed + 1
    assert a[0] == 0.0 and all(y >= x for x, y in zip(a, a[1:])) and len(a) == 8


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_arrivals_mean_rate_and_cv(burstiness):
    # fixed seed: deterministic; 20 000 intervals put the sample mean within ~1 % and the CV within ~2 %
    rate = 5.0
    gaps = np.diff(arrival_times(20_001, rate, burstiness, seed=123))
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=0.03)
    cv = gaps.std(ddof=1) / gaps.mean()
    assert cv == pytest.approx(interarrival_cv(burstiness), rel=0.05)
    assert interarrival_cv(1.0) == 1.0  # Poisson: exponential intervals


def test_arrivals_bad_input():
    for bad in (dict(n=-1, rate_req_s=1), dict(n=3, rate_req_s=0), dict(n=3, rate_req_s=math.inf),
                dict(n=3, rate_req_s=1, burstiness=0)):
        with pytest.raises(ValueError, match="Fix"):
            arrival_times(**bad)
    assert arrival_times(0, 2.0) == []
    assert (rate_key(4), rate_key(4.0), rate_key(0.5)) == ("r4", "r4", "r0.5")


def test_params_rates_and_slo_validated(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("modes: {baseline: {algorithm: null}}\nbench: {request_rates: [2, 8], slo: {ttft_ms: 300, tpot_ms: null}}\n")
    p = load_params(f)
    assert p.bench.request_rates == [2.0, 8.0] and p.bench.slo.ttft_ms == 300 and p.bench.slo.tpot_ms is None
    for bad, key in (("request_rates: [0]", "request_rates"), ("request_rates: [2, 2.0]", "request_rates"),
                     ("burstiness: 0", "burstiness"), ("slo: {ttft_ms: null, tpot_ms: null}", "slo"),
                     ("slo: {ttft_ms: -1}", "slo.ttft_ms"), ("slo: {tpot: 5}", "slo.tpot")):
        f.write_text(f"modes: {{baseline: {{algorithm: null}}}}\nbench: {{{bad}}}\n")
        with pytest.raises(ParamsError, match=f"bench.{key}"):
            load_params(f)


# ------------------------------------------------------------------ goodput

def _rec(t_send, ttft_s, n, tpot_s, ok=True, t_scheduled=None):
    """A client record whose TTFT and TPOT are exactly ttft_s and tpot_s (one chunk per token)."""
    chunks = [[t_send + ttft_s + k * tpot_s, 1] for k in range(n)]
    return {"ok": ok, "t_send": t_send, "t_dispatch": t_send, "t_scheduled": t_scheduled,
            "t_end": chunks[-1][0] if ok else t_send + 1, "chunks": chunks if ok else [],
            "completion_tokens": n if ok else None, "meta_info": {}}


def test_goodput_hand_computed():
    slo = {"ttft_ms": 100.0, "tpot_ms": 20.0}
    recs = [_rec(0.0, 0.050, 11, 0.010),   # good: 50 ms, 10 ms
            _rec(0.0, 0.150, 11, 0.010),   # TTFT over
            _rec(0.0, 0.050, 11, 0.030),   # TPOT over
            _rec(0.0, 0.100, 21, 0.020),   # exactly at both limits: good (vLLM: s >= r)
            _rec(0.0, 0.050, 11, 0.010, ok=False)]  # failed: never good
    m = run_load_metrics(recs, wall_s=2.0, slo=slo)
    assert m["goodput_req_s"] == pytest.approx(2 / 2.0)
    assert m["goodput_tok_s"] == pytest.approx((11 + 21) / 2.0)
    assert m["slo_attainment"] == pytest.approx(2 / 5)
    assert m["request_throughput_req_s"] == pytest.approx(4 / 2.0)
    # per user: n / e2e, e2e = ttft + (n - 1) * tpot
    per_user = [11 / 0.15, 11 / 0.25, 11 / 0.35, 21 / 0.5]
    assert m["output_tok_s_per_user"] == pytest.approx(sum(per_user) / 4)
    assert m["p99_schedule_lag_ms"] is None  # closed loop: no schedule
    assert run_load_metrics(recs, 2.0, {"ttft_ms": None, "tpot_ms": 20.0})["goodput_req_s"] == pytest.approx(3 / 2)
    lagged = [_rec(1.0, 0.05, 3, 0.01, t_scheduled=0.99), _rec(2.0, 0.05, 3, 0.01, t_scheduled=2.0)]
    assert run_load_metrics(lagged, 1.0, slo)["p99_schedule_lag_ms"] == pytest.approx(10 * 0.99 + 0 * 0.01, rel=1e-6)
    # an open-loop point divides by the same measured window (vLLM: good_completed / dur_s)
    at_rate = run_load_metrics(recs, wall_s=2.0, slo=slo, rate_req_s=4.0)
    assert at_rate["goodput_req_s"] == m["goodput_req_s"] and at_rate["goodput_tok_s"] == m["goodput_tok_s"]
    assert at_rate["request_throughput_req_s"] == m["request_throughput_req_s"]
    assert is_good(10.0, None, slo)  # a 1-token request: TPOT counts as 0 (vLLM)
    with pytest.raises(ValueError):
        run_load_metrics(recs, 0.0, slo)


def test_rate_point_ttft_counts_from_the_schedule():
    """At a rate point a request the client sent late is charged the lag: TTFT from t_scheduled."""
    slo = {"ttft_ms": 100.0, "tpot_ms": None}
    on_time = _rec(1.0, 0.050, 3, 0.01, t_scheduled=1.0)   # 50 ms from the schedule
    late = _rec(1.2, 0.050, 3, 0.01, t_scheduled=1.0)      # sent 200 ms late: 250 ms from the schedule
    m = run_load_metrics([on_time, late], wall_s=1.0, slo=slo, rate_req_s=2.0)
    assert m["goodput_req_s"] == pytest.approx(1.0) and m["slo_attainment"] == pytest.approx(0.5)
    assert m["p99_schedule_lag_ms"] == pytest.approx(198.0)
    # closed loop: no schedule, TTFT from t_send: both meet 100 ms
    assert run_load_metrics([on_time, late], wall_s=1.0, slo=slo)["slo_attainment"] == pytest.approx(1.0)
    assert ttft_from_schedule_ms(late) == pytest.approx(250.0) and ttft_from_schedule_ms(_rec(0, 0.05, 3, 0.01)) \
        == pytest.approx(50.0)  # no schedule: from t_send
    assert ttft_from_schedule_ms(_rec(0, 0.05, 3, 0.01, ok=False, t_scheduled=0.0)) is None


@pytest.mark.parametrize("seed", range(40))
def test_goodput_never_exceeds_throughput(seed):
    """Random runs (failures, late sends, tight and loose SLOs, closed loop and rate points): good
    requests are ok requests over the same window, so goodput <= throughput; a definition that
    divided by the offered duration n / rate (the old one) fails this when the run overran it."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    recs = []
    for i in range(n):
        sched = float(rng.uniform(0, 0.5))
        recs.append(_rec(sched + float(rng.exponential(0.3)), float(rng.uniform(0.01, 0.4)), int(rng.integers(1, 30)),
                         float(rng.uniform(0.005, 0.03)), ok=bool(rng.random() > 0.2), t_scheduled=sched))
    starts = [r["t_dispatch"] for r in recs]
    wall = max(r["t_end"] for r in recs) - min(starts)
    slo = {"ttft_ms": float(rng.choice([50.0, 200.0, 1e9])), "tpot_ms": float(rng.choice([10.0, 1e9]))}
    for rate in (None, float(rng.uniform(0.5, 50.0))):
        m = run_load_metrics(recs, wall_s=wall, slo=slo, rate_req_s=rate)
        assert m["goodput_req_s"] <= m["request_throughput_req_s"] + 1e-12
        assert 0.0 <= m["slo_attainment"] <= 1.0


def test_issue_example_lagging_client_is_charged_and_warned():
    """Issue 22's case: 8 requests at 12 req/s with a cap of 1 on a server that needs ~0.8 s each.
    The old definition reported goodput 12.0 req/s against 1.22 req/s of throughput and no warning."""
    from lab.measure.hygiene import SCHEDULE_LAG_WARN_MS, hygiene_warnings

    sched = arrival_times(8, 12.0, 1.0, seed=0)
    recs, free = [], 0.0
    for t in sched:  # one slot: each request waits for the previous one to end
        send = max(t, free)
        r = _rec(send, 0.05, 64, 0.012, t_scheduled=t)
        free = r["t_end"]
        recs.append(r)
    wall = max(r["t_end"] for r in recs) - min(r["t_dispatch"] for r in recs)
    m = run_load_metrics(recs, wall, {"ttft_ms": 500.0, "tpot_ms": 20.0}, rate_req_s=12.0)
    assert m["goodput_req_s"] <= m["request_throughput_req_s"] == pytest.approx(8 / wall)
    assert m["slo_attainment"] < 0.5  # most waited seconds behind their schedule
    assert m["p99_schedule_lag_ms"] > 1000
    row = {"point": "r12", "request_rate": 12.0, "concurrency": 1, "repeat": 0, **m}
    (w,) = [w for w in hygiene_warnings([row], None) if "schedule lag" in w]
    assert w.startswith("r12: schedule lag p99") and "bench.rate_max_concurrency" in w and "Fix:" in w
    calm = {**row, "p99_schedule_lag_ms": SCHEDULE_LAG_WARN_MS / 2}
    assert not [w for w in hygiene_warnings([calm], None) if "schedule lag" in w]
    uncapped = {**row, "concurrency": 0}
    (w,) = [w for w in hygiene_warnings([uncapped], None) if "schedule lag" in w]
    assert "client fell behind" in w and "idle machine" in w


def test_goodput_speedup_and_zero_cases():
    s = goodput_speedup([2.0, 2.1, 1.9], [3.0, 3.1, 2.9])
    assert s["verdict"] == "faster" and s["ratio"] == pytest.approx(1.5) and s["ci95_lo"] > 1
    assert goodput_speedup([2.0, 2.1, 1.9], [2.0, 1.9, 2.1])["verdict"] == "not distinguishable"
    both = goodput_speedup([0, 0, 0], [0, 0, 0])
    assert (both["ratio"], both["ci95_lo"], both["verdict"]) == (None, None, None) and "both modes" in both["note"]
    # issue 32: a baseline goodput of 0 is a zero denominator: no ratio, no word (was "faster", no interval)
    z = goodput_speedup([0, 0, 0], [1.0, 1.1, 0.9])
    assert z["ratio"] is None and z["verdict"] is None and "zero denominator" in z["note"]
    z2 = goodput_speedup([1.0, 1.1, 0.9], [0, 0, 0])
    assert z2["verdict"] is None and z2["ci95_lo"] is None and "goodput 0" in z2["note"]
    one = goodput_speedup([2.0], [3.0])
    assert one["ratio"] == pytest.approx(1.5) and one["verdict"] is None and "one repeat" in one["note"]


def test_goodput_speedup_paired_by_repeat():
    # repeat k replays the same arrivals in both modes: the schedule's spread is shared, the ratio is steady
    base, other = [2.0, 4.0, 6.0], [2.4, 4.9, 7.2]
    unpaired = goodput_speedup(base, other)
    paired = goodput_speedup(base, other, paired=True)
    assert unpaired["verdict"] == "not distinguishable" and not unpaired["paired"]
    assert paired["paired"] and paired["ratio"] == pytest.approx((1.2 * 1.225 * 1.2) ** (1 / 3))
    assert 1.0 < paired["ci95_lo"] < paired["ratio"] < paired["ci95_hi"] and paired["verdict"] == "faster"
    # a zero goodput cannot be paired on the log scale: the unpaired rules apply
    assert goodput_speedup([0, 0, 0], [1.0, 1.1, 0.9], paired=True) == {**goodput_speedup([0, 0, 0], [1.0, 1.1, 0.9])}


@pytest.mark.parametrize("paired", [False, True])
def test_no_spread_is_no_interval_and_no_confident_verdict(paired):
    """Issue 22: goodput 4, 4, 4 against 3.5, 3.5, 3.5 (7 of 8 requests good in every repeat) was
    "0.875x [0.875, 0.875] slower". Issue 32: no spread gets the resolution's interval (one request
    in 8), never a zero-width one, and no jump between spread 0 and spread 1e-9."""
    s = goodput_speedup([4.0, 4.0, 4.0], [3.5, 3.5, 3.5], paired=paired, rel_resolution=1 / 8)
    assert s["ratio"] == pytest.approx(0.875) and s["ci95_lo"] < 0.875 < s["ci95_hi"]
    assert s["ci95_hi"] / s["ci95_lo"] > 1.03  # about one request in 8 wide, not [0.875, 0.875]
    near = goodput_speedup([4.0, 4.0 * (1 + 1e-9), 4.0], [3.5, 3.5, 3.5], paired=paired, rel_resolution=1 / 8)
    assert near["ci95_lo"] == pytest.approx(s["ci95_lo"], rel=1e-6) and near["verdict"] == s["verdict"]
    from lab.analysis.estimates import Ratio

    text = Ratio.from_dict(s).text()
    assert text.startswith("0.88x [")
    # an exact ratio from rounding-level spread (2.4 / 2 vs 4.8 / 4) gets the resolution's interval too
    exact = goodput_speedup([2.0, 4.0, 6.0], [2.4, 4.8, 7.2], paired=True)
    assert exact["ci95_lo"] < 1.2 < exact["ci95_hi"]
    # one repeat: no interval, no verdict word, and a note saying why
    one = goodput_speedup([4.0], [3.5])
    assert one["verdict"] is None and "one repeat" in one["note"]


def test_goodput_speedup_across_launches_uses_launch_rounds():
    from lab.analysis.load import goodput_speedup_launches

    # the ratio is 1.2 in launch 1 and 1.1 in launch 2 (a launch effect): the unit is the round
    base = [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]]
    other = [[2.4, 4.8, 7.3], [2.2, 4.4, 6.6]]
    s = goodput_speedup_launches(base, other, paired=True)
    assert s["scope"] == "across 2 launches" and s["unit"] == "launch" and s["paired"]
    r1 = sum(math.log(o / b) for b, o in zip(base[0], other[0])) / 3
    r2 = sum(math.log(o / b) for b, o in zip(base[1], other[1])) / 3
    assert s["ratio"] == pytest.approx(math.exp((r1 + r2) / 2))
    # two units with t(1 df) = 12.7: the 20 %/10 % launch-to-launch change leaves it undecided
    assert s["ci95_lo"] < 1.0 < s["ci95_hi"] and s["verdict"] == "not distinguishable"
    # per repeat the same 18 % pooled (six repeats, one launch's scope) would have said "faster"
    within = goodput_speedup([v for g in base for v in g], [v for g in other for v in g], paired=True)
    assert within["verdict"] == "faster"
    one = goodput_speedup_launches(base[:1], other[:1], paired=True)
    assert one["scope"] == "within one launch" and one["unit"] == "repeat"


def test_pareto_front():
    #        A (fast user, low total)  B (dominated by C)  C       D (high total)  E (nan)
    x = [80.0, 50.0, 60.0, 30.0, math.nan]
    y = [80.0, 300.0, 400.0, 600.0, 900.0]
    assert pareto_front(x, y) == [True, False, True, True, False]
    assert pareto_front([1.0, 1.0], [2.0, 2.0]) == [True, True]  # ties dominate neither
    with pytest.raises(ValueError):
        pareto_front([1.0], [])


# ------------------------------------------------------------------ the sentence

SLO = {"ttft_ms": 500.0, "tpot_ms": 20.0}


@pytest.mark.parametrize("verdicts, expected", [
    ({2.0: "faster", 4.0: "faster", 12.0: "not distinguishable"},
     "eagle3_decode beats baseline up to 4 req/s at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): goodput speedup's "
     "95 % interval above 1 at 2 req/s, 4 req/s; not distinguishable (interval includes 1) at 12 req/s."),
    # issue 22: "up to 4" while the 2 req/s interval includes 1 was wrong: it must hold at every rate up to N
    ({2.0: "not distinguishable", 4.0: "faster", 12.0: "slower"},
     "eagle3_decode beats baseline at 4 req/s but not at every lower rate at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): "
     "goodput speedup's 95 % interval above 1 at 4 req/s; not distinguishable (interval includes 1) at 2 req/s; "
     "worse (interval below 1) at 12 req/s."),
    ({4.0: "slower", 12.0: "not distinguishable"},
     "eagle3_decode does not beat baseline at any measured rate at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): "
     "not distinguishable (interval includes 1) at 12 req/s; worse (interval below 1) at 4 req/s."),
    ({4.0: "not distinguishable", 12.0: "not distinguishable"},
     "eagle3_decode is not distinguishable from baseline at any measured rate at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): "
     "not distinguishable (interval includes 1) at 4 req/s, 12 req/s."),
    ({4.0: "slower", 12.0: "faster"},
     "eagle3_decode beats baseline at 12 req/s but not at every lower rate at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): "
     "goodput speedup's 95 % interval above 1 at 12 req/s; worse (interval below 1) at 4 req/s."),
])
def test_beats_sentence(verdicts, expected):
    assert beats_sentence("eagle3_decode", "baseline", verdicts, SLO) == expected


def test_beats_sentence_states_each_ratio():
    speedups = {4.0: {"ratio": 1.3, "ci95_lo": 1.1, "ci95_hi": 1.52, "verdict": "faster"},
                12.0: {"ratio": 1.05, "ci95_lo": 0.9, "ci95_hi": 1.22, "verdict": "not distinguishable"},
                16.0: {"ratio": None, "ci95_lo": None, "ci95_hi": None, "verdict": "not distinguishable"}}
    assert beats_sentence("eagle3_decode", "baseline", speedups, SLO) == (
        "eagle3_decode beats baseline up to 4 req/s at this SLO (TTFT <= 500 ms, TPOT <= 20 ms): goodput speedup's "
        "95 % interval above 1 at 4 req/s (1.30x [1.10, 1.52]); not distinguishable (interval includes 1) at 12 req/s "
        "(1.05x [0.90, 1.22]), 16 req/s.")


def test_beats_up_to_and_no_rates():
    assert beats_up_to({1.0: "faster", 2.0: "slower", 8.0: "faster"})["up_to_req_s"] == 1.0
    assert beats_up_to({})["up_to_req_s"] is None
    # "up to N" holds at every measured rate up to N: a tie below N ends it
    assert beats_up_to({2.0: "faster", 4.0: "not distinguishable", 8.0: "faster"})["up_to_req_s"] == 2.0
    assert beats_up_to({2.0: "not distinguishable", 8.0: "faster"})["up_to_req_s"] is None
    ceiling = "every request met the SLO in every repeat of both modes: a ceiling"
    same = {4.0: {"ratio": 1.0, "ci95_lo": None, "ci95_hi": None, "verdict": "not distinguishable", "note": ceiling}}
    assert f"4 req/s (1.00x, {ceiling})" in beats_sentence("m", "b", same, SLO)
    scoped = {4.0: {**same[4.0], "scope": "within one launch"}}
    assert "TPOT <= 20 ms) [within one launch]: " in beats_sentence("m", "b", scoped, SLO)
    assert "no request rate measured" in beats_sentence("m", "baseline", {}, {"ttft_ms": 1.0, "tpot_ms": None})
    assert "TTFT <= 1 ms)" in beats_sentence("m", "baseline", {1.0: "faster"}, {"ttft_ms": 1.0, "tpot_ms": None})


def test_answer_states_the_load_sentences():
    comparison = {"baseline": "baseline", "modes": {"baseline": {}, "eagle3_decode": {}},
                  "load": {"sentences": {"eagle3_decode": "eagle3_decode beats baseline up to 4 req/s at this SLO (x)."}}}
    for render in (answer_text, answer_markdown):
        text = render(comparison)
        assert "Under open-loop load" in text and "eagle3_decode beats baseline up to 4 req/s" in text
    assert "Under open-loop load" not in answer_text({**comparison, "load": None})


def test_measurement_points_add_rate_points_after_the_levels():
    from types import SimpleNamespace

    from lab.measure.point import measurement_points

    bench = SimpleNamespace(concurrency=[8, 1], context_tokens=[0, 4096], output_levels=[64],
                            request_rates=[4.0, 0.5], rate_max_concurrency=16)
    pts = measurement_points(bench)
    assert [p.key for p in pts] == ["c1", "c1_ctx4096_out64", "c8", "c8_ctx4096_out64", "r4", "r0.5"]
    assert [(p.request_rate, p.concurrency, p.context_tokens, p.output_tokens) for p in pts[-2:]] == [
        (4.0, 16, 0, 64), (0.5, 16, 0, 64)]  # primary context/output length; concurrency = the in-flight cap
    assert all(p.request_rate is None for p in pts[:4])


def _frame(rate_points: bool):
    import pandas as pd

    rows = []
    for mode, good in (("baseline", [4.0, 4.0, 3.5]), ("eagle3_decode", [4.0, 4.0, 4.0])):
        for rep, g in enumerate(good):
            rows.append({"mode": mode, "point": "c1", "concurrency": 1, "repeat": rep, "request_rate": None,
                         "goodput_req_s": 1.0, "goodput_tok_s": 64.0, "slo_attainment": 1.0, "output_tok_s": 100.0,
                         "output_tok_s_per_user": 80.0 if mode == "baseline" else 90.0})
            if rate_points:
                rows.append({"mode": mode, "point": "r4", "concurrency": 0, "repeat": rep, "request_rate": 4.0,
                             "goodput_req_s": g, "goodput_tok_s": 64 * g, "slo_attainment": g / 4, "output_tok_s": 250.0,
                             "output_tok_s_per_user": 70.0 if mode == "baseline" else 85.0})
    return pd.DataFrame(rows)


def _summary(runs):
    """The comparison load_part runs on (lab.analysis.comparison.summarize: means and intervals)."""
    from lab.analysis.comparison import summarize

    return summarize({m: {} for m in ("baseline", "eagle3_decode")}, runs, "baseline")


def _add_load(summary, runs, results, baseline):
    """What the compare stage does with load_part: merge its point columns, set its load part."""
    from lab.analysis.load import load_part

    part = load_part(summary, runs, results, baseline)
    summary.merge(part.points)
    summary.load = part.load
    return part.flat, part.pareto


def test_add_load_goodput_sentence_and_pareto_rows():
    from lab.analysis.load import load_part

    runs = _frame(rate_points=True)
    summary = _summary(runs)
    results = {m: {"load": {"slo": SLO, "burstiness": 1.0}} for m in ("baseline", "eagle3_decode")}
    part = load_part(summary, runs, results, "baseline")
    assert "speedup_goodput_req_s" not in summary.modes["eagle3_decode"]["r4"]  # a part: the comparison is untouched
    flat, pareto = _add_load(summary, runs, results, "baseline")
    assert (flat, pareto) == (part.flat, part.pareto)
    e = summary["modes"]["eagle3_decode"]["r4"]
    assert e["goodput_req_s"]["mean"] == pytest.approx(4.0) and e["speedup_goodput_req_s"]["paired"]
    # per repeat 1, 1, 4/3.5: the paired geometric mean, its interval includes 1 -> a tie
    assert e["speedup_goodput_req_s"]["ratio"] == pytest.approx((4 / 3.5) ** (1 / 3))
    sentence = summary["load"]["sentences"]["eagle3_decode"]  # one launch: no goodput verdict word (issue 32)
    assert sentence.startswith("eagle3_decode against baseline: no goodput verdict at any measured rate"), sentence
    assert "no verdict: one launch per mode" in sentence
    assert flat == {"eagle3_decode.beats_up_to_req_s": 0.0}
    from lab.analysis.comparison import lean_numbers

    assert lean_numbers({**summary, "load_flat": flat})["eagle3_decode.r4.goodput_req_s"] == pytest.approx(4.0)
    assert {(p["mode"], p["point"], p["kind"], p["on_frontier"]) for p in pareto} == {
        ("baseline", "c1", "concurrency", True), ("baseline", "r4", "rate", True),
        ("eagle3_decode", "c1", "concurrency", True), ("eagle3_decode", "r4", "rate", True)}
    row = next(r for r in summary["rows"] if (r["mode"], r["point"]) == ("eagle3_decode", "r4"))
    assert row["verdict_goodput_req_s"] is None and row["request_rate"] == 4.0  # one launch: no word
    assert row["speedup_goodput_req_s_scope"] == "within one launch"
    # c1: every request of every repeat met the SLO in both modes: 1.00x is a ceiling, said so, no interval
    c1 = summary["modes"]["eagle3_decode"]["c1"]["speedup_goodput_req_s"]
    assert c1["ratio"] == 1.0 and c1["ci95_lo"] < 1.0 < c1["ci95_hi"] and "a ceiling" in c1["note"]
    assert c1["verdict"] is None and "no verdict: one launch" in c1["note"]
    assert summary["modes"]["eagle3_decode"]["c1"]["slo_attainment"]["ci95_hi"] != summary["modes"][
        "eagle3_decode"]["c1"]["slo_attainment"]["ci95_hi"]  # NaN: no zero-width [1.0, 1.0]
    # no rate point measured: goodput per point still, but no sentence
    closed = _frame(rate_points=False)
    s2 = _summary(closed)
    _add_load(s2, closed, results, "baseline")
    assert s2["load"]["sentences"] == {} and "goodput_req_s" in s2["modes"]["eagle3_decode"]["c1"]
    # results from before open-loop load: nothing added
    s3 = _summary(closed)
    assert _add_load(s3, closed.drop(columns=["goodput_req_s"]), {"baseline": {}}, "baseline") == ({}, None)
    assert s3["load"] is None
