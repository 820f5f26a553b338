"""lab.analysis.crossover: where the verdict flips along the context axis (issue 30, item 4).

A summary built from known linear costs (verify growing 0.6 ms per 1k tokens of context, decode
0.05 ms) has its break-even crossover where ``a * decode(T) = draft + verify(T)``; the
interpolated crossover must land there, the line must name the backends, the intervals either
side and the accept length, and the map figure must be drawn."""

from __future__ import annotations

import pytest

from lab.analysis.crossover import break_even_map_figure, crossovers, interpolate_crossing

ACC, DRAFT = 1.85, 0.9


def _decode(t):
    return 12.0 + 0.05 * t / 1000


def _verify(t):
    return 18.3 + 0.6 * t / 1000


def _est(m, half=0.01):
    return {"mean": m, "ci95_lo": m - half, "ci95_hi": m + half}


def _summary(contexts=(0, 2048, 4096, 8192)):
    base, spec = {}, {}
    for i, t in enumerate(contexts):
        key = "c1" if i == 0 else f"c1_ctx{t}_out64"
        common = {"concurrency": 1, "context_tokens": t, "max_new_tokens": 64}
        base[key] = {**common, "decode_ms": _est(_decode(t))}
        r = ACC * _decode(t) / (DRAFT + _verify(t))
        spec[key] = {**common, "verify_ms": _est(_verify(t)), "draft_ms": _est(DRAFT), "accept_length": _est(ACC),
                     "verify_backend": "triton", "draft_backend": "triton",
                     "speedup_decode_tok_s": {"ratio": r, "ci95_lo": r - 0.02, "ci95_hi": r + 0.02,
                                              "verdict": "faster" if r - 0.02 > 1 else "slower" if r + 0.02 < 1
                                              else "not distinguishable"}}
    base["c8"] = {"concurrency": 8, "context_tokens": 0, "max_new_tokens": 64, "decode_ms": _est(13.0)}
    return {"baseline": "baseline", "modes": {"baseline": base, "eagle3_decode": spec}}


def test_crossover_matches_the_costs_it_was_built_from():
    truth = (ACC * 12.0 - DRAFT - 18.3) / (0.6 - ACC * 0.05) * 1000  # a*decode(T) = draft + verify(T)
    [x] = crossovers(_summary())
    assert x.mode == "eagle3_decode" and x.concurrency == 1 and [p.context_tokens for p in x.points] == [0, 2048, 4096, 8192]
    flips = [f for f in x.flips if f["from"].verdict == "faster"]
    assert flips, x.flips
    f = flips[0]
    assert f["from"].context_tokens <= truth <= f["to"].context_tokens
    # costs linear in context: the break-even interpolation is exact, the ratio's close
    assert f["break_even_tokens"] == pytest.approx(truth, rel=1e-6)
    assert f["measured_tokens"] == pytest.approx(truth, rel=0.05)
    line = x.to_dict()["line"]
    assert line.startswith("eagle3_decode (verify on triton, draft on triton; concurrency 1) is faster up to about")
    assert "accept length 1.85 [1.84, 1.86]" in line and "slower" in line
    assert break_even_map_figure([x]) is not None


def test_no_crossover_is_said_and_one_context_gives_no_axis():
    s = _summary(contexts=(0, 1024))
    [x] = crossovers(s)
    assert not x.flips and "no crossover in the measured range" in x.to_dict()["line"]
    assert crossovers(_summary(contexts=(0,))) == []
    assert break_even_map_figure([]) is None


def test_interpolate_crossing():
    assert interpolate_crossing(0, 1.2, 1000, 0.8, 1.0) == pytest.approx(500)
    assert interpolate_crossing(0, 1.2, 1000, 1.1, 1.0) is None
    assert interpolate_crossing(0, 1.0, 1000, 1.0, 1.0) is None


def test_context_reaches_the_dvc_headline_and_the_answer():
    """The DVC headline carries the verdict speedup at each other context length
    (``speedup_ctx<T>``), and the answer (``lab summary``, summary.md) the crossover line, also
    from a comparison.json that has no ``crossover`` yet."""
    from lab.report.answer import answer_text, build_answer
    from lab.report.tables import headline_record

    s = _summary()
    rec = headline_record(s, "eagle3_decode")
    assert rec["point"] == "c1" and set(k for k in rec if k.startswith("speedup_ctx")) == {
        "speedup_ctx2048", "speedup_ctx4096", "speedup_ctx8192"}
    assert rec["speedup_ctx8192"] < 1 < rec["speedup"]
    assert not any(k.startswith("speedup_ctx") for k in headline_record(_summary(contexts=(0,)), "eagle3_decode"))
    a = build_answer(s)
    assert a.crossover["eagle3_decode"].startswith("eagle3_decode (verify on triton, draft on triton")
    text = " ".join(answer_text(s).split())  # unwrapped
    assert "context: eagle3_decode (verify on triton" in text and "tokens of context" in text


def test_break_even_sentence_names_the_backend_next_to_each_number():
    from lab.analysis.theory import ModeCosts, explain
    from lab.report.html import _backend_sentence

    s = _summary()
    text = explain(ModeCosts("eagle3_decode", 1, 12.0, 0.9, 18.3, 1.85, 1.84, 1.86, 3))
    out = _backend_sentence(text, s, "eagle3_decode")
    assert "0.9 ms draft (triton) + 18.3 ms verify (triton) against a 12.0 ms decode step" in out
    assert out.startswith("eagle3_decode (concurrency 1)")
