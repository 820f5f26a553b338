"""SGLang "Decode batch" log lines: parsing and per-window summary.

Input: the engine's ``server.log`` (SGLang 0.5.23 ``scheduler_components/metrics_reporter.py``
``log_decode_stats``; the emulator writes the same lines). Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["DECODE_LOG_FIELDS", "parse_decode_log", "summarize_decode_log", "steps_by_batch"]


_DECODE_LINE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)(?P<ranks>[^\]]*)\]\s*)?"
    r"Decode batch(?: \[(?P<iter>\d+)\])?,\s*(?P<body>.*)$"
)
_TP = re.compile(r"\bTP(\d+)\b")
_DECODE_KEYS = {
    "#running-req": ("running_req", int),
    "#token": ("token", int),
    "#full token": ("token", int),
    "token usage": ("token_usage", float),
    "full token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "gen throughput (token/s)": ("gen_throughput_tok_s", float),
    "#queue-req": ("queue_req", int),
}
_GRAPH_KEYS = ("cuda graph", "cpu graph", "npu graph", "musa graph")
DECODE_LOG_FIELDS = (
    "running_req",
    "token",
    "token_usage",
    "accept_len",
    "accept_rate",
    "cuda_graph",
    "gen_throughput_tok_s",
    "queue_req",
)


def parse_decode_log(text: str | Iterable[str]) -> list[dict[str, Any]]:
    """Parse SGLang "Decode batch" log lines.

    Format (SGLang 0.5.23 ``metrics_reporter.py`` ``log_decode_stats``)::

        [2026-01-05 10:00:00 TP0] Decode batch, #running-req: 1, #token: 512,
        token usage: 0.01, accept len: 1.85, accept rate: 0.42, cuda graph: True,
        gen throughput (token/s): 61.20, #queue-req: 0[, fwd occupancy: ...]

    ``accept len``/``accept rate`` appear only with speculation; the timestamp prefix,
    ``[iter]``, hybrid-pool token fields, MFU and occupancy suffixes are optional. Other
    lines are skipped.

    :param text: log text or an iterable of lines.
    :returns: one dict per line with keys ``ts`` (str|None), ``tp_rank`` (int|None),
        ``forward_iter`` (int|None), :data:`DECODE_LOG_FIELDS` (``cuda_graph`` bool;
        absent fields None) and ``extra`` (other ``key: value`` pairs as strings).
    """
    lines = text.splitlines() if isinstance(text, str) else text
    out: list[dict[str, Any]] = []
    for line in lines:
        if "Decode batch" not in line:
            continue
        m = _DECODE_LINE.search(line.rstrip())
        if not m:
            continue
        rec: dict[str, Any] = {"ts": m["ts"], "tp_rank": None, "forward_iter": None}
        rec.update(dict.fromkeys(DECODE_LOG_FIELDS))
        rec["extra"] = {}
        if m["ranks"]:
            tp = _TP.search(m["ranks"])
            rec["tp_rank"] = int(tp.group(1)) if tp else None
        if m["iter"]:
            rec["forward_iter"] = int(m["iter"])
        for part in m["body"].split(", "):
            key, sep, val = part.partition(": ")
            if not sep:
                continue
            key, val = key.strip(), val.strip().rstrip(",")
            if key in _GRAPH_KEYS:
                rec["cuda_graph"] = val == "True"
            elif key in _DECODE_KEYS:
                name, typ = _DECODE_KEYS[key]
                try:
                    rec[name] = typ(val)
                except ValueError:
                    rec["extra"][key] = val
            else:
                rec["extra"][key] = val
        out.append(rec)
    return out


def summarize_decode_log(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate parsed "Decode batch" lines (:func:`parse_decode_log`).

    Each line reports one iteration out of every ``--decode-log-interval`` (default 40),
    so ``cuda_graph_fraction`` is a sampled share of decode iterations run in a CUDA
    graph (DESIGN.md ``verify_graph_fraction``, log variant); the means are over lines.

    :returns: ``{"lines": int, "cuda_graph_fraction", "mean_accept_len",
        "mean_gen_throughput_tok_s", "max_running_req"}``; None where no line has the field.
    """
    graph = [r["cuda_graph"] for r in rows if r.get("cuda_graph") is not None]
    acc = [r["accept_len"] for r in rows if r.get("accept_len") is not None]
    thr = [r["gen_throughput_tok_s"] for r in rows if r.get("gen_throughput_tok_s") is not None]
    run = [r["running_req"] for r in rows if r.get("running_req") is not None]
    return {
        "lines": len(rows),
        "cuda_graph_fraction": sum(graph) / len(graph) if graph else None,
        "mean_accept_len": float(np.mean(acc)) if acc else None,
        "mean_gen_throughput_tok_s": float(np.mean(thr)) if thr else None,
        "max_running_req": max(run) if run else None,
    }


def steps_by_batch(text: str | Iterable[str]) -> dict[int, int]:
    """``{running requests: most frequent draft steps}`` of the decode log lines: the tier an
    adaptive server (``--speculative-adaptive``) ran at each batch size. SGLang logs ``accept rate``
    = (accept len - 1) / steps (0.5.16 ``scheduler_metrics_mixin``, 0.5.23 ``metrics_reporter.py``),
    so steps = round((accept len - 1) / accept rate); lines with ``accept rate`` 0 (no draft
    accepted: steps unknown) are left out, except at ``accept len`` 1.00, where 0 steps (the
    zero-step tier: verify one token, no draft) is the only reading consistent with the tier tables.
    Lines without speculation fields give nothing (an empty dict for a plain-decoding server)."""
    import collections

    seen: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for rec in parse_decode_log(text):
        n, al, rate = rec["running_req"], rec["accept_len"], rec["accept_rate"]
        if n is None or al is None or rate is None:
            continue
        if rate > 0:
            seen[n][round((al - 1) / rate)] += 1
        elif al == 1.0:
            seen[n][0] += 1
    return {n: c.most_common(1)[0][0] for n, c in seen.items()}
