"""lab.report.answer: the few lines `dvc repro` ends with, and that report.html, summary.md and
`lab summary` open with."""

from __future__ import annotations

import math

from lab.report.answer import WIDTH, answer_html, answer_speedups, answer_markdown, answer_text, group_warnings


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


def test_text_opens_with_one_actionable_line_per_mode_then_the_detail():
    text = answer_text(COMP, "reports/report.html")
    lines = text.splitlines()
    assert lines[0] == "Does EAGLE-3 beat plain decoding here? decode tok/s speedup over baseline [95 % CI]:"
    # one line per speculative mode: verdict, interval and its scope at the lowest point, then the others
    assert lines[1] == "  eagle3_prefill: 0.76x slower at c1 [0.75, 0.76], within one launch; slower at c8 (0.73x)"
    assert lines[2] == "  eagle3_decode: 1.17x faster at c1 [1.16, 1.18], within one launch"
    assert lines[3].startswith("Detail per point (the verdict is the per-repeat interval")
    detail = " ".join(ln.strip() for ln in lines[3:])
    # one verdict per point: the Welch one; the other speedups beside it carry no verdict word
    assert ("c1: decode tok/s 0.76x [0.75, 0.76] slower, within one launch (output tok/s 0.75x [0.74, 0.75]); "
            "accept length 1.86, verify 29.0 ms") in detail
    assert "c8: decode tok/s 0.73x [0.70, 0.76] slower, within one launch (output tok/s 0.68x)" in detail
    assert "output tok/s 1.00x [0.98, 1.01])" in detail and "not distinguishable" not in detail
    assert "9.00x" not in text  # an off-primary point (context/output axis) is the table's, not the answer's
    assert "  baseline:" not in lines  # the reference has no speedup line
    assert lines[-1] == "  Report: reports/report.html"
    assert max(len(ln) for ln in lines) <= WIDTH


def test_paired_estimate_is_beside_the_verdict_never_a_second_verdict():
    comp = {"baseline": "b", "modes": {"b": {"c8": {"concurrency": 8}}, "m": {"c8": {
        "concurrency": 8, "speedup_decode_tok_s": _sp(1.10, 0.99, 1.22, "not distinguishable"),
        "paired_speedup_decode_tok_s": _sp(1.11, 1.03, 1.19, "faster")}}}}
    text = answer_text(comp)
    assert "m: 1.10x not distinguishable at c8 [0.99, 1.22], within one launch" in text
    assert "(paired per prompt 1.11x [1.03, 1.19])" in text and "faster" not in text
    # issue 32, item 5: they disagree, so the point's line says which one it used and why, once
    flat = " ".join(text.split())
    assert flat.count("the word is the per-repeat interval's, not the paired one's (which lies above 1)") == 1
    assert "declared before the run (lab.catalog.VERDICT_SPEEDUP)" in flat
    agree = {"baseline": "b", "modes": {"b": {"c8": {"concurrency": 8}}, "m": {"c8": {
        "concurrency": 8, "speedup_decode_tok_s": _sp(1.10, 1.02, 1.22, "faster"),
        "paired_speedup_decode_tok_s": _sp(1.11, 1.03, 1.19, "faster")}}}}
    assert "not the paired one" not in answer_text(agree)


def test_interval_scope_comes_from_the_launch_fields_when_present():
    """The launch-aware comparison labels its intervals (``scope`` or ``launches`` on the speedup,
    or ``launches`` per mode on the comparison); without them the label is "within one launch"."""
    from lab.analysis.provenance import scope_of

    assert scope_of(_sp(1, 1, 1, "x"), {}, "m") == "within one launch"
    assert scope_of({**_sp(1, 1, 1, "x"), "launches": 3}, {}, "m") == "across 3 launches"
    assert scope_of({**_sp(1, 1, 1, "x"), "scope": "within one launch; launch spread of 4 earlier launches"}, {},
                    "m") == "within one launch; launch spread of 4 earlier launches"
    assert scope_of(_sp(1, 1, 1, "x"), {"launches": {"m": 2}}, "m") == "across 2 launches"
    comp = {**COMP, "launches": 3}
    assert "  eagle3_decode: 1.17x faster at c1 [1.16, 1.18], across 3 launches" in answer_text(comp).splitlines()


def test_every_line_fits_in_120_columns_even_for_long_names_and_sentences():
    long_mode = "sw_s3_k1_d4_prefill_backend_flashinfer"
    comp = {**COMP, "modes": {**COMP["modes"], long_mode: {
        f"c{c}": {"concurrency": c, "accept_length": {"mean": 2.0}, "verify_ms": {"mean": 20.0},
                  "speedup_decode_tok_s": _sp(1.0 + c / 100, 0.9, 1.2, "not distinguishable"),
                  "paired_speedup_decode_tok_s": _sp(1.0, 0.95, 1.05, "not distinguishable"),
                  "speedup_output_tok_s": _sp(0.9, 0.8, 1.0, "not distinguishable")} for c in (1, 2, 4, 8, 16, 32)}},
            "warnings": {long_mode: ["a long warning " * 30]},
            "caption": "engine: emulator " * 20, "notice": "two modes resolved the same " * 10,
            "crosscheck": {long_mode: {"c8": {"count": 3, "repeats": [0, 1], "max_disagreement": 0.21,
                                              "checks": ["client cycle vs GPU time"]}}}}
    text = answer_text(comp, "/home/someone/checkouts/eagle-verify-lab/.dvc/tmp/exps/tmpabcdef/reports/report.html")
    assert max(len(ln) for ln in text.splitlines()) <= WIDTH, max(text.splitlines(), key=len)
    assert f"{long_mode}: 1.01x not distinguishable at c1 [0.90, 1.20], within one launch" in text
    assert "c8: 3 flags in 2 repeats, up to 21 % (client cycle vs GPU time)" in " ".join(text.split())


