"""The report's figures checked by what they draw (the matplotlib Figure objects the report code
builds): each series, its error bars against the intervals the statistics give, its labels and
the engine caption; never by the size of a PNG."""

from __future__ import annotations


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from lab.analysis import stats  # noqa: E402
from lab.report import figures, sweep_figures  # noqa: E402

CAPTION = "engine: emulator (profile x). Modelled step costs. Not a GPU measurement."
MODES = ("base", "spec")
DECODE = {("base", 1): [82.0, 82.5, 81.5], ("base", 8): [77.0, 76.0, 78.0],
          ("spec", 1): [95.0, 90.0, 100.0], ("spec", 8): [84.0, 80.0, 88.0]}


def _runs(contexts=(0,)) -> pd.DataFrame:
    rows = []
    for (mode, c), vals in DECODE.items():
        for ctx in contexts:
            for k, v in enumerate(vals):
                rows.append({"mode": mode, "concurrency": c, "repeat": k, "point": f"c{c}" if ctx == contexts[0]
                             else f"c{c}_ctx{ctx}_out64", "context_tokens": ctx, "max_new_tokens": 64,
                             "decode_tok_s": v, "output_tok_s": v * c * 0.9, "cycle_ms": 1000 / v,
                             "verify_ms": None if mode == "base" else 18.0 + k + ctx / 1000,
                             "draft_ms": None if mode == "base" else 1.2 + 0.1 * k,
                             "decode_ms": 12.0 + 0.1 * k if mode == "base" else None, "request_rate": None})
    return pd.DataFrame(rows)


def _sp(r, lo, hi, v):
    return {"ratio": r, "ci95_lo": lo, "ci95_hi": hi, "verdict": v}


SPEEDUPS = {1: _sp(1.16, 1.04, 1.30, "faster"), 8: _sp(1.10, 0.99, 1.22, "not distinguishable")}


def _summary() -> dict:
    return {"baseline": "base", "caption": CAPTION, "notice": None,
            "modes": {"base": {f"c{c}": {"concurrency": c} for c in (1, 8)},
                      "spec": {f"c{c}": {"concurrency": c, "speedup_decode_tok_s": SPEEDUPS[c]} for c in (1, 8)}}}


def _caption_text(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts).replace("\n", " ")


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_decode_bars_are_the_means_with_t_interval_whiskers_and_labels():
    fig = figures.decode_tok_s_figure(_runs(), _summary())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(MODES)  # params order
    levels = [int(t.get_text()) for t in ax.get_legend().get_texts()]  # hue order = container order
    by_level = {lv: list(c.datavalues) for lv, c in zip(levels, ax.containers)}
    for level in (1, 8):
        assert by_level[level] == pytest.approx([np.mean(DECODE[(m, level)]) for m in MODES])
    # the whiskers are the 95 % t-intervals over repeats, not seaborn's bootstrap
    whiskers = sorted((round(float(np.nanmin(ln.get_ydata())), 6), round(float(np.nanmax(ln.get_ydata())), 6))
                      for ln in ax.lines)  # one line per whisker, caps included
    want = sorted((round(lo, 6), round(hi, 6)) for lo, hi in
                  (stats.mean_ci(v)[1:] for v in DECODE.values()))
    assert [b for w in whiskers for b in w] == pytest.approx([b for w in want for b in w])
    assert ax.get_legend().get_title().get_text() == "concurrency"
    assert levels == [1, 8]
    assert "95 % CI" in ax.get_title() and ax.get_ylabel() == "decode tok/s per request"
    assert "Not a GPU measurement" in _caption_text(fig)


def test_latency_bars_name_each_phase_in_words():
    fig = figures.latency_figure(_runs(), _summary())
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["verify (server)", "draft (server)", "decode step (server)", "cycle (client)"]  # no provenance
    verify = ax.containers[labels.index("verify (server)")]  # hue order = container order
    # one verify bar, over the speculative mode (x = 1: params order), the baseline has none
    assert [round(p.get_x() + p.get_width() / 2) for p in verify.patches] == [1]
    assert list(verify.datavalues) == pytest.approx([np.mean([18.0, 19.0, 20.0])])  # at the lowest level
    cycle = ax.containers[labels.index("cycle (client)")]
    assert list(cycle.datavalues) == pytest.approx([np.mean([1000 / v for v in DECODE[(m, 1)]]) for m in MODES])
    assert "concurrency 1" in ax.get_ylabel()


