"""The lossless check: does each speculative mode's output match plain decoding token for token?

EAGLE-3 is lossless by construction: like all speculative decoding (Leviathan et al., "Fast
Inference from Transformers via Speculative Decoding", ICML 2023) the target model verifies
every drafted token and keeps only those it would have produced itself, so at temperature 0
the output is the greedy decoding's token for token (the EAGLE papers, Li et al. 2024-2025,
state the same for EAGLE-3). A speculative output that differs from the baseline's at temperature 0
points to a verify bug, a numerics difference between the verify and decode kernels (batch
shape, attention backend), or a sampling setting.

Pure: the inputs are the modes' request records (``results/<mode>/requests.jsonl`` lines,
docs/contracts.md, with ``output_ids`` from :mod:`lab.measure.client`), the output a dict.

What is compared with what (like with like): every mode streams the same requests, so a
request is matched with the baseline's request at the same ``point``, ``repeat`` and slot
(its position in that repeat's list, the ``-r<repeat>-<slot>`` rid suffix,
:func:`lab.analysis.paired.request_slot`), which must carry the same ``prompt_index`` (the
same prompt text, context padding and output length: ``lab.workload.dataset.workload`` and
``output_lengths`` draw them from ``seed + repeat`` in every mode). Both must be ``ok``.
A pair is *identical* when the two ``output_ids`` lists are equal; otherwise its *first
divergence* is the first token position (0-based) where they differ, or the shorter
length when one is a prefix of the other. Per prompt (``prompt_index``), its pairs over
points and repeats are pooled: how many are identical and the earliest divergence.

Never a false pass: a pair where either side has no ``output_ids`` (results recorded before
the check existed, or a server that sent none) is counted in ``missing_ids`` and left out;
with no comparable pair the mode is "not checked", with the reason. So is every mode when
decoding is not greedy (temperature > 0: sampled outputs differ between any two runs), and
a mode given a ``skip`` reason (SGLang's simulated acceptance, ``SGLANG_SIMULATE_ACC_LEN``,
accepts draft tokens unverified, so its outputs are not the model's by design).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from lab.analysis.paired import request_slot

__all__ = ["check_lossless", "first_divergence", "flat_metrics", "summary_line", "METHOD", "HEAD_CHARS", "NAMED_PROMPTS"]

METHOD = ("each ok request vs the baseline's at the same point, repeat, slot and prompt index; "
          "identical = equal output_ids; first divergence = first differing token position (0-based)")
#: Characters of a prompt's text named in a warning.
HEAD_CHARS = 40
#: Prompts named in one warning (the rest are counted).
NAMED_PROMPTS = 5


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """First position (0-based) where token lists ``a`` and ``b`` differ; the shorter length
    when one is a proper prefix of the other; None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _key(rec: Mapping[str, Any]) -> tuple[Any, Any, int] | None:
    slot = request_slot(rec.get("rid"))
    if rec.get("point") is None or slot is None:
        return None  # warm-up, profile or foreign records: not part of the measured workload
    return rec["point"], rec.get("repeat"), slot


def _index(records: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any, int], Mapping[str, Any]]:
    return {k: r for r in records if (k := _key(r)) is not None}


def _head(text: str | None) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= HEAD_CHARS else t[: HEAD_CHARS - 1].rstrip() + "…"


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _not_checked(reason: str) -> dict[str, Any]:
    return {"status": "not checked", "reason": reason, "pairs": 0, "identical": 0, "identical_share": None,
            "total_pairs": 0, "failed": 0, "missing_ids": 0, "unmatched": 0, "first_divergence_token_min": None,
            "first_divergence_token_median": None, "divergent": [], "prompts": [], "points": {},
            "passed": None, "warning": None}


