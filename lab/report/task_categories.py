"""Showing the task mix: the per-category figure, the per-category lines of the answer, and
``reports/categories.csv`` (``dvc plots``).

Input is ``summary["taskmix"]`` of :func:`lab.analysis.taskmix.comparison_taskmix` (also in
``reports/comparison.json``). A category with fewer prompts than the interval needs says
"too few prompts" in text and gets a hollow marker without error bar in the figure: no
interval is drawn that the data cannot support.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = ["taskmix_lines", "taskmix_markdown", "taskmix_html", "taskmix_figure", "draw_taskmix",
           "write_categories_csv"]

_SPEEDUP = "speedup_decode_tok_s"


def _fmt(value: float | None, lo: float | None, hi: float | None, n: int | None, min_n: int, fmt: str,
         unit: str = "") -> str:
    """``1.95 [1.80, 2.10]``, or ``1.95 (too few prompts: n=2)`` below ``min_n`` prompts, or ``-``."""
    if value is None:
        return "-"
    if lo is None or hi is None:
        return f"{value:{fmt}}{unit} (too few prompts: n={n})" if n is not None and n < min_n else f"{value:{fmt}}{unit}"
    return f"{value:{fmt}}{unit} [{lo:{fmt}}, {hi:{fmt}}]"


def taskmix_lines(comparison: dict[str, Any]) -> list[str]:
    """Plain-text lines, one per (speculative mode, lowest primary point), listing per category
    the accept length and the paired speedup with 95 % intervals, or "too few prompts"; [] when
    the comparison has no task mix. The first line says what the numbers are."""
    tm = comparison.get("taskmix")
    if not tm or not tm.get("rows"):
        return []
    lines = [f"Per task category (accept length; paired decode tok/s speedup over {comparison.get('baseline')}) "
             f"[95 % CI across the prompts of launch 1, within one launch; no interval with fewer than "
             f"{tm.get('min_prompts')} prompts]:"]
    min_n = int(tm.get("min_prompts") or 0)
    first_point: dict[str, str] = {}
    for r in tm["rows"]:
        first_point.setdefault(r["mode"], r["point"])
    for mode, point in first_point.items():
        parts = []
        for r in tm["rows"]:
            if r["mode"] != mode or r["point"] != point:
                continue
            acc = _fmt(r.get("accept_length"), r.get("accept_length_ci95_lo"), r.get("accept_length_ci95_hi"),
                       r.get("accept_n_prompts"), min_n, ".2f")
            sp = _fmt(r.get(_SPEEDUP), r.get(f"{_SPEEDUP}_ci95_lo"), r.get(f"{_SPEEDUP}_ci95_hi"),
                      r.get("speedup_n_prompts"), min_n, ".2f", "x")
            if acc == "-" and sp == "-":
                continue
            parts.append(f"{r['category']} {acc}; {sp}" if r.get("accept_length") is not None else f"{r['category']} {sp}")
        if parts:
            lines.append(f"{mode} {point}: " + " | ".join(parts))
    return lines if len(lines) > 1 else []


def taskmix_markdown(comparison: dict[str, Any]) -> str:
    """:func:`taskmix_lines` as Markdown ("" without a task mix)."""
    lines = taskmix_lines(comparison)
    return "\n".join([f"**{lines[0]}**", ""] + [f"- {ln}" for ln in lines[1:]]) if lines else ""


def taskmix_html(comparison: dict[str, Any]) -> str:
    """:func:`taskmix_lines` as an escaped HTML fragment ("" without a task mix)."""
    lines = taskmix_lines(comparison)
    if not lines:
        return ""
    e = html.escape
    return (f'<section class="taskmix"><p><b>{e(lines[0])}</b></p><ul>'
            + "".join(f"<li>{e(ln)}</li>" for ln in lines[1:]) + "</ul></section>")


def taskmix_figure(summary: dict[str, Any]):
    """Accept length (left) and paired decode tok/s speedup (right) per category, one marker
    per mode, one row of panels per primary point; 95 % intervals across prompts as error
    bars, hollow markers where the category has too few prompts for one. Returns the figure,
    or None without a task mix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from lab.report.figures import caption

    tm = summary.get("taskmix")
    if not tm or not tm.get("rows"):
        return None
    rows = tm["rows"]
    points = list(dict.fromkeys(r["point"] for r in rows))
    cats = list(tm["categories"])
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    colors = dict(zip(modes, sns.color_palette("colorblind", len(modes))))
    fig, axes = plt.subplots(len(points), 2, figsize=(11, 3.6 * len(points) + 1.2), squeeze=False)
    width = 0.8 / max(1, len(modes))
    for i, point in enumerate(points):
        for j, (key, label) in enumerate((("accept_length", "accept length (tokens per verify)"),
                                          (_SPEEDUP, f"paired decode tok/s speedup over {summary.get('baseline')}"))):
            ax = axes[i][j]
            for k, mode in enumerate(modes):
                for r in rows:
                    if r["mode"] != mode or r["point"] != point or r.get(key) is None or r["category"] not in cats:
                        continue
                    x = cats.index(r["category"]) + (k - (len(modes) - 1) / 2) * width
                    lo, hi = r.get(f"{key}_ci95_lo"), r.get(f"{key}_ci95_hi")
                    if lo is not None and hi is not None:
                        ax.errorbar(x, r[key], yerr=[[r[key] - lo], [hi - r[key]]], fmt="o", color=colors[mode],
                                    capsize=3, label=mode)
                    else:  # too few prompts for an interval: the value alone, hollow
                        ax.plot(x, r[key], "o", mfc="none", color=colors[mode], label=mode)
                    n = r.get("accept_n_prompts" if j == 0 else "speedup_n_prompts")
                    if n is not None:  # prompts behind the point (the interval's n)
                        ax.annotate(f"n={n}", (x, r[key]), xytext=(4, -3), textcoords="offset points", fontsize=6,
                                    color="dimgray")
            if key == _SPEEDUP:
                ax.axhline(1.0, color="gray", lw=0.8, ls="--")
            ax.set_xticks(range(len(cats)), cats, rotation=20)
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(f"{point}: {'accept length' if j == 0 else 'speedup'} by task category", fontsize=9)
            handles, labels = ax.get_legend_handles_labels()
            uniq = dict(zip(labels, handles))
            if uniq:
                ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    fig.suptitle("Task mix: 95 % interval across prompts; hollow = too few prompts "
                 f"(< {tm.get('min_prompts')}) for an interval", fontsize=10)
    caption(fig, summary)
    return fig


