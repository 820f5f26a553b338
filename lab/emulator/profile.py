"""Versioned cost profile of the emulator: how long each forward phase takes.

A profile is a JSON file (``lab/emulator/profiles/<name>.json`` or any path) validated by
:class:`CostProfile` (pydantic, unknown keys forbidden). Every numeric constant is a
``{"value": ..., "source": "..."}`` pair so that the file itself says where each number
comes from (a seed measurement, ``docs/benchmarks/physics-h200-design-folder.json`` or an explicit
assumption). :func:`load_profile` raises :class:`ProfileError` naming the file and the key.

A profile fitted by ``lab calibrate`` (:mod:`lab.calibrate`) adds to each constant a ``fit``
record (:class:`FitInfo`: standard error, 95 % interval, the measured windows it came from) and
may leave a constant the data could not determine as ``"value": null`` with
``fit.determined: false`` and the reason: marked, not guessed. Such a profile loads only with
``load_profile(..., allow_undetermined=True)`` (what ``lab predict`` does); the emulator refuses
it, naming the keys, until they are measured or filled (``lab calibrate --fill-from``).

Cost model (all results in seconds; ``kv_tokens`` is the total KV context of the batch,
summed over its sequences, in tokens)::

    prefill_s(n)      = prefill.base_ms + prefill.per_token_ms * n
    decode_s(b, kv, g)= (decode.graph_ms_bs1 + decode.per_extra_seq_ms*(b-1)) * (1 if g else eager_over_graph)
                        + decode.kv_ms_per_1k_tokens * kv/1000 + decode.kv_seq_ms_per_1k_tokens * (kv/b)/1000
    verify_s(b, t, kv, mode, g)
                      = (ref_ms + per_extra_token_ms*(t-ref_tokens) + per_extra_seq_ms*(b-1))
                        + kv_ms_per_1k_tokens[mode] * kv/1000 + kv_seq_ms_per_1k_tokens[mode] * (kv/b)/1000
                        + offset_ms[mode]
                        where ref_ms = graph_ms_ref if g else eager_ms_ref (offset_ms, kv_seq_*: 0 unless set)

Two context terms: ``kv_ms_per_1k_tokens`` scales with the batch's whole KV (work that grows with
every sequence's context), ``kv_seq_ms_per_1k_tokens`` with one sequence's (the mean over the
batch: a kernel whose time follows the longest per-sequence reduction, not the batch total). On
real SGLang 0.5.16 the triton backend's verify is almost all the second kind: at 6144 tokens it
cost 79 ms at concurrency 1 and 78 ms at 4
(``docs/benchmarks/h200-sglang-0.5.16-context.md``); the per-backend profiles
``kshard_h200_triton`` / ``kshard_h200_flashinfer`` carry both terms fitted by ``lab calibrate``.
    draft_s(b, steps) = eagle_draft_s + eagle_draft_extend_s   (see :meth:`CostProfile.draft_parts_s`)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["ProfileError", "CostProfile", "ModelledBuild", "FitInfo", "load_profile", "PROFILES_DIR",
           "accept_prob_for_mean", "undetermined_keys"]

PROFILES_DIR = Path(__file__).parent / "profiles"


class ProfileError(ValueError):
    """A cost profile is missing or invalid; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FitInfo(_Strict):
    """How a fitted constant was determined (``lab calibrate``, :mod:`lab.calibrate.fit`).

    ``stderr`` / ``ci95``: standard error and 95 % t interval (None when the fit had no residual
    degrees of freedom); ``determined``: False when the measured windows cannot determine it
    (then ``reason`` says why and ``value`` is null); ``results``: the measured windows
    (``<result dir>/<point>/r<repeat>``) it came from; ``n`` / ``dof``: windows and residual
    degrees of freedom of its fit.
    """

    stderr: float | None = None
    ci95: tuple[float, float] | None = None
    determined: bool = True
    reason: str | None = None
    results: list[str] = Field(default_factory=list)
    n: int | None = None
    dof: int | None = None


class _Provenanced(_Strict):
    """A value with its ``source`` and optional ``fit`` record; null only when ``fit.determined`` is False."""

    source: str = Field(min_length=1)
    fit: FitInfo | None = None

    @model_validator(mode="after")
    def _null_only_undetermined(self):
        if getattr(self, "value") is None and (self.fit is None or self.fit.determined):
            raise ValueError("value is null but fit.determined is not false: only an undetermined constant may be null")
        return self


