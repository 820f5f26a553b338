"""Benchmark prompts: load the chat dataset, render it to text, and order a workload.

The dataset (``data/prompts.jsonl``) holds real, natural chat prompts, one JSON object a
line: ``{"id": str, "category": str, "messages": [{"role": "system"|"user"|"assistant",
"content": str}, ...]}``. Real chat-templated text matters: random-token prompts collapse
EAGLE acceptance (DESIGN.md, "SGLang 0.5.23 facts").

Prompts are sent to SGLang's native ``/generate`` as already-templated text, so
:func:`render_prompt` applies the chat template on the client side: the model's own
tokenizer template when a Hugging Face tokenizer is given, otherwise a built-in
Kimi-K2-style template (see :func:`render_prompt`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DatasetError",
    "Prompt",
    "KIMI_DEFAULT_SYSTEM_PROMPT",
    "KIMI_HEADERS",
    "load_prompts",
    "render_prompt",
    "workload",
    "workload_indices",
    "output_lengths",
]

_ROLES = ("system", "user", "assistant")

#: Default system prompt that Kimi-K2's chat template inserts when none is given
#: (``chat_template.jinja`` of moonshotai/Kimi-K2-Instruct).
KIMI_DEFAULT_SYSTEM_PROMPT = "You are Kimi, an AI assistant created by Moonshot AI."

#: Kimi-K2 role headers: <|im_{system,user,assistant}|>{role}<|im_middle|>{content}<|im_end|>
#: (``chat_template.jinja`` of moonshotai/Kimi-K2-Instruct; :mod:`lab.workload.context` finds the user turn by it).
KIMI_HEADERS = {
    "system": "<|im_system|>system<|im_middle|>",
    "user": "<|im_user|>user<|im_middle|>",
    "assistant": "<|im_assistant|>assistant<|im_middle|>",
}
_KIMI_END = "<|im_end|>"


class DatasetError(ValueError):
    """The prompt file is missing or invalid; the message names the problem and the fix."""


@dataclass(frozen=True)
class Prompt:
    """One chat prompt.

    :ivar id: unique identifier (e.g. ``"coding-03"``).
    :ivar category: task family (writing, coding, math, reasoning, extraction, roleplay).
    :ivar messages: chat turns, each ``{"role": ..., "content": ...}``; the last is a user turn.
    """

    id: str
    category: str
    messages: tuple[dict[str, str], ...]


def _check_record(obj: Any, where: str) -> Prompt:
    fix = (
        'Fix: each line must be {"id": "...", "category": "...", "messages": '
        '[{"role": "user", "content": "..."}]}'
    )
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(obj).__name__}. {fix}")
    for key in ("id", "category"):
        if key not in obj:
            raise DatasetError(f"{where}: missing key {key!r}. {fix}")
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise DatasetError(f"{where}: key {key!r} must be a non-empty string (got {obj[key]!r}). {fix}")
    if "messages" not in obj:
        raise DatasetError(f"{where}: missing key 'messages'. {fix}")
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise DatasetError(f"{where}: 'messages' must be a non-empty list. {fix}")
    out: list[dict[str, str]] = []
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DatasetError(f"{where}: messages[{j}] must be an object with 'role' and 'content'. {fix}")
        if m["role"] not in _ROLES:
            raise DatasetError(
                f"{where}: messages[{j}].role={m['role']!r} is not one of {list(_ROLES)}. Fix: use one of them"
            )
        if not isinstance(m["content"], str) or not m["content"].strip():
            raise DatasetError(f"{where}: messages[{j}].content must be a non-empty string. {fix}")
        if m["role"] == "system" and j != 0:
            raise DatasetError(f"{where}: messages[{j}] is a system message not in first position. Fix: move it first")
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise DatasetError(f"{where}: the last message must have role 'user' (the turn to answer). {fix}")
    return Prompt(id=obj["id"], category=obj["category"], messages=tuple(out))


def load_prompts(path: str | os.PathLike[str]) -> list[Prompt]:
    """Load and validate a JSONL prompt file.

    :param path: the ``.jsonl`` file (blank lines are skipped).
    :returns: the prompts in file order (length >= 1).
    :raises DatasetError: file missing, empty, not UTF-8 at line N, malformed JSON at line N, missing or invalid
        keys at line N, or a duplicate id; the message names the line and the fix.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(
            f"{p}: prompt file not found. Fix: check bench.dataset in params.yaml "
            "(paths are relative to the repository root), e.g. data/prompts.jsonl"
        )
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{p}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{where}: not UTF-8 text at line {lineno} (byte {exc.start} of the line, "
                    f"{raw[exc.start:exc.start + 4]!r}: {exc.reason}). Fix: save the file as UTF-8, "
                    f"e.g. `iconv -f latin1 -t utf-8 {p} > fixed.jsonl` (latin1: the encoding it was written in)"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{where}: malformed JSON at line {lineno} ({exc.msg}, column {exc.colno}). "
                    "Fix: each line must be one complete JSON object"
                ) from None
            prompt = _check_record(obj, f"{where} (line {lineno})")
            if prompt.id in seen:
                raise DatasetError(
                    f"{where} (line {lineno}): duplicate id {prompt.id!r} (first at line {seen[prompt.id]}). "
                    "Fix: give every prompt a unique id"
                )
            seen[prompt.id] = lineno
            prompts.append(prompt)
    if not prompts:
        raise DatasetError(f"{p}: prompt file is empty. Fix: add at least one JSON line (see data/prompts.jsonl)")
    return prompts


