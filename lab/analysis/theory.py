"""Break-even model of speculative decoding: when does a draft + verify cycle beat decoding?

A chain draft (``eagle_topk`` 1) runs, per cycle, ``num_steps`` draft forwards
(``draft_ms`` in total) and one target-verify forward over ``num_steps + 1`` tokens
(``verify_ms``), and emits ``accept_length`` tokens (accepted drafts plus the bonus token;
at most ``num_steps + 1``). Plain decoding emits one token per decode step ``decode_ms``.
Per-token time is ``(draft_ms + verify_ms) / accept_length`` against ``decode_ms``, so

    speedup            = accept_length * decode_ms / (draft_ms + verify_ms)
    break-even accept  = (draft_ms + verify_ms) / decode_ms

Source: Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023), Theorem 3.8 / Eq. 1: walltime improvement
``(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))`` where the numerator over
``(1 - alpha)`` is the expected accepted length and ``gamma c + 1`` is the cycle cost in
units of a target step; here the cycle cost is measured (``draft_ms + verify_ms``) instead of
assumed to be one target step, because the seeds' verify ran outside CUDA graphs at 2.4x a
decode step. EAGLE-3 (Li, Wei, Zhang, Zhang, "EAGLE-3: Scaling up Inference Acceleration of
Large Language Models via Training-Time Test", 2025) reports the same quantity as the
"average acceptance length tau" and speedup as the ratio of per-token latencies.

With the seeds' numbers (decode 12 ms, verify 29 ms, draft ~1 ms, 2 steps) the break-even
accept length is 30 / 12 = 2.5 of a possible 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["speedup", "break_even_accept_length", "ModeCosts", "costs_from_summary", "explain",
           "break_even_figure"]


def speedup(accept_length: float, decode_ms: float, draft_ms: float, verify_ms: float) -> float:
    """Modelled speedup of a chain-draft speculative cycle over plain decoding.

    ``accept_length * decode_ms / (draft_ms + verify_ms)`` (Leviathan et al. 2023, Eq. 1
    with a measured cycle cost; module docstring).

    :param accept_length: tokens emitted per verify (>= 1, incl. the bonus token).
    :param decode_ms: plain decode step (ms per token) of the baseline, > 0.
    :param draft_ms: draft time per cycle (ms), >= 0.
    :param verify_ms: target-verify time per cycle (ms), > 0 together with ``draft_ms``.
    :returns: the ratio (1.0 = break-even, above 1 = faster).
    :raises ValueError: non-positive decode_ms or cycle time, or accept_length < 1.
    """
    cycle = draft_ms + verify_ms
    if not decode_ms > 0 or not cycle > 0:
        raise ValueError(f"decode_ms={decode_ms}, draft_ms + verify_ms={cycle}: both must be > 0. "
                         "Fix: pass measured per-step times in ms")
    if accept_length < 1:
        raise ValueError(f"accept_length={accept_length} < 1: a verify always emits at least the "
                         "bonus token. Fix: pass tokens per verify (completion tokens / verify calls)")
    return accept_length * decode_ms / cycle


def break_even_accept_length(decode_ms: float, draft_ms: float, verify_ms: float) -> float:
    """Accept length at which speculative decoding ties plain decoding: ``(draft_ms + verify_ms) / decode_ms``.

    Same source and units as :func:`speedup`. :raises ValueError: ``decode_ms`` <= 0.
    """
    if not decode_ms > 0:
        raise ValueError(f"decode_ms={decode_ms} must be > 0. Fix: pass the baseline decode step in ms")
    return (draft_ms + verify_ms) / decode_ms


@dataclass(frozen=True)
class ModeCosts:
    """One speculative mode's measured per-cycle costs (ms) at one concurrency level.

    ``max_accept`` is ``num_steps + 1`` for a chain draft (the most a cycle can emit);
    ``accept_lo``/``accept_hi`` the 95 % interval of the measured accept length;
    ``measured_speedup`` and ``verdict`` the measured decode tok/s ratio over the baseline and
    its verdict (:func:`lab.analysis.stats.verdict`), when known.
    """

    mode: str
    concurrency: int
    decode_ms: float
    draft_ms: float
    verify_ms: float
    accept_length: float
    accept_lo: float
    accept_hi: float
    max_accept: float | None
    measured_speedup: float | None = None
    verdict: str | None = None

    @property
    def break_even(self) -> float:
        """Break-even accept length for these costs."""
        return break_even_accept_length(self.decode_ms, self.draft_ms, self.verify_ms)

    @property
    def modelled_speedup(self) -> float:
        """:func:`speedup` at the measured accept length."""
        return speedup(self.accept_length, self.decode_ms, self.draft_ms, self.verify_ms)


def _mean(entry: dict[str, Any], metric: str) -> float | None:
    v = entry.get(metric)
    return None if not v or v.get("mean") is None or v["mean"] != v["mean"] else float(v["mean"])


def costs_from_summary(summary: dict[str, Any], max_accept: dict[str, float | None] | None = None) -> list[ModeCosts]:
    """Measured :class:`ModeCosts` per speculative mode and level from :func:`lab.analysis.comparison.summarize`.

    ``decode_ms`` is the baseline's server-side decode step at the same level (the client
    cycle time when the server did not report it). Modes without verify/draft timings or
    without a baseline at that level are left out.
    """
    base = summary.get("baseline")
    if not base or base not in summary["modes"]:
        return []
    out = []
    for mode, levels in summary["modes"].items():
        if mode == base:
            continue
        for key, e in levels.items():
            b = summary["modes"][base].get(key, {})
            decode = _mean(b, "decode_ms") or _mean(b, "cycle_ms")
            verify, draft, acc = _mean(e, "verify_ms"), _mean(e, "draft_ms") or 0.0, _mean(e, "accept_length")
            if not (decode and verify and acc):
                continue
            a = e["accept_length"]
            lo, hi = a.get("ci95_lo", math.nan), a.get("ci95_hi", math.nan)
            sp = e.get("speedup_decode_tok_s", {})
            out.append(ModeCosts(mode, int(e["concurrency"]), decode, draft, verify, acc,
                                 lo if lo == lo else acc, hi if hi == hi else acc,
                                 (max_accept or {}).get(mode), sp.get("ratio"), sp.get("verdict")))
    return out


def explain(c: ModeCosts) -> str:
    """One sentence: does this mode win on these costs, and if not what would have to change.

    Losing modes get both levers: the accept length needed at the measured cycle cost, and
    the verify time needed at the measured acceptance (``accept * decode - draft``).
    """
    be, sp = c.break_even, c.modelled_speedup
    cap = f" of a possible {c.max_accept:g}" if c.max_accept else ""
    head = (f"{c.mode} (concurrency {c.concurrency}): cycle {c.draft_ms:.1f} ms draft + {c.verify_ms:.1f} ms "
            f"verify against a {c.decode_ms:.1f} ms decode step: break-even accept length {be:.2f}{cap}; "
            f"measured {c.accept_length:.2f} [{c.accept_lo:.2f}, {c.accept_hi:.2f}] -> modelled speedup {sp:.2f}x")
    if c.verdict == "not distinguishable":
        return head + (f". Too close to call: the measured speedup ({c.measured_speedup:.2f}x) is not "
                       f"distinguishable from 1; a clear win needs an accept length well above {be:.2f} "
                       "or a cheaper cycle.")
    if sp >= 1.0:
        return head + f". It wins; it keeps winning while the accept length stays above {be:.2f}."
    need_verify = c.accept_length * c.decode_ms - c.draft_ms
    levers = [f"an accept length above {be:.2f}{cap}"]
    if c.max_accept and be > c.max_accept:
        levers = [f"an accept length of {be:.2f}, which is impossible with at most {c.max_accept:g} tokens per cycle"]
    verify_lever = (f"a verify under {need_verify:.1f} ms (now {c.verify_ms:.1f} ms, "
                    f"{need_verify / c.verify_ms:.0%} of it) at the measured acceptance"
                    if need_verify > 0 else "no verify cost can make up for the draft time at this acceptance")
    return head + f". It loses; to win it needs {levers[0]}, or {verify_lever}."


def break_even_figure(costs: list[ModeCosts], caption: str):
    """Speedup vs accept length for each mode's measured costs (lowest concurrency per mode).

    One line per mode (:func:`speedup` over accept lengths 1..max), the measured point with
    its accept-length interval, each mode's break-even accept length as a dotted vertical
    line, and the 1.0x line. Returns a matplotlib figure; the explanation sentences are drawn
    under the axes with the engine ``caption``.
    """
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    lowest: dict[str, ModeCosts] = {}
    for c in sorted(costs, key=lambda c: c.concurrency):
        lowest.setdefault(c.mode, c)
    sel = list(lowest.values())
    texts = [explain(c) for c in sel] + [caption]
    lines = [ln for t in texts for ln in textwrap.wrap(t, 140)]
    fig, ax = plt.subplots(figsize=(9.5, 5.0 + 0.16 * len(lines)))
    xmax = max([c.max_accept or 0 for c in sel] + [c.break_even for c in sel] + [3.0]) + 0.3
    xs = np.linspace(1.0, xmax, 200)
    palette = sns.color_palette("tab10", max(len(sel), 1))
    for color, c in zip(palette, sel):
        ax.plot(xs, xs * c.decode_ms / (c.draft_ms + c.verify_ms), color=color,
                label=f"{c.mode}: {c.draft_ms:.1f}+{c.verify_ms:.1f} ms cycle / {c.decode_ms:.1f} ms decode")
        ax.errorbar([c.accept_length], [c.modelled_speedup],
                    xerr=[[c.accept_length - c.accept_lo], [c.accept_hi - c.accept_length]],
                    fmt="o", color=color, capsize=4, ms=7)
        if c.measured_speedup:
            ax.plot([c.accept_length], [c.measured_speedup], marker="x", color=color, ms=9, ls="none")
        ax.axvline(c.break_even, color=color, ls=":", lw=1.2)
        ax.annotate(f"break-even {c.break_even:.2f}", (c.break_even, 0.35), rotation=90, fontsize=7,
                    color=color, ha="right", va="bottom")
        if c.max_accept:
            ax.axvline(c.max_accept, color="gray", ls="-.", lw=0.8)
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xlim(1.0, xmax)
    ax.set_ylim(0.3, max([1.6] + [c.modelled_speedup * 1.2 for c in sel]))
    ax.set_xlabel("accept length (tokens per verify, incl. bonus); dash-dot: num_steps + 1 cap")
    ax.set_ylabel("modelled speedup over decoding")
    ax.set_title("Break-even model (Leviathan et al. 2023; EAGLE-3): o measured accept length [95 % CI], "
                 "x measured speedup", fontsize=9)
    if sel:
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no speculative mode with verify timings and a baseline", ha="center",
                transform=ax.transAxes)
    bottom = 0.02 + 0.028 * len(lines) * 5.2 / (5.0 + 0.16 * len(lines))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", ha="left", color="dimgray")
    return fig
