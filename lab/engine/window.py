"""The served model's context window, and the refusal of ``bench.context_tokens`` past it.

SGLang refuses a request whose prompt does not fit (0.5.16
``sglang/srt/managers/tokenizer_manager.py`` ``TokenizerManager._validate_one_request``):
``input_tokens + num_reserved_tokens >= context_len`` ("The input ... is longer than the
model's context length") or ``input_tokens + num_reserved_tokens + max_new_tokens >
context_len`` ("Requested token count exceeds the model's maximum context length"), where
``num_reserved_tokens = max(eagle_topk * num_steps, num_draft_tokens)`` for EAGLE (the draft
tokens live in output slots) and 0 otherwise (``TokenizerManager.__init__``). A sweep that
reached such a length would fail after a model load of minutes, so :func:`check_context_window`
refuses it first (``lab doctor`` and every stage's preflight run it: :mod:`lab.engine.preflight`).

``context_len`` is ``server.context_length`` when set (``--context-length``), else the model
config's own length: the first of SGLang's ``CONTEXT_LENGTH_KEYS`` (``max_sequence_length``,
``seq_length``, ``max_seq_len``, ``model_max_length``, ``max_position_embeddings``) in the text
config, times a ``rope_scaling`` ``factor`` unless ``original_max_position_embeddings`` is set
or the rope type is ``llama3`` (0.5.16 ``srt/utils/hf_transformers/common.py``
``get_context_length``; 2048 when none is set). The emulator serves Kimi-K2.5's length
(:data:`lab.emulator.args.DEFAULT_CONTEXT_LENGTH`); the synthetic models (:mod:`lab.engine.synthetic`)
their generated config's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CONTEXT_LENGTH_KEYS", "Window", "config_context_length", "served_window", "window_of", "reserved_tokens",
           "context_window_problems", "window_problems", "check_context_window", "hf_cache_dir"]

#: SGLang 0.5.16 ``srt/utils/hf_transformers/common.py`` ``CONTEXT_LENGTH_KEYS``, in its order.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")


@dataclass(frozen=True)
class Window:
    """The served context length in tokens (``tokens``; None: unknown) and where it comes from."""

    tokens: int | None
    source: str


def config_context_length(config: dict[str, Any]) -> int:
    """A Hugging Face ``config.json`` dict's context length in tokens, by SGLang's rule (module
    docstring; ``text_config`` is used when present, as SGLang's ``get_hf_text_config`` does)."""
    cfg = config.get("text_config") or config
    rope = cfg.get("rope_scaling") or None
    factor = 1
    if rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        if cfg.get(key) is not None:
            return int(factor * cfg[key])
    return 2048


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _model_config(path: str) -> tuple[dict[str, Any] | None, str]:
    """``config.json`` of a local folder, or of a snapshot of ``path`` in the Hugging Face cache
    (``<cache>/models--<org>--<name>/snapshots/<rev>/config.json``)."""
    p = Path(path)
    files = [p / "config.json"] if p.is_dir() else []
    if not files:
        snaps = hf_cache_dir() / f"models--{path.replace('/', '--')}" / "snapshots"
        files = sorted(snaps.glob("*/config.json")) if snaps.is_dir() else []
    for f in files:
        try:
            return json.loads(f.read_text()), str(f)
        except (OSError, ValueError):
            continue
    return None, f"{path}: no readable config.json here or in the Hugging Face cache"


def served_window(params) -> Window:
    """The context length the engine of ``params`` serves (same for every mode: one target).

    :returns: :class:`Window`; ``tokens`` None when a real model's config cannot be read here
        (weights on another node): the check is then skipped, SGLang refuses at request time.
    """
    from lab.engine.registry import engine_for

    eng = engine_for(params.engine)
    return window_of(eng, model=params.model, server=params.server, own=eng.own_section(params))


def window_of(eng, *, model, server, own=None) -> Window:
    """:func:`served_window` from the engine and the sections it reads.

    :param eng: the :class:`lab.engine.registry.Engine`; ``model``, ``server``: ``params.model``,
        ``params.server``; ``own``: ``eng.own_section(params)``.
    :returns: :class:`Window` (``tokens`` None: not known here).
    """
    if server.context_length is not None:
        return Window(int(server.context_length), "server.context_length (--context-length)")
    if model.synthetic:
        from lab.engine.synthetic import target_config

        return Window(config_context_length(target_config(model.synthetic)),
                      f"synthetic {model.synthetic}'s config (lab/engine/synthetic.py max_position_embeddings)")
    mine = eng.context_window(own)  # the emulator's model: its own window
    if mine is not None:
        return Window(*mine)
    cfg, where = _model_config(model.path)
    return Window(config_context_length(cfg) if cfg is not None else None, where)


def reserved_tokens(mode) -> int:
    """Tokens SGLang reserves per request for ``mode``: ``max(eagle_topk * num_steps,
    num_draft_tokens)`` with EAGLE, else 0 (module docstring; unset values count as 0 here,
    SGLang's auto choice is not known before launch)."""
    if not mode.is_speculative:
        return 0
    return max((mode.eagle_topk or 1) * (mode.num_steps or 0), mode.num_draft_tokens or 0)


def context_window_problems(params, modes: list[str] | None = None) -> tuple[Window, list[str]]:
    """Each ``bench.context_tokens`` length that some mode's requests cannot hold.

    A length ``T`` fits when ``T + reserved + max_out <= window`` (``max_out`` the longest of
    ``bench.output_levels``, ``reserved`` :func:`reserved_tokens`); 0 (prompts as they are) is
    never refused here.

    :returns: ``(window, problems)``, one ``<key>: <problem>. Fix: <fix>`` line per length.
    """
    win = served_window(params)
    if win.tokens is None:
        return win, []
    return win, window_problems(win, [params.mode(n) for n in (modes or params.modes)], params.bench)


def window_problems(win: Window, modes: list, bench) -> list[str]:
    """:func:`context_window_problems`' lines for the served window ``win``, the modes' ``ModeParams``
    ``modes`` and ``params.bench`` (``bench``); none when ``win.tokens`` is not known."""
    if win.tokens is None:
        return []
    reserve = max((reserved_tokens(m) for m in modes), default=0)
    out_max = max(bench.output_levels)
    limit = win.tokens - reserve - out_max
    return [
        f"bench.context_tokens: {t} tokens of context + {out_max} output tokens"
        + (f" + {reserve} reserved for draft tokens" if reserve else "")
        + f" do not fit the served model's context length of {win.tokens} tokens ({win.source}); SGLang would "
        f"refuse every request. Fix: use at most {max(limit, 0)} (or lower bench.max_new_tokens/output_tokens), "
        "or raise server.context_length if the model supports a longer window"
        for t in bench.context_tokens if t and t > limit]


def check_context_window(params, modes: list[str] | None = None) -> Window:
    """Raise before any launch when a ``bench.context_tokens`` length does not fit
    (:func:`context_window_problems`).

    :returns: the served :class:`Window`.
    :raises lab.config.ParamsError: one line per refused length, naming the key and the fix.
    """
    from lab.config import ParamsError

    win, problems = context_window_problems(params, modes)
    if problems:
        raise ParamsError("\n".join(problems))
    return win
