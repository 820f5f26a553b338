"""The answer: one line per mode a performance engineer can act on, then the detail.

One renderer for every place that states the answer: the end of ``dvc repro`` (printed by
the compare stage, :mod:`lab.pipeline.compare_stage`), the top of ``reports/report.html`` and
``reports/summary.md``, and ``lab summary``. Its input is the comparison that
:func:`lab.pipeline.compare.run_compare` returns and writes to ``reports/comparison.json``:

- ``baseline``: the baseline mode's name (None: no speedups);
- ``modes``: ``{mode: {point: entry}}``; an entry holds ``concurrency``, the means of the
  metrics :mod:`lab.catalog` states in the answer (``{"mean": ...}``: accept length, verify
  ms) and the speedups of the others (``speedup_<metric>``, ``paired_speedup_<metric>``:
  ``{"ratio", "ci95_lo", "ci95_hi", "verdict"}``, and from the launch-aware comparison, where
  it gives them, ``scope`` (the interval's label, e.g. ``"across 3 launches"``) or
  ``launches`` (how many engine launches per mode it spans));
- ``launches`` (optional): launches per mode, an int or ``{mode: int}`` (read when a speedup
  entry carries neither ``scope`` nor ``launches``; absent: ``"within one launch"``);
- ``provenance``: ``{mode: {engine, timing, weights, acceptance}}`` (:mod:`lab.analysis.provenance`);
- ``crosscheck``: ``{mode: {point: {"count", "max_disagreement", "checks"}}}``
  (:func:`lab.analysis.crosschecks.crosscheck_summary`);
- ``break_even``: per speculative mode at its lowest concurrency, the break-even explanation
  (:func:`lab.analysis.theory.explain`);
- ``load``: :func:`lab.analysis.load.load_part`'s section (its ``sentences``, one per
  speculative mode, come after the per-point detail; None or absent: no rate points);
- ``lossless`` (optional): :func:`lab.analysis.lossless.check_lossless`'s dict; each mode's
  ``line`` is stated under the mode;
- ``taskmix`` (optional): per-category rows of :func:`lab.analysis.taskmix.comparison_taskmix`,
  rendered by :mod:`lab.report.task_categories` as the "Per task category" lines;
- ``warnings``: ``{mode: [text, ...]}`` (measurement hygiene, lossless check); ``notice``: a sentence
  when two modes resolved to the same configuration; ``caption``: which engine produced
  the numbers.

**One verdict per point.** The verdict is the per-repeat Welch interval of the catalog's headline
metric (:func:`lab.catalog.headline_metric`, :data:`lab.catalog.VERDICT_SPEEDUP`: decode tok/s);
the paired per-prompt estimate of the same metric is shown beside it without a verdict word, and
the other speedups the catalog states in ``answer`` as ratio and interval only. Where the paired
estimate's own verdict (``paired_verdict_*`` in summary.csv) differs from the point's, the point's
line says in one more clause which one it used and why (:func:`disagreement`). The answer
opens with one line per speculative mode (:func:`headline_lines`): its verdict and interval at its
lowest closed-loop point, the interval's scope, and the verdicts at its other closed-loop points.

Every line of :func:`answer_text` fits in :data:`WIDTH` characters (longer sentences are
wrapped, continuation lines indented; only a single word longer than that, a long path, is kept
whole). Only points at the primary context and output length
(``c1``, ``c8``...) are stated; the report's table has the others. This module imports nothing
heavy (``lab summary`` must answer in well under 3 s).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import textwrap
from pathlib import Path
from typing import Any, Mapping

from lab import catalog
from lab.analysis.estimates import Ratio, Scope
from lab.analysis.provenance import scope_data, scope_of

__all__ = ["WIDTH", "MAX_LINES", "answer_brief", "answer_speedups", "answer_values", "Answer", "build_answer", "group_warnings", "answer_text",
           "answer_markdown", "answer_html", "warnings_html", "load_answer", "headline_lines", "mode_headline", "ModeHeadline"]

#: The widest line :func:`answer_text` prints (a terminal of 120 columns).
WIDTH = 120
#: The most lines :func:`answer_brief` (the end of ``dvc repro``) prints: one screen (issue 34, item 6).
MAX_LINES = 30



def answer_speedups() -> list[tuple[str, str]]:
    """``(entry key, label)`` of every speedup the answer states, in order: those of the metrics
    :mod:`lab.catalog` shows in ``answer`` (the per-prompt one is
    :func:`lab.analysis.paired.paired_part`'s ratio and its interval)."""
    return [(catalog.speedup_key(m.name, k), f"{m.header} paired per prompt" if k == "per_prompt" else m.header)
            for m in catalog.shown_in(catalog.ANSWER) for k in m.speedups]


def answer_values() -> list[catalog.Metric]:
    """The metrics whose mean the answer states (shown in ``answer``, no speedup of their own)."""
    return [m for m in catalog.shown_in(catalog.ANSWER) if not m.speedups]


def _num(v: Any) -> float | None:
    return None if v is None or not isinstance(v, (int, float)) or v != v else float(v)


def _ratio_text(s: dict[str, Any] | None, verdict: bool) -> str | None:
    """``"0.75x [0.67, 0.84] slower"`` (``verdict``) or ``"0.74x [0.69, 0.79]"`` (beside the
    verdict, not a second one): :meth:`lab.analysis.estimates.Ratio.text` without the scope (the
    line states it once); None without a finite ratio."""
    r = Ratio.from_dict(s)
    if r is None or r.ratio is None or not math.isfinite(r.ratio):
        return None
    return (r if verdict else dataclasses.replace(r, verdict=None)).text(scope=False)


def disagreement(e: dict[str, Any]) -> str | None:
    """One clause for a point whose paired per-prompt verdict differs from its verdict (issue 32,
    item 5), e.g. ``"the word is the per-repeat interval's, not the paired one's (which lies above
    1): ..."``, naming no second verdict word; None when they agree or either is absent."""
    head = catalog.headline_metric().name
    main = e.get(catalog.speedup_key(head, catalog.VERDICT_SPEEDUP)) or {}
    paired = e.get(catalog.speedup_key(head, "per_prompt")) or {}
    if not main or not paired or main.get("ratio") is None or paired.get("ratio") is None:
        return None
    v, pv = main.get("verdict"), paired.get("verdict")
    if v == pv:
        return None
    lo, hi = _num(paired.get("ci95_lo")), _num(paired.get("ci95_hi"))
    where = ("has no interval" if lo is None or hi is None else "lies above 1" if lo > 1 else
             "lies below 1" if hi < 1 else "includes 1")
    return (f"the word is the per-repeat interval's, not the paired one's (which {where}): the per-repeat "
            f"estimator is declared before the run (lab.catalog.VERDICT_SPEEDUP), so the word is not picked "
            f"after seeing both, and the paired one's prompts share a repeat's batch and launch")


def _mean(e: dict[str, Any], key: str) -> float | None:
    return _num((e.get(key) or {}).get("mean"))


def group_warnings(warnings: dict[str, list[str]] | None) -> list[tuple[list[str], str]]:
    """``[(modes, text), ...]``: each distinct warning once, with every mode it applies to
    (modes in the order they first appear; warnings in first-seen order)."""
    out: dict[str, list[str]] = {}
    for mode, ws in (warnings or {}).items():
        for w in ws:
            modes = out.setdefault(w, [])
            if mode not in modes:
                modes.append(mode)
    return [(modes, w) for w, modes in out.items()]


def _primary(points: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The closed-loop points at the primary context/output length, lowest concurrency first."""
    out = [(k, e) for k, e in points.items() if k == f"c{e.get('concurrency')}"]
    return sorted(out, key=lambda kv: kv[1].get("concurrency") or 0)


@dataclasses.dataclass(frozen=True)
class ModeHeadline:
    """One speculative mode's verdict at its lowest closed-loop point (:func:`mode_headline`).

    :ivar point: that point (``"c1"``).
    :ivar speedup: the verdict speedup there (:data:`lab.catalog.VERDICT_SPEEDUP` of the catalog's
        headline metric), a finite ratio.
    :ivar scope: what its interval spans (:func:`lab.analysis.provenance.scope_data`).
    :ivar others: ``(point, verdict, ratio)`` of the mode's other closed-loop points, lowest first.
    """

    point: str
    speedup: Ratio
    scope: Scope
    others: list[tuple[str, str | None, float]]

    @property
    def text(self) -> str:
        """``"1.15x faster at c1 [1.07, 1.24], within one launch"``; without a verdict word the
        estimate and why (``"1.15x at c1 [1.07, 1.24], within one launch; no verdict: ..."``)."""
        r = self.speedup
        ci = f" [{r.ci95_lo:.2f}, {r.ci95_hi:.2f}]" if r.ci95_lo is not None and r.ci95_hi is not None else " (no interval)"
        if r.verdict:
            return f"{r.ratio:.2f}x {r.verdict} at {self.point}{ci}, {self.scope.text}"
        return f"{r.ratio:.2f}x at {self.point}{ci}, {self.scope.text}; {r.note or 'no verdict'}"

    def short(self, words: dict[str, str]) -> str:
        """For narrow columns (``reports/headline/<mode>.json``): the speedup with its interval
        (:meth:`lab.analysis.estimates.Ratio.text`), its verdict said with ``words`` where they have
        one (``"not judged"`` without a word) and :meth:`lab.analysis.estimates.Scope.short`:
        ``"1.15x [1.07, 1.24] faster, 1 launch"``."""
        r = self.speedup
        word = words.get(r.verdict, r.verdict) or "not judged"
        return f"{dataclasses.replace(r, verdict=word, note=None).text(scope=False)}, {self.scope.short()}"


def mode_headline(comparison: Mapping[str, Any], mode: str) -> ModeHeadline | None:
    """The verdict of one speculative mode at its lowest closed-loop point (:class:`ModeHeadline`);
    None without a finite speedup there."""
    key = catalog.speedup_key(catalog.headline_metric().name, catalog.VERDICT_SPEEDUP)
    stated = [(p, e[key]) for p, e in _primary((comparison.get("modes") or {}).get(mode) or {})
              if e.get(key) and _num(e[key].get("ratio")) is not None and math.isfinite(e[key]["ratio"])]
    if not stated:
        return None
    (point, s), rest = stated[0], stated[1:]
    return ModeHeadline(point, Ratio.from_dict(s), scope_data(s, comparison, mode),
                        [(p, o.get("verdict"), o["ratio"]) for p, o in rest])


def headline_lines(comparison: dict[str, Any]) -> list[tuple[str, str]]:
    """``[(mode, line)]``, one per mode with a speedup: ``"eagle3_decode: 1.15x faster at c1
    [1.07, 1.24], within one launch; not distinguishable at c8 (1.10x)"`` (the other closed-loop
    points grouped by verdict, each with its ratio)."""
    out = []
    baseline = comparison.get("baseline")
    for mode in comparison.get("modes") or {}:
        if mode == baseline:
            continue
        h = mode_headline(comparison, mode)
        if h is None:
            out.append((mode, f"{mode}: no speedup (no {baseline or 'baseline'} at its points)"))
            continue
        groups: dict[str, list[str]] = {}
        for p, v, r in h.others:
            groups.setdefault(v or "not judged", []).append(f"{p} ({r:.2f}x)")
        tail = "".join(f"; {v} at {', '.join(ps)}" for v, ps in groups.items())
        out.append((mode, f"{mode}: {h.text}{tail}"))
    return out


class Answer:
    """The answer's content, independent of its rendering.

    :ivar headlines: :func:`headline_lines`.
    :ivar rows: per non-baseline mode, ``(mode, [(point, verdict text, [beside texts], [value
        texts])])``: the verdict (``"decode tok/s 0.75x [0.67, 0.84] slower"``), the estimates
        beside it (the paired per-prompt one, the other speedups), the means
        (``"accept length 1.84"``, :meth:`lab.catalog.Metric.text`).
    :ivar warnings: :func:`group_warnings` of the comparison's warnings.
    :ivar notice, caption, report: the identical-configuration notice, the engine caption,
        and where ``report.html`` is (or None).
    :ivar provenance: the provenance sentence (:func:`lab.analysis.provenance.provenance_sentence`).
    :ivar lossless: ``{mode: sentence}`` of the lossless check (empty when not run).
    :ivar break_even: ``{mode: explanation}`` at the mode's lowest concurrency.
    :ivar crosscheck: ``{mode: sentence}``: where the client's and the server's clocks disagreed.
    :ivar crossover: ``{mode: sentence}``: where the verdict changes along the context axis, with
        the backends, intervals and accept length it rests on (:func:`lab.analysis.crossover.crossover_line`).
    :ivar load: the open-loop sentences, one per speculative mode (empty: no rate points).
    """

    def __init__(self, rows, baseline, warnings, notice, caption, report, lossless=None, load=(), headlines=(),
                 provenance="", break_even=None, crosscheck=None, crossover=None) -> None:
        self.rows, self.baseline, self.warnings = rows, baseline, warnings
        self.notice, self.caption, self.report = notice, caption, report
        self.lossless: dict[str, str] = dict(lossless or {})
        self.load = list(load)
        self.headlines = list(headlines)
        self.provenance = provenance
        self.break_even: dict[str, str] = dict(break_even or {})
        self.crosscheck: dict[str, str] = dict(crosscheck or {})
        self.crossover: dict[str, str] = dict(crossover or {})


def _provenance_sentence(comparison: dict[str, Any]) -> str:
    from lab.analysis.provenance import provenance_sentence

    return provenance_sentence(comparison.get("provenance") or {})


def _crosscheck_sentences(comparison: dict[str, Any]) -> dict[str, str]:
    from lab.analysis.crosschecks import crosscheck_sentence

    out = {}
    for mode, points in (comparison.get("crosscheck") or {}).items():
        if text := crosscheck_sentence(points):
            out[mode] = text
    return out


def _crossover(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    """``comparison["crossover"]`` (the compare stage's), else computed from its modes (a
    comparison.json written before the context axis had crossovers)."""
    if comparison.get("crossover") is not None:
        return list(comparison["crossover"])
    if not comparison.get("modes"):
        return []
    from lab.analysis.crossover import crossovers

    return [x.to_dict() for x in crossovers(comparison)]


def build_answer(comparison: dict[str, Any], report_path: str | Path | None = None) -> Answer:
    """Collect the answer from a comparison (module docstring); ``report_path`` is shown as given."""
    baseline = comparison.get("baseline")
    head = catalog.headline_metric()
    verdict_key = catalog.speedup_key(head.name, catalog.VERDICT_SPEEDUP)
    rows = []
    speedups, values = answer_speedups(), answer_values()
    for mode, points in (comparison.get("modes") or {}).items():
        if mode == baseline:
            continue
        lines = []
        for key, e in _primary(points):
            verdict = _ratio_text(e.get(verdict_key), verdict=True)
            if verdict:
                verdict = f"{head.header} {verdict}, {scope_of(e.get(verdict_key), comparison, mode)}"
                if not (e.get(verdict_key) or {}).get("verdict") and (e.get(verdict_key) or {}).get("note"):
                    verdict += f"; {e[verdict_key]['note']}"  # why there is no word (issue 32)
                if why := disagreement(e):
                    verdict += f"; {why}"
            paired_key = catalog.speedup_key(head.name, "per_prompt")
            beside = [f"{'paired per prompt' if k == paired_key else label} {t}" for k, label in speedups
                      if k != verdict_key and (t := _ratio_text(e.get(k), verdict=False))]
            shown = [m.text(v) for m in values if (v := _mean(e, m.name)) is not None]
            if e.get("verify_backend") or e.get("draft_backend"):  # next to the verify number: what served it
                shown.append(f"attention verify {e.get('verify_backend') or '?'}, draft {e.get('draft_backend') or '?'}")
            lines.append((key, verdict, beside, shown))
        rows.append((mode, lines))
    lossless = {m: e["line"] for m, e in ((comparison.get("lossless") or {}).get("modes") or {}).items()
                if e.get("line")}
    load = list(((comparison.get("load") or {}).get("sentences") or {}).values())
    be: dict[str, str] = {}
    for b in sorted(comparison.get("break_even") or [], key=lambda b: b.get("concurrency") or 0):
        be.setdefault(b["mode"], b.get("explanation") or "")
    return Answer(rows, baseline, group_warnings(comparison.get("warnings")), comparison.get("notice"),
                  comparison.get("caption"), str(report_path) if report_path else None, lossless, load,
                  headlines=headline_lines(comparison) if baseline else [],
                  provenance=_provenance_sentence(comparison), break_even=be,
                  crosscheck=_crosscheck_sentences(comparison),
                  crossover={x["mode"]: x["line"] for x in _crossover(comparison) if x.get("line")})


#: Heading of the open-loop sentences (lab.analysis.load).
LOAD_HEADING = "Under open-loop load (requests arriving at a rate; goodput = requests meeting the SLO per measured second):"
#: Heading of the detail, saying which estimate is the verdict.
DETAIL_HEADING = ("Detail per point (the verdict is the per-repeat interval; the paired per-prompt estimate "
                  "is shown beside it):")
#: Heading of the cross-check lines.
CROSSCHECK_HEADING = ("Cross-checks: the client's cycle, the scheduler's step and the GPU's time disagree by more "
                      "than 10 % (result.json levels.<point>.crosscheck_flags):")


def _point_text(point: str, verdict: str | None, beside: list[str], values: list[str]) -> str:
    said = verdict or "no speedup (no baseline at this point)"
    if beside:
        said += f" ({'; '.join(beside)})"
    return f"{point}: {said}" + (f"; {', '.join(values)}" if values else "")


def _question(a: Answer) -> str:
    if not a.baseline:
        return "No baseline mode in this comparison: no speedups (set baseline_mode in params.yaml)."
    m = catalog.headline_metric()
    return f"Does EAGLE-3 beat plain decoding here? {m.header} speedup over {a.baseline} [95 % CI]:"


def _wrap(text: str, indent: int, more: int = 4) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH` characters, indented by ``indent`` spaces, the
    continuation lines by ``indent + more``. A single word longer than a line (a long path) is
    kept whole, so it can be copied."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * (indent + more),
                         break_long_words=False, break_on_hyphens=False) or [" " * indent]


def answer_text(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """Plain text: the one-line verdicts first, then the detail (what ``dvc repro`` ends with and
    ``lab summary`` starts with); every line at most :data:`WIDTH` characters."""
    a = build_answer(comparison, report_path)
    lines = _wrap(_question(a), 0)
    for _, text in a.headlines:
        lines += _wrap(text, 2)
    if a.provenance:
        lines += _wrap(f"Numbers from: {a.provenance}", 2)
    if not a.baseline:
        lines += [f"  {mode}: " + ", ".join(p for p, *_ in points) for mode, points in a.rows]
    if a.baseline and a.rows:
        lines += _wrap(DETAIL_HEADING, 0)
        for mode, points in a.rows:
            lines.append(f"  {mode}:")
            for p in points:
                lines += _wrap(_point_text(*p), 4)
            if mode in a.break_even:
                lines += _wrap(f"break-even: {a.break_even[mode]}", 4)
            if mode in a.crossover:
                lines += _wrap(f"context: {a.crossover[mode]}", 4)
            if mode in a.lossless:
                lines += _wrap(a.lossless[mode], 4)
    from lab.report.task_categories import taskmix_lines  # per task category, when the prompts have several

    tm = taskmix_lines(comparison)
    if tm:
        lines += _wrap(tm[0], 2)
        for ln in tm[1:]:
            lines += _wrap(ln, 4)
    from lab.report.speculation import speculation_lines  # acceptance by position, the waterfall's largest loss

    for ln in speculation_lines(comparison):
        lines += _wrap(ln, 2, 2)
    if a.load:
        lines += _wrap(LOAD_HEADING, 2)
        for t in a.load:
            lines += _wrap(t, 4)
    if a.crosscheck:
        lines += _wrap(CROSSCHECK_HEADING, 2)
        for mode, t in a.crosscheck.items():
            lines += _wrap(f"{mode}: {t}", 4)
    if a.caption:
        lines += _wrap(f"({a.caption})", 2)
    if a.notice:
        lines += _wrap(f"Note: {a.notice}", 2)
    for modes, w in a.warnings:
        lines += _wrap(f"Warning ({', '.join(modes)}): {w}", 2)
    if a.report:
        lines += _wrap(f"Report: {a.report}", 2)
    return "\n".join(lines)


def answer_markdown(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """Markdown (the top of ``reports/summary.md``): the one-line verdicts, then the detail."""
    a = build_answer(comparison, report_path)
    lines = [f"**{_question(a)}**", ""]
    lines += [f"- **{text}**" for _, text in a.headlines]
    if a.provenance:
        lines += ["", f"_Numbers from: {a.provenance}_"]
    if a.rows:
        lines += ["", f"**{DETAIL_HEADING}**", ""] if a.baseline else [""]
        for mode, points in a.rows:
            lines.append(f"- **{mode}**")
            lines += [f"  - {_point_text(*p)}" for p in points]
            if mode in a.break_even:
                lines.append(f"  - break-even: {a.break_even[mode]}")
            if mode in a.crossover:
                lines.append(f"  - context: {a.crossover[mode]}")
            if mode in a.lossless:
                lines.append(f"  - {a.lossless[mode]}")
    from lab.report.task_categories import taskmix_markdown

    if tm := taskmix_markdown(comparison):
        lines += ["", tm]
    from lab.report.speculation import speculation_markdown

    if sp := speculation_markdown(comparison):
        lines += ["", sp]
    if a.load:
        lines += ["", f"**{LOAD_HEADING}**", ""] + [f"- {t}" for t in a.load]
    if a.crosscheck:
        lines += ["", f"**{CROSSCHECK_HEADING}**", ""] + [f"- {m}: {t}" for m, t in a.crosscheck.items()]
    if a.caption:
        lines += ["", f"_{a.caption}_"]
    if a.notice:
        lines += ["", f"Note: {a.notice}"]
    if a.warnings:
        lines += ["", "Warnings:"] + [f"- ({', '.join(modes)}) {w}" for modes, w in a.warnings]
    if a.report:
        lines += ["", f"Report: {a.report}"]
    return "\n".join(lines)


def warnings_html(comparison: dict[str, Any]) -> str:
    """The measurement warnings as a folded HTML block (escaped): ``<details class="warnings">``
    whose summary line counts them and names the modes they concern; unfolded, each warning once,
    naming its modes (:func:`group_warnings`). ``""`` when there are none."""
    grouped = group_warnings(comparison.get("warnings"))
    if not grouped:
        return ""
    e = html.escape
    modes = list(dict.fromkeys(m for ms, _ in grouped for m in ms))
    return (f'<details class="warnings"><summary><b>Measurement warnings</b>: {len(grouped)} '
            f"({e(', '.join(modes))}); click to unfold</summary><ul>" + "".join(
                f"<li><b>{e(', '.join(ms))}</b>: {e(w)}</li>" for ms, w in grouped) + "</ul></details>")


def answer_html(comparison: dict[str, Any], report_path: str | Path | None = None, *, with_warnings: bool = True) -> str:
    """An HTML fragment (escaped), the top of ``reports/report.html``: the one-line verdicts and
    where the numbers come from (``<section class="verdict">``); the detail, the load sentences,
    the cross-checks and the warnings (folded: :func:`warnings_html`; left out with
    ``with_warnings=False``, where the page places them itself) follow in ``<section class="answer">``."""
    a = build_answer(comparison, report_path)
    e = html.escape
    question = (f"{catalog.headline_metric().header} speedup over {a.baseline} [95 % CI], per mode:" if a.baseline
                else _question(a))  # the page's title asks the question
    out = [f'<section class="verdict"><p><b>{e(question)}</b></p><ul>'
           + "".join(f"<li><b>{e(text)}</b></li>" for _, text in a.headlines) + "</ul>"]
    if a.provenance:
        out.append(f'<p class="provenance">Numbers from: {e(a.provenance)}</p>')
    if a.notice:
        out.append(f'<p class="notice">{e(a.notice)}</p>')
    out.append("</section>")
    out.append('<section class="answer">')
    if a.rows:
        out.append(f"<p><b>{e(DETAIL_HEADING)}</b></p><ul>" if a.baseline else "<ul>")
        for mode, points in a.rows:
            extra = "".join(f"<li>{e(x)}</li>" for x in (
                *( [f"break-even: {a.break_even[mode]}"] if mode in a.break_even else []),
                *([f"context: {a.crossover[mode]}"] if mode in a.crossover else []),
                *([a.lossless[mode]] if mode in a.lossless else [])))
            out.append(f"<li><b>{e(mode)}</b><ul>" + "".join(f"<li>{e(_point_text(*p))}</li>" for p in points)
                       + extra + "</ul></li>")
        out.append("</ul>")
    from lab.report.task_categories import taskmix_html

    out.append(taskmix_html(comparison))
    from lab.report.speculation import speculation_html

    out.append(speculation_html(comparison))
    if a.load:
        out.append(f"<p><b>{e(LOAD_HEADING)}</b></p><ul>" + "".join(f"<li>{e(t)}</li>" for t in a.load) + "</ul>")
    if a.crosscheck:
        out.append(f'<p><b>{e(CROSSCHECK_HEADING)}</b></p><ul class="crosscheck">' + "".join(
            f"<li><b>{e(m)}</b>: {e(t)}</li>" for m, t in a.crosscheck.items()) + "</ul>")
    if a.warnings and with_warnings:
        out.append(warnings_html(comparison))
    out.append("</section>")
    return "\n".join(out)


#: The line after the verdicts in :func:`answer_brief`: where the rest of the answer is.
DETAIL_POINTER = ("Detail per point (break-even, context, lossless, load, cross-checks, each warning in full): "
                  "`lab summary`")


def answer_brief(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """The answer on one screen: what ``dvc repro`` ends with. At most :data:`MAX_LINES` lines of
    at most :data:`WIDTH` characters: the question, one verdict per speculative mode
    (:func:`headline_lines`, wrapped while they fit, else one line each, cut with ``…``, and past
    the room left the count of modes left out), where the numbers come from, the
    identical-configuration notice, one line per kind of warning
    (:func:`lab.report.warning_kinds.kind_lines`), where the detail is (``lab summary``) and the
    report. ``lab summary`` prints :func:`answer_text`, the whole answer."""
    from lab.report.warning_kinds import kind_lines

    a = build_answer(comparison, report_path)
    head = _wrap(_question(a), 0)
    tail: list[str] = []
    if a.provenance:
        tail += _wrap(f"Numbers from: {a.provenance}", 2)[:2]
    if a.notice:
        tail += _wrap(f"Note: {a.notice}", 2)[:2]
    tail += kind_lines(comparison.get("warnings"), WIDTH, indent=2, max_kinds=6)
    tail += _wrap(DETAIL_POINTER if a.baseline else "Detail: `lab summary`", 0)
    if a.report:
        tail += _wrap(f"Report: {a.report}", 0)
    room = MAX_LINES - len(head) - len(tail)
    texts = [t for _, t in a.headlines] or ([f"{mode}: " + ", ".join(p for p, *_ in points) for mode, points in a.rows]
                                             if not a.baseline else [])
    wrapped = [ln for t in texts for ln in _wrap(t, 2)]
    if len(wrapped) <= room:
        verdicts = wrapped
    else:
        cut = [t if len(t) + 2 <= WIDTH else t[: WIDTH - 3].rstrip() + "…" for t in texts]
        verdicts = ["  " + t for t in cut]
        if len(verdicts) > room:
            keep = max(room - 1, 0)
            verdicts = verdicts[:keep] + [f"  ... and {len(texts) - keep} more modes (`lab summary` lists each)"]
    return "\n".join(head + verdicts + tail)


def load_answer(reports_dir: str | Path, report_shown: str | None = None, brief: bool = False) -> str:
    """:func:`answer_text` (``brief``: :func:`answer_brief`) of ``reports_dir/comparison.json``;
    the report is named as ``report_shown`` when given (default ``reports_dir/report.html``).

    :raises FileNotFoundError: no comparison yet (the message says to run ``dvc repro``).
    """
    path = Path(reports_dir) / "comparison.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. Fix: run `dvc repro` (the compare stage writes it)")
    render = answer_brief if brief else answer_text
    return render(json.loads(path.read_text()), report_shown or Path(reports_dir) / "report.html")
