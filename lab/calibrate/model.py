"""The cost model a calibration fits and a prediction replays: one linear block per forward category.

The blocks mirror the emulator's cost profile (:mod:`lab.emulator.profile`, module docstring)
and SGLang's device-timer categories (``sglang:forward_execution_seconds_total{category=...}``,
DESIGN.md). Each block is ``ms = x' beta`` with the regressors below; the same functions build
the rows of a measured window (with window means: every block is linear, so the mean of a
window's iterations is the row at the mean regressors) and of a simulated iteration, so a
prediction uses exactly the model the data were fitted with.

===============  =================================================  ==========================
block            y (ms)                                            columns (regressor)
===============  =================================================  ==========================
``decode``       category ``decode`` per decode iteration            ``decode.graph_ms_bs1`` (g),
                 (no speculation)                                    ``decode.per_extra_seq_ms`` (g (b-1)),
                                                                     ``decode.eager_ms_bs1`` (1-g),
                                                                     ``decode.eager_per_extra_seq_ms`` ((1-g)(b-1)),
                                                                     ``decode.kv_ms_per_1k_tokens`` (kv),
                                                                     ``decode.kv_seq_ms_per_1k_tokens`` (kv / b; with context)
``verify``       ``target_verify`` per decode iteration              ``verify.graph_ms_ref`` (g),
                                                                     ``verify.eager_ms_ref`` (1-g),
                                                                     ``verify.per_extra_token_ms`` (t - t_ref),
                                                                     ``verify.per_extra_seq_ms`` (b-1),
                                                                     ``verify.kv_ms_per_1k_tokens@V`` (kv, variant V),
                                                                     ``verify.kv_seq_ms_per_1k_tokens@V`` (kv / b; with context),
                                                                     ``verify.offset_ms@V`` (1, variant V but the first)
``draft``        ``eagle_draft`` per decode iteration                ``draft.eagle_draft_ms_per_step`` (s),
                                                                     ``draft.eagle_draft_per_extra_seq_ms`` (s (b-1))
``draft_extend`` ``eagle_draft_extend`` per decode iteration         ``draft.eagle_draft_extend_ms`` (1),
                                                                     ``draft.eagle_draft_extend_per_extra_seq_ms`` (b-1)
``extend``       ``extend`` in the whole window (prefill, plus the   ``prefill.base_ms`` (prefill passes),
                 draft-extend when it ran outside CUDA graphs, and   ``prefill.per_token_ms`` (prompt tokens computed),
                 the draft model's forward over the prompt under     ``draft.eager_extend_ms`` (decode iterations),
                 speculation)                                        ``draft.eager_extend_per_extra_seq_ms`` (sum of b-1),
                                                                     ``draft.prefill_base_ms`` (speculative prefill passes),
                                                                     ``draft.prefill_per_token_ms`` (their prompt tokens)
``overhead``     a decode iteration's wall time minus its device     ``scheduler_overhead_ms`` (1),
                 time (requests whose decode ran without a           ``scheduler_overhead_per_extra_seq_ms`` (b-1),
                 prefill in between)                                 ``spec_overhead_ms`` (1 for a speculative cycle)
``prefill_wall`` busy time minus device time minus the decode        ``prefill_extra_ms`` (1)
                 iterations' overhead, per prefill
===============  =================================================  ==========================

The per-sequence context columns (``kv / b``: the mean sequence's KV, thousands of tokens) enter
only when the measured windows span context lengths (:func:`spans_context`: the mean sequence's
KV differs by more than :data:`CONTEXT_SPAN` x between windows and reaches 1,000 tokens); with the
short prompts alone the two KV regressors are nearly collinear and the fit keeps the batch one.
Why both: on real SGLang 0.5.16 the triton backend's verify at 6144 tokens cost about the same
at concurrency 1 and 4 (``docs/benchmarks/h200-sglang-0.5.16-context.md``), a cost that follows
one sequence's context, not the batch's total.

``g``: share of the iterations that replayed a CUDA graph; ``b``: sequences in the batch; ``kv``:
KV tokens of the batch / 1000; ``t``: tokens verified per sequence (``num_draft_tokens``);
``t_ref``: the reference token count of the fit; ``s``: draft steps (``num_steps``).
``spec_overhead_ms``: what a speculative cycle's scheduling costs beyond a decode step's
(draft-tree bookkeeping); ``prefill_extra_ms``: the wall time a prefill adds beyond its device
time (its scheduling, and the request's send-to-admission latency, which the engine's busy time
includes once per prefill at concurrency 1); ``draft.prefill_*``: the draft model's own forward
over a new prompt, which SGLang books as ``extend`` beside the target's prefill.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCKS", "CONTEXT_SPAN", "MODE_PICKS_BACKEND_ONLY_VERSIONS", "spans_context", "decode_columns",
           "verify_variant", "verify_columns", "decode_x",
           "verify_x", "verify_needs", "draft_x", "draft_extend_x", "extend_x", "overhead_x", "prefill_wall_x"]

#: SGLang builds in which the attention mode only selects the verify attention backend (DESIGN.md).
MODE_PICKS_BACKEND_ONLY_VERSIONS = ("0.5.16", "0.5.23")

BLOCKS: dict[str, list[str]] = {
    "decode": ["decode.graph_ms_bs1", "decode.per_extra_seq_ms", "decode.eager_ms_bs1",
               "decode.eager_per_extra_seq_ms", "decode.kv_ms_per_1k_tokens"],
    "draft": ["draft.eagle_draft_ms_per_step", "draft.eagle_draft_per_extra_seq_ms"],
    "draft_extend": ["draft.eagle_draft_extend_ms", "draft.eagle_draft_extend_per_extra_seq_ms"],
    "extend": ["prefill.base_ms", "prefill.per_token_ms", "draft.eager_extend_ms",
               "draft.eager_extend_per_extra_seq_ms", "draft.prefill_base_ms", "draft.prefill_per_token_ms"],
    "overhead": ["scheduler_overhead_ms", "scheduler_overhead_per_extra_seq_ms", "spec_overhead_ms"],
    "prefill_wall": ["prefill_extra_ms"],
}
#: How much the mean sequence's KV must vary between windows for the per-sequence columns (ratio).
CONTEXT_SPAN = 4.0
_DECODE_SEQ = "decode.kv_seq_ms_per_1k_tokens"
_VERIFY_SHARED = ["verify.graph_ms_ref", "verify.eager_ms_ref", "verify.per_extra_token_ms", "verify.per_extra_seq_ms"]


def verify_variant(engine_version: str | None, attention_mode: str | None, verify_backend: str | None) -> str:
    """The verify variant of a configuration (module docstring): ``backend:<name>`` in the builds
    of :data:`MODE_PICKS_BACKEND_ONLY_VERSIONS`, else ``mode:<attention mode>``."""
    if str(engine_version) in MODE_PICKS_BACKEND_ONLY_VERSIONS:
        return f"backend:{verify_backend or 'default'}"
    return f"mode:{attention_mode}"


def spans_context(seq_kv_k: list[float]) -> bool:
    """Whether windows whose mean sequence holds ``seq_kv_k`` thousand KV tokens span context
    lengths enough to fit the per-sequence columns (module docstring)."""
    xs = [x for x in seq_kv_k if x > 0]
    return bool(xs) and max(xs) >= 1.0 and max(xs) > CONTEXT_SPAN * min(xs)


def decode_columns(per_seq: bool = False) -> list[str]:
    """Columns of the decode block (with the per-sequence context column when ``per_seq``)."""
    return [*BLOCKS["decode"], *([_DECODE_SEQ] if per_seq else [])]


def verify_columns(variants: list[str], per_seq: bool = False) -> list[str]:
    """Columns of the verify block for these variants (the first is the offsets' reference; with
    ``per_seq``, each variant's per-sequence context column too)."""
    cols = list(_VERIFY_SHARED)
    cols += [f"verify.kv_ms_per_1k_tokens@{v}" for v in variants]
    if per_seq:
        cols += [f"verify.kv_seq_ms_per_1k_tokens@{v}" for v in variants]
    cols += [f"verify.offset_ms@{v}" for v in variants[1:]]
    return cols


def decode_x(b: float, kv_k: float, g: float, columns: list[str] | None = None) -> np.ndarray:
    """Row of the ``decode`` block: batch ``b``, ``kv_k`` thousand KV tokens of the batch, graph
    share ``g``; ``columns`` (:func:`decode_columns`) with the per-sequence one adds ``kv_k / b``."""
    x = [g, g * (b - 1), 1 - g, (1 - g) * (b - 1), kv_k]
    if columns and _DECODE_SEQ in columns:
        x.append(kv_k / b if b else 0.0)
    return np.array(x)


def verify_x(columns: list[str], b: float, kv_k: float, g: float, t: float, t_ref: float, variant: str) -> np.ndarray:
    """Row of the ``verify`` block (``columns`` from :func:`verify_columns`). A variant without
    columns gets zeros there (and :meth:`lab.calibrate.linfit.LinearFit.estimable` then refuses it
    unless its columns were never needed)."""
    x = np.zeros(len(columns))
    x[0], x[1], x[2], x[3] = g, 1 - g, t - t_ref, b - 1
    kv_col, off_col = f"verify.kv_ms_per_1k_tokens@{variant}", f"verify.offset_ms@{variant}"
    seq_col = f"verify.kv_seq_ms_per_1k_tokens@{variant}"
    if kv_col in columns:
        x[columns.index(kv_col)] = kv_k
    if seq_col in columns:
        x[columns.index(seq_col)] = kv_k / b if b else 0.0
    if off_col in columns:
        x[columns.index(off_col)] = 1.0
    return x


def verify_needs(columns: list[str], variant: str) -> str | None:
    """None when ``variant`` has columns in the fit, else why a prediction for it is refused."""
    return None if f"verify.kv_ms_per_1k_tokens@{variant}" in columns else (
        f"verify variant {variant} was never measured (the fit has {', '.join(c.split('@')[1] for c in columns if c.startswith('verify.kv_ms_per_1k_tokens@'))})")


def draft_x(b: float, steps: float) -> np.ndarray:
    """Row of the ``draft`` block (``steps`` draft forwards per cycle)."""
    return np.array([steps, steps * (b - 1)])


def draft_extend_x(b: float) -> np.ndarray:
    """Row of the ``draft_extend`` block."""
    return np.array([1.0, b - 1])


def extend_x(passes: float, tokens: float, eager_extend_iters: float = 0.0, eager_extend_extra_seqs: float = 0.0,
             speculative: bool = False) -> np.ndarray:
    """Row of the ``extend`` block: a window's (or one prefill's) totals; under speculation the
    prefill passes and tokens also enter the draft model's prefill columns."""
    s = 1.0 if speculative else 0.0
    return np.array([passes, tokens, eager_extend_iters, eager_extend_extra_seqs, s * passes, s * tokens])


def overhead_x(b: float, speculative: float = 0.0) -> np.ndarray:
    """Row of the ``overhead`` block: a decode iteration of batch ``b`` (``speculative`` 1 for a
    speculative cycle; a window's row carries its mean batch)."""
    return np.array([1.0, b - 1, speculative])


def prefill_wall_x() -> np.ndarray:
    """Row of the ``prefill_wall`` block (one prefill)."""
    return np.array([1.0])
