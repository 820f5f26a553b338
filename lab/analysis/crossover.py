"""Where the verdict flips along the context axis: one crossover line per mode and backend, and
the break-even map (break-even accept length against context length, the measured accept
length drawn on it).

Input is :func:`lab.analysis.comparison.summarize`'s summary: per mode, entries keyed ``c<N>``
(primary context) or ``c<N>_ctx<T>_out<M>``, each with ``context_tokens``, ``concurrency``,
``max_new_tokens``, the means of ``verify_ms``, ``draft_ms``, ``accept_length`` and the
baseline's ``decode_ms``, and ``speedup_decode_tok_s`` (the Welch ratio of decode tok/s over
the baseline at the same point, with its 95 % interval and verdict: the lab's verdict metric,
:func:`lab.catalog.headline_metric`). The context axis of a mode is its entries at the lowest
concurrency and the primary output length, sorted by ``context_tokens``.

The crossover context of a pair of neighbouring lengths ``(T0, T1)`` whose verdicts differ (or
between which an estimate crosses) is estimated twice, both by linear interpolation in context:

- **measured**: where the measured speedup ratio ``r(T)`` crosses 1, ``T0 + (1 - r0) / (r1 -
  r0) * (T1 - T0)``;
- **break-even**: where the break-even accept length ``b(T) = (draft_ms + verify_ms) /
  decode_ms`` (Leviathan et al. 2023; :func:`lab.analysis.theory.break_even_accept_length`)
  meets the measured accept length ``a(T)``, i.e. where the margin ``m(T) = a * decode_ms -
  draft_ms - verify_ms`` (ms per cycle) is 0: ``T0 + m0 / (m0 - m1) * (T1 - T0)``. The margin
  (not ``a - b``, a ratio) is interpolated: with costs linear in context and a constant accept
  length it is linear, so this crossover is then exact.

Both are only as exact as the spacing of the measured lengths: the crossover is known to lie
in ``[T0, T1]``, the interpolation says where in it. Linear interpolation is right when
verify, draft and decode ms grow linearly in context (the emulator's cost model,
:mod:`lab.emulator.profile`, and what the real H200 captures show over 128..4096 tokens, see
docs/benchmarks/); the speedup ratio is then a ratio of linear functions, monotone between the
two points, so ``r`` crosses 1 once in ``[T0, T1]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lab.analysis.theory import break_even_accept_length

__all__ = ["ContextPoint", "Crossover", "context_axis", "crossovers", "crossover_line", "break_even_map_figure",
           "interpolate_crossing"]

SPEEDUP_KEY = "speedup_decode_tok_s"


@dataclass(frozen=True)
class ContextPoint:
    """One mode at one context length (lowest concurrency, primary output length).

    :ivar context_tokens: prompt length (tokens); 0 = the prompts as they are.
    :ivar decode_ms, draft_ms, verify_ms: means per iteration (ms; decode is the baseline's).
    :ivar accept_length, accept_lo, accept_hi: mean accept length and its 95 % interval.
    :ivar ratio, lo, hi, verdict: the measured decode tok/s speedup over the baseline.
    """

    context_tokens: int
    decode_ms: float
    draft_ms: float
    verify_ms: float
    accept_length: float
    accept_lo: float
    accept_hi: float
    ratio: float | None
    lo: float | None
    hi: float | None
    verdict: str | None

    @property
    def break_even(self) -> float:
        """Break-even accept length ``(draft_ms + verify_ms) / decode_ms``."""
        return break_even_accept_length(self.decode_ms, self.draft_ms, self.verify_ms)

    @property
    def margin_ms(self) -> float:
        """``accept_length * decode_ms - draft_ms - verify_ms`` (ms per cycle): what decoding
        the accepted tokens one by one would cost minus the cycle; > 0 exactly when the
        measured accept length is above the break-even."""
        return self.accept_length * self.decode_ms - self.draft_ms - self.verify_ms


@dataclass
class Crossover:
    """The context axis of one mode: its points, backends, and where its verdict changes.

    :ivar mode: mode name; :ivar concurrency: the level the axis is read at.
    :ivar verify_backend, draft_backend: what served target verify and the draft (from
        ``/server_info``, :mod:`lab.engine.effective`), None when unknown.
    :ivar points: :class:`ContextPoint` by context ascending.
    :ivar flips: one dict per pair of neighbouring lengths whose verdicts differ or between
        which the measured speedup crosses 1 or the break-even margin crosses 0: ``from``/``to``
        (points), ``measured_tokens`` and ``break_even_tokens`` (interpolated crossover,
        tokens; None when that estimate does not cross inside the pair).
    """

    mode: str
    concurrency: int
    verify_backend: str | None
    draft_backend: str | None
    points: list[ContextPoint]
    flips: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``summary["crossover"]`` entries), with :func:`crossover_line`'s ``line``."""
        return {"mode": self.mode, "concurrency": self.concurrency, "verify_backend": self.verify_backend,
                "draft_backend": self.draft_backend,
                "points": [{**p.__dict__, "break_even": p.break_even} for p in self.points],
                "flips": [{"from_context": f["from"].context_tokens, "to_context": f["to"].context_tokens,
                           "from_verdict": f["from"].verdict, "to_verdict": f["to"].verdict,
                           "measured_tokens": f["measured_tokens"], "break_even_tokens": f["break_even_tokens"]}
                          for f in self.flips],
                "line": crossover_line(self)}


def _mean(e: dict[str, Any], k: str) -> float | None:
    v = (e or {}).get(k) or {}
    m = v.get("mean")
    return float(m) if m is not None and m == m else None


def context_axis(summary: dict[str, Any], mode: str) -> tuple[int | None, list[ContextPoint]]:
    """``mode``'s :class:`ContextPoint` list at its lowest closed-loop concurrency and the
    primary output length (``max_new_tokens`` of its ``c<N>`` entry), by context ascending;
    points without verify, accept length or a baseline decode_ms are left out.

    :returns: ``(concurrency, points)``; ``(None, [])`` without a baseline.
    """
    base = summary.get("baseline")
    levels = summary["modes"].get(mode) or {}
    if not base or base not in summary["modes"] or mode == base:
        return None, []
    closed = [e for k, e in levels.items() if e.get("request_rate") is None and k.startswith("c")]
    if not closed:
        return None, []
    c = min(int(e["concurrency"]) for e in closed)
    primary_out = (levels.get(f"c{c}") or {}).get("max_new_tokens")
    pts = []
    for key, e in levels.items():
        if key != f"c{c}" and not key.startswith(f"c{c}_"):
            continue
        if primary_out is not None and e.get("max_new_tokens") not in (None, primary_out):
            continue
        b = summary["modes"][base].get(key) or {}
        decode = _mean(b, "decode_ms") or _mean(b, "cycle_ms")
        verify, acc = _mean(e, "verify_ms"), _mean(e, "accept_length")
        if not (decode and verify and acc):
            continue
        a = e.get("accept_length") or {}
        sp = e.get(SPEEDUP_KEY) or {}
        lo, hi = a.get("ci95_lo"), a.get("ci95_hi")
        pts.append(ContextPoint(int(e.get("context_tokens") or 0), decode, _mean(e, "draft_ms") or 0.0, verify, acc,
                                lo if lo is not None and lo == lo else acc, hi if hi is not None and hi == hi else acc,
                                sp.get("ratio"), sp.get("ci95_lo"), sp.get("ci95_hi"), sp.get("verdict")))
    return c, sorted(pts, key=lambda p: p.context_tokens)


def interpolate_crossing(x0: float, y0: float, x1: float, y1: float, level: float = 0.0) -> float | None:
    """The ``x`` in ``[x0, x1]`` where the line through ``(x0, y0)``, ``(x1, y1)`` reaches
    ``level``; None when both ``y`` are on the same side of it or the line is flat."""
    if any(v is None or not math.isfinite(v) for v in (y0, y1)) or y0 == y1:
        return None
    t = (level - y0) / (y1 - y0)
    return x0 + t * (x1 - x0) if 0.0 <= t <= 1.0 else None


def crossovers(summary: dict[str, Any], backends: dict[str, tuple[str | None, str | None]] | None = None) -> list[Crossover]:
    """A :class:`Crossover` per speculative mode with at least two context lengths.

    :param summary: :func:`lab.analysis.comparison.summarize` output.
    :param backends: mode -> (verify backend, draft backend); default: the ``verify_backend``
        / ``draft_backend`` the summary's entries carry.
    """
    out = []
    for mode, levels in summary["modes"].items():
        c, pts = context_axis(summary, mode)
        if c is None or len(pts) < 2:
            continue
        first = next(iter(levels.values()), {})
        vb, db = (backends or {}).get(mode, (first.get("verify_backend"), first.get("draft_backend")))
        x = Crossover(mode, c, vb, db, pts)
        for p0, p1 in zip(pts, pts[1:]):
            meas = None if p0.ratio is None or p1.ratio is None else interpolate_crossing(
                p0.context_tokens, p0.ratio, p1.context_tokens, p1.ratio, 1.0)
            be = interpolate_crossing(p0.context_tokens, p0.margin_ms, p1.context_tokens, p1.margin_ms, 0.0)
            if (p0.verdict or "") != (p1.verdict or "") or meas is not None or be is not None:
                x.flips.append({"from": p0, "to": p1, "measured_tokens": meas, "break_even_tokens": be})
        out.append(x)
    return out


def _sp(p: ContextPoint) -> str:
    if p.ratio is None:
        return f"no speedup at {p.context_tokens}"
    ci = f" [{p.lo:.2f}, {p.hi:.2f}]" if p.lo is not None and p.hi is not None else ""
    return f"{p.ratio:.2f}x{ci} {p.verdict or ''} at {p.context_tokens}".replace("  ", " ")


def _word(p: ContextPoint) -> str:
    """The point's verdict word; without one (a single launch, no launch spread known), which side
    of 1 its estimate is on, saying there is no verdict."""
    if p.verdict:
        return p.verdict
    if p.ratio is None:
        return "without a speedup"
    return f"estimated {'faster' if p.ratio > 1 else 'slower'} (no verdict)"


def _backends(x: Crossover) -> str:
    if not x.verify_backend and not x.draft_backend:
        return "backend unknown"
    return f"verify on {x.verify_backend or '?'}, draft on {x.draft_backend or '?'}"


def crossover_line(x: Crossover) -> str:
    """One sentence for the answer: where ``x``'s verdict changes along the context axis (or
    that it does not), with the measured speedups and intervals either side, the accept length
    it assumes and the break-even accept lengths there.

    e.g. ``"eagle3_decode (verify on triton, draft on triton; concurrency 1) is faster up to about
    2400 tokens of context (1.10x [1.05, 1.15] faster at 1024, 0.93x [0.90, 0.96] slower at 4096;
    break-even crossover 2300), at accept length 1.85 [1.84, 1.86] (break-even 1.68 -> 1.98)"``.
    """
    pts = x.points
    lo_ctx, hi_ctx = pts[0].context_tokens, pts[-1].context_tokens
    acc = pts[-1] if not x.flips else x.flips[0]["to"]
    acc_ci = (f" [{acc.accept_lo:.2f}, {acc.accept_hi:.2f}]" if (acc.accept_lo, acc.accept_hi) != (acc.accept_length,) * 2
              else " (no interval)")
    acc_text = f"at accept length {acc.accept_length:.2f}{acc_ci}"
    be_text = f"break-even {pts[0].break_even:.2f} at {lo_ctx} -> {pts[-1].break_even:.2f} at {hi_ctx}"
    head = f"{x.mode} ({_backends(x)}; concurrency {x.concurrency})"
    if not x.flips:
        v = pts[0].verdict or ("without a verdict" if {_word(p) for p in pts} != {_word(pts[0])}
                               else _word(pts[0]))
        return (f"{head} is {v} at every measured context length from {lo_ctx} to {hi_ctx} tokens "
                f"({_sp(pts[0])}, {_sp(pts[-1])}), {acc_text} ({be_text}): no crossover in the measured range")
    parts = []
    for f in x.flips:
        p0, p1 = f["from"], f["to"]
        where = f["measured_tokens"] if f["measured_tokens"] is not None else f["break_even_tokens"]
        be = (f"; break-even crossover {f['break_even_tokens']:.0f}" if f["break_even_tokens"] is not None
              and f["measured_tokens"] is not None else "")
        if where is None:  # the verdict changes, but no estimate crosses inside the pair
            parts.append(f"is {_word(p0)} at {p0.context_tokens} tokens of context and {_word(p1)} at "
                         f"{p1.context_tokens} ({_sp(p0)}, {_sp(p1)})")
        else:
            parts.append(f"is {_word(p0)} up to about {where:.0f} tokens of context, {_word(p1)} past it "
                         f"({_sp(p0)}, {_sp(p1)}{be})")
    return f"{head} " + "; then ".join(parts) + f", {acc_text} ({be_text})"


def break_even_map_figure(xs: list[Crossover], caption: str = ""):
    """Break-even accept length against context length, one line per mode (label: mode and the
    backends that served verify and draft), the measured accept length with its 95 % interval
    drawn at each length in the same colour (dodged sideways by about 1 % of the axis per mode so
    modes with the same accept length stay visible); where the measured accept length is above the
    line the mode wins on these costs. Interpolated crossovers are marked. Returns a
    matplotlib figure, or None without any mode with two context lengths."""
    if not xs:
        return None
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    lines = [ln for t in [crossover_line(x) for x in xs] + ([caption] if caption else [])
             for ln in textwrap.wrap(t, 140)]
    fig, ax = plt.subplots(figsize=(9.5, 5.0 + 0.16 * len(lines)))
    palette = sns.color_palette("tab10", len(xs))
    span = max(p.context_tokens for x in xs for p in x.points) or 1
    for i, (color, x) in enumerate(zip(palette, xs)):
        ctx = [p.context_tokens for p in x.points]
        ax.plot(ctx, [p.break_even for p in x.points], color=color, marker="s", ms=4,
                label=f"{x.mode} ({_backends(x)}): break-even")
        dodge = (i - (len(xs) - 1) / 2) * 0.012 * span  # modes sharing an accept length stay visible
        ax.errorbar([c + dodge for c in ctx], [p.accept_length for p in x.points],
                    yerr=[[p.accept_length - p.accept_lo for p in x.points], [p.accept_hi - p.accept_length for p in x.points]],
                    fmt="o--", color=color, alpha=0.7, capsize=3, ms=5, lw=0.8)
        for f in x.flips:
            t = f["break_even_tokens"] if f["break_even_tokens"] is not None else f["measured_tokens"]
            if t is not None:
                ax.axvline(t, color=color, ls=":", lw=1.2)
                ax.annotate(f"crossover ~{t:.0f}", (t, ax.get_ylim()[0]), rotation=90, fontsize=7, color=color,
                            ha="right", va="bottom")
    ax.set_xlabel("context tokens (prompt length)")
    ax.set_ylabel("accept length (tokens per verify, incl. bonus)")
    ax.set_title("Break-even map: squares = break-even accept length (draft + verify) / decode; "
                 "o = measured accept length [95 % CI]; above the line EAGLE-3 wins", fontsize=8)
    ax.legend(fontsize=7, loc="best")
    bottom = 0.02 + 0.028 * len(lines) * 5.2 / (5.0 + 0.16 * len(lines))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", ha="left", color="dimgray")
    return fig