class Num(_Provenanced):
    """A constant with its provenance (``value`` null only in a fitted profile, for a constant
    the data could not determine: ``fit.determined`` False)."""

    value: float | None


class Flag(_Provenanced):
    """A boolean with its provenance (null like :class:`Num`)."""

    value: bool | None


class PrefillCost(_Strict):
    """Prefill (extend) forward: ``base_ms + per_token_ms x new prompt tokens`` (ms)."""

    base_ms: Num
    per_token_ms: Num


class DecodeCost(_Strict):
    """Decode step (ms): ``graph_ms_bs1`` at batch 1 in a CUDA graph, ``per_extra_seq_ms`` per
    further sequence, ``eager_over_graph`` (ratio) outside graphs, ``kv_ms_per_1k_tokens`` per
    1,000 KV tokens of the batch, ``kv_seq_ms_per_1k_tokens`` (optional, 0 when absent) per 1,000
    KV tokens of the mean sequence. Used by :meth:`CostProfile.decode_s`."""

    graph_ms_bs1: Num
    per_extra_seq_ms: Num
    eager_over_graph: Num
    kv_ms_per_1k_tokens: Num
    kv_seq_ms_per_1k_tokens: Num | None = None


class VerifyModeCost(_Strict):
    """One attention mode's verify: whether it runs in a CUDA graph, its KV cost (ms per
    1,000 KV tokens of the batch; optionally ``kv_seq_ms_per_1k_tokens``, ms per 1,000 KV tokens
    of the mean sequence) and, optionally, a fixed offset (ms) over the shared reference cost
    (a fitted profile sets it when the two modes' verify costs differ)."""

    graph_captured: Flag
    kv_ms_per_1k_tokens: Num
    kv_seq_ms_per_1k_tokens: Num | None = None
    offset_ms: Num | None = None


class VerifyCost(_Strict):
    """Target-verify forward (ms): ``graph_ms_ref`` / ``eager_ms_ref`` for ``ref_tokens`` tokens
    per sequence at batch 1, ``per_extra_token_ms`` per further token, ``per_extra_seq_ms`` per
    further sequence; ``modes`` per ``--speculative-attention-mode``."""

    ref_tokens: int = Field(ge=1)
    graph_ms_ref: Num
    eager_ms_ref: Num
    per_extra_token_ms: Num
    per_extra_seq_ms: Num
    modes: dict[Literal["prefill", "decode"], VerifyModeCost]


class DraftCost(_Strict):
    """EAGLE draft costs (ms): per draft step and its per-sequence slope, and the draft-extend
    forward and its per-sequence slope."""

    eagle_draft_ms_per_step: Num
    eagle_draft_per_extra_seq_ms: Num
    eagle_draft_extend_ms: Num
    eagle_draft_extend_per_extra_seq_ms: Num


class AcceptanceModel(_Strict):
    """Acceptance: probability (0..1) that each successive draft token is accepted (a chain
    stops at the first rejection; :mod:`lab.emulator.acceptance`).

    ``per_category`` (optional): the same probability for the prompts of one task category
    (``{"coding": {"value": 0.68, "source": ...}}``), a modelled stand-in for content-dependent
    acceptance; the emulator knows a request's category from the prompt file it is given
    (:mod:`lab.emulator.categories`). Categories not listed, and requests it cannot map, use
    ``p_accept_per_draft_token``."""

    p_accept_per_draft_token: Num
    per_category: dict[str, Num] = Field(default_factory=dict)


class KernelCounts(_Strict):
    """MODELLED kernel counts per forward, for the emulator's profiler trace (lab/emulator/modelled_trace.py)."""

    target_forward: Num
    attention_per_target_forward: Num
    allreduce_per_target_forward: Num
    draft_forward: Num


class ModelledBuild(_Strict):
    """The SGLang build whose *timing* a profile models (its HTTP surfaces are always 0.5.23's).

    ``sglang_version``: the version the timing is faithful to, or None for a build that is
    not a released version the lab can name (the seeds' older build). The emulator reports
    it as ``/server_info`` ``version`` when set, else ``label`` (never "0.5.23" for a build
    that behaves differently), and names it in ``emulator_models_build`` and its log.
    """

    label: str = Field(min_length=1)
    sglang_version: str | None = None
    source: str = Field(min_length=1)


