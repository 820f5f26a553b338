"""Effective server configuration: what the engine actually resolved, read from /server_info.

SGLang rewrites some arguments (with ``--speculative-eagle-topk 1`` it forces
``num_draft_tokens = num_steps + 1``; under speculation it caps ``max_running_requests`` at
48 when unset), and in 0.5.23 both ``--speculative-attention-mode`` values resolve to the
same attention backend on H200 with default backends (``fa3`` for Kimi-K2.5's MLA). Two
modes can therefore launch differently and run the same code. The lab records the resolved
arguments that decide the comparison and says plainly when two modes resolved alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lab.engine.surfaces import captured_graph_bs, surface_for

__all__ = ["EFFECTIVE_KEYS", "draft_attention_backend", "effective_config", "identical_modes", "identical_notice", "captured_graph_bs",
           "MODE_PICKS_BACKEND_ONLY_VERSION"]

# /server_info keys (SGLang ServerArgs field names) that decide a verify-cost comparison.
EFFECTIVE_KEYS: tuple[str, ...] = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_attention_mode",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_draft_attention_backend",
    "max_running_requests",
    "cuda_graph_max_bs_decode",
    "disable_cuda_graph",
    "tp_size",
    "context_length",
)

#: The newest SGLang build whose semantics this module encodes (each supported build's own
#: surfaces: :mod:`lab.engine.surfaces`).
MODE_PICKS_BACKEND_ONLY_VERSION = "0.5.23"

_DISABLED = "disabled"


# The verify forward uses the prefill backend in prefill mode and the decode backend in
# decode mode (SGLang 0.5.23 ``--speculative-attention-mode`` help text).
_VERIFY_BACKEND = {"prefill": "prefill_attention_backend", "decode": "decode_attention_backend"}


def effective_config(server_info: Mapping[str, Any], log_text: str | None = None) -> dict[str, Any]:
    """The decisive resolved arguments from a ``/server_info`` response (SGLang 0.5.23's
    ``resolved_dict()``), plus:

    - ``verify_attention_backend``: the backend that serves target-verify given the attention
      mode (None without speculation). ``prefill_attention_backend`` /
      ``decode_attention_backend`` are null in 0.5.23 unless set; then ``attention_backend``
      (the only resolved one) serves both.
    - ``cuda_graph_decode_backend`` / ``cuda_graph_bs_decode``: from the resolved
      ``cuda_graph_config.decode`` (``arg_groups/memory_hook.py`` ~201-205; the top-level
      ``cuda_graph_bs_decode`` is raw input and null unless set).
    - ``decode_cuda_graph_disabled``: the decode graph backend is ``disabled`` (``--cuda-graph-
      backend-decode disabled``, ``--disable-decode-cuda-graph`` or the deprecated
      ``--disable-cuda-graph``, which leaves the others untouched).
    - ``captured_cuda_graph_bs``: the list actually captured, from the log (:func:`captured_graph_bs`),
      when ``log_text`` is given.
    - ``effective_max_running_requests``: the scheduler's actual cap
      (``internal_states[0].effective_max_running_requests_per_dp``, ``internal_state.py``).
    - ``engine_version`` and ``modelled_build`` (the emulator's ``emulator_models_build``):
      which build's semantics apply; ``sglang_contract`` (the :mod:`lab.engine.surfaces`
      contract the lab read a real SGLang with, None for the emulator) and ``contract_note``
      (set when the version is not one the lab was checked against).

    Missing keys are recorded as None.
    """
    eff = {k: server_info.get(k) for k in EFFECTIVE_KEYS}
    eff["engine_version"] = server_info.get("version")
    eff["modelled_build"] = server_info.get("emulator_models_build")
    if eff["modelled_build"] is None:
        surface, note = surface_for(eff["engine_version"])
        eff["sglang_contract"], eff["contract_note"] = surface.contract, note
    else:
        eff["sglang_contract"], eff["contract_note"] = None, None
    dec = (server_info.get("cuda_graph_config") or {}).get("decode") or {}
    eff["cuda_graph_decode_backend"] = dec.get("backend")
    eff["cuda_graph_bs_decode"] = dec.get("bs") if dec.get("bs") is not None else server_info.get("cuda_graph_bs_decode")
    eff["decode_cuda_graph_disabled"] = bool(
        dec.get("backend") == _DISABLED or server_info.get("cuda_graph_backend_decode") == _DISABLED
        or server_info.get("disable_decode_cuda_graph") or server_info.get("disable_cuda_graph"))
    if log_text is not None:
        eff["captured_cuda_graph_bs"] = captured_graph_bs(log_text)
    states = server_info.get("internal_states") or [{}]
    first = states[0] if isinstance(states[0], Mapping) else {}
    eff["effective_max_running_requests"] = first.get("effective_max_running_requests_per_dp")
    mode = eff.get("speculative_attention_mode")
    if eff.get("speculative_algorithm") and mode in _VERIFY_BACKEND:
        eff["verify_attention_backend"] = eff.get(_VERIFY_BACKEND[mode]) or eff.get("attention_backend")
    else:
        eff["verify_attention_backend"] = None
    return eff


def _runtime_signature(eff: Mapping[str, Any]) -> str:
    """What the GPU actually executes. In SGLang 0.5.23 and 0.5.16 (each real build's
    :attr:`lab.engine.surfaces.SglangSurface.mode_picks_backend_only`) the attention mode only matters
    through the backend it selects, so it is left out and the resolved verify backend kept.
    For any other build (the emulator's default profile models the seeds' older build, where
    prefill-mode verify ran outside CUDA graphs) the mode itself changes the verify path and
    stays in. The log-derived captured list is left out (it is absent when no log was read)."""
    contract = eff.get("sglang_contract")
    mode_only_backend = (str(eff.get("engine_version")) == MODE_PICKS_BACKEND_ONLY_VERSION
                         or bool(contract and surface_for(contract)[0].mode_picks_backend_only))
    drop = ({"captured_cuda_graph_bs", "engine_version", "sglang_contract", "contract_note"}
            | ({"speculative_attention_mode"} if mode_only_backend else set()))
    return json.dumps({k: v for k, v in eff.items() if k not in drop}, sort_keys=True, default=str)


def identical_modes(configs: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Groups (size >= 2) of modes whose effective configurations run the same code.

    :param configs: mode name -> :func:`effective_config` output (modes without a recorded
        configuration are skipped).
    """
    groups: dict[str, list[str]] = {}
    for name, eff in configs.items():
        if eff:
            groups.setdefault(_runtime_signature(eff), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def identical_notice(groups: list[list[str]]) -> str | None:
    """A plain-words sentence for figures and summaries, or None when all modes differ."""
    if not groups:
        return None
    parts = [" and ".join(g) for g in groups]
    return ("Identical effective configuration: " + "; ".join(parts) + " resolved to the same "
            "server arguments and attention backends, so they run the same code and any "
            "difference between them is noise. To make prefill- and decode-mode verify differ, "
            "set prefill_attention_backend / decode_attention_backend per mode in params.yaml.")


def draft_attention_backend(eff: Mapping[str, Any]) -> str | None:
    """The attention backend SGLang 0.5.16 serves the EAGLE draft with, from an
    :func:`effective_config`: ``speculative_draft_attention_backend`` when set, else the prefill
    backend (``prefill_attention_backend`` or ``attention_backend``), else ``flashinfer``
    (``speculative/draft_worker_common.py`` ``_resolve_draft_attention_backend_fallback``,
    lines 35-51, and ``build_draft_tp_worker``, which sets it as the draft's ``attention_backend``);
    a backend outside ``flashinfer, fa3, fa4, triton, ascend`` falls back to ``flashinfer`` there
    too. None without speculation. /server_info keeps the unresolved null (the draft worker
    resolves a copy of the server arguments)."""
    if not eff.get("speculative_algorithm"):
        return None
    b = eff.get("speculative_draft_attention_backend") or eff.get("prefill_attention_backend") or eff.get("attention_backend")
    return b if b in ("flashinfer", "fa3", "fa4", "triton", "ascend") else "flashinfer"