@pytest.mark.parametrize("timings, server", [
    (("modelled", "modelled"), "server, modelled by the emulator"),
    (("measured", "measured"), "server, GPU"),
    (("measured", "modelled"), "server"),  # mixed engines: the caption says which is which
])
def test_an_emulated_bar_is_never_labelled_gpu(timings, server):
    """Issue 34 item 6: the server-side bars say "GPU" only when every mode ran on a real server."""
    summary = {**_summary(), "provenance": {m: {"engine": "x", "timing": t} for m, t in zip(MODES, timings)}}
    fig = figures.latency_figure(_runs(), summary)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [f"verify ({server})", f"draft ({server})", f"decode step ({server})", "cycle (client)"]
    assert ("GPU" in " ".join(labels)) == (set(timings) == {"measured"})


def test_speedup_bars_error_bars_and_verdicts_are_the_comparisons():
    fig = figures.speedup_figure(_summary())
    ax = fig.axes[0]
    bars = [c for c in ax.containers if hasattr(c, "errorbar")]
    assert [c.get_label() for c in bars] == ["concurrency 1", "concurrency 8"]
    for c, level in zip(bars, (1, 8)):
        s = SPEEDUPS[level]
        assert [p.get_height() for p in c.patches] == pytest.approx([s["ratio"]])
        (seg,), = [lc.get_segments() for lc in c.errorbar.lines[2]]
        assert (seg[0][1], seg[1][1]) == pytest.approx((s["ci95_lo"], s["ci95_hi"]))
    texts = {t.get_text() for t in ax.texts}
    assert {"1.16x\nfaster", "1.10x\nnot distinguishable"} <= texts
    assert any(ln.get_ydata()[0] == 1.0 for ln in ax.lines)  # the break-even line
    assert "within one launch" in ax.get_title()
    empty = figures.speedup_figure({**_summary(), "modes": {"base": {"c1": {"concurrency": 1}}}})
    assert "no baseline mode to compare against" in {t.get_text() for t in empty.axes[0].texts}


def test_verify_vs_context_is_not_drawn_without_a_second_context_length():
    assert sweep_figures.verify_vs_context(_runs(), _summary()) is None
    fig = sweep_figures.verify_vs_context(_runs(contexts=(0, 8192)), _summary())
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.lines if len(ln.get_xdata()) == 2]  # the speculative mode only: base has no verify
    assert list(line.get_xdata()) == [0, 8192]
    assert list(line.get_ydata()) == pytest.approx([19.0, 19.0 + 8.192])
    assert "concurrency 1" in ax.get_xlabel()


def test_heatmap_cells_are_the_speedups_with_their_verdict_marks():
    fig = sweep_figures.speedup_heatmap(_summary())
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"1.16x +", "1.10x ~"} <= texts
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["spec"]


def test_throughput_lines_one_per_mode_over_concurrency():
    fig = sweep_figures.throughput_vs_concurrency(_runs(), _summary())
    ax = fig.axes[0]
    lines = dict(zip(MODES, [ln for ln in ax.lines if len(ln.get_xdata()) == 2]))  # hue order
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(MODES)
    for mode in MODES:
        assert list(lines[mode].get_ydata()) == pytest.approx(
            [np.mean(DECODE[(mode, c)]) * c * 0.9 for c in (1, 8)])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8"]


