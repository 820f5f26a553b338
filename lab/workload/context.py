"""Long-context prompts: pad a chat prompt with a real document to about N tokens.

Prefill- vs decode-mode verify matters most at long context (the verify's attention runs
over the whole KV cache), so the bench sweeps prompt length inside one server launch
(``bench.context_tokens``). A padded prompt is the chat prompt with a real document placed
in the user turn before the question: "Read this document, then answer." The document is
the Python Language Reference's topic texts shipped with every CPython
(``pydoc_data.topics``, ~465k characters of English technical prose), repeated if needed.

Token counts are estimated at 4 characters per token (:data:`CHARS_PER_TOKEN`), the same
estimate the emulator uses to count prompt tokens; with a real tokenizer the sizes are
approximate and the emulator-side count is what the engine reports.
"""

from __future__ import annotations

import functools

from lab.workload.dataset import KIMI_HEADERS

__all__ = ["CHARS_PER_TOKEN", "document_text", "pad_prompt", "USER_HEADER"]

CHARS_PER_TOKEN = 4
#: The user turn's header in a rendered prompt (:data:`lab.workload.dataset.KIMI_HEADERS`).
USER_HEADER = KIMI_HEADERS["user"]


@functools.lru_cache(maxsize=1)
def document_text() -> str:
    """The padding document (Python Language Reference topics, sorted by topic name)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip() for k in sorted(topics))


def pad_prompt(text: str, context_tokens: int) -> str:
    """``text`` with a document inserted so that the whole prompt is about ``context_tokens`` tokens.

    :param text: a rendered chat prompt (the document goes right after the first user
        header :data:`USER_HEADER`, else in front of the text).
    :param context_tokens: target prompt length in tokens (estimated at 4 chars/token);
        0, or a target shorter than the prompt, returns ``text`` unchanged.
    :returns: the padded prompt.
    :raises ValueError: negative ``context_tokens``.
    """
    if context_tokens < 0:
        raise ValueError(f"context_tokens={context_tokens} is negative. Fix: use 0 (no padding) or more")
    lead, tail = "Read the following document, then answer the request after it.\n\n", "\n\n---\n\n"
    room = context_tokens * CHARS_PER_TOKEN - len(text) - len(lead) - len(tail)
    if context_tokens == 0 or room <= 0:
        return text
    doc = document_text()
    doc = (doc * (room // len(doc) + 1))[:room]
    insert = lead + doc + tail
    i = text.find(USER_HEADER)
    if i < 0:
        return insert + text
    j = i + len(USER_HEADER)
    return text[:j] + insert + text[j:]
