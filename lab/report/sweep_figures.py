"""Figures over sweeps: throughput vs concurrency, verify time vs context length, speedup heatmap.

Inputs are :func:`lab.analysis.comparison.runs_frame` (one row per mode x point x repeat, with
``concurrency``, ``context_tokens``, ``max_new_tokens``, ``point``) and the summary of
:func:`lab.analysis.comparison.summarize`. Lines and error bands are the comparison's estimates
(:class:`lab.report.figures.EstimateBars`: the mean and the interval :mod:`lab.catalog` declares, over
repeats or launch means). Every figure carries the engine caption.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from lab.report.figures import EstimateBars, caption  # noqa: E402

__all__ = ["primary_runs", "primary_summary", "throughput_vs_concurrency", "verify_vs_context", "speedup_heatmap"]


def primary_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows at the primary context/output length (point key ``c<N>``)."""
    if "point" not in runs or not len(runs):
        return runs
    return runs[runs["point"] == [f"c{int(c)}" for c in runs["concurrency"]]]


def primary_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with each mode's entries restricted to its primary points (``c<N>`` keys)."""
    return {**summary, "modes": {m: {k: e for k, e in lv.items() if k == f"c{e['concurrency']}"}
                                 for m, lv in summary["modes"].items()}}


def throughput_vs_concurrency(runs: pd.DataFrame, summary: dict[str, Any]):
    """Output tok/s (all requests together) vs concurrency, one line per mode, 95 % CI bands."""
    data = primary_runs(runs)
    fig, ax = plt.subplots(figsize=(9, 5.4))
    bars = EstimateBars.of(data, ("mode", "concurrency"), "output_tok_s")
    sns.lineplot(data=bars.data, x="concurrency", y="output_tok_s", hue="mode", style="mode", markers=True,
                 dashes=False, estimator=bars.mean, errorbar=bars.interval, ax=ax, hue_order=list(summary["modes"]))
    levels = sorted(data["concurrency"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tok/s, all requests")
    ax.set_title("Throughput vs concurrency per mode (mean of repeats, 95 % CI)")
    ax.legend(fontsize=7, ncol=2)
    caption(fig, summary)
    return fig


def verify_vs_context(runs: pd.DataFrame, summary: dict[str, Any]):
    """Server-side verify ms per cycle vs prompt (context) length at the lowest concurrency; None
    when the runs have one context length only (set ``bench.context_tokens``, e.g. ``[0, 8192]``):
    the report then shows no figure rather than an empty placeholder."""
    data = runs.dropna(subset=["verify_ms"]) if "verify_ms" in runs else runs.iloc[0:0]
    if "request_rate" in data:  # closed-loop points only (an open-loop rate point's concurrency is its cap, 0)
        data = data[data["request_rate"].isna()]
    if not (len(data) and "context_tokens" in data and data["context_tokens"].nunique() > 1):
        return None
    fig, ax = plt.subplots(figsize=(9, 5.4))
    low = data["concurrency"].min()
    out0 = data["max_new_tokens"].iloc[0] if "max_new_tokens" in data else None
    data = data[(data["concurrency"] == low) & ((data["max_new_tokens"] == out0) if out0 is not None else True)]
    bars = EstimateBars.of(data, ("mode", "context_tokens"), "verify_ms")
    sns.lineplot(data=bars.data, x="context_tokens", y="verify_ms", hue="mode", style="mode", markers=True,
                 dashes=False, estimator=bars.mean, errorbar=bars.interval, ax=ax)
    ax.set_xlabel(f"prompt length, tokens (approx.; 0 = the chat prompt as is), concurrency {low}")
    ax.legend(fontsize=7, ncol=2)
    ax.set_ylabel("target-verify ms per cycle (95 % CI)")
    ax.set_title("Verify cost vs context length (prefill- vs decode-mode attention)")
    caption(fig, summary)
    return fig


def speedup_heatmap(summary: dict[str, Any]):
    """Decode tok/s speedup over the baseline: rows = modes, columns = concurrency (primary points)."""
    rows = [{"mode": mode, "concurrency": e["concurrency"], "speedup": e["speedup_decode_tok_s"]["ratio"],
             "verdict": e["speedup_decode_tok_s"]["verdict"]}
            for mode, levels in summary["modes"].items() for key, e in levels.items()
            if "speedup_decode_tok_s" in e and key == f"c{e['concurrency']}"]
    n = len({r["mode"] for r in rows})
    fig, ax = plt.subplots(figsize=(8.5, 2.2 + 0.42 * max(n, 1)))
    if rows:
        df = pd.DataFrame(rows)
        grid = df.pivot(index="mode", columns="concurrency", values="speedup")
        grid = grid.reindex([m for m in summary["modes"] if m in grid.index])
        mark = {"faster": "+", "slower": "-", "not distinguishable": "~"}
        annot = df.assign(txt=[f"{s:.2f}x {mark.get(v, '')}".rstrip() for s, v in zip(df["speedup"], df["verdict"])]) \
            .pivot(index="mode", columns="concurrency", values="txt").reindex(grid.index)
        span = max(abs(grid.max().max() - 1), abs(1 - grid.min().min()), 0.05)
        sns.heatmap(grid, annot=annot, fmt="", cmap="RdBu", center=1.0, vmin=1 - span, vmax=1 + span,
                    cbar_kws={"label": "speedup"}, ax=ax, linewidths=0.5)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("")
        ax.tick_params(axis="y", labelrotation=0)
    else:
        ax.text(0.5, 0.5, "no baseline to compare against", ha="center", transform=ax.transAxes)
    ax.set_title(f"Decode tok/s speedup over {summary.get('baseline')} "
                 "(+ faster, - slower, ~ not distinguishable: 95 % Welch log-ratio CI)", fontsize=9)
    caption(fig, summary)
    return fig
