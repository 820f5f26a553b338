"""Rank predicted configurations: most likely to win first, or most uncertain first.

``win``: descending ``p_win`` (the share of posterior draws in which the candidate's decode tok/s
beats the baseline's at the ranking point, :mod:`lab.calibrate.predict`), ties broken by the
predicted speedup; a team that runs the sweep in this order measures the likely winners first and
can stop once one is confirmed. Undetermined candidates come last (nothing says they win).

``uncertain``: undetermined candidates first (measuring one determines the constants it needs, so
it teaches the model most), then ascending ``|p_win - 1/2|`` (the verdict the data leave most
open), ties broken by the relative width of the decode tok/s interval. This is uncertainty
sampling (Lewis & Gale 1994, "A sequential algorithm for training text classifiers", SIGIR):
measure where the model is least sure of the answer that matters.

The baseline is never ranked: every comparison needs it, so a sweep runs it first.
"""

from __future__ import annotations

from lab.calibrate.predict import Prediction

__all__ = ["ORDERS", "rank"]

ORDERS = ("win", "uncertain")


def _rel_width(p: Prediction) -> float:
    d = p.metrics.get("decode_tok_s") or {}
    if d.get("pred") and d.get("lo") is not None and d.get("hi") is not None:
        return (d["hi"] - d["lo"]) / d["pred"]
    return float("inf")


def rank(predictions: list[Prediction], point: str, order: str = "win") -> list[Prediction]:
    """The speculative predictions at ``point``, in ``order`` (module docstring).

    :param point: a point key (``c1``, ``c8``, ``r4``).
    :raises ValueError: unknown ``order``, or no prediction at ``point`` (names the points there are).
    """
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: use one of {', '.join(ORDERS)}")
    at = [p for p in predictions if p.point.key == point and p.candidate.speculative]
    if not at:
        points = sorted({p.point.key for p in predictions})
        raise ValueError(f"no speculative prediction at point {point!r}. Fix: use one of {', '.join(points)}")

    def speedup(p: Prediction) -> float:
        return (p.metrics.get("speedup_decode_tok_s") or {}).get("pred") or 0.0

    if order == "win":
        return sorted(at, key=lambda p: (p.status != "ok", -(p.p_win or 0.0), -speedup(p)))
    return sorted(at, key=lambda p: (p.status == "ok", abs((p.p_win if p.p_win is not None else 0.5) - 0.5),
                                     -_rel_width(p)))
