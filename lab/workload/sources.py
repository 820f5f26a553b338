"""Where the benchmark prompts come from: the local JSONL file or a Hugging Face dataset.

``bench.dataset`` is either

- a local prompt file ending in ``.jsonl`` (the format of :mod:`lab.workload.dataset`,
  e.g. ``data/prompts.jsonl``), or
- a Hugging Face dataset id ``owner/name`` (e.g. MT-Bench ``philschmid/mt-bench``, GSM8K
  ``openai/gsm8k``, HumanEval ``openai/openai_humaneval``), loaded with the ``datasets``
  library (the optional extra ``hf``: ``uv sync --extra hf``) on the node that runs the
  bench stage. ``bench.dataset_split`` (required), ``bench.dataset_subset`` (the HF config
  name), ``bench.dataset_revision`` (a commit or tag: pin it for a reproducible run) and
  ``bench.dataset_columns: {prompt: ..., category: ..., id: ...}`` say what to read; a
  single-task set without a category column takes ``bench.dataset_category`` (e.g. ``math``
  for GSM8K) instead.

The prompt column's value may be a string (one user turn), a list of strings (a multi-turn
set: its **first** turn is sent, as vLLM's MT-Bench loader does,
``vllm/benchmarks/datasets.py`` ``MTBenchDataset``) or a list of ``{"role", "content"}``
messages. Every row becomes a :class:`lab.workload.dataset.Prompt`, validated like a line of
the JSONL file.

Reproducibility: :func:`load_bench_prompts` returns, beside the prompts, a record of the
source (``dataset_info``: the id, split, subset, requested revision, the ``datasets``
fingerprint and a SHA-256 of the prompts as loaded) that the bench stage stores in
``result.json`` and logs to MLflow, and the per-prompt categories that the compare stage
groups by (:mod:`lab.analysis.taskmix`). dvc.yaml cannot hash a remote dataset, so the bench
stage depends on ``data/`` and on the ``bench`` params (id, split, revision...), and the
fingerprint in the results says which content a run saw.

The loader is a seam: :func:`load_hf_prompts` takes ``loader`` (default
``datasets.load_dataset``), so tests pass a fake that needs neither network nor ``datasets``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lab.config import check_dataset_params, is_hf_id  # noqa: F401  (validation lives with the params; re-exported)
from lab.workload.dataset import DatasetError, Prompt, _check_record, load_prompts

__all__ = ["is_hf_id", "check_dataset_params", "load_bench_prompts", "load_hf_prompts", "write_prompts",
           "prompts_sha256", "dataset_params", "emulator_prompt_file", "HF_INSTALL_HINT"]

HF_INSTALL_HINT = "uv sync --extra hf (or pip install 'eagle-verify-lab[hf]', i.e. the `datasets` package)"


def _datasets_load_dataset() -> Callable[..., Any]:
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise DatasetError(
            f"bench.dataset names a Hugging Face dataset, which needs the optional `datasets` package. "
            f"Fix: {HF_INSTALL_HINT}") from None
    return datasets.load_dataset


def _messages(value: Any, where: str, column: str) -> list[dict[str, str]]:
    """The chat messages of one prompt cell (module docstring: str, list of turns, list of messages)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)) and value:
        first = value[0]
        if isinstance(first, str):
            return [{"role": "user", "content": first}]
        if all(isinstance(m, Mapping) for m in value):
            return [{"role": m.get("role"), "content": m.get("content")} for m in value]  # type: ignore[misc]
    raise DatasetError(
        f"{where}: column {column!r} holds {type(value).__name__} {str(value)[:60]!r}, not a prompt. Fix: point "
        "bench.dataset_columns.prompt at a column of strings, lists of turns, or lists of {role, content} messages")


