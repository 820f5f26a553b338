"""Warnings grouped by kind: one line per kind, naming the modes and points it covers.

A comparison's ``warnings`` (``{mode: [text, ...]}``, written by :mod:`lab.measure.hygiene`,
:mod:`lab.analysis.lossless` and the comparison) says the same thing once per mode and point: on
a busy machine eleven near-identical client-dispatch-delay warnings, each three lines long. The
short answer that ``dvc repro`` ends with (:func:`lab.report.answer.answer_brief`) states each
kind once, e.g.::

    Warning (baseline c=1, c=8; eagle3_decode c=1): client dispatch delay p99 > 5 ms (worst 9.1 ms) ...

``lab summary`` and ``reports/report.html`` keep every warning's full text.

A warning's point is the text before its first ``": "`` when that is one word (``c=8``, ``r12``,
``c1_ctx4096_out64``), or what follows ``" at "`` in the known kinds that name it there (token
accounting, degenerate outputs). Its kind is the first match in :data:`KINDS` (a pattern of the
sentence :mod:`lab.measure.hygiene` or :mod:`lab.analysis.lossless` writes, with a short label);
any other warning is its own kind, keyed by its first clause with the numbers taken out. This
module imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

__all__ = ["KINDS", "WarningKind", "Kind", "group_by_kind", "kind_lines"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One known kind of warning.

    :ivar name: a short key (``"dispatch_delay"``).
    :ivar pattern: matched (``re.search``) against the warning without its point prefix; a group
        ``v`` is the value shown as the kind's worst (largest), a group ``where`` the point(s).
    :ivar label: the line's text; ``{worst}`` is replaced by the largest ``v`` over the kind's warnings.
    """

    name: str
    pattern: str
    label: str


#: The kinds the lab writes, in the order their lines are printed (their sources: lab/measure/hygiene.py
#: ``hygiene_warnings``, ``_schedule_lag_rows``, ``_first_use_rows``; lab/analysis/lossless.py).
KINDS: tuple[Kind, ...] = (
    Kind("dispatch_delay", r"client dispatch delay p99 (?P<v>[\d.]+) ms",
         "dispatch delay p99 > 5 ms (worst {worst} ms): a busy client sent less load; use an idle machine"),
    Kind("schedule_lag", r"schedule lag p99 (?P<v>[\d.]+) ms",
         "open-loop schedule lag p99 > 50 ms (worst {worst} ms), charged to the SLO"),
    Kind("few_waves", r"requests per repeat fill the batch fewer than",
         "batch fills < 4 times a repeat (no steady state): raise bench.num_prompts"),
    Kind("one_time_stall", r"a (?P<v>\d+) ms stall in repeats? .* only",
         "a one-time stall (worst {worst} ms) in some repeats' measured window"),
    Kind("stall_one_repeat", r"a (?P<v>\d+) ms stall inside the measured window",
         "a stall (worst {worst} ms) with one repeat: first-use or recurring cannot be told. Fix: raise bench.repeats"),
    Kind("recurring_stall", r"stalls of up to (?P<v>\d+) ms recur in every repeat",
         "stalls (worst {worst} ms) recur in every repeat: the engine pauses decoding"),
    Kind("first_token_wait", r"waited (?P<v>\d+) ms for a first token",
         "the first repeat waited longer for a first token (worst {worst} ms): a first-use cost"),
    Kind("warmup", r"warm-up not stable", "warm-up not stable"),
    Kind("draft_incomplete", r"draft_ms is incomplete at (?P<where>[^:]+):", "draft_ms incomplete (eager draft)"),
    Kind("accounting", r"token accounting failed at (?P<where>[^:]+):",
         "token accounting failed: streamed tokens != completion_tokens"),
    Kind("degenerate", r"degenerate \(looping\) outputs at (?P<where>[^:]+):",
         "degenerate (looping) outputs: accept length is inflated"),
    Kind("lossless", r"lossless check: (?P<v>\d+) of \d+ outputs",
         "outputs differ from the baseline's (lossless check; worst {worst} outputs)"),
)

_POINT = re.compile(r"^([A-Za-z0-9_=.]+): ")


@dataclasses.dataclass
class WarningKind:
    """The warnings of one kind.

    :ivar key: the kind's name (:class:`Kind`), or the first clause of an unknown warning without numbers.
    :ivar label: the text its line shows.
    :ivar where: ``{mode: [point, ...]}``, modes in first-seen order, points in natural order (a point list may be empty: no point named).
    :ivar texts: the full texts, first-seen order, each once.
    """

    key: str
    label: str
    where: dict[str, list[str]]
    texts: list[str]

    def where_text(self) -> str:
        """``"baseline c=1, c=8; eagle3_decode c=1"``; modes with the same points share them
        (``"baseline, eagle3_decode c=8"``); a mode without points: its name alone."""
        same: dict[tuple[str, ...], list[str]] = {}
        for m, ps in self.where.items():
            same.setdefault(tuple(ps), []).append(m)
        return "; ".join(f"{', '.join(ms)} {', '.join(ps)}" if ps else ", ".join(ms) for ps, ms in same.items())