def _check_mode(mode: str, base: dict, other: dict, baseline: str, min_share: float,
                heads: Mapping[int, str]) -> dict[str, Any]:
    pairs = identical = missing = unmatched = failed = 0
    divergent: list[dict[str, Any]] = []
    per_prompt: dict[Any, dict[str, Any]] = defaultdict(lambda: {"pairs": 0, "identical": 0, "first": []})
    per_point: dict[Any, list[int]] = defaultdict(lambda: [0, 0])  # [pairs, identical]
    keys = base.keys() | other.keys()
    for key in sorted(keys, key=lambda k: (str(k[0]), k[1] if k[1] is not None else -1, k[2])):
        rb, ro = base.get(key), other.get(key)
        if rb is None or ro is None or rb.get("prompt_index") != ro.get("prompt_index"):
            unmatched += 1
            continue
        if not rb.get("ok") or not ro.get("ok"):
            failed += 1  # a request that failed on either side has no output to compare
            continue
        ib, io = rb.get("output_ids"), ro.get("output_ids")
        if not isinstance(ib, list) or not isinstance(io, list):
            missing += 1
            continue
        pairs += 1
        pi = rb.get("prompt_index")
        per_prompt[pi]["pairs"] += 1
        per_point[key[0]][0] += 1
        d = first_divergence(ib, io)
        if d is None:
            identical += 1
            per_prompt[pi]["identical"] += 1
            per_point[key[0]][1] += 1
        else:
            per_prompt[pi]["first"].append(d)
            divergent.append({"point": key[0], "repeat": key[1], "slot": key[2], "prompt_index": pi,
                              "first_divergence_token": d, "tokens_baseline": len(ib), "tokens": len(io)})
    if pairs == 0:
        if missing:
            who = sorted({m for m, idx in ((baseline, base), (mode, other))
                          if any(isinstance(r, Mapping) and r.get("ok") and not isinstance(r.get("output_ids"), list)
                                 for r in idx.values())})
            out = _not_checked(f"no output_ids in {' and '.join(who or [mode])} requests.jsonl "
                               f"({missing} matched requests; results recorded before the lossless check). "
                               f"Fix: re-run `dvc repro {' '.join('bench@' + m for m in who or [mode])}`")
        else:
            out = _not_checked(f"no request matched the baseline's (same point, repeat, slot and prompt; "
                               f"{unmatched} unmatched, {failed} failed)")
        out.update(missing_ids=missing, unmatched=unmatched, failed=failed, total_pairs=len(keys))
        return out
    firsts = [d["first_divergence_token"] for d in divergent]
    prompts = []
    for pi in sorted(per_prompt, key=lambda x: (x is None, x if isinstance(x, int) else 0)):
        e = per_prompt[pi]
        prompts.append({"prompt_index": pi, "head": _head(heads.get(pi)) if pi in heads else None,
                        "pairs": e["pairs"], "identical": e["identical"],
                        "identical_share": e["identical"] / e["pairs"],
                        "first_divergence_token_min": min(e["first"]) if e["first"] else None})
    share = identical / pairs
    out = {"status": "checked", "reason": None, "pairs": pairs, "identical": identical, "identical_share": share,
           "total_pairs": len(keys), "failed": failed, "missing_ids": missing, "unmatched": unmatched,
           "first_divergence_token_min": min(firsts) if firsts else None,
           "first_divergence_token_median": statistics.median(firsts) if firsts else None,
           "divergent": divergent, "prompts": prompts,
           "points": {p: {"pairs": n, "identical": k, "identical_share": k / n,
                          "total_pairs": sum(1 for key in keys if key[0] == p)} for p, (n, k) in per_point.items()},
           "passed": share >= min_share, "warning": None}
    if not out["passed"]:
        bad = [p for p in prompts if p["identical"] < p["pairs"]]
        named = "; ".join(f"#{p['prompt_index']}" + (f" \"{p['head']}\"" if p["head"] else "")
                          + f" (first divergence at token {p['first_divergence_token_min']})"
                          for p in bad[:NAMED_PROMPTS])
        more = f"; and {len(bad) - NAMED_PROMPTS} more" if len(bad) > NAMED_PROMPTS else ""
        out["warning"] = (f"lossless check: {pairs - identical} of {pairs} outputs ({100 * (1 - share):.1f} %) "
                          f"differ from {baseline}'s token for token at temperature 0 (identical share "
                          f"{share:.3f} < lossless.min_identical_share {min_share:g}), first at token "
                          f"{out['first_divergence_token_min']}; {_n(len(bad), 'prompt')}: {named}{more}. A verify bug, "
                          "a numerics difference between verify and decode kernels, or a sampling setting; "
                          "per-request detail in reports/comparison.json (lossless)")
    return out


