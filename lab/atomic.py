"""Atomic file writes: a reader (DVC, ``compare``, a person) never sees a half-written file.

Every writer of a result, metric, summary or figure goes through here: the content is
written to a hidden temp file in the same directory (same filesystem), flushed and
``fsync``-ed, then ``os.replace``-d over the target (atomic on POSIX). A crash or a signal
mid-write leaves the previous file (or none), never a truncated one.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["atomic_path", "write_text_atomic", "write_json_atomic", "savefig_atomic"]


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on normal exit it replaces ``path``, on an
    exception it is removed and ``path`` is untouched."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (non-JSON values via ``str``)."""
    write_text_atomic(path, json.dumps(obj, indent=indent, default=str) + "\n")


def savefig_atomic(fig, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """``fig.savefig`` to ``path`` atomically; the format comes from ``path``'s suffix."""
    fmt = kwargs.pop("format", None) or Path(path).suffix.lstrip(".") or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, **kwargs)