class CostProfile(_Strict):
    """A validated cost profile. Methods return seconds."""

    name: str
    version: int = Field(ge=1)
    description: str
    models_build: ModelledBuild
    prefill: PrefillCost
    decode: DecodeCost
    verify: VerifyCost
    draft: DraftCost
    acceptance: AcceptanceModel
    scheduler_overhead_ms: Num
    kv_capacity_tokens: Num
    kernels: KernelCounts | None = None
    #: The attention backend whose costs the profile's context terms were measured on; the emulator
    #: reports it as ``/server_info`` ``attention_backend`` when the launch sets none (None: its
    #: surfaces' default, :data:`lab.emulator.args.DEFAULT_ATTENTION_BACKEND`).
    attention_backend: str | None = None

    def prefill_s(self, num_new_tokens: int) -> float:
        """Cost (s) of one prefill (extend) forward over ``num_new_tokens`` prompt tokens."""
        return (self.prefill.base_ms.value + self.prefill.per_token_ms.value * max(0, num_new_tokens)) / 1e3

    def decode_s(self, batch: int, kv_tokens: int, graph: bool) -> float:
        """Cost (s) of one decode step of ``batch`` sequences (1 token each).

        ``graph`` False multiplies the compute part by ``decode.eager_over_graph``.
        """
        d = self.decode
        ms = d.graph_ms_bs1.value + d.per_extra_seq_ms.value * max(0, batch - 1)
        if not graph:
            ms *= d.eager_over_graph.value
        ms += d.kv_ms_per_1k_tokens.value * kv_tokens / 1000.0
        if d.kv_seq_ms_per_1k_tokens is not None:
            ms += d.kv_seq_ms_per_1k_tokens.value * kv_tokens / max(1, batch) / 1000.0
        return ms / 1e3

    def verify_graph_captured(self, attention_mode: str) -> bool:
        """Whether target-verify runs in a CUDA graph in ``attention_mode`` (prefill|decode).

        :raises ProfileError: mode not in the profile.
        """
        return self._mode(attention_mode).graph_captured.value

    def _mode(self, attention_mode: str) -> VerifyModeCost:
        try:
            return self.verify.modes[attention_mode]  # type: ignore[index]
        except KeyError:
            raise ProfileError(
                f"profile {self.name}: verify.modes has no attention mode {attention_mode!r} "
                f"(has {sorted(self.verify.modes)})"
            ) from None

    def verify_s(self, batch: int, tokens_per_seq: int, kv_tokens: int, attention_mode: str, graph: bool) -> float:
        """Cost (s) of one target-verify forward: ``batch`` sequences x ``tokens_per_seq`` tokens.

        ``graph`` is whether this step replays a CUDA graph (the caller combines
        :meth:`verify_graph_captured` with the batch limit and ``--disable-cuda-graph``).
        """
        v = self.verify
        ref = v.graph_ms_ref.value if graph else v.eager_ms_ref.value
        ms = ref + v.per_extra_token_ms.value * (tokens_per_seq - v.ref_tokens) + v.per_extra_seq_ms.value * max(0, batch - 1)
        mode = self._mode(attention_mode)
        ms += mode.kv_ms_per_1k_tokens.value * kv_tokens / 1000.0
        if mode.kv_seq_ms_per_1k_tokens is not None:
            ms += mode.kv_seq_ms_per_1k_tokens.value * kv_tokens / max(1, batch) / 1000.0
        if mode.offset_ms is not None:
            ms += mode.offset_ms.value
        return max(ms, 0.0) / 1e3

    def draft_parts_s(self, batch: int, num_steps: int) -> tuple[float, float]:
        """``(eagle_draft_s, eagle_draft_extend_s)`` of one speculative cycle.

        eagle_draft: ``num_steps`` draft-model decode steps; eagle_draft_extend: the draft
        model's extend over the accepted tokens after verify.
        """
        d = self.draft
        extra = max(0, batch - 1)
        draft = num_steps * (d.eagle_draft_ms_per_step.value + d.eagle_draft_per_extra_seq_ms.value * extra)
        extend = d.eagle_draft_extend_ms.value + d.eagle_draft_extend_per_extra_seq_ms.value * extra
        return draft / 1e3, extend / 1e3

    def draft_s(self, batch: int, num_steps: int) -> float:
        """Total draft cost (s) of one cycle: eagle_draft + eagle_draft_extend."""
        return sum(self.draft_parts_s(batch, num_steps))

    @property
    def overhead_s(self) -> float:
        """Per-iteration scheduler (CPU) overhead in seconds, outside any forward."""
        return self.scheduler_overhead_ms.value / 1e3

    @property
    def p_accept(self) -> float:
        """Per-draft-token accept probability of a chain (topk 1) draft."""
        return self.acceptance.p_accept_per_draft_token.value

    def p_accept_for(self, category: str | None) -> float:
        """:attr:`p_accept` of a prompt category (``acceptance.per_category``), or the global
        value for None or a category the profile does not list."""
        num = self.acceptance.per_category.get(category) if category is not None else None
        return num.value if num is not None else self.p_accept