def test_a_warning_shared_by_modes_appears_once_naming_them():
    assert group_warnings(COMP["warnings"]) == [(["baseline", "eagle3_prefill", "eagle3_decode"], "c=8: one wave"),
                                                (["eagle3_prefill"], "looping output")]
    for render in (answer_text, answer_markdown, answer_html):
        out = render(COMP)
        assert out.count("c=8: one wave") == 1, render
        assert "baseline, eagle3_prefill, eagle3_decode" in out


def test_markdown_and_html_carry_the_same_speedups():
    md, page = answer_markdown(COMP, "report.html"), answer_html(COMP)
    for s in ("0.76x [0.75, 0.76] slower", "1.17x faster at c1 [1.16, 1.18]", "verify 18.3 ms"):
        assert s in md and s in page
    assert "<script" not in answer_html({**COMP, "warnings": {"m": ["<script>x</script>"]}})  # escaped


def test_no_baseline_says_so():
    out = answer_text({"baseline": None, "modes": {"a": {"c1": {"concurrency": 1}}}})
    assert out.startswith("No baseline mode in this comparison")
    assert "  a: c1" in out


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
    assert "TTFT p90 ms 1.20x [1.10, 1.30])" in out and "ITL p99 23.0 ms" in out


def test_headline_file_fits_its_dvc_column_whatever_the_verdict():
    """reports/headline/<mode>.json's headline is no wider than the column header `dvc exp show`
    gives it, for every verdict and up to 9 launches, so README's command fits 120 columns."""
    from lab.report.tables import headline_record

    header = len("reports/headline/eagle3_decode.json:headline")
    for verdict in ("faster", "slower", "not distinguishable", None):
        for launches in (1, 9):
            sp = {"ratio": 1.2345, "ci95_lo": 0.9876, "ci95_hi": 1.5234, "verdict": verdict,
                  "scope": "within one launch" if launches == 1 else f"across {launches} launches",
                  "unit": "repeat" if launches == 1 else "launch", "n_units": [3, 3] if launches == 1 else [launches] * 2}
            comparison = {"baseline": "baseline", "modes": {"eagle3_decode": {"c1": {
                "concurrency": 1, "speedup_decode_tok_s": sp}}}}
            rec = headline_record(comparison, "eagle3_decode")
            assert len(rec["headline"]) <= header, rec
            assert rec["headline"].startswith("1.23x [0.99, 1.52] ")
            if verdict == "not distinguishable":
                assert " inconclusive, " in rec["headline"]  # the interval includes 1, said short


def test_headline_scope_words_come_from_the_launch_count_the_scope_carries():
    """headline/<mode>.json says "N launches" from the estimator's launch count (unit "launch",
    n_units: the smaller of the two modes), "1 launch" within one launch or with an assumed spread, and
    keeps a borrowed spread's label; the printed scope string is never parsed for its number."""
    from lab.analysis.estimates import Ratio, Scope
    from lab.report.tables import headline_record

    def head(**sp):
        comparison = {"baseline": "baseline", "modes": {"eagle3_decode": {"c1": {
            "concurrency": 1, "speedup_decode_tok_s": {"ratio": 1.2, "ci95_lo": 1.1, "ci95_hi": 1.3,
                                                       "verdict": "faster", **sp}}}}}
        return headline_record(comparison, "eagle3_decode")["headline"]

    assert head(scope="across 3 launches", unit="launch", n_units=[4, 3]).endswith("faster, 3 launches")
    assert head(scope="within one launch", unit="repeat", n_units=[3, 3]).endswith("faster, 1 launch")
    assert head(scope="launch spread assumed: 2.2 % CV (documented, 14 launches)", unit="repeat",
                assumed_launch_cv=0.022).endswith(", 1 launch")
    borrowed = "launch spread borrowed from 5 earlier launches"
    assert head(scope=borrowed, earlier_launches=[5, 5]).endswith(f", {borrowed}")
    assert head(launches=4).endswith(", 4 launches")  # no scope string: the entry's launch count
    assert Ratio(1.2, 1.1, 1.3, "faster", {"unit": "launch", "n_units": [2, 5]},
                 scope="across 2 launches").scope_data() == Scope("across", 2, "across 2 launches")
    assert Scope.across(1) == Scope("within", 1, "within one launch")
