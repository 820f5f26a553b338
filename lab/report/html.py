"""The explanatory figures and ``reports/report.html``, a self-contained HTML report.

:func:`explain_figures` draws the break-even figure (:mod:`lab.analysis.theory`) and the sweep
figures (:mod:`lab.report.sweep_figures`) next to the comparison figures. :func:`write_report`
renders one HTML file with a jinja2 template: every figure embedded as a base64 PNG data
URI (no external file, script or network access), the summary table with 95 % intervals,
the effective configuration of each mode, the break-even explanation and the engine
caption. It opens in any browser, without Jupyter.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from lab import catalog
from lab.atomic import savefig_atomic, write_text_atomic
from lab.config import ModeParams
from lab.analysis import theory
from lab.analysis.estimates import Estimate, Ratio
from lab.report.tables import speedup_cell, table_columns

__all__ = ["explain_figures", "break_even_costs", "summary_html", "write_report"]


def break_even_costs(modes: Mapping[str, ModeParams], summary: dict[str, Any]) -> list[theory.ModeCosts]:
    """:class:`lab.analysis.theory.ModeCosts` of every speculative mode at its primary points.

    :param modes: the ``modes`` section (``num_steps`` caps each mode's accept length)."""
    cap = {n: (m.num_steps + 1 if m.num_steps else None) for n, m in modes.items()}
    from lab.report.sweep_figures import primary_summary

    return theory.costs_from_summary(primary_summary(summary), cap)


def explain_figures(modes: Mapping[str, ModeParams], runs: pd.DataFrame, summary: dict[str, Any],
                    out_dir: Path) -> dict[str, str]:
    """Draw ``break_even``, ``throughput_vs_concurrency``, ``verify_vs_context`` and
    ``speedup_heatmap`` PNGs into ``out_dir``; returns ``name -> path``. Also stores the
    break-even sentences in ``summary["break_even"]``."""
    import matplotlib.pyplot as plt

    from lab.report import sweep_figures as sf

    costs = break_even_costs(modes, summary)
    summary["break_even"] = [{"mode": c.mode, "concurrency": c.concurrency, "break_even_accept_length": c.break_even,
                              "accept_length": c.accept_length, "max_accept_length": c.max_accept,
                              "modelled_speedup": c.modelled_speedup, "measured_speedup": c.measured_speedup,
                              "explanation": theory.explain(c)} for c in costs]
    figs = {"break_even": theory.break_even_figure(costs, summary.get("caption", "")),
            "throughput_vs_concurrency": sf.throughput_vs_concurrency(runs, summary),
            "verify_vs_context": sf.verify_vs_context(runs, summary),
            "speedup_heatmap": sf.speedup_heatmap(summary)}
    paths = {}
    for name, fig in figs.items():
        path = out_dir / f"{name}.png"
        savefig_atomic(fig, path, dpi=100)  # lab/atomic.py: never a half-written figure
        plt.close(fig)
        paths[name] = str(path)
    return paths


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>eagle-verify-lab report ({{ engine }})</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 1em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.caption { color: #555; font-size: 0.9em; border-left: 4px solid #c60; padding-left: 0.6em; }
.notice { font-weight: bold; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
li { margin-bottom: 0.4em; }
</style></head><body>
<h1>Does EAGLE-3 beat plain decoding here?</h1>
{{ answer | safe }}
<p class="caption">{{ caption }}</p>
<h2>Break-even explanation</h2>
<p>A chain draft emits <i>accept length</i> tokens per cycle of <i>draft_ms + verify_ms</i>; plain decoding
emits one token per <i>decode_ms</i>. Speedup = accept_length &times; decode_ms / (draft_ms + verify_ms);
break-even accept length = (draft_ms + verify_ms) / decode_ms (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding"; EAGLE-3, Li et al. 2025).</p>
<p>Per mode, at its lowest concurrency (comparison.json has every level):</p>
<ul>{% for b in break_even %}<li>{{ b.explanation }}</li>{% else %}<li>No speculative mode with verify timings and a baseline.</li>{% endfor %}</ul>
{% if trace %}<h2>Where the verify time goes (torch-profiler trace{% if trace.modelled %}, MODELLED by the emulator{% endif %})</h2>
<p>GPU busy = union of kernel intervals; a host launch gap = GPU idle before a kernel the host had not yet launched
(lab/profiling/trace.py). Traces: the <code>trace/</code> artifacts of each mode's MLflow run (open in ui.perfetto.dev).</p>
<ul>{% for m, s in trace.sentences.items() %}<li>{{ s }}</li>{% endfor %}{% for m, st in trace.failed.items() %}<li>{{ m }}: profiling {{ st }}</li>{% endfor %}</ul>
{{ trace_table | safe }}{% endif %}
{% if lossless_table %}<h2>Lossless check: output token ids against the baseline's, per prompt</h2>
<p>Each request matched with the baseline's at the same point, repeat, slot and prompt (lab/analysis/lossless.py);
first divergence: the first differing token position (0-based), the earliest over that prompt's requests.</p>
{{ lossless_table | safe }}{% endif %}
<h2>Summary (mean [95 % CI]; speedup: Welch log-ratio 95 % CI; paired: per prompt, repeat or launch; "intervals": over launch means, or within one launch)</h2>
{{ table | safe }}
<h2>Figures</h2>
{% for f in figures %}<figure><img alt="{{ f.name }}" src="data:image/png;base64,{{ f.b64 }}"><figcaption>{{ f.name }}</figcaption></figure>
{% endfor %}
<h2>Effective configuration of each mode</h2>
<p>As requested in params.yaml and as the engine resolved it (read back from /server_info).</p>
{{ config_table | safe }}
</body></html>
"""


def summary_html(summary: dict[str, Any]) -> str:
    """The report's summary table: one row per mode x point with its axes, the mean [95 % CI] of
    each metric :mod:`lab.catalog` shows in ``report``, then each of their speedups over the
    baseline (:func:`lab.report.tables.table_columns`), then "intervals": what the row's
    intervals span (a speedup spanning something else says so in its cell)."""
    metrics, speedups = table_columns(catalog.REPORT)
    baseline = summary.get("baseline")
    rows = []
    for mode, levels in summary["modes"].items():
        for key, e in levels.items():
            row = {"mode": mode, "point": key, "concurrency": e["concurrency"],
                   "context tokens": e.get("context_tokens", "-"), "output tokens": e.get("max_new_tokens", "-")}
            for m in metrics:
                est = Estimate.from_dict(e.get(m.name))
                row[m.header] = "-" if est is None else est.text(m.digits)
            for m, kind in speedups:
                row[catalog.speedup_label(m, kind)] = speedup_cell(
                    Ratio.from_dict(e.get(catalog.speedup_key(m.name, kind))), mode, baseline, e.get("interval_scope"))
            row["intervals"] = e.get("interval_scope") or "-"
            rows.append(row)
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0)


def _config_html(modes: Mapping[str, ModeParams], summary: dict[str, Any]) -> str:
    eff = summary.get("effective_config") or {}
    rows = []
    for mode in summary["modes"]:
        requested = modes[mode].model_dump(exclude_defaults=True) if mode in modes else {}
        rows.append({"mode": mode, "params.yaml": ", ".join(f"{k}={v}" for k, v in requested.items()) or "-",
                     "resolved by the engine": ", ".join(f"{k}={v}" for k, v in (eff.get(mode) or {}).items()) or "-"})
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0)


def _trace_html(trace: dict[str, Any] | None) -> str:
    """The per-mode, per-step profiling table (lab.profiling.report.stage_rows), or ""."""
    if not trace or not trace.get("rows"):
        return ""
    rows = [{"mode": r["mode"], "step": r["stage"], "n": r["n"], "wall ms": r["wall_ms_p50"],
             "GPU busy ms": r["gpu_busy_ms_p50"], "idle share": r["idle_share_p50"],
             "host launch gap share": r["host_gap_share_p50"], "kernels": r["kernels_p50"],
             "eager launches": r["eager_launches_p50"], "graph replays": r["graph_launches_p50"],
             "all-reduces": r["allreduce_count_p50"], "all-reduce ms": r["allreduce_ms_p50"],
             "attention kernels per step": ", ".join(f"{k} x{v:g}" for k, v in r["attention_kernels"].items())}
            for r in trace["rows"]]
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0, float_format=lambda v: f"{v:.3g}")


def _lossless_html(lossless: dict[str, Any] | None) -> str:
    """The lossless check per mode and prompt (:func:`lab.analysis.lossless.check_lossless`), or ""."""
    rows = []
    for mode, e in ((lossless or {}).get("modes") or {}).items():
        if e.get("status") != "checked":
            rows.append({"mode": mode, "prompt": "-", "text": e.get("reason"), "pairs": 0, "identical": 0,
                         "first divergence (token)": "-"})
            continue
        for p in e["prompts"]:
            fd = p["first_divergence_token_min"]
            rows.append({"mode": mode, "prompt": p["prompt_index"], "text": p["head"] or "-", "pairs": p["pairs"],
                         "identical": p["identical"], "first divergence (token)": "-" if fd is None else fd})
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0) if rows else ""


def _lowest_level(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One break-even entry per mode: its lowest concurrency (as in the figure)."""
    out: dict[str, dict[str, Any]] = {}
    for b in sorted(items, key=lambda b: b["concurrency"]):
        out.setdefault(b["mode"], b)
    return list(out.values())


def write_report(summary: dict[str, Any], path: Path, *, engine: str, modes: Mapping[str, ModeParams]) -> Path:
    """Render the self-contained report to ``path`` (figures from ``summary["figures"]``).

    :param engine: ``params.yaml``'s ``engine`` (the title says it).
    :param modes: the ``modes`` section (what each mode asked for, beside what the engine resolved).

    :raises FileNotFoundError: a figure listed in the summary is missing.
    """
    import jinja2

    from lab.report.answer import answer_html

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    figures = [{"name": name, "b64": base64.b64encode(Path(p).read_bytes()).decode("ascii")}
               for name, p in summary.get("figures", {}).items()]
    text = env.from_string(_TEMPLATE).render(
        engine=html.escape(engine), caption=summary.get("caption", ""),
        answer=answer_html(summary),  # the answer first; each warning once, naming its modes
        break_even=_lowest_level(summary.get("break_even", [])), table=summary_html(summary), figures=figures,
        config_table=_config_html(modes, summary), trace=summary.get("trace"),
        trace_table=_trace_html(summary.get("trace")), lossless_table=_lossless_html(summary.get("lossless")))
    write_text_atomic(path, text)
    return path
