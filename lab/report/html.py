"""The explanatory figures and ``reports/report.html``, a self-contained HTML report.

:func:`explain_figures` draws the break-even figure (:mod:`lab.analysis.theory`) and the sweep
figures (:mod:`lab.report.sweep_figures`) next to the comparison figures. :func:`write_report`
renders one HTML file with a jinja2 template: every figure embedded as a base64 PNG data
URI (no external file, script or network access), the summary table with 95 % intervals,
the effective configuration of each mode, the break-even explanation and the engine
caption. It opens in any browser, without Jupyter.

The page opens with what fits one 1280 x 1000 window (issue 34, item 6; checked in headless
Chromium by ``tests/component/test_report_screen.py``): the verdict and where its numbers come
from, one line per mode's configuration as the engine resolved it (:func:`mode_line`), the lead
figure (the speedup's, with a baseline) and the measurement warnings folded in a ``<details>``
(:func:`lab.report.answer.warnings_html`); the tables, the detail and the other figures follow.
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

__all__ = ["explain_figures", "break_even_costs", "summary_html", "speedup_html", "write_report", "FIGURE_CAPTIONS",
           "figure_caption", "load_label", "mode_line"]


def break_even_costs(modes: Mapping[str, ModeParams], summary: dict[str, Any]) -> list[theory.ModeCosts]:
    """:class:`lab.analysis.theory.ModeCosts` of every speculative mode at its primary points.

    :param modes: the ``modes`` section (``num_steps`` caps each mode's accept length)."""
    cap = {n: (m.num_steps + 1 if m.num_steps else None) for n, m in modes.items()}
    from lab.report.sweep_figures import primary_summary

    return theory.costs_from_summary(primary_summary(summary), cap)


def _mode_backends(summary: dict[str, Any], mode: str) -> dict[str, str]:
    """``verify_backend`` / ``draft_backend`` of ``mode``'s entries in ``summary`` (same in every entry)."""
    first = next(iter((summary["modes"].get(mode) or {}).values()), {})
    return {k: first[k] for k in ("verify_backend", "draft_backend") if first.get(k)}


def _backend_sentence(text: str, summary: dict[str, Any], mode: str) -> str:
    """A break-even sentence (:func:`lab.analysis.theory.explain`) with the backend that served
    each number next to it: ``"1.9 ms draft (fa3) + 29.2 ms verify (fa3) against ..."``."""
    b = _mode_backends(summary, mode)
    if b.get("draft_backend"):
        text = text.replace(" ms draft + ", f" ms draft ({b['draft_backend']}) + ", 1)
    if b.get("verify_backend"):
        text = text.replace(" ms verify against ", f" ms verify ({b['verify_backend']}) against ", 1)
    return text


def explain_figures(modes: Mapping[str, ModeParams], runs: pd.DataFrame, summary: Mapping[str, Any],
                    out_dir: Path) -> tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]]]:
    """Draw ``break_even``, ``throughput_vs_concurrency``, ``verify_vs_context`` (only when more
    than one context length was measured: otherwise it would be an empty placeholder, and a stale
    one from an earlier run is removed) and ``speedup_heatmap`` PNGs into ``out_dir``; returns
    ``(name -> path, break_even, crossover)``: the figures, and the comparison's ``break_even`` part (one
    dict per mode and level with its sentence) and ``crossover`` part (:func:`lab.analysis.crossover.crossovers`).
    Edits nothing in ``summary``."""
    import matplotlib.pyplot as plt

    from lab.report import sweep_figures as sf

    from lab.analysis import crossover

    costs = break_even_costs(modes, summary)
    break_even = [{"mode": c.mode, "concurrency": c.concurrency, "break_even_accept_length": c.break_even,
                              "accept_length": c.accept_length, "max_accept_length": c.max_accept,
                              "modelled_speedup": c.modelled_speedup, "measured_speedup": c.measured_speedup,
                              **_mode_backends(summary, c.mode),
                              "explanation": _backend_sentence(theory.explain(c), summary, c.mode)} for c in costs]
    xs = crossover.crossovers(summary)  # where the verdict flips along the context axis (issue 30)
    crossover_part = [x.to_dict() for x in xs]
    figs = {"break_even": theory.break_even_figure(costs, summary.get("caption", "")),
            "break_even_map": crossover.break_even_map_figure(xs, summary.get("caption", "")),
            "throughput_vs_concurrency": sf.throughput_vs_concurrency(runs, summary),
            "verify_vs_context": sf.verify_vs_context(runs, summary),
            "speedup_heatmap": sf.speedup_heatmap(summary)}
    paths = {}
    for name, fig in figs.items():
        path = out_dir / f"{name}.png"
        if fig is None:  # nothing to draw: no placeholder figure
            path.unlink(missing_ok=True)
            continue
        savefig_atomic(fig, path, dpi=100)  # lab/atomic.py: never a half-written figure
        plt.close(fig)
        paths[name] = str(path)
    return paths, break_even, crossover_part


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>eagle-verify-lab report ({{ engine }})</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 1240px; margin: 0.6em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin: 0.3em 0; }
.verdict p, .verdict ul { margin: 0.3em 0; }
ul.modes { margin: 0.2em 0 0.4em; font-size: 0.9em; } ul.modes li { margin-bottom: 0.1em; }
figure.lead { margin: 0.4em 0 0.8em; } figure.lead img { max-height: 54vh; width: auto; }
details.warnings { margin: 0.5em 0 1em; } details.warnings summary { cursor: pointer; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0 1.5em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; vertical-align: top; }
th { white-space: normal; background: #f4f4f4; }
th:first-child, td:first-child, td.text { text-align: left; }
td.key { white-space: nowrap; text-align: left; }
td .ci { display: block; color: #666; font-size: 0.85em; white-space: nowrap; }
.v-faster { color: #17652a; font-weight: bold; } .v-slower { color: #a1260d; font-weight: bold; }
.caption { color: #555; font-size: 0.9em; border-left: 4px solid #c60; padding-left: 0.6em; }
.verdict { font-size: 1.05em; border-left: 4px solid #26a; padding-left: 0.8em; }
.notice { font-weight: bold; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.9em; }
li { margin-bottom: 0.4em; }
</style></head><body>
<h1>Does EAGLE-3 beat plain decoding here?</h1>
{{ verdict | safe }}
<p class="modes-head"><b>Modes</b>, as the engine resolved them (full table: <a href="#config">effective configuration</a>):</p>
<ul class="modes">{% for m in mode_lines %}<li><b>{{ m.mode }}</b>: {{ m.line }}</li>{% endfor %}</ul>
{% if lead %}<figure class="lead"><img alt="{{ lead.name }}" src="data:image/png;base64,{{ lead.b64 }}"><figcaption>{{ lead.caption }}</figcaption></figure>
{% endif %}{{ warnings | safe }}
<h2>Summary: mean [95 % CI] over repeats</h2>
<p>{{ table_note }}</p>
{{ table | safe }}
<h2>Speedup over {{ baseline }}: the verdict is the per-repeat (Welch log-ratio) interval; the paired per-prompt estimate is shown beside it</h2>
{{ speedup_table | safe }}
<p class="caption">{{ caption }}</p>
<h2>Detail</h2>
{{ answer | safe }}
<h2>Break-even explanation</h2>
<p>A chain draft emits <i>accept length</i> tokens per cycle of <i>draft_ms + verify_ms</i>; plain decoding
emits one token per <i>decode_ms</i>. Speedup = accept_length &times; decode_ms / (draft_ms + verify_ms);
break-even accept length = (draft_ms + verify_ms) / decode_ms (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding"; EAGLE-3, Li et al. 2025).</p>
<p>Per mode, at its lowest concurrency (comparison.json has every level):</p>
<ul>{% for b in break_even %}<li>{{ b.explanation }}</li>{% else %}<li>No speculative mode with verify timings and a baseline.</li>{% endfor %}</ul>
{% if crossover %}<p>Along the context axis (lab/analysis/crossover.py; the break_even_map figure):</p>
<ul>{% for x in crossover %}<li>{{ x.line }}</li>{% endfor %}</ul>{% endif %}
<h2>Figures</h2>
{% for f in figures %}<figure><img alt="{{ f.name }}" src="data:image/png;base64,{{ f.b64 }}"><figcaption>{{ f.caption }}</figcaption></figure>
{% endfor %}
{% if trace %}<h2>Where the verify time goes (torch-profiler trace{% if trace.modelled %}, MODELLED by the emulator{% endif %})</h2>
<p>GPU busy = union of kernel intervals; a host launch gap = GPU idle before a kernel the host had not yet launched
(lab/profiling/trace.py). Traces: the <code>trace/</code> artifacts of each mode's MLflow run (open in ui.perfetto.dev).</p>
<ul>{% for m, s in trace.sentences.items() %}<li>{{ s }}</li>{% endfor %}{% for m, st in trace.failed.items() %}<li>{{ m }}: profiling {{ st }}</li>{% endfor %}</ul>
{{ trace_table | safe }}{% endif %}
{% if lossless_table %}<h2>Per-prompt detail: output token ids against the baseline's (lossless check)</h2>
<p>Each request matched with the baseline's at the same point, repeat, slot and prompt (lab/analysis/lossless.py);
first divergence: the first differing token position (0-based), the earliest over that prompt's requests.</p>
{{ lossless_table | safe }}{% endif %}
<h2 id="config">Effective configuration of each mode</h2>
<p>As requested in params.yaml and as the engine resolved it (read back from /server_info).</p>
{{ config_table | safe }}
</body></html>
"""

#: What each figure shows, in words (the report's figure captions); a figure not listed here is
#: captioned by :func:`figure_caption` from its name.
FIGURE_CAPTIONS = {
    "decode_tok_s": "Decode tok/s per request by mode, one bar per concurrency (95 % interval over repeats).",
    "latency_ms": "Where a decode iteration's time goes at the lowest concurrency: verify, draft, decode and the "
                  "client's cycle (95 % interval over repeats).",
    "accept_length": "Accept length per request (tokens per verify, bonus token included) of each speculative mode.",
    "speedup": "Decode tok/s speedup over the baseline per mode and concurrency, with the per-repeat 95 % interval "
               "and its verdict (1.0 = break-even).",
    "break_even": "Modelled speedup against accept length for each mode's measured costs; the dot is the measured "
                  "accept length, the dotted line the break-even.",
    "throughput_vs_concurrency": "Output tok/s of all requests together against concurrency, per mode "
                                 "(95 % interval bands).",
    "verify_vs_context": "Target-verify ms per cycle against the prompt's length, at the lowest concurrency.",
    "break_even_map": "Break-even accept length (draft + verify ms over the baseline's decode ms) against context "
                      "length, per mode and the backends that served its verify and draft, with the measured accept "
                      "length [95 % CI]; where the measured accept length falls below the line the mode loses.",
    "speedup_heatmap": "Decode tok/s speedup over the baseline, modes by concurrency (+ faster, - slower, "
                       "~ not distinguishable).",
    "taskmix": "Accept length and paired decode tok/s speedup per prompt category (95 % interval across prompts).",
    "verify_time_breakdown": "Where the verify step's time goes on the GPU, from the profiler trace.",
}


def _speculation_captions() -> None:
    from lab.report.speculation import FIGURE_CAPTIONS as more  # acceptance by position, speedup waterfall

    FIGURE_CAPTIONS.update(more)


_speculation_captions()


def figure_caption(name: str) -> str:
    """The words under a figure: :data:`FIGURE_CAPTIONS`, ``pareto_<mode>`` as its mode's
    throughput-interactivity trade-off, else the name with spaces."""
    if name in FIGURE_CAPTIONS:
        return FIGURE_CAPTIONS[name]
    if name.startswith("pareto_"):
        return (f"{name[len('pareto_'):]}: total output tok/s against tokens/s per user at every measured point "
                "(concurrency levels and request rates), with its Pareto frontier and the baseline's.")
    return name.replace("_", " ").capitalize() + "."


def load_label(entry: Mapping[str, Any]) -> str:
    """How a point was loaded, in words: ``"1 in flight"`` at a closed-loop point, ``"4 req/s"``
    (``", at most 8 in flight"`` with a cap) at an open-loop rate point, never "concurrency 0"."""
    rate = entry.get("request_rate")
    if rate is not None:
        cap = entry.get("concurrency") or 0
        return f"{rate:g} req/s" + (f", at most {cap} in flight" if cap else "")
    return f"{entry.get('concurrency')} in flight"


def _axes_columns(summary: dict[str, Any]) -> tuple[list[str], str]:
    """The context/output-length columns worth a column (they vary across points), and a note
    naming the constant ones."""
    entries = [e for levels in summary["modes"].values() for e in levels.values()]
    show, same = [], []
    for key, label in (("context_tokens", "context tokens"), ("max_new_tokens", "output tokens")):
        values = {e.get(key) for e in entries}
        if len(values) > 1:
            show.append(key)
        elif values != {None}:
            same.append(f"{label} {next(iter(values))}")
    return show, ("At every point: " + ", ".join(same) + ". " if same else "")


def _cell(text: str) -> str:
    """A table cell's HTML: ``"82.2 [82.1, 82.3]"`` as the mean over its interval (a second, smaller
    line), so a wide table wraps between the two instead of inside the numbers; a speedup's verdict
    (``"0.75x [0.67, 0.84] slower, within one launch"``) stays on the first line with the ratio, in
    its colour, the interval and its scope under it; other text escaped."""
    text = str(text)
    if " [" not in text or "]" not in text:
        return html.escape(text)
    head, rest = text.split(" [", 1)
    ci, tail = rest.split("]", 1)
    verdict, _, scope = tail.strip().partition(", ")
    main = html.escape(head) + (f' <span class="v-{verdict.split()[0]}">{html.escape(verdict)}</span>' if verdict else "")
    return f'{main}<span class="ci">[{html.escape(ci)}]{html.escape(", " + scope if scope else "")}</span>'


def _table(rows: list[dict[str, Any]], keys: int = 3) -> str:
    """An HTML table of ``rows`` (one dict per row, the first row's keys as the header); the first
    ``keys`` columns (mode, point, load) never wrap; cells through :func:`_cell`."""
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(
        f'<td class="key">{html.escape(str(r.get(c, "-")))}</td>' if i < keys else f"<td>{_cell(r.get(c, '-'))}</td>"
        for i, c in enumerate(cols)) + "</tr>" for r in rows)
    return f'<table class="dataframe"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def backend_label(entry: Mapping[str, Any]) -> str | None:
    """``"verify triton, draft triton"``: the attention backends that served an entry's target
    verify and draft (``verify_backend`` / ``draft_backend`` of
    :func:`lab.analysis.comparison.summarize`, from ``/server_info``), or None (no speculation)."""
    v, d = entry.get("verify_backend"), entry.get("draft_backend")
    if not v and not d:
        return None
    return f"verify {v or '?'}, draft {d or '?'}"


def _with_backend(row: dict[str, Any], entry: Mapping[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """``row`` with an ``attention backend`` column after ``load`` when any entry has one."""
    if any(e.get("verify_backend") or e.get("draft_backend") for lv in summary["modes"].values() for e in lv.values()):
        row["attention backend"] = backend_label(entry) or "-"
    return row


def summary_html(summary: dict[str, Any]) -> str:
    """The report's summary table: one row per mode x point with how it was loaded, the
    context/output length where they vary, and the mean [95 % CI] of each metric
    :mod:`lab.catalog` shows in ``report`` (the speedups are :func:`speedup_html`'s), then
    "intervals": what the row's intervals span ("within one launch", "across 3 launches")."""
    metrics, _ = table_columns(catalog.REPORT)
    axes, _ = _axes_columns(summary)
    rows = []
    for mode, levels in summary["modes"].items():
        for key, e in levels.items():
            row = _with_backend({"mode": mode, "point": key, "load": load_label(e)}, e, summary)
            for axis in axes:
                row[axis.replace("_", " ").replace("max new", "output")] = e.get(axis, "-")
            for m in metrics:
                est = Estimate.from_dict(e.get(m.name))
                row[m.header] = "-" if est is None else est.text(m.digits)
            row["intervals"] = e.get("interval_scope") or "-"
            rows.append(row)
    return _table(rows)


def speedup_html(summary: dict[str, Any]) -> str:
    """The speedups over the baseline, one row per mode x point: the verdict speedup of the
    catalog's headline metric (:data:`lab.catalog.VERDICT_SPEEDUP`) with its verdict and the
    interval's scope, the other speedups beside it without a verdict."""
    from lab.analysis.provenance import scope_of

    _, speedups = table_columns(catalog.REPORT)
    head = catalog.headline_metric()
    baseline = summary.get("baseline")
    rows = []
    for mode, levels in summary["modes"].items():
        if mode == baseline:
            continue
        for key, e in levels.items():
            row = _with_backend({"mode": mode, "point": key, "load": load_label(e)}, e, summary)
            for m, kind in speedups:
                k = catalog.speedup_key(m.name, kind)
                r = Ratio.from_dict(e.get(k))
                label = catalog.speedup_label(m, kind)
                if m.name == head.name and kind == catalog.VERDICT_SPEEDUP:
                    cell = speedup_cell(r, mode, baseline, r.scope if r is not None else None)
                    row[f"{label} (verdict)"] = cell if r is None else f"{cell}, {scope_of(e.get(k), summary, mode)}"
                else:
                    row[label] = speedup_cell(None if r is None else Ratio(r.ratio, r.ci95_lo, r.ci95_hi, None),
                                              mode, baseline)
            rows.append(row)
    return _table(rows) if rows else "<p>No baseline mode: no speedups.</p>"


def mode_line(eff: Mapping[str, Any] | None, requested: ModeParams | None) -> str:
    """One mode's configuration in a line (the report's top): the speculative algorithm and its
    steps, topk, draft tokens and verify mode, the attention backend, tensor parallelism and CUDA
    graphs, as the engine resolved them (``effective_config``, read back from /server_info); from
    params.yaml (``requested``, saying so) when the engine reported nothing."""
    if eff:
        alg, steps, topk, draft = (eff.get(f"speculative_{k}") for k in ("algorithm", "num_steps", "eagle_topk",
                                                                          "num_draft_tokens"))
        parts = [f"{alg}, {steps} steps, topk {topk}, {draft} draft tokens, "
                 f"{eff.get('speculative_attention_mode') or 'prefill'}-mode verify" if alg else "no speculation"]
        backend = eff.get("verify_attention_backend") or eff.get("attention_backend")
        if backend:
            parts.append(f"attention {backend}")
        if eff.get("tp_size"):
            parts.append(f"TP {eff['tp_size']}")
        graphs_off = eff.get("decode_cuda_graph_disabled", eff.get("disable_cuda_graph"))
        if graphs_off is not None:
            parts.append("eager (no CUDA graphs)" if graphs_off else "CUDA graphs")
        return "; ".join(parts)
    if requested is None:
        return "-"
    if not requested.is_speculative:
        return "no speculation (params.yaml; the engine reported no configuration)"
    return (f"{requested.algorithm}, {requested.num_steps} steps, topk {requested.eagle_topk}, "
            f"{requested.num_draft_tokens} draft tokens, {requested.attention_mode or 'prefill'}-mode verify "
            "(params.yaml; the engine reported no configuration)")


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

    from lab.report.answer import answer_html, warnings_html

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    figures = [{"name": name, "caption": figure_caption(name),
                "b64": base64.b64encode(Path(p).read_bytes()).decode("ascii")}
               for name, p in summary.get("figures", {}).items()]
    # the verdict first, then the detail; the warnings (each once, naming its modes) folded under the lead figure
    page = answer_html(summary, with_warnings=False)
    cut = page.index('<section class="answer">')
    # the figure beside the verdict at the top (the speedup's, when there is a baseline), the rest below
    names = [f["name"] for f in figures]
    lead_name = "speedup" if summary.get("baseline") and "speedup" in names else (names[0] if names else None)
    lead = next((f for f in figures if f["name"] == lead_name), None)
    eff = summary.get("effective_config") or {}
    mode_lines = [{"mode": m, "line": mode_line(eff.get(m), modes.get(m))} for m in summary["modes"]]
    _, note = _axes_columns(summary)
    text = env.from_string(_TEMPLATE).render(
        engine=html.escape(engine), caption=summary.get("caption", ""), baseline=summary.get("baseline") or "-",
        verdict=page[:cut], answer=page[cut:], table_note=note + "Rate points (r<R>) send requests at R req/s on a "
        "seeded schedule; closed-loop points (c<N>) keep N requests in flight.",
        break_even=_lowest_level(summary.get("break_even", [])), crossover=summary.get("crossover") or [], table=summary_html(summary),
        speedup_table=speedup_html(summary), figures=[f for f in figures if f is not lead], lead=lead,
        mode_lines=mode_lines, warnings=warnings_html(summary),
        config_table=_config_html(modes, summary), trace=summary.get("trace"),
        trace_table=_trace_html(summary.get("trace")), lossless_table=_lossless_html(summary.get("lossless")))
    write_text_atomic(path, text)
    return path
