"""The answer in a few lines: per mode, its speedup over the baseline at each concurrency.

One renderer for every place that states the answer: the end of ``dvc repro`` (printed by
the compare stage, :mod:`lab.pipeline.compare_stage`), the top of ``reports/report.html`` and
``reports/summary.md``, and ``lab summary``. Its input is the comparison that
:func:`lab.pipeline.compare.run_compare` returns and writes to ``reports/comparison.json``:

- ``baseline``: the baseline mode's name (None: no speedups);
- ``modes``: ``{mode: {point: entry}}``; an entry holds ``concurrency``, the means of the
  metrics :mod:`lab.catalog` states in the answer (``{"mean": ...}``: accept length, verify
  ms) and the speedups of the others (``speedup_<metric>``, ``paired_speedup_<metric>``:
  ``{"ratio", "ci95_lo", "ci95_hi", "verdict"}``);
- ``load``: :func:`lab.analysis.load.add_load`'s section; its ``sentences`` (one per
  speculative mode: "eagle3_decode beats baseline up to N req/s at this SLO (...)") are
  stated after the per-concurrency lines (None or absent: no rate points);
- ``lossless`` (optional): :func:`lab.analysis.lossless.check_lossless`'s dict; each mode's
  ``line`` is stated under the mode;
- ``taskmix`` (optional): per-category rows of :func:`lab.analysis.taskmix.add_taskmix`,
  rendered by :mod:`lab.report.task_categories` as the "Per task category" lines;
- ``warnings``: ``{mode: [text, ...]}`` (measurement hygiene, lossless check); ``notice``: a sentence
  when two modes resolved to the same configuration; ``caption``: which engine produced
  the numbers.

What is stated is the catalog's ``answer`` place (:func:`answer_speedups`, :func:`answer_values`):
a metric shown there adds its speedups, or its mean when it has none, to every rendering. Only
points at the primary context and output length (``c1``, ``c8``...) are stated; the report's
table has the others.
This module imports nothing heavy (``lab summary`` must answer in well under 3 s).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from lab import catalog

__all__ = ["answer_speedups", "answer_values", "Answer", "build_answer", "group_warnings", "answer_text", "answer_markdown",
           "answer_html", "load_answer"]

def answer_speedups() -> list[tuple[str, str]]:
    """``(entry key, label)`` of every speedup the answer states, in order: those of the metrics
    :mod:`lab.catalog` shows in ``answer`` (the per-prompt one is
    :func:`lab.analysis.paired.add_paired`'s ratio and its interval)."""
    return [(catalog.speedup_key(m.name, k), f"{m.header} paired per prompt" if k == "per_prompt" else m.header)
            for m in catalog.shown_in(catalog.ANSWER) for k in m.speedups]


def answer_values() -> list[catalog.Metric]:
    """The metrics whose mean the answer states (shown in ``answer``, no speedup of their own)."""
    return [m for m in catalog.shown_in(catalog.ANSWER) if not m.speedups]


def _fmt_speedup(s: dict[str, Any] | None) -> str | None:
    from lab.analysis.stats import format_speedup

    if not s:
        return None
    num = lambda v: None if v is None or v != v else float(v)  # noqa: E731  (NaN -> None)
    return format_speedup(num(s.get("ratio")), num(s.get("ci95_lo")), num(s.get("ci95_hi")), s.get("verdict"),
                          scope=s.get("scope"), note=s.get("note"))  # what the interval spans, e.g. "within one launch"


def _mean(e: dict[str, Any], key: str) -> float | None:
    v = (e.get(key) or {}).get("mean")
    return None if v is None or v != v else float(v)


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


class Answer:
    """The answer's content, independent of its rendering.

    :ivar rows: per non-baseline mode, ``(mode, [(point, [(label, speedup text)], [value
        text]...)])`` (``"accept length 1.84"``, :meth:`lab.catalog.Metric.text`); the baseline
        itself, or every mode when there is no baseline, is listed with its points and no speedup.
    :ivar warnings: :func:`group_warnings` of the comparison's warnings.
    :ivar notice, caption, report: the identical-configuration notice, the engine caption,
        and where ``report.html`` is (or None).
    :ivar lossless: ``{mode: sentence}`` of the lossless check (empty when not run).
    :ivar load: the open-loop sentences, one per speculative mode (empty: no rate points).
    """

    def __init__(self, rows, baseline, warnings, notice, caption, report, lossless=None, load=()) -> None:
        self.rows, self.baseline, self.warnings = rows, baseline, warnings
        self.notice, self.caption, self.report = notice, caption, report
        self.lossless: dict[str, str] = dict(lossless or {})
        self.load = list(load)


def build_answer(comparison: dict[str, Any], report_path: str | Path | None = None) -> Answer:
    """Collect the answer from a comparison (module docstring); ``report_path`` is shown as given."""
    baseline = comparison.get("baseline")
    rows = []
    speedups, values = answer_speedups(), answer_values()
    for mode, points in (comparison.get("modes") or {}).items():
        if mode == baseline:
            continue
        lines = []
        for key, e in points.items():
            if key != f"c{e.get('concurrency')}":
                continue  # off the primary context/output length
            stated = [(label, t) for k, label in speedups if (t := _fmt_speedup(e.get(k)))]
            lines.append((key, stated, [m.text(v) for m in values if (v := _mean(e, m.name)) is not None]))
        rows.append((mode, lines))
    lossless = {m: e["line"] for m, e in ((comparison.get("lossless") or {}).get("modes") or {}).items()
                if e.get("line")}
    load = list(((comparison.get("load") or {}).get("sentences") or {}).values())
    return Answer(rows, baseline, group_warnings(comparison.get("warnings")), comparison.get("notice"),
                  comparison.get("caption"), str(report_path) if report_path else None, lossless, load)


#: Heading of the open-loop sentences (lab.analysis.load).
LOAD_HEADING = "Under open-loop load (requests arriving at a rate; goodput = requests/s meeting the SLO):"


def _point_text(point: str, speedups: list[tuple[str, str]], values: list[str]) -> str:
    said = ", ".join(f"{label} {t}" for label, t in speedups) or "no speedup (no baseline at this point)"
    return f"{point}: {said}" + (f"; {', '.join(values)}" if values else "")


def _headline(a: Answer) -> str:
    return (f"Does EAGLE-3 beat plain decoding here? Speedup over {a.baseline} [95 % CI] per concurrency:"
            if a.baseline else "No baseline mode in this comparison: no speedups (set baseline_mode in params.yaml).")


def answer_text(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """Plain text, a few lines (what ``dvc repro`` ends with and ``lab summary`` starts with)."""
    a = build_answer(comparison, report_path)
    lines = [_headline(a)]
    for mode, points in a.rows:
        lines.append(f"  {mode}:")
        lines += [f"    {_point_text(*p)}" for p in points]
        if mode in a.lossless:
            lines.append(f"    {a.lossless[mode]}")
    from lab.report.task_categories import taskmix_lines  # per task category, when the prompts have several

    tm = taskmix_lines(comparison)
    lines += [f"  {tm[0]}"] + [f"    {ln}" for ln in tm[1:]] if tm else []
    if a.load:
        lines.append(f"  {LOAD_HEADING}")
        lines += [f"    {t}" for t in a.load]
    if a.caption:
        lines.append(f"  ({a.caption})")
    if a.notice:
        lines.append(f"  Note: {a.notice}")
    for modes, w in a.warnings:
        lines.append(f"  Warning ({', '.join(modes)}): {w}")
    if a.report:
        lines.append(f"  Report: {a.report}")
    return "\n".join(lines)


def answer_markdown(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """Markdown (the top of ``reports/summary.md``)."""
    a = build_answer(comparison, report_path)
    lines = [f"**{_headline(a)}**", ""]
    for mode, points in a.rows:
        lines.append(f"- **{mode}**")
        lines += [f"  - {_point_text(*p)}" for p in points]
        if mode in a.lossless:
            lines.append(f"  - {a.lossless[mode]}")
    from lab.report.task_categories import taskmix_markdown

    if tm := taskmix_markdown(comparison):
        lines += ["", tm]
    if a.load:
        lines += ["", f"**{LOAD_HEADING}**", ""] + [f"- {t}" for t in a.load]
    if a.caption:
        lines += ["", f"_{a.caption}_"]
    if a.notice:
        lines += ["", f"Note: {a.notice}"]
    if a.warnings:
        lines += ["", "Warnings:"] + [f"- ({', '.join(modes)}) {w}" for modes, w in a.warnings]
    if a.report:
        lines += ["", f"Report: {a.report}"]
    return "\n".join(lines)


def answer_html(comparison: dict[str, Any], report_path: str | Path | None = None) -> str:
    """An HTML fragment (escaped): the top of ``reports/report.html``."""
    a = build_answer(comparison, report_path)
    e = html.escape
    out = [f'<section class="answer"><p><b>{e(_headline(a))}</b></p><ul>']
    for mode, points in a.rows:
        extra = f"<li>{e(a.lossless[mode])}</li>" if mode in a.lossless else ""
        out.append(f"<li><b>{e(mode)}</b><ul>" + "".join(f"<li>{e(_point_text(*p))}</li>" for p in points)
                   + extra + "</ul></li>")
    out.append("</ul>")
    from lab.report.task_categories import taskmix_html

    out.append(taskmix_html(comparison))
    if a.load:
        out.append(f"<p><b>{e(LOAD_HEADING)}</b></p><ul>" + "".join(f"<li>{e(t)}</li>" for t in a.load) + "</ul>")
    if a.notice:
        out.append(f'<p class="notice">{e(a.notice)}</p>')
    if a.warnings:
        out.append("<p><b>Measurement warnings</b></p><ul>" + "".join(
            f"<li><b>{e(', '.join(modes))}</b>: {e(w)}</li>" for modes, w in a.warnings) + "</ul>")
    out.append("</section>")
    return "\n".join(out)


def load_answer(reports_dir: str | Path, report_shown: str | None = None) -> str:
    """:func:`answer_text` of ``reports_dir/comparison.json``; the report is named as
    ``report_shown`` when given (default ``reports_dir/report.html``).

    :raises FileNotFoundError: no comparison yet (the message says to run ``dvc repro``).
    """
    path = Path(reports_dir) / "comparison.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. Fix: run `dvc repro` (the compare stage writes it)")
    return answer_text(json.loads(path.read_text()), report_shown or Path(reports_dir) / "report.html")
