"""What each mode's numbers stand on, carried into every output of the comparison: the engine and
its inputs, and (:func:`scope_of`) how many engine launches an interval spans.

:func:`lab.engine.registry.provenance` says it for a configuration (``engine``; ``timing``
modelled/measured; ``weights`` emulated/random/real; ``acceptance`` emulated/simulated/real/n/a),
and the bench stage records it in each mode's ``result.json`` (``provenance``). The compare stage
reads it back per mode (:func:`result_provenance`; results recorded before the field existed are
read off what they did record: the engine, and the server command's ``--load-format dummy``,
``SGLANG_SIMULATE_ACC_LEN`` and ``--speculative-algorithm``), and puts it in every CSV row
(:func:`tag_rows`, columns :data:`COLUMNS`), ``summary.json``, the headline metrics, the figure
and report caption (:func:`provenance_sentence`) and the answer. So a reader of any one file
can tell an emulator number, or a real SGLang number from a synthetic model with random weights
and simulated acceptance, from a measurement of the served model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lab.analysis.estimates import Ratio, Scope

__all__ = ["COLUMNS", "scope_data", "scope_of", "result_provenance", "mode_provenance", "tag_rows", "provenance_sentence", "short_label"]

#: The interval's label when the comparison says nothing about launches (issue 22: every repeat of a
#: mode runs in one engine launch, so launch-to-launch variation is not in the interval).

#: The provenance columns every CSV row carries, in this order.
COLUMNS = ("engine", "timing", "weights", "acceptance")

#: What each value means, for the sentences.
_WEIGHTS = {"emulated": "emulated weights (no model)",
            "random": "random weights (--load-format dummy: the model's shapes, not its numbers)",
            "real": "real weights"}
_ACCEPTANCE = {"emulated": "emulated acceptance (the profile's model)",
               "simulated": "simulated acceptance (SGLANG_SIMULATE_ACC_LEN: draft tokens accepted unverified)",
               "real": "real acceptance (the draft model's own)"}


def result_provenance(result: Mapping[str, Any]) -> dict[str, str]:
    """``{"engine", "timing", "weights", "acceptance"}`` of one mode's ``result.json``.

    The recorded ``provenance`` when present; otherwise inferred from the result itself: the
    emulator is modelled with emulated weights and acceptance; a real engine is measured, its
    weights ``random`` when its server command loaded ``--load-format dummy``, else ``real``, and
    its acceptance ``simulated`` when ``SGLANG_SIMULATE_ACC_LEN`` was set, ``n/a`` without
    ``--speculative-algorithm``, else ``real``.
    """
    recorded = result.get("provenance")
    if isinstance(recorded, Mapping) and all(k in recorded for k in COLUMNS):
        return {k: str(recorded[k]) for k in COLUMNS}
    engine = str(result.get("engine") or "?")
    cmd = str(result.get("server_command") or "")
    speculative = "--speculative-algorithm" in cmd or bool((result.get("headline") or {}).get("accept_length"))
    from lab.engine.registry import any_modelled

    if any_modelled([engine]):
        return {"engine": engine, "timing": "modelled", "weights": "emulated",
                "acceptance": "emulated" if speculative else "n/a"}
    weights = "random" if "--load-format dummy" in cmd else "real"
    acceptance = ("simulated" if "SGLANG_SIMULATE_ACC_LEN=" in cmd else "real") if speculative else "n/a"
    return {"engine": engine, "timing": "measured", "weights": weights, "acceptance": acceptance}


def mode_provenance(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """``{mode: result_provenance(...)}``: the comparison's ``provenance`` part (the compare stage
    also puts the four :data:`COLUMNS` on every row with :func:`tag_rows`, right after ``engine``)."""
    return {mode: result_provenance(r) for mode, r in results.items()}


def tag_rows(rows: Iterable[Mapping[str, Any]], provenance: Mapping[str, Mapping[str, str]],
             after: str = "mode") -> list[dict[str, Any]]:
    """Copies of ``rows`` (dicts with ``mode``) with the :data:`COLUMNS` of their mode inserted
    after column ``after`` (replacing any there already); a mode without provenance gets ``?``."""
    out = []
    for row in rows:
        p = provenance.get(row.get("mode"), {})
        tags = {k: p.get(k, "?") for k in COLUMNS}
        new: dict[str, Any] = {}
        for k, v in row.items():
            if k == after:
                new[k] = tags[k] if k in tags else v
                new.update(tags)
            elif k not in tags:
                new[k] = v
        if after not in row:
            new.update(tags)
        out.append(new)
    return out


def short_label(p: Mapping[str, str]) -> str:
    """A few words for one mode: ``"emulator"`` (every emulator number is modelled, with emulated
    weights and acceptance), ``"sglang: random weights, simulated acceptance"``, ``"sglang: real
    weights"`` (a plain-decoding mode has no acceptance)."""
    from lab.engine.registry import any_modelled

    if any_modelled([p.get("engine")]):
        return str(p.get("engine"))
    words = [f"{p.get('weights')} weights"] + ([f"{p.get('acceptance')} acceptance"]
                                                if p.get("acceptance") not in (None, "n/a") else [])
    return f"{p.get('engine')}: {', '.join(words)}"