def test_pareto_figure_draws_points_frontiers_and_keys():
    from lab.report.load_figures import pareto_figure

    rows = pd.DataFrame([
        {"mode": "base", "point": "c1", "kind": "concurrency", "output_tok_s_per_user": 80, "output_tok_s": 80, "on_frontier": True},
        {"mode": "base", "point": "c8", "kind": "concurrency", "output_tok_s_per_user": 70, "output_tok_s": 560, "on_frontier": True},
        {"mode": "spec", "point": "c1", "kind": "concurrency", "output_tok_s_per_user": 92, "output_tok_s": 91, "on_frontier": True},
        {"mode": "spec", "point": "r4", "kind": "rate", "output_tok_s_per_user": 60, "output_tok_s": 50, "on_frontier": False}])
    fig = pareto_figure(rows[rows["mode"] == "spec"], rows[rows["mode"] == "base"], "spec", caption=CAPTION,
                        baseline="base")
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert list(lines["base frontier"].get_xdata()) == [70, 80] and lines["base frontier"].get_linestyle() == "--"
    assert list(lines["spec frontier"].get_xdata()) == [92]  # r4 is dominated: off the frontier
    offsets = np.vstack([c.get_offsets() for c in ax.collections])
    assert sorted(map(tuple, offsets.tolist())) == [(60.0, 50.0), (92.0, 91.0)]
    assert {t.get_text() for t in ax.texts} == {"c1", "r4"}
    assert "Not a GPU measurement" in _caption_text(fig)


def test_break_even_lines_and_measured_points():
    from lab.analysis import theory

    costs = [theory.ModeCosts(mode="spec", concurrency=1, decode_ms=12.0, draft_ms=1.0, verify_ms=29.0,
                              accept_length=1.84, accept_lo=1.6, accept_hi=2.08, max_accept=3,
                              measured_speedup=0.74, verdict="slower")]
    fig = theory.break_even_figure(costs, CAPTION)
    ax = fig.axes[0]
    be = costs[0].break_even
    assert be == pytest.approx(30.0 / 12.0)
    assert any(list(ln.get_xdata()) == pytest.approx([be, be]) for ln in ax.lines)  # the break-even marker
    assert any(ln.get_label().startswith("spec") for ln in ax.lines)
    assert "Not a GPU measurement" in _caption_text(fig)


def test_a_figures_error_bar_is_the_summary_rows_interval_for_the_same_metric():
    """The bars and whiskers are :func:`lab.analysis.estimates.group_estimates`' estimates, the same
    as the summary table's: the catalog's rule (a throughput's interval never goes below 0, where a
    bare t-interval over [1, 50, 100] would) and launch means as units with two launches."""
    from lab.analysis.comparison import summarize

    rows = []
    for mode, c, launches in (("base", 1, {1: [1.0, 50.0, 100.0]}), ("base", 8, {1: [70.0, 72.0, 75.0]}),
                              ("spec", 1, {1: [90.0, 91.0, 92.0], 2: [60.0]}),  # two launches, unequal repeats
                              ("spec", 8, {1: [80.0, 84.0, 88.0]})):
        for la, vals in launches.items():
            for k, v in enumerate(vals):
                rows.append({"mode": mode, "launch": la, "concurrency": c, "point": f"c{c}", "repeat": k,
                             "decode_tok_s": v, "output_tok_s": v * c})
    runs = pd.DataFrame(rows)
    summary = summarize({"base": {}, "spec": {}}, runs, "base")
    want = {(r["mode"], r["concurrency"]): (r["decode_tok_s_mean"], r["decode_tok_s_ci95_lo"], r["decode_tok_s_ci95_hi"])
            for r in summary["rows"]}
    assert want[("base", 1)][1] == 0.0 and stats.mean_ci([1.0, 50.0, 100.0])[1] < 0  # the rules differ here
    assert want[("spec", 1)][0] == pytest.approx(np.mean([91.0, 60.0]))  # launch means, not the 4 repeats
    fig = figures.decode_tok_s_figure(runs, summary)
    ax = fig.axes[0]
    levels = [int(t.get_text()) for t in ax.get_legend().get_texts()]
    seen = 0
    for level, container in zip(levels, ax.containers):
        for p in container.patches:
            x = p.get_x() + p.get_width() / 2
            mean, lo, hi = want[(MODES[round(x)], level)]
            assert p.get_height() == pytest.approx(mean)
            whisker = [ln for ln in ax.lines if np.allclose(np.nanmean(ln.get_xdata()), x)]
            ys = np.concatenate([ln.get_ydata() for ln in whisker])
            assert (float(np.nanmin(ys)), float(np.nanmax(ys))) == pytest.approx((lo, hi))
            seen += 1
    assert seen == 4
