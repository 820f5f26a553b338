"""Long-context prompts: pad a chat prompt with a real document to exactly N tokens of the served model.

Prefill- vs decode-mode verify matters most at long context (the verify's attention runs
over the whole KV cache), so the bench sweeps prompt length inside one server launch
(``bench.context_tokens``). A padded prompt is the chat prompt with a real document placed
in the user turn before the question: "Read this document, then answer."

The document is the Python Language Reference's topic texts (``pydoc_data.topics`` of
CPython 3.12.3, 499,608 characters of English technical prose, topics sorted by name, joined by
blank lines; PSF licence), committed with the project as ``data/context-document.txt``: every
interpreter and node builds the same prompts (each CPython release ships a different copy of
those topics, so reading the running interpreter's would change the prompts with the Python
version; the H200 captures ran on 3.12.3, the copy this file holds, and
``tests/component/test_real_sglang_0516_context_prompts.py``
rebuilds their prompts from this file, token for token). Each prompt starts
its slice of the document at its own offset (from a CRC-32 of the prompt text), so two
prompts do not share a padding prefix that SGLang's radix cache could serve: like distinct
users' chat histories, every request prefills its own context.

Lengths are counted with the served model's own tokenizer (:mod:`lab.engine.tokenizer`: the
Hugging Face tokenizer SGLang loads for ``--model-path``; for the emulator its own prompt-length
rule, :func:`estimate_tokens`), and :func:`pad_prompt` searches the document length so the
whole prompt is the longest one that fits in ``context_tokens`` tokens: exact to a few tokens
(a BPE merge across the join can move the count by one or two).
"""

from __future__ import annotations

import functools
import math
import zlib
from typing import Callable

from pathlib import Path

from lab.workload.dataset import KIMI_HEADERS

__all__ = ["CHARS_PER_TOKEN", "TokenCount", "document_text", "estimate_tokens", "pad_prompt", "USER_HEADER",
           "PAD_LEAD", "PAD_TAIL"]

CHARS_PER_TOKEN = 4
#: The padding document, committed with the project (see the module docstring).
DOCUMENT = Path(__file__).resolve().parents[2] / "data" / "context-document.txt"
#: The user turn's header in a rendered prompt (:data:`lab.workload.dataset.KIMI_HEADERS`).
USER_HEADER = KIMI_HEADERS["user"]
PAD_LEAD = "Read the following document, then answer the request after it.\n\n"
PAD_TAIL = "\n\n---\n\n"

#: A prompt-length counter: text -> tokens the engine will count for it.
TokenCount = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """The emulator's prompt length: ``ceil(len(text) / 4)`` characters per token, at least 1
    (:data:`CHARS_PER_TOKEN`; ``lab/emulator/http.py`` counts text prompts with this function)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@functools.lru_cache(maxsize=1)
def document_text() -> str:
    """The padding document (Python Language Reference topics, sorted by topic name)."""
    return DOCUMENT.read_text(encoding="utf-8")


def _padded(text: str, room: int) -> str:
    doc = document_text()
    start = zlib.crc32(text.encode("utf-8")) % len(doc)
    rotated = doc[start:] + "\n\n" + doc[:start]
    body = (rotated * (room // len(rotated) + 1))[:room]
    insert = PAD_LEAD + body + PAD_TAIL
    i = text.find(USER_HEADER)
    if i < 0:
        return insert + text
    j = i + len(USER_HEADER)
    return text[:j] + insert + text[j:]


def pad_prompt(text: str, context_tokens: int, count: TokenCount = estimate_tokens) -> str:
    """``text`` with a document slice inserted so that the whole prompt is ``context_tokens`` tokens.

    :param text: a rendered chat prompt (the document goes right after the first user
        header :data:`USER_HEADER`, else in front of the text).
    :param context_tokens: target prompt length in tokens of ``count``; 0, or a target the
        prompt already reaches, returns ``text`` unchanged.
    :param count: the served model's token counter (:func:`lab.engine.tokenizer.token_counter`);
        the emulator's :func:`estimate_tokens` by default.
    :returns: the longest padded prompt with ``count(prompt) <= context_tokens`` (a binary search
        over the document's length in characters: about 15 calls of ``count``).
    :raises ValueError: negative ``context_tokens``.
    """
    if context_tokens < 0:
        raise ValueError(f"context_tokens={context_tokens} is negative. Fix: use 0 (no padding) or more")
    if context_tokens == 0 or count(_padded(text, 0)) >= context_tokens:
        return text
    lo, hi = 0, max(64, context_tokens * CHARS_PER_TOKEN)
    while count(_padded(text, hi)) <= context_tokens:  # a tokenizer denser than 4 chars/token
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: count(lo) <= target < count(hi)
        mid = (lo + hi) // 2
        if count(_padded(text, mid)) <= context_tokens:
            lo = mid
        else:
            hi = mid
    return _padded(text, lo)
