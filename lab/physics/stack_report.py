"""Figures and the Markdown table of a physics ``metrics.json`` (matplotlib/seaborn, Agg).

Every function takes the metrics dict that :func:`lab.physics.run_physics` writes; none
needs torch, so figures can be redrawn from a stored ``metrics.json`` anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.atomic import savefig_atomic

__all__ = [
    "FIGURE_FILES",
    "forward_tables",
    "SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE",
    "make_figures",
    "plot_overview",
    "markdown_report",
]

#: Figure files :func:`make_figures` writes into the results folder.
FIGURE_FILES = ("time_per_forward.png", "ratios.png")

#: The seeds' comparison: 29 ms verify of 3 tokens outside CUDA graphs over a 12 ms
#: graph-captured decode step (SGLang, Kimi-K2.5, TP 8 on PCIe GPUs; DESIGN.md).
SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE = 29.0 / 12.0

_RATIO_LABELS = {
    "verify_over_decode_eager": "verify / decode\n(both eager)",
    "verify_over_decode_graph": "verify / decode\n(both graph)",
    "eager_verify_over_graph_decode": "eager verify /\ngraph decode",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    return plt


def _subtitle(m: dict[str, Any]) -> str:
    p, d = m["params"], m.get("device", {})
    return (f"{d.get('name', '?')}, tp={p['tp']} (per-GPU shard): {p['num_layers']} layers, hidden "
            f"{p['hidden_size']}, {p['heads_per_gpu']}x{p['head_dim']} heads, MLP {p['mlp_intermediate_per_gpu']}, "
            f"KV {p['kv_context']}, {p['dtype']}")


def _draw_times(ax: Any, m: dict[str, Any]) -> None:
    rows = m["rows"]
    ts = [r["T"] for r in rows]
    for kind, color, label in (("eager", "tab:red", "eager (no graph)"), ("graph", "tab:blue", "CUDA graph replay")):
        pts = [(r["T"], r[f"{kind}_ms_p50"], r[f"{kind}_ms_p90"]) for r in rows if r.get(f"{kind}_ms_p50") is not None]
        if not pts:
            continue
        x, p50, p90 = zip(*pts)
        ax.errorbar(x, p50, yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p90)]], fmt="o-", color=color,
                    capsize=3, label=f"{label}: median, bar to p90")
    floors = [r.get("floor_ms") for r in rows]
    if all(f is not None for f in floors):
        ax.plot(ts, floors, "--", color="0.4", label=f"bytes-moved floor ({m['copy_bandwidth_gb_s']:.0f} GB/s copy)")
    ax.axvline(m["params"]["verify_tokens"], color="0.7", lw=1, ls=":")
    ax.set_xticks(ts)
    ax.set_xlabel("tokens per forward T (T=1 decode; T=num_draft_tokens verify)")
    ax.set_ylabel("time per forward (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="center right")


def _draw_ratios(ax: Any, m: dict[str, Any]) -> None:
    ratios = m.get("ratios") or {}
    keys = [k for k in _RATIO_LABELS if ratios.get(k) is not None]
    vals = [ratios[k] for k in keys]
    colors = {"verify_over_decode_eager": "tab:red", "verify_over_decode_graph": "tab:blue",
              "eager_verify_over_graph_decode": "tab:purple"}
    bars = ax.bar([_RATIO_LABELS[k] for k in keys], vals, color=[colors[k] for k in keys], alpha=0.8)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.2f}x", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=9)
    ax.axhline(1.0, color="0.3", lw=1)
    if "eager_verify_over_graph_decode" in keys:
        i = keys.index("eager_verify_over_graph_decode")
        ax.plot([i], [SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE], marker="D", color="black", ls="none",
                label=f"seeds: 29 ms / 12 ms = {SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE:.2f}x (SGLang, TP8, PCIe)")
        ax.legend(fontsize=8, loc="upper left")
    ax.set_ylabel(f"time ratio, T={m['params']['verify_tokens']} over T=1 (medians)")
    ax.set_ylim(bottom=0, top=max(vals + [SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE]) * 1.25 if vals else 1)


def make_figures(metrics: dict[str, Any], out_dir: str | Path) -> list[str]:
    """Write :data:`FIGURE_FILES` for an ``ok`` metrics dict; returns the file names written.

    ``time_per_forward.png``: median time per forward against T, eager and graph, with a
    bar up to p90 and the bytes-moved floor. ``ratios.png``: the three ratios of
    :func:`lab.physics.compute_ratios` with the seeds' 2.42x for reference.

    :raises ValueError: the metrics are not ``ok`` (no numbers to draw).
    """
    if metrics.get("status") != "ok":
        raise ValueError(f"no figures for status {metrics.get('status')!r}")
    plt = _plt()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, size, draw, title in ((FIGURE_FILES[0], (8, 5), _draw_times, "One forward: eager vs CUDA graph"),
                                    (FIGURE_FILES[1], (7, 5), _draw_ratios, "Verify cost relative to decode")):
        fig, ax = plt.subplots(figsize=size)
        draw(ax, metrics)
        ax.set_title(title + "\n" + _subtitle(metrics), fontsize=9)
        fig.tight_layout()
        savefig_atomic(fig, out / name, dpi=130)
        plt.close(fig)
        written.append(name)
    return written


def plot_overview(metrics: dict[str, Any], path: str | Path) -> Path:
    """Both panels of :func:`make_figures` side by side in one PNG at ``path``."""
    if metrics.get("status") != "ok":
        raise ValueError(f"no figures for status {metrics.get('status')!r}")
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1.25, 1]})
    _draw_times(a1, metrics)
    a1.set_title("One forward: eager vs CUDA graph", fontsize=10)
    _draw_ratios(a2, metrics)
    a2.set_title("Verify cost relative to decode", fontsize=10)
    fig.suptitle("PyTorch layer stack (no SGLang, random weights): " + _subtitle(metrics), fontsize=9)
    fig.tight_layout()
    p = Path(path)
    savefig_atomic(fig, p, dpi=130)
    plt.close(fig)
    return p


def _f(v: Any, nd: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


def markdown_report(metrics: dict[str, Any]) -> str:
    """A short Markdown page: setup, the per-T table, the ratios (or the not-run status).

    An optional ``metrics["repeat"]`` (``measured_at``, ``rows``, ``ratios`` of a second run)
    adds that run's table and ratios.
    """
    p = metrics["params"]
    lines = ["# Physics: eager verify vs graph decode on a Kimi-K2.5-shaped layer stack", ""]
    if metrics.get("status") != "ok":
        return "\n".join(lines + [f"Status: **{metrics.get('status')}**; nothing was measured.", ""])
    d = metrics["device"]
    s = metrics["shapes"]
    lines += [
        f"- measured: {metrics['measured_at']} by `python -m lab.physics` (PyTorch only: no SGLang, random weights)",
        f"- GPU: {d.get('name')} x{d.get('count')} (driver {d.get('driver')}), torch {d.get('torch')}, "
        f"CUDA {d.get('cuda')}, NCCL {d.get('nccl')}",
        f"- stack (per-GPU shard, tp={p['tp']}): {p['num_layers']} layers, hidden {p['hidden_size']}, "
        f"{p['heads_per_gpu']} heads x {p['head_dim']} (plain MHA standing in for MLA), MLP "
        f"{p['mlp_intermediate_per_gpu']}, KV context {p['kv_context']}, {p['dtype']}; "
        f"weights {s['weight_bytes'] / 1e9:.2f} GB, KV {s['kv_bytes_context'] / 1e9:.3f} GB",
        f"- timing: {p['warmup_iters']} warm-up + {p['timed_iters']} timed forwards per T and mode, fresh random "
        "input each, device synchronized before each, CUDA events",
        f"- copy bandwidth (read + write): {metrics['copy_bandwidth_gb_s']:.0f} GB/s; floor = bytes moved / that",
        "",
        "| T | eager p50 (ms) | eager p90 (ms) | graph p50 (ms) | graph p90 (ms) | floor (ms) | eager / graph "
        "| eager host issue p50 (ms) | kernels / forward |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in metrics["rows"]:
        eg = r["eager_ms_p50"] / r["graph_ms_p50"] if r.get("graph_ms_p50") else None
        k = r.get("kernels_per_forward")
        lines.append(f"| {r['T']} | {_f(r['eager_ms_p50'])} | {_f(r['eager_ms_p90'])} | {_f(r.get('graph_ms_p50'))} "
                     f"| {_f(r.get('graph_ms_p90'))} | {_f(r.get('floor_ms'))} | {_f(eg)} "
                     f"| {_f(r.get('eager_host_ms_p50'))} | {'n/a' if k is None else k} |")
    ra = metrics["ratios"]
    v = p["verify_tokens"]
    lines += [
        "",
        f"Ratios (medians, verify T={v}, decode T=1):",
        "",
        f"- verify / decode, both eager: **{_f(ra.get('verify_over_decode_eager'))}x**",
        f"- verify / decode, both CUDA graph: **{_f(ra.get('verify_over_decode_graph'))}x**",
        f"- eager verify / graph decode (the seeds' comparison; seeds: 29/12 = "
        f"{SEEDS_EAGER_VERIFY_OVER_GRAPH_DECODE:.2f}x on 8 PCIe GPUs with SGLang): "
        f"**{_f(ra.get('eager_verify_over_graph_decode'))}x**",
        "",
    ]
    rep = metrics.get("repeat")
    if rep:
        rr = rep["ratios"]
        lines += [
            f"Repeat run ({rep.get('measured_at')}, same machine, same command):",
            "",
            "| T | eager p50 (ms) | eager p90 (ms) | graph p50 (ms) | graph p90 (ms) |",
            "| ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [f"| {r['T']} | {_f(r['eager_ms_p50'])} | {_f(r['eager_ms_p90'])} | {_f(r.get('graph_ms_p50'))} "
                  f"| {_f(r.get('graph_ms_p90'))} |" for r in rep["rows"]]
        lines += [
            "",
            f"Repeat ratios: verify / decode eager {_f(rr.get('verify_over_decode_eager'))}x, graph "
            f"{_f(rr.get('verify_over_decode_graph'))}x; eager verify / graph decode "
            f"{_f(rr.get('eager_verify_over_graph_decode'))}x.",
            "",
        ]
    return "\n".join(lines)


def forward_tables(metrics: dict[str, Any]) -> tuple[str, Any, Any]:
    """What the physics notebook shows for a measured run (status ``ok``): a line naming the
    device, driver, torch, CUDA, copy bandwidth (GB/s) and tp; the per-T table (index T;
    ``eager_ms_p50/p90``, ``graph_ms_p50/p90``, ``floor_ms``, ``eager_host_ms_p50`` in ms,
    ``kernels_per_forward``, and ``eager_over_graph`` = eager p50 / graph p50), rounded to
    3 decimals; and the ratios (T = ``verify_tokens`` over T = 1) as a one-column frame.

    :raises KeyError: ``metrics`` is not an ``ok`` run of :func:`lab.physics.run_physics`.
    """
    import pandas as pd  # here, not at import: the package imports with the standard library only

    cols = ["T", "eager_ms_p50", "eager_ms_p90", "graph_ms_p50", "graph_ms_p90", "floor_ms",
            "eager_host_ms_p50", "kernels_per_forward"]
    table = pd.DataFrame(metrics["rows"]).reindex(columns=cols).set_index("T")
    table["eager_over_graph"] = table["eager_ms_p50"] / table["graph_ms_p50"]
    d = metrics["device"]
    line = (f"{d['name']} x{d['count']}, driver {d['driver']}, torch {d['torch']}, CUDA {d['cuda']}, "
            f"copy bandwidth {metrics['copy_bandwidth_gb_s']:.0f} GB/s, tp={metrics['tp']}")
    verify = metrics["params"]["verify_tokens"]
    ratios = pd.Series(metrics["ratios"], name=f"T={verify} over T=1").round(3).to_frame()
    return line, table.round(3), ratios
