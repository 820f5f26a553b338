"""The rules of ``bench.dataset``: a local prompt file (``.jsonl``) or a Hugging Face id
(``owner/name``) with the keys only such a set takes (split, subset, revision, columns, category)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["is_hf_id", "check_dataset_params"]

_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HF_KEYS = ("dataset_split", "dataset_subset", "dataset_revision", "dataset_columns", "dataset_category")


def is_hf_id(dataset: str) -> bool:
    """True when ``bench.dataset`` names a Hugging Face dataset (``owner/name``, not ending in
    ``.jsonl``; loaded by :mod:`lab.workload.sources`); a local prompt file must end in ``.jsonl``."""
    return not dataset.endswith(".jsonl") and bool(_HF_ID.match(dataset))


def check_dataset_params(bench: Any) -> None:
    """Validate the dataset keys of ``bench`` (:class:`lab.config.schema.BenchParams`); called by its validator.

    :raises ValueError: a message naming the key and the fix: HF-only keys with a local file;
        an HF id without ``dataset_split`` or ``dataset_columns``; neither or both of
        ``dataset_columns.category`` and ``dataset_category``; a value that is neither a
        ``.jsonl`` path nor an ``owner/name`` id.
    """
    ds = bench.dataset
    if not is_hf_id(ds):
        if not ds.endswith(".jsonl"):
            raise ValueError(
                f"bench.dataset={ds!r} is neither a local prompt file (.jsonl) nor a Hugging Face id (owner/name). "
                "Fix: e.g. data/prompts.jsonl, or philschmid/mt-bench with bench.dataset_split and bench.dataset_columns")
        set_ = [f"bench.{k}" for k in _HF_KEYS if getattr(bench, k) is not None]
        if set_:
            raise ValueError(
                f"{', '.join(set_)} apply to a Hugging Face dataset only, but bench.dataset={ds!r} is a local file. "
                "Fix: remove them, or set bench.dataset to an HF id such as philschmid/mt-bench")
        return
    example = "e.g. bench.dataset_split: train, bench.dataset_columns: {prompt: turns, category: category} for philschmid/mt-bench"
    if bench.dataset_split is None:
        raise ValueError(f"bench.dataset_split missing for the Hugging Face dataset {ds!r}. Fix: {example}")
    if bench.dataset_columns is None:
        raise ValueError(f"bench.dataset_columns missing for the Hugging Face dataset {ds!r}. Fix: {example}")
    has_col, has_fixed = bench.dataset_columns.category is not None, bench.dataset_category is not None
    if has_col == has_fixed:
        raise ValueError(
            f"{'both' if has_col else 'neither of'} bench.dataset_columns.category and bench.dataset_category "
            f"{'are' if has_col else 'is'} set for {ds!r}. Fix: set exactly one: the category column of a task-labelled "
            "set (category for philschmid/mt-bench), or one fixed category for a single-task set (math for openai/gsm8k)")