def load_hf_prompts(bench: Any, loader: Callable[..., Any] | None = None) -> tuple[list[Prompt], dict[str, Any]]:
    """Load a Hugging Face dataset named by ``bench.dataset`` as prompts.

    :param bench: :class:`lab.config.BenchParams` with an HF id (validated by :func:`check_dataset_params`).
    :param loader: ``load_dataset(path, name=..., split=..., revision=...)``-like callable
        returning an iterable of row dicts with ``column_names`` (default:
        ``datasets.load_dataset``); tests pass a fake.
    :returns: ``(prompts, info)``; ``info`` holds ``source`` ("huggingface"), ``id``,
        ``split``, ``subset``, ``revision`` (as requested), ``fingerprint`` (the ``datasets``
        fingerprint, or None) and ``num_rows``.
    :raises DatasetError: ``datasets`` not installed (names the install command), a mapped
        column missing (names the column, the columns the set has and the key to fix), an
        empty set, a row that is not a valid prompt, or a duplicate id.
    """
    cols = bench.dataset_columns
    load = loader or _datasets_load_dataset()
    try:
        ds = load(bench.dataset, name=bench.dataset_subset, split=bench.dataset_split, revision=bench.dataset_revision)
    except DatasetError:
        raise
    except Exception as exc:  # network, unknown split/subset/revision: the library's own message
        raise DatasetError(
            f"bench.dataset={bench.dataset!r} (split {bench.dataset_split!r}, subset {bench.dataset_subset!r}, "
            f"revision {bench.dataset_revision!r}) could not be loaded: {type(exc).__name__}: {exc}. Fix: check the id, "
            "bench.dataset_split/dataset_subset/dataset_revision, and that this node reaches the Hub (or has it cached)"
        ) from None
    names = list(getattr(ds, "column_names", None) or [])
    wanted = [("bench.dataset_columns.prompt", cols.prompt), ("bench.dataset_columns.category", cols.category),
              ("bench.dataset_columns.id", cols.id)]
    for key, col in wanted:
        if col is not None and names and col not in names:
            raise DatasetError(f"{key}={col!r} is not a column of {bench.dataset!r} (split {bench.dataset_split!r}); "
                               f"its columns are {names}. Fix: set {key} to one of them")
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(ds):
        where = f"{bench.dataset} row {i}"
        for key, col in wanted:
            if col is not None and col not in row:
                raise DatasetError(f"{where}: no column {col!r} ({key}). Fix: set {key} to one of {sorted(row)}")
        category = str(row[cols.category]) if cols.category is not None else bench.dataset_category
        pid = str(row[cols.id]) if cols.id is not None else f"{category}-{i:05d}"
        prompt = _check_record({"id": pid, "category": category,
                                "messages": _messages(row[cols.prompt], where, cols.prompt)}, where)
        if prompt.id in seen:
            raise DatasetError(f"{where}: duplicate id {prompt.id!r} (first at row {seen[prompt.id]}). Fix: map "
                               "bench.dataset_columns.id to a unique column, or remove it (ids then come from row numbers)")
        seen[prompt.id] = i
        prompts.append(prompt)
    if not prompts:
        raise DatasetError(f"{bench.dataset!r} split {bench.dataset_split!r} has no rows. Fix: choose another split")
    info = {"source": "huggingface", "id": bench.dataset, "split": bench.dataset_split, "subset": bench.dataset_subset,
            "revision": bench.dataset_revision, "fingerprint": getattr(ds, "_fingerprint", None), "num_rows": len(prompts)}
    return prompts, info