def provenance_sentence(provenance: Mapping[str, Mapping[str, str]]) -> str:
    """One sentence for captions and the answer: the engine and timing, then the weights and the
    acceptance, naming the modes each applies to when they differ, e.g. ``"sglang (measured
    timing): random weights (--load-format dummy); simulated acceptance (...) in eagle3_prefill,
    eagle3_decode."``; ``""`` without modes."""
    if not provenance:
        return ""

    def joined(key: str, words: Mapping[str, str]) -> str:
        groups: dict[str, list[str]] = {}
        for mode, p in provenance.items():
            if p.get(key) not in (None, "n/a"):
                groups.setdefault(str(p[key]), []).append(mode)
        if len(groups) == 1:
            (value, modes), = groups.items()
            every = len(modes) == sum(1 for p in provenance.values() if p.get(key) not in (None, "n/a"))
            return words.get(value, value) + ("" if every else f" in {', '.join(modes)}")
        return "; ".join(f"{words.get(v, v)} in {', '.join(ms)}" for v, ms in groups.items())

    engines = sorted({str(p.get("engine")) for p in provenance.values()})
    timings = sorted({str(p.get("timing")) for p in provenance.values()})
    parts = [f"{', '.join(engines)} ({', '.join(timings)} timing)", joined("weights", _WEIGHTS)]
    acc = joined("acceptance", _ACCEPTANCE)
    if acc:
        parts.append(acc)
    return parts[0] + ": " + "; ".join(p for p in parts[1:] if p) + "."


def scope_data(s: dict[str, Any] | None, comparison: dict[str, Any], mode: str) -> Scope:
    """What a speedup's interval spans, as data (:class:`lab.analysis.estimates.Scope`): from the
    entry's ``scope`` and its estimator's fields (:meth:`lab.analysis.estimates.Ratio.scope_data`);
    else from its ``launches``, or the comparison's ``launches`` (an int, or per mode): across N
    launches for N > 1, else within one launch."""
    if s and isinstance(s.get("scope"), str) and s["scope"]:
        got = Ratio.from_dict(s)
        if got is not None and (sc := got.scope_data()) is not None:
            return sc
    n = (s or {}).get("launches")
    if n is None:
        n = comparison.get("launches")
        if isinstance(n, dict):
            n = n.get(mode)
    try:
        n = int(n) if n is not None else None
    except (TypeError, ValueError):
        n = None
    return Scope.across(n or 1)


def scope_of(s: dict[str, Any] | None, comparison: dict[str, Any], mode: str) -> str:
    """The label of a speedup's interval: :func:`scope_data`'s text (the entry's ``scope``; else
    ``"across N launches"`` for N > 1 launches; else :data:`lab.analysis.estimates.WITHIN_ONE_LAUNCH`)."""
    return scope_data(s, comparison, mode).text
