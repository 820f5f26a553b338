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

__all__ = ["EFFECTIVE_KEYS", "effective_config", "identical_modes", "identical_notice"]

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
    "cuda_graph_bs_decode",
    "disable_cuda_graph",
    "tp_size",
    "context_length",
)

# The verify forward uses the prefill backend in prefill mode and the decode backend in
# decode mode (SGLang 0.5.23 ``--speculative-attention-mode`` help text).
_VERIFY_BACKEND = {"prefill": "prefill_attention_backend", "decode": "decode_attention_backend"}


def effective_config(server_info: Mapping[str, Any]) -> dict[str, Any]:
    """The decisive resolved arguments from a ``/server_info`` response.

    Adds ``verify_attention_backend``: the backend that serves target-verify given the
    attention mode (None without speculation), and ``effective_max_running_requests``:
    the scheduler's actual cap (``internal_states[0].effective_max_running_requests_per_dp``,
    SGLang 0.5.23 ``internal_state.py``; None when absent). Missing keys are recorded as None.
    """
    eff = {k: server_info.get(k) for k in EFFECTIVE_KEYS}
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
    """What the GPU actually executes: the attention mode only matters through the backend
    it selects, so it is left out and the resolved verify backend kept."""
    return json.dumps({k: v for k, v in eff.items() if k != "speculative_attention_mode"},
                      sort_keys=True, default=str)


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
