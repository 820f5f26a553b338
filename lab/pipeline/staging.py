"""A stage's working directory: previous complete results stay until a new complete result replaces them.

Each run of a stage writes into its own *attempt* directory, ``<out>/partial/<UTC time>/``
(``results/<mode>/partial/20260101T120000Z/``, ``reports/partial/...``), never into ``<out>``
itself: the notebook gets that directory as its ``results_dir`` / ``reports_dir``, papermill
writes the executed notebook there, the engine its log, the client its ``requests.jsonl``.

- A **complete** result (the stage's own test, e.g. ``result.json`` with ``status: ok``) is
  moved up into ``<out>`` by :func:`promote`: each file replaces its namesake (``os.replace``,
  atomic per file; ``metrics.json`` and ``result.json`` last, so a reader that sees the new
  status sees the new files), and what the previous result had but the new one has not
  (of the names the stage owns) is removed. The attempt directory is then gone.
- An interrupted, crashed or failed run leaves its attempt directory as it is, with the
  partial result (``metrics.json`` saying ``failed``, what was measured, the server log, the
  executed notebook) beside the previous complete result, which is untouched: readable, and
  what ``dvc.lock`` still describes (DVC does not commit a failed stage). The stage's error
  message names the attempt directory. Each attempt keeps its own directory: nothing measured
  is overwritten by a later attempt.

``partial/`` is in ``.dvcignore`` (so an attempt never changes the ``results`` dependency
of ``compare``) and in ``.gitignore``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["PARTIAL_DIR", "attempt_dir", "promote", "check_output_dir"]

#: Sub-directory of a stage's output directory that holds its attempts.
PARTIAL_DIR = "partial"
#: Written last when promoting: the files that say what the result is.
_LAST = ("result.json", "metrics.json")


def check_output_dir(out: Path) -> str | None:
    """Why ``out`` cannot hold a stage's results (a file or a non-directory is in the way,
    or it cannot be created or written), as a message with the fix; None when it can."""
    for p in (out, *out.parents):
        if p.exists() and not p.is_dir():
            return (f"{p} is a file, not a directory, so the stage cannot write its results in {out}. "
                    f"Fix: move it away (mv {p} {p}.bak) or delete it, then run the stage again")
        if p.exists():
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return (f"{out} is not writable ({exc.strerror or exc}). Fix: check its permissions "
                "(and the disk's free space), then run the stage again")
    return None


def attempt_dir(out: Path) -> Path:
    """A new, empty ``<out>/partial/<UTC time>[-<n>]/`` for one run of a stage.

    :raises RuntimeError: the 999 names of this second are all taken.
    :raises OSError: ``out`` cannot be written (the stage's preflight checks it first)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = out / PARTIAL_DIR
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        d = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise RuntimeError(f"could not make a new attempt directory under {base}")


def promote(work: Path, out: Path, owned: Iterable[str] = ()) -> list[str]:
    """Move the complete result in ``work`` up into ``out`` (module docstring); returns the
    names moved. ``owned``: names the stage writes; those absent from ``work`` are removed
    from ``out`` (the previous result's leftovers), other entries of ``out`` are left alone."""
    names = sorted((p.name for p in work.iterdir()), key=lambda n: (n in _LAST, _LAST.index(n) if n in _LAST else 0, n))
    for name in set(owned) - set(names) - {PARTIAL_DIR}:
        _remove(out / name)
    for name in names:
        src, dst = work / name, out / name
        if src.is_dir() and not src.is_symlink():
            if dst.exists() or dst.is_symlink():
                old = out / f".{name}.replaced"
                _remove(old)
                os.replace(dst, old)
                os.replace(src, dst)
                _remove(old)
            else:
                os.replace(src, dst)
        else:
            if dst.is_dir() and not dst.is_symlink():
                _remove(dst)
            os.replace(src, dst)
    work.rmdir()
    try:
        work.parent.rmdir()  # partial/ itself, when no earlier attempt is kept there
    except OSError:
        pass
    return names


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)