def _first_clause(text: str) -> str:
    return re.split(r": |; |\. ", text, maxsplit=1)[0]


def _fmt(v: float) -> str:
    return f"{v:.1f}" if v != int(v) else f"{int(v)}"


def group_by_kind(warnings: dict[str, list[str]] | None) -> list[WarningKind]:
    """The comparison's ``warnings`` (``{mode: [text]}``) grouped by kind: known kinds
    (:data:`KINDS`) first, in that order, then the others in first-seen order."""
    groups: dict[str, WarningKind] = {}
    worst: dict[str, float] = {}
    for mode, texts in (warnings or {}).items():
        for text in texts:
            m = _POINT.match(text)
            point, body = (m.group(1), text[m.end():]) if m else (None, text)
            kind = hit = None
            for k in KINDS:
                if hit := re.search(k.pattern, body):
                    kind = k
                    break
            if kind is not None:
                key, label = kind.name, kind.label
                if "where" in hit.groupdict() and hit.group("where") and point is None:
                    point = hit.group("where").strip()
                if "v" in hit.groupdict() and hit.group("v"):
                    worst[key] = max(worst.get(key, float("-inf")), float(hit.group("v")))
            else:
                label = _first_clause(body)
                key = "other:" + re.sub(r"\d+(\.\d+)?", "#", label)
            g = groups.setdefault(key, WarningKind(key, label, {}, []))
            points = g.where.setdefault(mode, [])
            if point and point not in points:
                points.append(point)
            if text not in g.texts:
                g.texts.append(text)
    for g in groups.values():  # points in natural order: c=1, c=8, c=16
        for ps in g.where.values():
            ps.sort(key=_natural)
    for key, v in worst.items():
        groups[key].label = groups[key].label.replace("{worst}", _fmt(v))
    order = {k.name: i for i, k in enumerate(KINDS)}
    return sorted(groups.values(), key=lambda g: order.get(g.key, len(order)))


#: The fewest characters of a label a warning line keeps (where the modes and points leave less, they are counted).
MIN_LABEL = 40


def _natural(p: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)]


def _compact(points: list[str]) -> str:
    """``["c=1", "c=8", "r4", "r12", "c1_ctx4096"]`` -> ``"c=1/8, r4/12, c1_ctx4096"``."""
    by: dict[str, list[str]] = {}
    for p in points:
        m = re.fullmatch(r"([a-z]=?)(\d+(?:\.\d+)?)", p)
        by.setdefault(m.group(1) if m else p, []).append(m.group(2) if m else "")
    return ", ".join(k + "/".join(v) if any(v) else k for k, v in by.items())


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def kind_lines(warnings: dict[str, list[str]] | None, width: int, indent: int = 2,
               max_kinds: int = 6) -> list[str]:
    """One line per kind, at most ``width`` characters each: ``Warning (<modes and points>): <label>``,
    the modes and points as :meth:`WarningKind.where_text`, else every point and every mode, else
    the count of points and the modes, whichever fits first (the label is cut with ``…`` where none
    leaves it room; the full texts are in ``lab summary`` and
    report.html), at most ``max_kinds`` lines and one more saying how many kinds were left out."""
    out: list[str] = []
    kinds = group_by_kind(warnings)
    pad = " " * indent
    for g in kinds[:max_kinds]:
        n = sum(max(1, len(ps)) for ps in g.where.values())
        points = _compact(sorted({p for ps in g.where.values() for p in ps}, key=_natural))
        forms = [g.where_text(),  # each mode's points; then every point in all modes; then a count
                 f"{points} in {', '.join(g.where)}",
                 f"{n} points of {', '.join(g.where)}"]
        heads = [f"{pad}Warning ({where}): " for where in forms]
        fits = [h for h in heads if len(h) + len(g.label) <= width]
        # none fits whole: the first that leaves the label MIN_LABEL characters, cut with …
        head = fits[0] if fits else next((h for h in heads if len(h) + MIN_LABEL <= width), heads[-1])
        out.append(_fit(head + g.label, width))
    if len(kinds) > max_kinds:
        out.append(_fit(f"{' ' * indent}... and {len(kinds) - max_kinds} more kinds of warning (lab summary lists "
                        "each)", width))
    return out


def iter_texts(kinds: Iterable[WarningKind]) -> Iterable[str]:
    """Every full text of ``kinds``, kind by kind."""
    for g in kinds:
        yield from g.texts
