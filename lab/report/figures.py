"""Seaborn comparison figures. Every figure carries a caption naming the engine.

Bars and error bars are the comparison's own estimates (:func:`lab.analysis.estimates.group_estimates`,
:class:`EstimateBars`): the mean and the 95 % interval :mod:`lab.catalog` declares for the metric
(:func:`lab.analysis.stats.metric_ci`), over the repeats of one launch, or over the launch means with
``bench.launches`` >= 2, so a figure's error bar is the interval of the same metric in the summary
table; speedups carry the comparison's intervals. The caption says what the intervals span
(``summary["interval_note"]``) and, when two modes resolved to the same effective configuration,
says so.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from lab.analysis.estimates import group_estimates  # noqa: E402
from lab.atomic import savefig_atomic  # noqa: E402

__all__ = ["EstimateBars", "draw_all", "decode_tok_s_figure", "latency_figure", "accept_length_figure", "speedup_figure",
           "server_timing", "latency_labels"]


class EstimateBars:
    """A seaborn ``estimator`` / ``errorbar`` pair that draws each group's :class:`~lab.analysis.estimates.Estimate`
    (:func:`lab.analysis.estimates.group_estimates`) instead of recomputing it from the values seaborn groups.

    Seaborn passes each group's values as a Series indexed like the frame drawn; :attr:`data` is
    that frame (index ``0..n-1``) and each of its rows maps to the estimate of its group.

    :param data: the rows to draw (index reset here).
    :param per_row: the estimate of each row's group (None: no value), aligned with ``data``'s rows.
    """

    def __init__(self, data: pd.DataFrame, per_row: list[Any]):
        self.data = data.reset_index(drop=True)
        if len(per_row) != len(self.data):
            raise ValueError(f"EstimateBars: {len(per_row)} estimates for {len(self.data)} rows")
        self._per_row = per_row

    @classmethod
    def of(cls, data: pd.DataFrame, by: tuple[str, ...], metric: str) -> "EstimateBars":
        """Each row's estimate of ``metric`` over the rows sharing its ``by`` values (and split by
        ``launch`` when the frame has it, as the comparison does)."""
        data = data.reset_index(drop=True)
        rows = data.to_dict("records")
        ests = group_estimates(rows, by=by, metrics=[metric])
        return cls(data, [ests.get(tuple(r.get(k) for k in by), {}).get(metric) for r in rows])

    def _estimate(self, values: pd.Series):
        got = {id(e): e for i in values.index if (e := self._per_row[i]) is not None}
        if len(got) != 1:  # seaborn grouped rows of different estimates: the figure would mislead
            raise ValueError(f"EstimateBars: {len(got)} estimates for one drawn group (rows {list(values.index)})")
        return next(iter(got.values()))

    def mean(self, values: pd.Series) -> float:
        """Seaborn ``estimator``: the group's estimated mean."""
        return self._estimate(values).mean

    def interval(self, values: pd.Series) -> tuple[float, float]:
        """Seaborn ``errorbar``: the group's 95 % interval (the mean itself when it has none)."""
        e = self._estimate(values)
        return (e.mean, e.mean) if e.ci95_lo != e.ci95_lo or e.ci95_hi != e.ci95_hi else (e.ci95_lo, e.ci95_hi)


def caption(fig, summary: dict[str, Any]) -> None:
    """Engine caption (and the identical-configuration notice) under the axes."""
    paras = [summary.get("caption", "")] + [summary[k] for k in ("interval_note", "notice") if summary.get(k)]
    lines = [line for p in paras for line in textwrap.wrap(p, 125)]
    bottom = 0.02 + 0.032 * len(lines)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", ha="left", color="dimgray")


def _order(summary: dict[str, Any]) -> list[str]:
    return list(summary["modes"])


def _ci_bars(ax, bars: EstimateBars, y: str, hue: str, summary: dict[str, Any], **kwargs: Any) -> None:
    """Bars of ``y`` per mode (in params order) and ``hue``: the estimates' means, their 95 % intervals
    as whiskers (:class:`EstimateBars`), values inside."""
    sns.barplot(data=bars.data, x="mode", y=y, hue=hue, estimator=bars.mean, errorbar=bars.interval, capsize=0.1,
                ax=ax, order=_order(summary), **kwargs)
    for c in ax.containers:
        ax.bar_label(c, fmt="%.1f", fontsize=7, label_type="center", color="white")


