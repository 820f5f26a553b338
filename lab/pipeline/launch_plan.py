"""``bench.launches``: how many fresh engine starts each mode gets, and the stages DVC runs for them.

``dvc.yaml`` has two bench stage groups that run the same code: ``bench@<mode>`` (``foreach:
${modes}``, launch 1, ``results/<mode>/``) and ``bench_launch@<n>-<mode>`` (``matrix:`` of
``bench.later_launches`` x ``modes``, launches 2..N, ``results/launches/<n>/<mode>/``). DVC runs
them in the order dvc.yaml defines them (its ``dvc repro`` walks the stage graph depth-first from
the stages in definition order; ``tests/e2e/test_launches_pipeline.py`` checks the ``dvc repro --dry``
order), so a session runs launch 1 of every mode, then launch 2 of every mode, ...: modes
interleaved A B C A B C, as :func:`interleaved_stages` lists them.

DVC's interpolation cannot count, so ``bench.later_launches`` spells the list ``[2, ..., N]`` out
beside ``bench.launches: N`` (:class:`lab.config.BenchParams` refuses a mismatch, naming this
command); :func:`set_launches` (``lab launches N``) writes both, changing only those two lines of
params.yaml. Changing ``bench.launches`` changes the ``bench`` params every bench stage declares,
so every launch runs again: the launches of one comparison are always measured together, in one
interleaved session, never launch 1 from yesterday beside launches 2-3 from today.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab.atomic import write_text_atomic
from lab.config import ParamsError, launch_stage

__all__ = ["interleaved_stages", "set_launches"]

_BLOCK = re.compile(r"^bench:\s*(#.*)?$")
_KEY = re.compile(r"^(?P<indent>[ \t]+)(?P<key>launches|later_launches|repeats):(?P<value>[^#\n]*)(?P<comment>#.*)?$")


def interleaved_stages(modes: list[str], launches: int) -> list[str]:
    """Every bench stage address in the order a session runs them: launch 1 of every mode (in
    ``modes`` order), then launch 2 of every mode, ... (:func:`lab.config.launch_stage`)."""
    return [launch_stage(m, n) for n in range(1, launches + 1) for m in modes]


def set_launches(params_path: Path, n: int) -> None:
    """Set ``bench.launches: n`` and ``bench.later_launches: [2, ..., n]`` in ``params_path``.

    Only those two lines change (added after ``repeats:`` when missing), comments included; the
    result is validated (:func:`lab.config.load_params`) before the file is replaced, atomically.

    :raises ParamsError: ``n < 1``, no top-level ``bench:`` block, or the written file is invalid.
    """
    from lab.config import load_params

    if n < 1:
        raise ParamsError(f"lab launches {n}: need at least 1 launch per mode. Fix: e.g. lab launches 3")
    lines = params_path.read_text().splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if _BLOCK.match(ln))
    except StopIteration:
        raise ParamsError(f"{params_path}: no top-level `bench:` block. Fix: add one (see README's params table)") from None
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t", "#")):
        end += 1
    values = {"launches": str(n), "later_launches": "[" + ", ".join(str(k) for k in range(2, n + 1)) + "]"}
    body = [ln for ln in lines[start + 1:end] if ln.strip() and not ln.lstrip().startswith("#")]
    indent = body[0][: len(body[0]) - len(body[0].lstrip())] if body else "  "
    found: dict[str, int] = {}
    after = start
    for i in range(start + 1, end):
        m = _KEY.match(lines[i])
        if not m or m["indent"] != indent:  # a key of a nested mapping, not of bench itself
            continue
        if m["key"] == "repeats":
            after = i
            continue
        found[m["key"]] = i
        pad = " " * max(1, len(m["value"]) - len(values[m["key"]]) - 1) if m["comment"] else ""
        lines[i] = f"{indent}{m['key']}: {values[m['key']]}" + (f"{pad}{m['comment']}" if m["comment"] else "")
    for key in ("later_launches", "launches"):  # inserted in this order after `repeats:` -> launches first
        if key not in found:
            lines.insert(after + 1, f"{indent}{key}: {values[key]}")
    text = "\n".join(lines) + "\n"
    tmp = params_path.with_name(f".{params_path.name}.launches.tmp")
    tmp.write_text(text)
    try:
        got = load_params(tmp).bench
    finally:
        tmp.unlink(missing_ok=True)
    if got.launches != n:  # e.g. a `launches:` key outside the block's own indentation
        raise ParamsError(f"{params_path}: could not set bench.launches (read back {got.launches}). "
                          "Fix: set bench.launches and bench.later_launches by hand")
    write_text_atomic(params_path, text)
