"""lab.report.answer: the few lines `dvc repro` ends with, and that report.html, summary.md and
`lab summary` open with."""

from __future__ import annotations

import math

from lab.report.answer import answer_html, answer_speedups, answer_markdown, answer_text, group_warnings


def _sp(r, lo, hi, v):
    return {"ratio": r, "ci95_lo": lo, "ci95_hi": hi, "verdict": v}


COMP = {
    "baseline": "baseline",
    "caption": "engine: emulator. Not a GPU measurement.",
    "notice": None,
    "modes": {
        "baseline": {"c1": {"concurrency": 1}, "c8": {"concurrency": 8}},
        "eagle3_prefill": {
            "c1": {"concurrency": 1, "accept_length": {"mean": 1.86}, "verify_ms": {"mean": 29.04},
                   "speedup_decode_tok_s": _sp(0.756, 0.75, 0.76, "slower"),
                   "speedup_output_tok_s": _sp(0.75, 0.74, 0.75, "slower")},
            "c8": {"concurrency": 8, "accept_length": {"mean": 1.86}, "verify_ms": {"mean": 31.0},
                   "speedup_decode_tok_s": _sp(0.73, 0.70, 0.76, "slower"),
                   "speedup_output_tok_s": _sp(0.68, math.nan, math.nan, "slower")},
            "c8_ctx4096_out64": {"concurrency": 8, "speedup_decode_tok_s": _sp(9.0, 8.0, 10.0, "faster")},
        },
        "eagle3_decode": {
            "c1": {"concurrency": 1, "accept_length": {"mean": 1.86}, "verify_ms": {"mean": 18.3},
                   "speedup_decode_tok_s": _sp(1.17, 1.16, 1.18, "faster"),
                   "speedup_output_tok_s": _sp(1.0, 0.98, 1.01, "not distinguishable")},
        },
    },
    "warnings": {"baseline": ["c=8: one wave"], "eagle3_prefill": ["c=8: one wave", "looping output"],
                 "eagle3_decode": ["c=8: one wave"]},
}


def test_text_states_each_mode_and_concurrency_with_interval_and_verdict():
    text = answer_text(COMP, "reports/report.html")
    lines = text.splitlines()
    assert lines[0] == "Does EAGLE-3 beat plain decoding here? Speedup over baseline [95 % CI] per concurrency:"
    assert ("    c1: decode tok/s 0.76x [0.75, 0.76] slower, output tok/s 0.75x [0.74, 0.75] slower; "
            "accept length 1.86, verify 29.0 ms") in lines
    assert "    c8: decode tok/s 0.73x [0.70, 0.76] slower, output tok/s 0.68x slower; accept length 1.86, verify 31.0 ms" in lines
    assert "output tok/s 1.00x [0.98, 1.01] not distinguishable" in text
    assert "9.00x" not in text  # an off-primary point (context/output axis) is the table's, not the answer's
    assert "  baseline:" not in lines  # the reference has no speedup line
    assert lines[-1] == "  Report: reports/report.html"
    assert len(lines) <= 12


def test_a_warning_shared_by_modes_appears_once_naming_them():
    assert group_warnings(COMP["warnings"]) == [(["baseline", "eagle3_prefill", "eagle3_decode"], "c=8: one wave"),
                                                (["eagle3_prefill"], "looping output")]
    for render in (answer_text, answer_markdown, answer_html):
        out = render(COMP)
        assert out.count("c=8: one wave") == 1, render
        assert "baseline, eagle3_prefill, eagle3_decode" in out


def test_markdown_and_html_carry_the_same_speedups():
    md, page = answer_markdown(COMP, "report.html"), answer_html(COMP)
    for s in ("0.76x [0.75, 0.76] slower", "1.17x [1.16, 1.18] faster", "verify 18.3 ms"):
        assert s in md and s in page
    assert "<script" not in answer_html({**COMP, "warnings": {"m": ["<script>x</script>"]}})  # escaped


def test_no_baseline_says_so():
    out = answer_text({"baseline": None, "modes": {"a": {"c1": {"concurrency": 1}}}})
    assert out.startswith("No baseline mode in this comparison")
    assert "no speedup" in out


def test_what_the_answer_states_comes_from_the_catalog(monkeypatch):
    """A metric the catalog shows in the answer adds its speedup (or, without one, its mean)."""
    from lab import catalog

    extra = catalog.Metric("p90_ttft_ms", "TTFT p90", "ms", "client", shown=frozenset({catalog.ANSWER}),
                           speedups=("welch",))
    mean = catalog.Metric("p99_itl_ms", "ITL p99", "ms", "client", shown=frozenset({catalog.ANSWER}))
    monkeypatch.setitem(catalog.METRICS, extra.name, extra)
    monkeypatch.setitem(catalog.METRICS, mean.name, mean)
    assert ("speedup_p90_ttft_ms", "TTFT p90 ms") in answer_speedups()
    comp = {**COMP, "modes": {"b": {"c1": {"concurrency": 1, "speedup_p90_ttft_ms": _sp(1.2, 1.1, 1.3, "faster"),
                                           "p99_itl_ms": {"mean": 23.04}}}}}
    out = answer_text(comp)
    assert "TTFT p90 ms 1.20x [1.10, 1.30] faster" in out and "ITL p99 23.0 ms" in out
