"""Workload hygiene: degenerate-output check, token accounting, warm-up until stable, dispatch delay."""

from __future__ import annotations

import pytest

from lab.emulator.request import VOCAB, Request
from lab.measure.hygiene import (accounting_check, coefficient_of_variation, degenerate_check, dispatch_delay_summary,
                         hygiene_warnings, repeated_ngram_share, run_hygiene, warmup_until_stable)


def _rec(rid, text="", chunks=((1.0, 1), (1.01, 1)), ct=2, ok=True, t_dispatch=0.0, t_send=0.0005):
    return {"rid": rid, "ok": ok, "output_text": text, "chunks": [list(c) for c in chunks], "completion_tokens": ct,
            "meta_info": {"completion_tokens": ct}, "t_dispatch": t_dispatch, "t_send": t_send, "t_end": 2.0}


def _emulator_text(rid: str, n: int, loop: bool) -> str:
    r = Request(rid=rid, prompt_tokens=8, max_new_tokens=n, loop=loop)
    r.add_tokens(n // 2, 0)
    r.add_tokens(n - n // 2, 0)
    return r.text


def test_repeated_ngram_share_known_values():
    assert repeated_ngram_share("a b c d e f g h") == 0.0
    # period-2 loop over 10 words, n=4: 7 four-grams, 2 distinct -> 1 - 2/7
    assert repeated_ngram_share("a b " * 5) == pytest.approx(1 - 2 / 7)
    assert repeated_ngram_share("a b c") is None  # too short to judge
    with pytest.raises(ValueError):
        repeated_ngram_share("a b", n=0)


def test_emulator_random_text_is_not_degenerate_and_loop_option_is():
    normal = [_rec(f"r{i}", _emulator_text(f"r{i}", 128, loop=False)) for i in range(8)]
    looping = [_rec(f"l{i}", _emulator_text(f"l{i}", 128, loop=True)) for i in range(8)]
    ok = degenerate_check(normal)
    bad = degenerate_check(looping)
    assert not ok["degenerate"] and ok["degenerate_fraction"] == 0.0 and ok["mean_repeated_ngram_share"] < 0.05
    assert bad["degenerate"] and bad["degenerate_fraction"] == 1.0 and bad["mean_repeated_ngram_share"] > 0.9
    # one looping output in eight is below the default 25 % run threshold, two in four above
    assert not degenerate_check(normal[:7] + looping[:1])["degenerate"]
    assert degenerate_check(normal[:2] + looping[:2], max_fraction=0.25)["degenerate"]


def test_degenerate_check_ignores_failed_and_short_outputs():
    out = degenerate_check([_rec("a", "x x x x x x x x", ok=False), _rec("b", "x y")])
    assert out["judged"] == 0 and out["degenerate_fraction"] is None and not out["degenerate"]


def test_token_accounting_mismatch_is_reported_with_rid():
    good = _rec("good", chunks=((1.0, 1), (1.1, 3)), ct=4)
    bad = _rec("bad", chunks=((1.0, 1), (1.1, 1)), ct=4)  # streamed 2, server says 4
    res = accounting_check([good, bad, _rec("failed", ok=False, ct=None)])
    assert not res["ok"] and res["checked"] == 2 and res["mismatch_count"] == 1
    assert res["mismatches"][0] == {"rid": "bad", "streamed": 2, "completion_tokens": 4}
    assert accounting_check([good])["ok"]
    warnings = hygiene_warnings([{"concurrency": 8, "repeat": 1, "hygiene": run_hygiene([good, bad])}], None)
    assert len(warnings) == 1 and "token accounting failed at c=8 repeat 1" in warnings[0]


def test_dispatch_delay_summary():
    recs = [_rec(str(i), t_dispatch=0.0, t_send=i * 0.001) for i in range(101)]
    s = dispatch_delay_summary(recs)
    assert s["p50_dispatch_delay_ms"] == pytest.approx(50.0)
    assert s["max_dispatch_delay_ms"] == pytest.approx(100.0)
    assert dispatch_delay_summary([])["p50_dispatch_delay_ms"] is None


def _icl_records(icl_ms: float, n: int):
    return [_rec(f"w{i}", chunks=[(k * icl_ms / 1e3, 1) for k in range(10)], ct=10) for i in range(n)]


def test_warmup_stops_when_icl_is_stable():
    icls = iter([40.0, 20.0, 12.1, 12.0, 12.05, 12.0, 12.0, 12.0])
    sent = []

    def send(i, n):
        sent.append(n)
        return _icl_records(next(icls), n)

    res = warmup_until_stable(send, batch=1, cv_threshold=0.05, window=3, max_requests=16, log=lambda s: None)
    assert res["stable"] is True and res["requests"] == 5  # 12.1, 12.0, 12.05 agree after request 5
    assert res["cv"] < 0.05 and len(res["icl_ms"]) == 5


def test_warmup_cap_marks_unstable():
    res = warmup_until_stable(lambda i, n: _icl_records([5.0, 50.0][i % 2], n), batch=2, cv_threshold=0.01,
                              window=3, max_requests=7, log=lambda s: None)
    assert res["stable"] is False and res["requests"] == 7 and res["batches"] == 4
    assert "warm-up not stable" in hygiene_warnings([], res)[0]
    none = warmup_until_stable(lambda i, n: [], batch=1, cv_threshold=0.05, window=2, max_requests=0, log=lambda s: None)
    assert none["stable"] is None and none["requests"] == 0


def test_coefficient_of_variation():
    assert coefficient_of_variation([10.0, 10.0, 10.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(2 ** 0.5 / 2)
    assert coefficient_of_variation([1.0]) != coefficient_of_variation([1.0])  # nan
    assert len(VOCAB) > 100


def test_level_that_never_refills_the_batch_is_flagged_once():
    runs = [{"concurrency": c, "repeat": i, "requests": n, "hygiene": {}}
            for c, n in ((1, 8), (8, 8), (16, 64)) for i in range(3)]
    warnings = hygiene_warnings(runs, None)
    assert len(warnings) == 1, warnings  # c=1 never drains; c=16 with 64 requests = 4 waves
    assert warnings[0].startswith("c=8: 8 requests per repeat") and "bench.num_prompts >= 32" in warnings[0]
    assert hygiene_warnings([{"concurrency": 8, "repeat": 0, "hygiene": {}}], None) == []  # count unknown


def test_dispatch_delay_warning_names_the_level_worst_repeat_and_fix():
    from lab.measure.hygiene import DISPATCH_DELAY_WARN_MS

    runs = [{"concurrency": 1, "repeat": i, "hygiene": {"p99_dispatch_delay_ms": d}} for i, d in enumerate((0.2, 0.3, 0.1))]
    runs += [{"concurrency": 8, "repeat": i, "hygiene": {"p99_dispatch_delay_ms": d}} for i, d in enumerate((3.0, 12.5, 7.0))]
    warnings = hygiene_warnings(runs, None)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("c=8: client dispatch delay p99 12.5 ms (repeat 1)")
    assert f"> {DISPATCH_DELAY_WARN_MS:g} ms" in warnings[0] and "Fix:" in warnings[0]
    assert hygiene_warnings([{"concurrency": 1, "repeat": 0, "hygiene": {"p99_dispatch_delay_ms": None}}], None) == []


def test_dispatch_delay_warning_from_records_of_a_busy_client():
    """From client records: a client that sent requests 20 ms after they were due is warned about."""
    recs = [{"t_dispatch": i * 1.0, "t_send": i * 1.0 + 0.020} for i in range(10)]
    runs = [{"concurrency": 2, "repeat": 0, "requests": 64, "hygiene": run_hygiene(recs)}]
    warnings = hygiene_warnings(runs, None)
    assert len(warnings) == 1 and "client dispatch delay p99 20.0 ms" in warnings[0]
