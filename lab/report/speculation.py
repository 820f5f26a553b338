"""Why this speedup and not more: the acceptance-by-position figure and the speedup waterfall
figure (``reports/figures/acceptance_by_position.png``, ``speedup_waterfall.png``), and their lines
in the answer (``lab summary``, summary.md, report.html).

Numbers come from :mod:`lab.analysis.position_acceptance` (``summary["acceptance_by_position"]``:
long rows of every mode's ``result.json`` section) and :mod:`lab.analysis.waterfall`
(``summary["waterfall"]``).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

__all__ = ["speculation_lines", "speculation_markdown", "speculation_html", "draw_speculation", "FIGURE_CAPTIONS"]

_PRIMARY = re.compile(r"^c\d+$")

#: Captions of the two figures (merged into the report's captions by the compare stage).
FIGURE_CAPTIONS = {
    "acceptance_by_position": "P(draft token k accepted | tokens 1..k-1 accepted) per draft position, per mode and "
                              "concurrency, from SGLang's spec_correct_drafts_histogram pooled over the window's "
                              "cycles (Wilson 95 % interval, cycles as trials).",
    "speedup_waterfall": "From the ideal speedup (accept length: free draft, verify costing one decode step) to the "
                         "measured one: each bar is a loss (red) or gain (green), labelled in ms per cycle.",
}


def _first_points(entries: list[dict[str, Any]], key: str = "point") -> dict[str, str]:
    first: dict[str, str] = {}
    for e in entries:
        if _PRIMARY.match(str(e.get(key))) and e["mode"] not in first:
            first[e["mode"]] = e[key]
    return first


def speculation_lines(comparison: dict[str, Any]) -> list[str]:
    """Plain-text lines: per speculative mode at its lowest primary point, the acceptance by
    position with intervals, and the waterfall's largest loss (one line each); [] when neither exists."""
    from lab.analysis.waterfall import waterfall_line

    lines: list[str] = []
    rows = [r for r in comparison.get("acceptance_by_position") or [] if r.get("group") == "all"]
    for mode, point in _first_points(rows).items():
        mine = sorted((r for r in rows if r["mode"] == mode and r["point"] == point), key=lambda r: r["position"])
        parts = [f"pos{r['position']} {r['accept_rate']:.2f} [{r['ci95_lo']:.2f}, {r['ci95_hi']:.2f}]"
                 for r in mine if r.get("accept_rate") is not None]
        sim = " (SGLang's simulated acceptance)" if any(r.get("simulated") for r in mine) else ""
        if parts:
            lines.append(f"Acceptance by draft position, {mode} {point}{sim}: " + ", ".join(parts))
    wf = [w for w in comparison.get("waterfall") or [] if "steps" in w]
    for mode, point in _first_points(wf).items():
        entry = next(w for w in wf if w["mode"] == mode and w["point"] == point)
        if (ln := waterfall_line(entry)) is not None:
            lines.append("Speedup waterfall, " + ln)
    return lines


def speculation_markdown(comparison: dict[str, Any]) -> str:
    """:func:`speculation_lines` as a Markdown list ("" when empty)."""
    return "\n".join(f"- {ln}" for ln in speculation_lines(comparison))


def speculation_html(comparison: dict[str, Any]) -> str:
    """:func:`speculation_lines` as an escaped HTML fragment ("" when empty)."""
    lines = speculation_lines(comparison)
    if not lines:
        return ""
    return '<section class="speculation"><ul>' + "".join(f"<li>{html.escape(ln)}</li>" for ln in lines) + "</ul></section>"


def acceptance_figure(summary: dict[str, Any]):
    """One panel per speculative mode: accept rate per draft position, one line per primary
    point, Wilson 95 % error bars; None without acceptance rows."""
    import matplotlib.pyplot as plt

    from lab.report.figures import caption

    rows = [r for r in summary.get("acceptance_by_position") or [] if r.get("group") == "all"
            and _PRIMARY.match(str(r["point"])) and r.get("accept_rate") is not None]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    if not modes:
        return None
    fig, axes = plt.subplots(1, len(modes), figsize=(max(8.5, 4.5 * len(modes)), 5.2), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        mine = [r for r in rows if r["mode"] == mode]
        for point in dict.fromkeys(r["point"] for r in mine):
            pts = sorted((r for r in mine if r["point"] == point), key=lambda r: r["position"])
            x = [r["position"] for r in pts]
            y = [r["accept_rate"] for r in pts]
            err = [[v - r["ci95_lo"] for v, r in zip(y, pts)], [r["ci95_hi"] - v for v, r in zip(y, pts)]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=point)
        ax.set_title(mode + (" (simulated)" if any(r.get("simulated") for r in mine) else ""))
        ax.set_xlabel("draft position k")
        ax.set_xticks(sorted({r["position"] for r in mine}))
        ax.set_xlim(0.5, max(r["position"] for r in mine) + 0.5)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("P(accept k | 1..k-1 accepted)")
    caption(fig, summary)
    return fig


def waterfall_figure(summary: dict[str, Any]):
    """One panel per (speculative mode, primary point) with a waterfall: the ideal speedup, each
    loss as a floating bar labelled in ms per cycle, the measured speedup; None without waterfalls."""
    import matplotlib.pyplot as plt

    from lab.report.figures import caption

    entries = [w for w in summary.get("waterfall") or [] if "steps" in w and _PRIMARY.match(str(w["point"]))][:8]
    if not entries:
        return None
    fig, axes = plt.subplots(1, len(entries), figsize=(max(8.5, 4.5 * len(entries)), 5.4), squeeze=False, sharey=True)
    for ax, e in zip(axes[0], entries):
        labels = ["ideal"] + [s["step"] for s in e["steps"]] + ["measured"]
        ax.bar(0, e["ideal_speedup"], color="#4c72b0")
        level = e["ideal_speedup"]
        for i, s in enumerate(e["steps"], start=1):
            after = s["speedup_after"]
            ax.bar(i, after - level, bottom=level, color="#c44e52" if after < level else "#55a868")
            ax.text(i, max(level, after), f"{s['loss_ms']:+.1f} ms", ha="center", va="bottom", fontsize=7)
            level = after
        ax.bar(len(labels) - 1, e["measured_speedup"], color="#8172b2")
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, fontsize=8, ha="right")
        ax.set_title(f"{e['mode']} {e['point']}", fontsize=9)
    axes[0][0].set_ylabel("decode tok/s speedup over baseline")
    caption(fig, summary)
    return fig


def draw_speculation(summary: dict[str, Any], out_dir: str | Path) -> dict[str, str]:
    """Save the figures that have data under ``out_dir``; ``{name: path}``."""
    import matplotlib.pyplot as plt

    from lab.atomic import savefig_atomic

    out: dict[str, str] = {}
    for name, make in (("acceptance_by_position", acceptance_figure), ("speedup_waterfall", waterfall_figure)):
        fig = make(summary)
        if fig is None:
            continue
        path = Path(out_dir) / f"{name}.png"
        savefig_atomic(fig, path, dpi=110)
        plt.close(fig)
        out[name] = str(path)
    return out