def draw_taskmix(summary: dict[str, Any], out_dir: str | Path) -> dict[str, str]:
    """Save :func:`taskmix_figure` as ``<out_dir>/taskmix.png``; ``{"taskmix": path}``, or {}
    without a task mix."""
    import matplotlib.pyplot as plt

    from lab.atomic import savefig_atomic

    fig = taskmix_figure(summary)
    if fig is None:
        return {}
    path = Path(out_dir) / "taskmix.png"
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return {"taskmix": str(path)}


def write_categories_csv(taskmix: dict[str, Any] | None, path: str | Path,
                         provenance: dict[str, dict[str, str]] | None = None) -> Path:
    """Write ``reports/categories.csv``: ``mode``, the provenance columns
    (:data:`lab.analysis.provenance.COLUMNS` of each row's mode, from ``provenance``), then the rest
    of :data:`lab.analysis.taskmix.CSV_COLUMNS`, one row per per-category row (empty cells where a
    value or an interval does not exist). Written, header only, also without a task mix,
    because dvc.yaml declares it as an output of the compare stage. Returns the path."""
    import csv

    from lab.analysis import provenance as prov
    from lab.analysis.taskmix import CSV_COLUMNS
    from lab.atomic import atomic_path

    path = Path(path)
    cols = [CSV_COLUMNS[0], *prov.COLUMNS, *(c for c in CSV_COLUMNS[1:] if c not in prov.COLUMNS)]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(prov.tag_rows((taskmix or {}).get("rows", []), provenance or {}))
    return path