def render_prompt(prompt: Prompt, tokenizer: Any = None) -> str:
    """Chat-template a prompt into the text sent to ``/generate``.

    With a Hugging Face tokenizer, returns
    ``tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)``
    (the served model's own template). Without one, uses the built-in Kimi-K2 template
    (moonshotai/Kimi-K2-Instruct ``chat_template.jinja``, no tools)::

        <|im_system|>system<|im_middle|>{system}<|im_end|>
        <|im_user|>user<|im_middle|>{user}<|im_end|>
        <|im_assistant|>assistant<|im_middle|>{assistant}<|im_end|> ...
        <|im_assistant|>assistant<|im_middle|>

    concatenated without newlines; when the prompt has no system message the template's
    default (:data:`KIMI_DEFAULT_SYSTEM_PROMPT`) is inserted, as Kimi-K2's template does.

    :param prompt: a :class:`Prompt`.
    :param tokenizer: optional object with ``apply_chat_template``.
    :returns: the templated text, ending with the assistant generation header.
    """
    messages = [dict(m) for m in prompt.messages]
    if tokenizer is not None:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts: list[str] = []
    if messages[0]["role"] != "system":
        parts.append(KIMI_HEADERS["system"] + KIMI_DEFAULT_SYSTEM_PROMPT + _KIMI_END)
    for m in messages:
        parts.append(KIMI_HEADERS[m["role"]] + m["content"] + _KIMI_END)
    parts.append(KIMI_HEADERS["assistant"])
    return "".join(parts)


def workload(prompts: list[Prompt], n: int, seed: int, tokenizer: Any = None) -> list[tuple[int, str]]:
    """A deterministic, seeded request order that cycles through the dataset.

    Each pass over the dataset is a fresh permutation drawn from
    ``numpy.random.default_rng(seed)``, so every prompt is used once per pass and the same
    ``(prompts, n, seed)`` always gives the same list.

    :param prompts: the dataset (non-empty).
    :param n: number of requests (>= 0).
    :param seed: RNG seed.
    :param tokenizer: passed to :func:`render_prompt`.
    :returns: ``n`` pairs ``(prompt_index, rendered_text)``.
    :raises DatasetError: empty ``prompts``; :raises ValueError: negative ``n``.
    """
    if not prompts:
        raise DatasetError("workload: no prompts. Fix: load a non-empty dataset with load_prompts")
    rendered: dict[int, str] = {}
    out: list[tuple[int, str]] = []
    for idx in workload_indices(len(prompts), n, seed):
        if idx not in rendered:
            rendered[idx] = render_prompt(prompts[idx], tokenizer)
        out.append((idx, rendered[idx]))
    return out


def workload_indices(num_prompts: int, n: int, seed: int) -> list[int]:
    """The prompt indices :func:`workload` sends, without the prompts: ``n`` indices into a
    dataset of ``num_prompts``, one fresh ``numpy.random.default_rng(seed)`` permutation per pass
    (what :mod:`lab.calibrate.predict` replays).

    :raises DatasetError: ``num_prompts`` < 1; :raises ValueError: negative ``n``.
    """
    if num_prompts < 1:
        raise DatasetError("workload: no prompts. Fix: load a non-empty dataset with load_prompts")
    if n < 0:
        raise ValueError(f"workload: n={n} is negative. Fix: pass n >= 0")
    rng = np.random.default_rng(seed)
    out: list[int] = []
    while len(out) < n:
        out.extend(rng.permutation(num_prompts).tolist()[: n - len(out)])
    return out


def output_lengths(n: int, max_new_tokens: int, spread: float, seed: int) -> list[int]:
    """Per-request output lengths (tokens) for one (level, repeat): uniform integers in
    ``[ceil(max_new_tokens * (1 - spread)), max_new_tokens]`` from
    ``numpy.random.default_rng(seed)``; ``spread == 0`` gives ``n`` copies of
    ``max_new_tokens``. The same ``(n, max_new_tokens, spread, seed)`` gives the same list,
    so every mode of a comparison decodes the same lengths.

    Why: with identical lengths a baseline's requests finish and are replaced together
    (one batched prefill per wave) while speculative requests drift apart, so c>1
    comparisons measure the workload's shape, not the modes (README, "Concurrency above 1").

    :param n: number of requests (>= 0). :param max_new_tokens: upper bound (>= 1).
    :param spread: fraction in [0, 1). :param seed: RNG seed.
    :returns: ``n`` ints, each >= 1 and <= ``max_new_tokens``.
    :raises ValueError: ``spread`` outside [0, 1), ``n < 0`` or ``max_new_tokens < 1``.
    """
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"output_lengths: spread={spread} outside [0, 1). Fix: e.g. 0.5 for lengths in [L/2, L]")
    if n < 0 or max_new_tokens < 1:
        raise ValueError(f"output_lengths: n={n}, max_new_tokens={max_new_tokens}. Fix: n >= 0, max_new_tokens >= 1")
    lo = max(1, math.ceil(max_new_tokens * (1.0 - spread)))
    if lo >= max_new_tokens:
        return [max_new_tokens] * n
    return np.random.default_rng(seed).integers(lo, max_new_tokens + 1, size=n).tolist()
