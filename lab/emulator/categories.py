"""Which task category a prompt belongs to, as the emulator sees it: a modelled stand-in for
content-dependent acceptance.

A real draft model accepts more on code and math than on open-ended writing because the
target's next tokens are more predictable there; the emulator has no model, so it looks the
prompt up instead. It is started with the lab's prompt file (``--emulator-prompt-categories
data/prompts.jsonl``, or the Hugging Face set the bench loaded, written as JSONL:
:func:`lab.workload.sources.emulator_prompt_file`) and maps the text of each ``/generate``
request to that prompt's category; the cost profile then gives the category its own accept
probability (``acceptance.per_category``, :mod:`lab.emulator.profile`).

Matching: the prompt file's prompts are rendered with the built-in chat template
(:func:`lab.workload.dataset.render_prompt`, what the bench sends to the emulator). A request
whose text equals a rendered prompt gets its category; otherwise the longest rendered
*tail* (the last user turn, its end marker and the assistant header) that the text ends
with decides, so a prompt padded with a document inside its user turn
(:func:`lab.workload.context.pad_prompt`) still maps. Text matching nothing (a warm-up
probe, a request from another client) gets no category and the profile's global accept
probability.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.workload.dataset import Prompt, load_prompts, render_prompt

__all__ = ["CategoryMap"]


class CategoryMap:
    """Prompt text -> category (module docstring).

    :param prompts: the prompt file's prompts.
    :ivar categories: the distinct categories, in first-seen order.
    """

    def __init__(self, prompts: list[Prompt]) -> None:
        self._exact: dict[str, str] = {}
        self._tails: list[tuple[str, str]] = []
        self.categories: list[str] = list(dict.fromkeys(p.category for p in prompts))
        for p in prompts:
            text = render_prompt(p)
            self._exact.setdefault(text, p.category)
            last_user = next(m for m in reversed(p.messages) if m["role"] == "user")
            i = text.rfind(last_user["content"])
            self._tails.append((text[i:], p.category))
        self._tails.sort(key=lambda t: -len(t[0]))  # longest (most specific) tail first

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "CategoryMap":
        """Load a JSONL prompt file. :raises lab.workload.dataset.DatasetError: as :func:`load_prompts`."""
        return cls(load_prompts(Path(path)))

    def lookup(self, text: object) -> str | None:
        """The category of a request's prompt text, or None (not a string, or no prompt matches)."""
        if not isinstance(text, str):
            return None
        hit = self._exact.get(text)
        if hit is not None:
            return hit
        for tail, category in self._tails:
            if text.endswith(tail):
                return category
        return None
