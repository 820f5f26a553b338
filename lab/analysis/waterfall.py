"""A speedup waterfall per point: from the ideal speedup down to the measured one, each loss named
and sized in milliseconds and in speedup.

Inputs per (speculative mode, point), with the baseline at the same point (summary rows of
:func:`lab.analysis.comparison.summarize`, or the emulator's ground truth in the same names):

- ``A`` = ``accept_length`` (tokens per verify cycle, bonus included);
- ``W_b`` = the baseline's ``cycle_ms`` (wall ms per decode iteration, client side) and ``d_b`` its
  ``decode_ms`` (device ms of one decode step, SGLang's device timer);
- ``D`` = ``draft_ms``, ``V`` = ``verify_ms`` (device ms per cycle), ``W_s`` = the mode's ``cycle_ms``;
- ``S`` = the measured ``speedup_decode_tok_s``.

Host (scheduler) time between iterations is wall minus device: ``h_b = W_b - d_b`` per decode
iteration, ``h_s = W_s - D - V`` per cycle. The ideal is a cycle that costs one baseline decode
iteration (a free draft, a verify that costs one decode step, the same host time): speedup ``S0 =
A``. Cycle times are then grown one cost at a time, ``C0 = W_b``, ``C1 = C0 + D`` (draft),
``C2 = C1 + (V - d_b)`` (verify above a decode step), ``C3 = C2 + (h_s - h_b) = W_s`` (host time
above a decode iteration's), and ``S_i = A W_b / C_i`` (the decode-throughput ratio of a cycle of
``A`` tokens in ``C_i`` ms against one token per ``W_b`` ms, the model of
:mod:`lab.analysis.theory`). ``S3`` is what the cycle times predict; the **remainder** is
``S / S3``, sized in ms as ``A W_b / S - W_s`` (the extra cycle time that would explain it): the
prefill's first token (counted by the accept length, not by ``decode_tok_s``), medians against
means, prefills interleaved at concurrency above 1, and noise.

Each step is reported as ``loss_ms`` (cycle ms it adds), ``loss_speedup`` (``S_{i-1} - S_i``: the
losses add to ``S0 - S``), and ``factor`` (``S_i / S_{i-1}``: the factors multiply to ``S / S0``),
exact by construction; the tests check the parts against the emulator's ground truth and the
product against the measured speedup. A negative loss is a gain (e.g. a verify cheaper than a
decode step, or less host time per cycle than per decode iteration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["STEPS", "WaterfallInputError", "waterfall", "summary_waterfalls", "comparison_waterfalls", "largest_loss",
           "waterfall_metrics", "waterfall_line"]

#: The losses in order: (key, label).
STEPS = (("draft", "draft cost"), ("verify", "verify above a decode step"),
         ("host", "host time above a decode iteration's"), ("remainder", "remainder"))


class WaterfallInputError(ValueError):
    """An input the waterfall needs is missing or not positive; the message names it."""


def _pos(name: str, v: Any) -> float:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise WaterfallInputError(f"{name} = {v!r}: the waterfall needs a positive number (is the mode's "
                                  "/metrics device timer on? SGLANG_ENABLE_METRICS_DEVICE_TIMER=1)")
    return float(v)


def waterfall(accept_length: float, base_cycle_ms: float, base_decode_ms: float, draft_ms: float, verify_ms: float,
              cycle_ms: float, speedup: float) -> dict[str, Any]:
    """The waterfall of one point (module docstring).

    :param accept_length: tokens per cycle. :param base_cycle_ms, base_decode_ms: the baseline's
        wall ms per decode iteration and device ms per decode step. :param draft_ms, verify_ms:
        device ms per cycle. :param cycle_ms: wall ms per cycle. :param speedup: the measured
        decode-throughput speedup.
    :returns: ``{"ideal_speedup", "modelled_speedup" (S3), "measured_speedup", "inputs": {...},
        "host_ms": h_s, "base_host_ms": h_b, "steps": [{"step", "label", "loss_ms", "loss_speedup",
        "factor", "speedup_after"}]}``.
    :raises WaterfallInputError: an input is missing, not finite or not positive (``draft_ms`` may be 0).
    """
    a = _pos("accept_length", accept_length)
    wb, db = _pos("baseline cycle_ms", base_cycle_ms), _pos("baseline decode_ms", base_decode_ms)
    if draft_ms is None or not math.isfinite(draft_ms) or draft_ms < 0:
        raise WaterfallInputError(f"draft_ms = {draft_ms!r}: the waterfall needs a number >= 0")
    v, ws, s = _pos("verify_ms", verify_ms), _pos("cycle_ms", cycle_ms), _pos("speedup", speedup)
    hb, hs = wb - db, ws - draft_ms - v
    adds = [("draft", float(draft_ms)), ("verify", v - db), ("host", hs - hb)]
    steps, c, prev = [], wb, a
    for key, ms in adds:
        c += ms
        now = a * wb / c
        steps.append((key, ms, now))
    remainder_ms = a * wb / s - ws
    steps.append(("remainder", remainder_ms, s))
    out = []
    prev = a
    labels = dict(STEPS)
    for key, ms, now in steps:
        out.append({"step": key, "label": labels[key], "loss_ms": ms, "loss_speedup": prev - now,
                    "factor": now / prev, "speedup_after": now})
        prev = now
    return {"ideal_speedup": a, "modelled_speedup": steps[2][2], "measured_speedup": s, "host_ms": hs, "base_host_ms": hb,
            "inputs": {"accept_length": a, "base_cycle_ms": wb, "base_decode_ms": db, "draft_ms": float(draft_ms),
                       "verify_ms": v, "cycle_ms": ws, "speedup": s},
            "steps": out}


def _wf_from(base: Mapping[str, Any], spec: Mapping[str, Any], speedup: Any, sfx: str) -> dict[str, Any]:
    return waterfall(spec.get(f"accept_length{sfx}"), base.get(f"cycle_ms{sfx}"), base.get(f"decode_ms{sfx}"),
                     spec.get(f"draft_ms{sfx}") if spec.get(f"draft_ms{sfx}") is not None else 0.0,
                     spec.get(f"verify_ms{sfx}"), spec.get(f"cycle_ms{sfx}"), speedup)


def summary_waterfalls(rows: Sequence[Mapping[str, Any]], baseline: str | None,
                       truth: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One waterfall per speculative (mode, point) row with a baseline row at the same point.

    :param rows: summary rows (``mode``, ``point``, ``accept_length_mean``, ``cycle_ms_mean``,
        ``decode_ms_mean``, ``draft_ms_mean``, ``verify_ms_mean``, ``speedup_decode_tok_s``).
    :param truth: ``mode -> result.json ground_truth`` (emulator), or None; where both modes have
        the point, the entry gets ``truth``: the same waterfall from what the emulator did.
    :returns: ``[{"mode", "point", **waterfall(...)}]`` (``{"mode", "point", "error"}`` where an
        input is missing: e.g. no device timer).
    """
    if not baseline:
        return []
    base = {r["point"]: r for r in rows if r.get("mode") == baseline}
    out = []
    for r in rows:
        if r.get("mode") == baseline or r.get("accept_length_mean") is None or r.get("point") not in base:
            continue
        entry: dict[str, Any] = {"mode": r["mode"], "point": r["point"]}
        try:
            entry.update(_wf_from(base[r["point"]], r, r.get("speedup_decode_tok_s"), "_mean"))
        except WaterfallInputError as exc:
            entry["error"] = str(exc)
        tb, ts = (truth or {}).get(baseline, {}).get(r["point"]), (truth or {}).get(r["mode"], {}).get(r["point"])
        if tb and ts and tb.get("decode_tok_s") and ts.get("decode_tok_s"):
            try:
                entry["truth"] = _wf_from(tb, ts, ts["decode_tok_s"] / tb["decode_tok_s"], "")
            except WaterfallInputError:
                pass
        out.append(entry)
    return out


