"""The virtual-clock replay (lab/calibrate/simulate.py): metrics as the lab defines them, the
scheduler's admission rules, open loop, acceptance samplers."""

from __future__ import annotations

import random
import statistics

import pytest

from lab.calibrate.simulate import SimRequest, chain_sampler, simulate_run, simulated_sampler


class Const:
    """Fixed costs (ms): prefill ``p``, decode ``d``, verify ``v`` + draft ``r``, overhead ``o``."""

    def __init__(self, p=20.0, d=10.0, v=15.0, r=1.0, o=0.5):
        self.p, self.d, self.v, self.r, self.o = p, d, v, r, o

    def prefill(self, n): return self.p + self.o
    def decode(self, b, kv): return self.d
    def spec(self, b, kv): return self.v, self.r
    def overhead(self, b): return self.o


def test_baseline_c1_decode_rate_is_one_token_per_iteration():
    reqs = [SimRequest(100, 100, 33) for _ in range(4)]
    out = simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=1)
    assert out["decode_tok_s"] == pytest.approx(1000.0 / 10.5)
    assert out["decode_ms"] == pytest.approx(10.0) and out["accept_length"] is None
    # output rate: 4 x 33 tokens over 4 x (prefill + 32 decode iterations) plus 3 client turnarounds
    span = 4 * (20.5 + 32 * 10.5) + 3 * 0.5
    assert out["output_tok_s"] == pytest.approx(4 * 33 / span * 1e3)


def test_speculative_rate_and_accept_length_with_fixed_accept_length():
    reqs = [SimRequest(100, 100, 31) for _ in range(3)]
    out = simulate_run(reqs, Const(), sampler=simulated_sampler(3.0, 3), rng=random.Random(0), concurrency=1)
    # 30 decode tokens in 10 cycles of 16.5 ms
    assert out["decode_tok_s"] == pytest.approx(30 / (10 * 16.5e-3))
    assert out["accept_length"] == pytest.approx(31 / 10)
    assert out["verify_ms"] == pytest.approx(15.0) and out["draft_ms"] == pytest.approx(1.0)


def test_first_burst_split_stalls_the_first_request():
    """The emulator admits the first request of a burst alone (the rest arrive during its prefill):
    its decode waits for the second prefill, the others' does not."""
    reqs = [SimRequest(100, 100, 11) for _ in range(4)]
    trace: list[dict] = []
    simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=4, first_group=1, trace=trace)
    gaps0 = [b[0] - a[0] for a, b in zip(trace[0]["chunks"], trace[0]["chunks"][1:])]
    gaps1 = [b[0] - a[0] for a, b in zip(trace[1]["chunks"], trace[1]["chunks"][1:])]
    assert gaps0[0] == pytest.approx(20.5 + 10.5)  # the second prefill, then its first decode step
    assert all(g == pytest.approx(10.5) for g in gaps1)
    together: list[dict] = []
    simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=4, trace=together)
    assert together[0]["chunks"][0][0] == together[3]["chunks"][0][0]  # one prefill for all


def test_open_loop_far_apart_arrivals_are_served_alone():
    reqs = [SimRequest(100, 100, 11) for _ in range(3)]
    out = simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=0,
                       arrivals_s=[0.0, 10.0, 20.0])
    assert out["decode_tok_s"] == pytest.approx(1000.0 / 10.5)
    assert out["output_tok_s"] == pytest.approx(33 / (20.0 + (20.5 + 10 * 10.5) / 1e3))
    with pytest.raises(ValueError, match="arrivals"):
        simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=0, arrivals_s=[0.0])


def test_max_running_requests_queues_the_rest():
    reqs = [SimRequest(100, 100, 6) for _ in range(4)]
    trace: list[dict] = []
    simulate_run(reqs, Const(), sampler=None, rng=random.Random(0), concurrency=4, max_running=2, trace=trace)
    firsts = sorted(t["chunks"][0][0] for t in trace)
    assert firsts[2] > firsts[1] + 5 * 10.5  # the third request waits for a free slot


def test_chain_sampler_mean_and_simulated_sampler_mean():
    rng = random.Random(1)
    draw = chain_sampler([0.8, 0.5])
    mean = statistics.fmean(x for _ in range(20000) for x in draw(rng, 1))
    assert mean == pytest.approx(1 + 0.8 + 0.8 * 0.5, abs=0.02)
    sim = simulated_sampler(2.4, 3)
    vals = [sim(rng, 4) for _ in range(20000)]
    assert all(len(set(v)) == 1 for v in vals)  # one length for the whole batch, as SGLang draws it
    assert statistics.fmean(v[0] for v in vals) == pytest.approx(2.4, abs=0.02)
