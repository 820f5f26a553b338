"""Pareto figures: tokens/s per user against total output tokens/s, one figure per mode.

Every measured point of a mode (closed-loop concurrency levels ``c<N>`` and open-loop
request rates ``r<R>``) is a marker at its mean over repeats; the mode's Pareto frontier
(:func:`lab.analysis.load.pareto_front`) is drawn through the points no other point beats
on both axes. The baseline's frontier is drawn in grey on every speculative mode's figure,
so the two trade-offs read against each other. The data are ``reports/pareto.csv``
(:func:`lab.analysis.load.load_part`), also a DVC plot.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from lab.atomic import savefig_atomic  # noqa: E402

__all__ = ["pareto_figure", "pareto_figures"]


def _frontier(ax, pts: pd.DataFrame, **kw) -> None:
    front = pts[pts["on_frontier"]].sort_values("output_tok_s_per_user")
    if len(front):
        ax.plot(front["output_tok_s_per_user"], front["output_tok_s"], **kw)


def pareto_figure(pts: pd.DataFrame, base: pd.DataFrame, mode: str, *, caption: str, baseline: str | None):
    """One mode's Pareto figure (module docstring): its points (hue/style = kind, each annotated
    with its point key), its frontier (line ``"<mode> frontier"``) and, for a speculative mode,
    the baseline's (grey dashed, ``"<baseline> frontier"``). Returns the matplotlib figure.

    :param pts, base: this mode's and the baseline's Pareto rows (``pareto_figures``' columns).
    """
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    if baseline and mode != baseline and len(base):
        _frontier(ax, base, color="gray", linestyle="--", label=f"{baseline} frontier")
    _frontier(ax, pts, color="C0", label=f"{mode} frontier")
    sns.scatterplot(data=pts, x="output_tok_s_per_user", y="output_tok_s", hue="kind", style="kind",
                    hue_order=["concurrency", "rate"], style_order=["concurrency", "rate"], s=70, ax=ax)
    for _, r in pts.iterrows():
        ax.annotate(r["point"], (r["output_tok_s_per_user"], r["output_tok_s"]), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("tokens/s per user (mean per-request output tok/s, TTFT included)")
    ax.set_ylabel("total output tokens/s (mean of repeats)")
    ax.set_title(f"{mode}: throughput vs interactivity (Pareto frontier)")
    ax.legend(fontsize=8)
    lines = textwrap.wrap(caption, 110)
    fig.tight_layout(rect=(0, 0.02 + 0.035 * len(lines), 1, 1))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", ha="left", color="dimgray")
    return fig


def pareto_figures(rows: list[dict], out_dir: Path, *, caption: str, baseline: str | None) -> dict[str, str]:
    """Draw ``pareto_<mode>.png`` per mode into ``out_dir`` (:func:`pareto_figure`).

    :param rows: :func:`lab.analysis.load.load_part`'s Pareto rows: ``mode, point, kind,
        output_tok_s_per_user, output_tok_s, on_frontier`` (tok/s; means over repeats).
    :param caption: the engine caption (:func:`lab.analysis.comparison.engine_caption`).
    :param baseline: the baseline mode, whose frontier is overlaid in grey (None: none).
    :returns: ``{"pareto_<mode>": path}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    pareto = pd.DataFrame(rows, columns=["mode", "point", "kind", "output_tok_s_per_user", "output_tok_s",
                                         "on_frontier"])
    paths: dict[str, str] = {}
    base = pareto[pareto["mode"] == baseline] if baseline else pareto.iloc[0:0]
    for mode, pts in pareto.groupby("mode", sort=False):
        fig = pareto_figure(pts, base, mode, caption=caption, baseline=baseline)
        path = out_dir / f"pareto_{mode}.png"
        savefig_atomic(fig, path, dpi=100)
        plt.close(fig)
        paths[f"pareto_{mode}"] = str(path)
    return paths