def accept_prob_for_mean(mean_accept_length: float, num_steps: int) -> float:
    """p such that ``1 + p + ... + p**num_steps == mean_accept_length`` (bisection).

    Chain draft, each draft token accepted with probability p given its prefix was.
    :raises ValueError: mean outside ``[1, num_steps + 1]``.
    """
    if not 1.0 <= mean_accept_length <= num_steps + 1:
        raise ValueError(f"mean accept length {mean_accept_length} outside [1, {num_steps + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(mid**k for k in range(num_steps + 1)) < mean_accept_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _resolve(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".json" or p.is_file() or "/" in str(name_or_path):
        return p
    return PROFILES_DIR / f"{name_or_path}.json"


def undetermined_keys(obj: BaseModel, prefix: str = "") -> list[str]:
    """Dotted keys of every constant whose ``value`` is null (not determined by a calibration)."""
    out: list[str] = []
    for name in type(obj).model_fields:
        v = getattr(obj, name)
        key = f"{prefix}{name}"
        if isinstance(v, (Num, Flag)):
            if v.value is None:
                out.append(key)
        elif isinstance(v, BaseModel):
            out += undetermined_keys(v, key + ".")
        elif isinstance(v, dict):
            for k, item in v.items():
                if isinstance(item, (Num, Flag)):
                    if item.value is None:
                        out.append(f"{key}.{k}")
                elif isinstance(item, BaseModel):
                    out += undetermined_keys(item, f"{key}.{k}.")
    return out


def load_profile(name_or_path: str | Path, *, allow_undetermined: bool = False) -> tuple[CostProfile, Path]:
    """Load and validate a profile by bundled name or path.

    :param allow_undetermined: accept constants a calibration left null (module docstring);
        the emulator never passes it.
    :returns: ``(profile, resolved_path)``.
    :raises ProfileError: missing file, bad JSON, an invalid key (``file: key: problem``), or
        (without ``allow_undetermined``) a constant left undetermined by a calibration.
    """
    path = _resolve(name_or_path)
    if not path.is_file():
        known = sorted(q.stem for q in PROFILES_DIR.glob("*.json"))
        raise ProfileError(f"{path}: cost profile not found. Fix: use one of {known} or a path to a JSON file")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from exc
    try:
        prof = CostProfile.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{path}: invalid cost profile:"]
        for e in exc.errors():
            key = ".".join(str(x) for x in e["loc"]) or "(top level)"
            msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
            lines.append(f"  {key}: {msg}")
        raise ProfileError("\n".join(lines)) from None
    missing = undetermined_keys(prof)
    if missing and not allow_undetermined:
        raise ProfileError(f"{path}: constants not determined by the calibration that wrote this profile: "
                           f"{', '.join(missing)}. Fix: measure configurations that exercise them and run "
                           "`lab calibrate` again, or fill them from a named profile: "
                           "`lab calibrate ... --fill-from kimi_k25_tp8_pcie` (marked as not fitted)")
    for label, v in (("decode.graph_ms_bs1", prof.decode.graph_ms_bs1.value),
                     ("verify.graph_ms_ref", prof.verify.graph_ms_ref.value),
                     ("acceptance.p_accept_per_draft_token", prof.p_accept)):
        if v is None:
            continue
        if not math.isfinite(v) or v < 0:
            raise ProfileError(f"{path}: {label}: must be a finite non-negative number (got {v})")
    if prof.p_accept is not None and prof.p_accept > 1:
        raise ProfileError(f"{path}: acceptance.p_accept_per_draft_token: must be <= 1 (got {prof.p_accept})")
    for cat, num in prof.acceptance.per_category.items():
        if num.value is not None and not (math.isfinite(num.value) and 0.0 <= num.value <= 1.0):
            raise ProfileError(f"{path}: acceptance.per_category.{cat}: must be a probability in [0, 1] (got {num.value})")
    return prof, path