def prompts_sha256(prompts: Iterable[Prompt]) -> str:
    """SHA-256 (hex) of the prompts as loaded (id, category, messages; JSON, sorted keys): the
    same content gives the same hash whatever file or library it came from."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps({"id": p.id, "category": p.category, "messages": list(p.messages)},
                            sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def load_bench_prompts(bench: Any, root: str | os.PathLike[str] | None = None,
                       loader: Callable[..., Any] | None = None) -> tuple[list[Prompt], dict[str, Any]]:
    """The prompts ``bench.dataset`` names, and a record of where they came from.

    :param bench: :class:`lab.config.BenchParams`. :param root: what a relative file path is
        relative to (default: the working directory). :param loader: see :func:`load_hf_prompts`.
    :returns: ``(prompts, info)``; ``info`` has ``source`` ("file" with ``path``, or the HF
        fields of :func:`load_hf_prompts`), ``prompts_sha256``, ``num_prompts`` and
        ``categories`` (the category of each prompt, by index: what ``prompt_index`` in
        ``requests.jsonl`` points at).
    :raises DatasetError: as :func:`lab.workload.dataset.load_prompts` or :func:`load_hf_prompts`.
    """
    if is_hf_id(bench.dataset):
        prompts, info = load_hf_prompts(bench, loader)
    else:
        path = Path(bench.dataset)
        if root is not None and not path.is_absolute():
            path = Path(root) / path
        prompts, info = load_prompts(path), {"source": "file", "path": bench.dataset}
    info.update(prompts_sha256=prompts_sha256(prompts), num_prompts=len(prompts),
                categories=[p.category for p in prompts])
    return prompts, info


def check_prompt_count(bench: Any, available: int) -> None:
    """Refuse ``bench.num_prompts`` above the dataset's prompt count unless
    ``bench.repeat_prompts`` says to send prompts more than once per repeat
    (:func:`lab.workload.dataset.workload_indices` cycles, a fresh permutation per pass): a
    repeated prompt hits SGLang's prefix cache, so the run would not measure what its count says.

    :param bench: :class:`lab.config.BenchParams`. :param available: prompts the dataset holds.
    :raises DatasetError: naming both counts and the two fixes.
    """
    if bench.num_prompts > available and not getattr(bench, "repeat_prompts", False):
        raise DatasetError(
            f"bench.num_prompts is {bench.num_prompts} but the dataset {bench.dataset} has {available} prompts: "
            f"each repeat would send {bench.num_prompts - available} of them twice (a repeated prompt is served "
            f"from SGLang's prefix cache). Fix: set bench.num_prompts to at most {available} "
            f"(`dvc exp run -S bench.num_prompts={available}`), use a larger dataset, or set "
            f"bench.repeat_prompts: true to cycle through the prompts on purpose")


def write_prompts(prompts: Iterable[Prompt], path: str | os.PathLike[str]) -> Path:
    """Write prompts as a JSONL prompt file (:func:`lab.workload.dataset.load_prompts` reads it
    back unchanged): e.g. a Hugging Face set materialized for the emulator. Returns the path."""
    from lab.atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(json.dumps({"id": p.id, "category": p.category, "messages": list(p.messages)})
                                    + "\n" for p in prompts))
    return path


def dataset_params(info: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow params of a mode run saying which content the dataset had: ``dataset.source``,
    ``dataset.prompts_sha256``, ``dataset.num_prompts`` and, for a Hugging Face set,
    ``dataset.fingerprint`` and ``dataset.revision`` (keys whose value is None are left out)."""
    keys = ("source", "prompts_sha256", "num_prompts", "fingerprint", "revision")
    return {f"dataset.{k}": info[k] for k in keys if info.get(k) is not None}


def emulator_prompt_file(bench: Any, prompts: list[Prompt], root: str | os.PathLike[str],
                         out: str | os.PathLike[str]) -> Path:
    """The prompt file the emulator maps prompt text to category with (its
    ``--emulator-prompt-categories``; :mod:`lab.emulator.categories`): the local JSONL of
    ``bench.dataset`` itself, or, for a Hugging Face set, the loaded prompts written to
    ``<out>/dataset.jsonl``. (A real engine needs no map: the caller asks only for the emulator.)

    :param bench: the ``bench`` section (:class:`lab.config.BenchParams`)."""
    if is_hf_id(bench.dataset):
        return write_prompts(prompts, Path(out) / "dataset.jsonl")
    path = Path(bench.dataset)
    return path if path.is_absolute() else Path(root) / path
