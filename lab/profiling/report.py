"""Tables, the one-sentence comparison and the figure for trace analyses (:mod:`lab.profiling.trace`).

Standard library except :func:`plot_time_breakdown` (matplotlib, imported inside).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lab.atomic import savefig_atomic

__all__ = ["stage_rows", "markdown_table", "where_time_goes", "plot_time_breakdown", "trace_section", "FIGURE_FILE"]

FIGURE_FILE = "verify_time_breakdown.png"

_COLS = ("wall_ms_p50", "gpu_busy_ms_p50", "idle_share_p50", "host_gap_share_p50", "kernels_p50",
         "eager_launches_p50", "graph_launches_p50", "allreduce_count_p50", "allreduce_ms_p50")


def stage_rows(analyses: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flatten ``{mode: analyze_trace result}`` into one row per (mode, stage) plus one
    ``cycle`` row per mode that has cycles.

    :returns: rows with ``mode``, ``stage``, ``n`` and the medians of :data:`_COLS` (ms,
        shares 0..1, counts), and ``attention_kernels`` (``{short name: per-step count}``).
    """
    rows = []
    for mode, a in analyses.items():
        items = list(a.get("by_stage", {}).items())
        if a.get("cycles"):
            items.append(("cycle", a["cycle_summary"]))
        for stage, s in items:
            n = s.get("n") or 0
            row = {"mode": mode, "stage": stage, "n": n}
            row.update({k: s.get(k) for k in _COLS})
            row["attention_kernels"] = {k: round(v / n, 2) for k, v in (s.get("attention_kernels") or {}).items()} if n else {}
            rows.append(row)
    return rows


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`stage_rows` output (medians per step / per cycle)."""
    out = ["| mode | step | n | wall p50 (ms) | GPU busy p50 (ms) | idle share | host launch gap share | kernels "
           "| eager launches | graph replays | all-reduces | all-reduce (ms) | attention kernels per step |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        attn = ", ".join(f"`{k}` x{v:g}" for k, v in r["attention_kernels"].items()) or "none"
        out.append(f"| {r['mode']} | {r['stage']} | {r['n']} | {_f(r['wall_ms_p50'], '{:.3f}')} "
                   f"| {_f(r['gpu_busy_ms_p50'], '{:.3f}')} | {_f(r['idle_share_p50'], '{:.1%}')} "
                   f"| {_f(r.get('host_gap_share_p50'), '{:.1%}')} | {_f(r['kernels_p50'], '{:.0f}')} "
                   f"| {_f(r['eager_launches_p50'], '{:.0f}')} | {_f(r['graph_launches_p50'], '{:.0f}')} "
                   f"| {_f(r['allreduce_count_p50'], '{:.0f}')} | {_f(r['allreduce_ms_p50'], '{:.3f}')} | {attn} |")
    return "\n".join(out) + "\n"


def where_time_goes(verify: Mapping[str, Any], decode: Mapping[str, Any], *, verify_label: str = "verify",
                    decode_label: str = "decode") -> str | None:
    """One sentence: how much longer the verify step is than the decode step, and in what.

    :param verify, decode: step summaries (:func:`lab.profiling.trace.summarize_rows`).
    :returns: e.g. "verify takes 30.4 ms per step against 6.8 ms for decode (+23.6 ms): +0.5 ms
        GPU busy (all-reduce +0.0 ms), +23.1 ms host launch gaps and +0.0 ms other idle; 976
        against 976 kernels, 976 eager launches against 0 (1 CUDA-graph replay against 1).", or
        None when either summary lacks the numbers.
    """
    need = ("wall_ms_p50", "gpu_busy_ms_p50", "host_gap_ms_p50")
    if any(verify.get(k) is None or decode.get(k) is None for k in need):
        return None
    dw = verify["wall_ms_p50"] - decode["wall_ms_p50"]
    db = verify["gpu_busy_ms_p50"] - decode["gpu_busy_ms_p50"]
    dg = verify["host_gap_ms_p50"] - decode["host_gap_ms_p50"]
    dar = (verify.get("allreduce_ms_p50") or 0.0) - (decode.get("allreduce_ms_p50") or 0.0)
    other = dw - db - dg

    def n(v: Any) -> str:
        return "n/a" if v is None else f"{v:.0f}"

    return (f"{verify_label} takes {verify['wall_ms_p50']:.2f} ms per step against {decode['wall_ms_p50']:.2f} ms "
            f"for {decode_label} ({dw:+.2f} ms): {db:+.2f} ms GPU busy (all-reduce {dar:+.2f} ms), "
            f"{dg:+.2f} ms host launch gaps and {other:+.2f} ms other idle; {n(verify.get('kernels_p50'))} against "
            f"{n(decode.get('kernels_p50'))} kernels, {n(verify.get('eager_launches_p50'))} against "
            f"{n(decode.get('eager_launches_p50'))} eager launches, {n(verify.get('graph_launches_p50'))} against "
            f"{n(decode.get('graph_launches_p50'))} CUDA-graph replays.")


def plot_time_breakdown(rows: list[dict[str, Any]], path: str | Path, *, title: str, caption: str) -> Path:
    """Horizontal stacked bars, one per row: GPU busy, host launch gaps, other idle (ms, medians).

    :param rows: :func:`stage_rows` output, or any rows with ``mode``, ``stage``,
        ``wall_ms_p50``, ``gpu_busy_ms_p50``, ``host_gap_share_p50``; an optional
        ``unprofiled_wall_ms_p50`` is drawn as a black tick.
    :param caption: printed under the axes (say "modelled" for emulator traces).
    :returns: the written PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("wall_ms_p50") is not None]
    labels = [f"{r['mode']} / {r['stage']}" for r in rows]
    busy = [r.get("gpu_busy_ms_p50") or 0.0 for r in rows]
    gap = [(r.get("host_gap_share_p50") or 0.0) * r["wall_ms_p50"] for r in rows]
    other = [max(r["wall_ms_p50"] - b - g, 0.0) for r, b, g in zip(rows, busy, gap)]
    cap_in = 0.16 * (1 + len(caption) // 160)  # caption height, inches
    height = 0.55 * len(rows) + 1.8 + cap_in
    fig, ax = plt.subplots(figsize=(11, height))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, busy, color="#4c72b0", label="GPU busy (union of kernels)")
    ax.barh(y, gap, left=busy, color="#dd8452", label="GPU idle: waiting for host launches")
    ax.barh(y, other, left=[b + g for b, g in zip(busy, gap)], color="#c7c7c7", label="GPU idle: other")
    for yi, r in zip(y, rows):
        if r.get("unprofiled_wall_ms_p50") is not None:
            ax.plot([r["unprofiled_wall_ms_p50"]] * 2, [yi - 0.4, yi + 0.4], color="black", lw=2)
    if any(r.get("unprofiled_wall_ms_p50") is not None for r in rows):
        ax.plot([], [], color="black", lw=2, label="wall time without the profiler")
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.set_xlabel("ms per step (median)")
    ax.set_title(title)
    ax.legend(loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=8)
    fig.text(0.01, 0.01, caption, fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, (cap_in + 0.05) / height, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    savefig_atomic(fig, out, dpi=110)
    plt.close(fig)
    return out


def trace_section(results: Mapping[str, Mapping[str, Any]], out_dir: str | Path, *, baseline: str | None,
                    caption: str) -> dict[str, Any] | None:
    """The report's profiling section from each mode's ``result.json`` (``result["trace"]``,
    written by ``bench.trace``); None when no mode was profiled.

    :param results: ``{mode: result}`` (:func:`lab.analysis.comparison.load_results`).
    :param out_dir: where the figure goes (``verify_time_breakdown.png``).
    :param baseline: the plain-decoding mode whose DECODE step each VERIFY step is compared with.
    :param caption: the engine caption; the figure's caption adds "MODELLED" for emulator traces.
    :returns: ``{"modelled", "rows" (:func:`stage_rows`), "markdown", "sentences" ({mode: str}),
        "failed" ({mode: status}), "traces" ({mode: path}), "figure" (path or None)}``.
    """
    prof = {m: r.get("trace") for m, r in results.items() if r.get("trace")}
    if not prof:
        return None
    ok = {m: p for m, p in prof.items() if p.get("status") == "ok" and p.get("analysis")}
    analyses = {m: p["analysis"] for m, p in ok.items()}
    modelled = any(p.get("modelled") for p in ok.values())
    rows = stage_rows(analyses)
    base = (analyses.get(baseline) or {}).get("by_stage", {}).get("DECODE") if baseline else None
    sentences: dict[str, str] = {}
    for m, a in analyses.items():
        v = a.get("by_stage", {}).get("VERIFY")
        if v and base:
            s = where_time_goes(v, base, verify_label=f"In {m}, verify", decode_label=f"a {baseline} decode step")
            if s:
                sentences[m] = s + (" (modelled by the emulator)" if ok[m].get("modelled") else "")
    figure = None
    plot_rows = [r for r in rows if r["stage"] != "EXTEND"]
    if plot_rows:
        note = (" Profiler traces MODELLED by the SGLang emulator from its cost profile (lab/emulator/modelled_trace.py): "
                "not a GPU measurement." if modelled else " Profiler traces captured with SGLang's /start_profile.")
        figure = str(plot_time_breakdown(plot_rows, Path(out_dir) / FIGURE_FILE,
                                         title="Where each step's time goes (medians over the traced steps)",
                                         caption=caption + note))
    return {"modelled": modelled, "rows": rows, "markdown": markdown_table(rows), "sentences": sentences,
            "failed": {m: p.get("status") for m, p in prof.items() if m not in ok},
            "traces": {m: p.get("file") for m, p in ok.items()}, "figure": figure}