def largest_loss(wf: Mapping[str, Any]) -> dict[str, Any] | None:
    """The step with the largest ``loss_speedup`` (None when the entry has no steps)."""
    steps = wf.get("steps") or []
    return max(steps, key=lambda s: s["loss_speedup"]) if steps else None


def waterfall_line(wf: Mapping[str, Any]) -> str | None:
    """One line for the answer: ``eagle3_prefill c1: ideal 1.85x -> measured 0.78x; largest loss:
    verify above a decode step (+16.9 ms/cycle, -0.92x)``; None without steps."""
    big = largest_loss(wf)
    if big is None:
        return None
    return (f"{wf['mode']} {wf['point']}: ideal {wf['ideal_speedup']:.2f}x -> measured {wf['measured_speedup']:.2f}x; "
            f"largest loss: {big['label']} ({big['loss_ms']:+.1f} ms/cycle, {-big['loss_speedup']:+.2f}x)")


def comparison_waterfalls(rows: Sequence[Mapping[str, Any]], baseline: str | None,
                          results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The comparison's ``waterfall`` part: :func:`summary_waterfalls` of its ``rows`` and
    ``baseline`` with each mode's ground truth from ``results`` (mode -> ``result.json``)."""
    truth = {m: r["ground_truth"] for m, r in results.items() if isinstance(r.get("ground_truth"), Mapping)}
    return summary_waterfalls(rows or [], baseline, truth or None)


def waterfall_metrics(entries: Sequence[Mapping[str, Any]] | None) -> dict[str, float]:
    """Flat MLflow metrics of the comparison run: ``<mode>.<point>.waterfall.<step>.loss_ms`` and
    ``.loss_speedup``, ``.ideal_speedup``, ``.modelled_speedup``."""
    flat: dict[str, float] = {}
    for e in entries or []:
        if "steps" not in e:
            continue
        key = f"{e['mode']}.{e['point']}.waterfall"
        flat[f"{key}.ideal_speedup"] = float(e["ideal_speedup"])
        flat[f"{key}.modelled_speedup"] = float(e["modelled_speedup"])
        for s in e["steps"]:
            flat[f"{key}.{s['step']}.loss_ms"] = float(s["loss_ms"])
            flat[f"{key}.{s['step']}.loss_speedup"] = float(s["loss_speedup"])
    return flat
