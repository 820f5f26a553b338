"""The answer in a few lines: per mode, its speedup over the baseline at each concurrency.

One renderer for every place that states the answer: the end of ``dvc repro`` (printed by
the compare stage, :mod:`lab.pipeline.compare_stage`), the top of ``reports/report.html`` and
``reports/summary.md``, and ``lab summary``. Its input is the comparison that
:func:`lab.pipeline.compare.run_compare` returns and writes to ``reports/comparison.json``:

- ``baseline``: the baseline mode's name (None: no speedups);
- ``modes``: ``{mode: {point: entry}}``; an entry holds ``concurrency``, the means
  ``accept_length`` / ``verify_ms`` (``{"mean": ...}``) and one ``speedup_<metric>`` per
  compared throughput (``{"ratio", "ci95_lo", "ci95_hi", "verdict"}``);
- ``load``: :func:`lab.analysis.load.add_load`'s section; its ``sentences`` (one per
  speculative mode: "eagle3_decode beats baseline up to N req/s at this SLO (...)") are
  stated after the per-concurrency lines (None or absent: no rate points);
- ``lossless`` (optional): :func:`lab.analysis.lossless.check_lossless`'s dict; each mode's
  ``line`` is stated under the mode;
- ``taskmix`` (optional): per-category rows of :func:`lab.analysis.taskmix.add_taskmix`,
  rendered by :mod:`lab.report.taskmix` as the "Per task category" lines;
- ``warnings``: ``{mode: [text, ...]}`` (measurement hygiene, lossless check); ``notice``: a sentence
  when two modes resolved to the same configuration; ``caption``: which engine produced
  the numbers.

To show another speedup (a paired per-prompt ratio, say), add its entry key and label to
:data:`SPEEDUPS`: every rendering picks it up. Only points at the primary context and
output length (``c1``, ``c8``...) are stated; the report's table has the others.
This module imports nothing heavy (``lab summary`` must answer in well under 3 s).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

__all__ = ["SPEEDUPS", "Answer", "build_answer", "group_warnings", "answer_text", "answer_markdown",
           "answer_html", "load_answer"]

#: ``(entry key, label)`` of every speedup the answer states, in order.
#: The paired entry is :func:`lab.analysis.paired.add_paired`'s per-prompt ratio and its interval.
SPEEDUPS: list[tuple[str, str]] = [("speedup_decode_tok_s", "decode tok/s"),
                                   ("paired_speedup_decode_tok_s", "decode tok/s paired per prompt"),
                                   ("speedup_output_tok_s", "output tok/s")]


def _fmt_speedup(s: dict[str, Any] | None) -> str | None:
    from lab.analysis.stats import format_speedup

    if not s:
        return None
    num = lambda v: None if v is None or v != v else float(v)  # noqa: E731  (NaN -> None)
    return format_speedup(num(s.get("ratio")), num(s.get("ci95_lo")), num(s.get("ci95_hi")), s.get("verdict"))


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

    :ivar rows: per non-baseline mode, ``(mode, [(point, [(label, speedup text)], accept
        length, verify ms)])``; the baseline itself, or every mode when there is no
        baseline, is listed with its points and no speedup.
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
    for mode, points in (comparison.get("modes") or {}).items():
        if mode == baseline:
            continue
        lines = []
        for key, e in points.items():
            if key != f"c{e.get('concurrency')}":
                continue  # off the primary context/output length
            speedups = [(label, t) for k, label in SPEEDUPS if (t := _fmt_speedup(e.get(k)))]
            lines.append((key, speedups, _mean(e, "accept_length"), _mean(e, "verify_ms")))
        rows.append((mode, lines))
    lossless = {m: e["line"] for m, e in ((comparison.get("lossless") or {}).get("modes") or {}).items()
                if e.get("line")}
    load = list(((comparison.get("load") or {}).get("sentences") or {}).values())
    return Answer(rows, baseline, group_warnings(comparison.get("warnings")), comparison.get("notice"),
                  comparison.get("caption"), str(report_path) if report_path else None, lossless, load)


#: Heading of the open-loop sentences (lab.analysis.load).
LOAD_HEADING = "Under open-loop load (requests arriving at a rate; goodput = requests/s meeting the SLO):"


def _point_text(point: str, speedups: list[tuple[str, str]], acc: float | None, verify: float | None) -> str:
    parts = [", ".join(f"{label} {t}" for label, t in speedups) or "no speedup (no baseline at this point)"]
    extra = ([f"accept length {acc:.2f}"] if acc is not None else []) + (
        [f"verify {verify:.1f} ms"] if verify is not None else [])
    return f"{point}: {parts[0]}" + (f"; {', '.join(extra)}" if extra else "")


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
    from lab.report.taskmix import taskmix_lines  # per task category, when the prompts have several

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
    from lab.report.taskmix import taskmix_markdown

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
    from lab.report.taskmix import taskmix_html

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
