"""Prompt-length counting with the served model's own tokenizer.

SGLang counts a text prompt as ``len(tokenizer.encode(text))`` with the Hugging Face tokenizer
it loads for ``--model-path`` (``sglang/srt/managers/tokenizer_manager.py``,
``_tokenize_one_request``: ``self.tokenizer.encode(input_text)``, special tokens added as the
tokenizer's post-processor says); ``meta_info.prompt_tokens`` reports that count. The lab pads
prompts to ``bench.context_tokens`` with the same tokenizer (:func:`token_counter`), so a
context length means the same number on a real server as in the report. The emulator counts
with :func:`lab.workload.context.estimate_tokens` and needs no tokenizer.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from lab.workload.context import TokenCount

__all__ = ["TokenizerError", "hf_token_counter", "token_counter", "served_counter"]


class TokenizerError(RuntimeError):
    """The served model's tokenizer cannot be loaded (the message names the path and the fix)."""


@functools.lru_cache(maxsize=4)
def hf_token_counter(model_path: str, trust_remote_code: bool = False) -> TokenCount:
    """``text -> len(tokenizer.encode(text))`` for the tokenizer of ``model_path``.

    Uses ``transformers.AutoTokenizer`` (what SGLang loads) when installed; else, for a local
    folder with ``tokenizer.json``, Hugging Face ``tokenizers`` directly (no special tokens:
    the lab's synthetic tokenizer has no post-processor, so both agree).

    :param model_path: a local model folder or a Hugging Face repo id (read from the HF cache;
        the lab never downloads at run time).
    :raises TokenizerError: neither library can load it.
    """
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found]

        tok = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        return lambda text: len(tok.encode(text))
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError/ValueError/... by case
        raise TokenizerError(f"cannot load the tokenizer of {model_path!r} ({type(exc).__name__}: {exc}). "
                             "Fix: download the model (hf download) or point model.path at its folder") from exc
    f = Path(model_path) / "tokenizer.json"
    if f.is_file():
        from tokenizers import Tokenizer

        tk = Tokenizer.from_file(os.fspath(f))
        return lambda text: len(tk.encode(text, add_special_tokens=False).ids)
    raise TokenizerError(f"cannot count tokens for {model_path!r}: transformers is not installed and the folder has "
                         "no tokenizer.json. Fix: install the serving environment (uv sync --extra sglang) or use a "
                         "local model folder")


def token_counter(params, mode_name: str | None = None) -> TokenCount:
    """The prompt-length counter of the engine ``params`` launch: the engine's own
    (:meth:`lab.engine.registry.Engine.prompt_counter`; the emulator's rule, :func:`lab.workload.context.estimate_tokens`),
    else the served target's tokenizer.

    :raises TokenizerError: a real engine whose tokenizer cannot be loaded.
    """
    from lab.engine.registry import engine_for

    eng = engine_for(params.engine)
    if eng.prompt_counter() is not None:  # the emulator's own rule: no mode needed
        return eng.prompt_counter()
    return served_counter(eng, model=params.model, mode=params.mode(mode_name or next(iter(params.modes))))


def served_counter(eng, *, model, mode) -> TokenCount:
    """:func:`token_counter` from the engine (``eng``, a :class:`lab.engine.registry.Engine`),
    ``params.model`` (``model``) and the launched mode's ``ModeParams`` (``mode``: the target's path
    under ``model.synthetic``).

    :raises TokenizerError: a real engine whose tokenizer cannot be loaded.
    """
    from lab.engine.command import model_paths

    own = eng.prompt_counter()  # the emulator's own rule
    if own is not None:
        return own
    target, _ = model_paths(mode, model)
    return hf_token_counter(target, bool(model.trust_remote_code))