def decode_tok_s_figure(runs: pd.DataFrame, summary: dict[str, Any]):
    """Per-request decode tok/s (median per run) by mode, one bar group per concurrency level
    (closed-loop points: ``runs`` as :func:`lab.report.sweep_figures.primary_runs` gives them)."""
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    _ci_bars(ax, EstimateBars.of(runs, ("mode", "concurrency"), "decode_tok_s"), "decode_tok_s", "concurrency",
             summary, palette="viridis")
    ax.set_ylabel("decode tok/s per request")
    ax.set_title("Decode throughput by mode (mean of repeats, 95 % CI)")
    ax.legend(title="concurrency", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    caption(fig, summary)
    return fig


#: Legend words of the latency figure's bars; ``{server}`` is :func:`server_timing` (never "GPU" for a
#: modelled engine's numbers).
LATENCY_LABELS = {"verify_ms": "verify ({server})", "draft_ms": "draft ({server})",
                  "decode_ms": "decode step ({server})", "cycle_ms": "cycle (client)"}


def server_timing(summary: dict[str, Any]) -> str:
    """Where the server-side bars' times come from, from the comparison's per-mode provenance
    (:func:`lab.engine.registry.provenance`: ``timing`` ``measured`` or ``modelled``): ``server, GPU``
    only when every mode was measured on a real server, ``server, modelled by the emulator`` when
    every mode was modelled, else (mixed, or no provenance recorded) ``server``."""
    timings = {str((p or {}).get("timing")) for p in (summary.get("provenance") or {}).values()}
    if timings == {"measured"}:
        return "server, GPU"
    if timings == {"modelled"}:
        return "server, modelled by the emulator"
    return "server"


def latency_labels(summary: dict[str, Any]) -> dict[str, str]:
    """:data:`LATENCY_LABELS` with this comparison's :func:`server_timing`."""
    server = server_timing(summary)
    return {k: v.format(server=server) for k, v in LATENCY_LABELS.items()}


def latency_figure(runs: pd.DataFrame, summary: dict[str, Any]):
    """Server-side verify, draft and decode step time, and client cycle time, at the lowest level."""
    lowest = runs["concurrency"].min()
    cols = [c for c in ("verify_ms", "draft_ms", "decode_ms", "cycle_ms") if c in runs]
    low = runs[runs["concurrency"] == lowest]
    ests = group_estimates(low, by=("mode",), metrics=cols)  # each phase by its own rule, as the tables
    long = low.melt(id_vars=["mode", "repeat"], value_vars=cols, var_name="metric", value_name="ms").dropna()
    long = long.reset_index(drop=True)
    per_row = [ests.get((m,), {}).get(c) for m, c in zip(long["mode"], long["metric"])]
    long["metric"] = long["metric"].map(latency_labels(summary))
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    _ci_bars(ax, EstimateBars(long, per_row), "ms", "metric", summary)
    ax.set_ylabel(f"ms per decode iteration, concurrency {lowest}")
    ax.set_title("Where a decode iteration's time goes (verify + draft = speculative cycle; 95 % CI)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    caption(fig, summary)
    return fig


def accept_length_figure(requests: pd.DataFrame, summary: dict[str, Any]):
    """Distribution of per-request accept length (completion tokens / verify calls) per speculative mode."""
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    data = requests.dropna(subset=["accept_length"]) if len(requests) else requests
    if len(data):
        # dodged bars: modes with the same acceptance model would hide each other as steps
        sns.histplot(data=data, x="accept_length", hue="mode", multiple="dodge", shrink=0.85, stat="count",
                     common_norm=False, bins=20, ax=ax)
        ax.set_xlabel("accept length per request (tokens per verify, incl. bonus token)")
    else:
        ax.text(0.5, 0.5, "no speculative mode in this comparison", ha="center", transform=ax.transAxes)
    ax.set_title("Accept length distribution")
    caption(fig, summary)
    return fig


def speedup_figure(summary: dict[str, Any]):
    """Speedup of decode tok/s over the baseline per mode and level, with Welch log-ratio 95 % CI."""
    rows = []
    for mode, levels in summary["modes"].items():
        for entry in levels.values():
            s = entry.get("speedup_decode_tok_s")
            if s:
                rows.append({"mode": mode, "concurrency": entry["concurrency"], **s})
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    if rows:
        df = pd.DataFrame(rows)
        modes = list(dict.fromkeys(df["mode"]))
        levels = sorted(df["concurrency"].unique())
        width = 0.8 / len(levels)
        for j, level in enumerate(levels):
            sub = df[df["concurrency"] == level].set_index("mode").reindex(modes)
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(modes))]
            err = [(sub["ratio"] - sub["ci95_lo"]).fillna(0), (sub["ci95_hi"] - sub["ratio"]).fillna(0)]
            ax.bar(xs, sub["ratio"], width=width, yerr=err, capsize=3, label=f"concurrency {level}",
                   color=sns.color_palette("viridis", len(levels))[j])
            for x, r, hi, v in zip(xs, sub["ratio"], sub["ci95_hi"].fillna(sub["ratio"]), sub["verdict"]):
                ax.text(x, hi + 0.02, f"{r:.2f}x\n{v or 'no verdict'}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(modes)), modes)
        ax.axhline(1.0, color="black", lw=1, ls="--")
        top = float(df["ci95_hi"].fillna(df["ratio"]).max())
        ax.set_ylim(0, max(top, 1.0) * 1.15)  # room for the value labels above the error bars
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no baseline mode to compare against", ha="center", transform=ax.transAxes)
    from lab.analysis.provenance import scope_of

    scopes = {scope_of(e.get("speedup_decode_tok_s"), summary, m) for m, lv in summary["modes"].items()
              for e in lv.values() if e.get("speedup_decode_tok_s")}
    ax.set_ylabel(f"decode tok/s speedup over {summary.get('baseline')}")
    ax.set_title(textwrap.fill("Speedup over plain decoding (1.0 = break-even; 95 % CI"  # a long scope wraps, not cut
                               + (f", {scopes.pop()})" if len(scopes) == 1 else ")"), 100), fontsize=10)
    caption(fig, summary)
    return fig


def draw_all(runs: pd.DataFrame, requests: pd.DataFrame, summary: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """Draw the four comparison figures to ``out_dir``; returns ``name -> png path``."""
    sns.set_theme(style="whitegrid", context="notebook")
    figs = {
        "decode_tok_s": decode_tok_s_figure(runs, summary),
        "latency_ms": latency_figure(runs, summary),
        "accept_length": accept_length_figure(requests, summary),
        "speedup": speedup_figure(summary),
    }
    paths = {}
    for name, fig in figs.items():
        path = out_dir / f"{name}.png"
        savefig_atomic(fig, path, dpi=110)
        plt.close(fig)
        paths[name] = str(path)
    return paths