def check_lossless(records: Mapping[str, Iterable[Mapping[str, Any]]], baseline: str | None, *,
                   temperature: float, min_identical_share: float = 1.0,
                   prompt_texts: Mapping[int, str] | None = None,
                   skip: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Compare every non-baseline mode's output token ids with the baseline's (module docstring).

    :param records: ``mode -> request records`` (dicts of docs/contracts.md; records without
        ``point`` or a lab rid, e.g. warm-up, are ignored); must include ``baseline``'s.
    :param baseline: the plain-decoding mode (None: nothing is checked).
    :param temperature: the benchmark's sampling temperature; above 0 nothing is checked.
    :param min_identical_share: a checked mode whose identical share is below this fails
        and gets a warning naming its divergent prompts (``lossless.min_identical_share`` in params.yaml).
    :param prompt_texts: ``prompt_index -> text`` for the warning's short heads (optional).
    :param skip: ``mode -> reason`` for modes whose outputs are not expected to match.
    :returns: ``{"baseline", "temperature", "min_identical_share", "method", "modes": {mode:
        {"status": "checked"|"not checked", "reason", "pairs" (compared), "identical", "identical_share",
        "total_pairs" (the request slots of either mode), "failed" (either side not ok), "missing_ids",
        "unmatched" (no partner or another prompt), "first_divergence_token_min", "first_divergence_token_median",
        "divergent": [{point, repeat, slot, prompt_index, first_divergence_token, tokens_baseline,
        tokens}], "prompts": [{prompt_index, head, pairs, identical, identical_share,
        first_divergence_token_min}], "points": {point: {pairs, identical, identical_share, total_pairs}},
        "passed", "warning", "line"}}, "warnings": {mode: [text]}}``; ``line`` is
        :func:`summary_line` (what the answer prints). Token positions are 0-based.
    :raises ValueError: ``min_identical_share`` outside [0, 1].
    """
    if not 0.0 <= min_identical_share <= 1.0:
        raise ValueError(f"min_identical_share={min_identical_share} outside [0, 1]. Fix: e.g. 1.0 (every output identical)")
    out: dict[str, Any] = {"baseline": baseline, "temperature": temperature,
                           "min_identical_share": min_identical_share, "method": METHOD, "modes": {}, "warnings": {}}
    if baseline is None:
        return out
    base = _index(records.get(baseline) or ())
    heads = dict(prompt_texts or {})
    for mode, recs in records.items():
        if mode == baseline:
            continue
        if temperature > 0:
            entry = _not_checked(f"temperature {temperature:g} > 0: sampled outputs differ between runs; "
                                 "the check needs greedy decoding (bench.temperature: 0)")
        elif skip and mode in skip:
            entry = _not_checked(skip[mode])
        else:
            entry = _check_mode(mode, base, _index(recs), baseline, min_identical_share, heads)
        entry["line"] = summary_line(entry, baseline)
        out["modes"][mode] = entry
        if entry["warning"]:
            out["warnings"][mode] = [entry["warning"]]
    return out


def summary_line(entry: Mapping[str, Any], baseline: str | None) -> str:
    """One sentence on a mode's lossless check, for the answer (:mod:`lab.report.answer`): how many
    pairs were compared of how many, and why the rest were not, e.g. ``"lossless: 1/1 identical to
    baseline's token for token (100.0 %) of 12 request pairs; 11 failed"``."""
    if entry.get("status") != "checked":
        return f"lossless: not checked: {entry.get('reason')}"
    n, k = entry["pairs"], entry["identical"]
    total = entry.get("total_pairs") or n
    text = f"lossless: {k}/{n} identical to {baseline}'s token for token ({100 * k / n:.1f} %) of {total} request pairs"
    for count, why in ((entry.get("failed"), "failed"), (entry.get("missing_ids"), "without output_ids"),
                       (entry.get("unmatched"), "unmatched")):
        if count:
            text += f"; {count} {why}"
    if entry.get("first_divergence_token_min") is not None:
        bad = sum(1 for p in entry.get("prompts", ()) if p["identical"] < p["pairs"])
        text += (f"; {bad} of {_n(len(entry.get('prompts', ())), 'prompt')} differ, first at token "
                 f"{entry['first_divergence_token_min']}")
    return text


def flat_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat numbers for DVC and MLflow: ``<mode>.lossless.checked`` (1/0) and, when checked,
    ``.identical_share``, ``.pairs`` (compared), ``.total_pairs``, ``.divergent_prompts`` and ``.first_divergence_token_min``
    (only when some output diverged)."""
    flat: dict[str, float] = {}
    for mode, e in (result.get("modes") or {}).items():
        pre = f"{mode}.lossless."
        flat[pre + "checked"] = 1.0 if e["status"] == "checked" else 0.0
        if e["status"] != "checked":
            continue
        flat[pre + "identical_share"] = float(e["identical_share"])
        flat[pre + "pairs"] = float(e["pairs"])
        flat[pre + "total_pairs"] = float(e.get("total_pairs") or e["pairs"])
        flat[pre + "divergent_prompts"] = float(sum(1 for p in e["prompts"] if p["identical"] < p["pairs"]))
        if e["first_divergence_token_min"] is not None:
            flat[pre + "first_divergence_token_min"] = float(e["first_divergence_token_min"])
    return flat
