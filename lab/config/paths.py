"""Where the lab's repository is: the root that holds ``params.yaml`` and ``dvc.yaml``, and the
main checkout behind a DVC experiment's temporary copy (``<main>/.dvc/tmp/exps/...``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["find_repo_root", "repo_root", "main_repo_root"]


def find_repo_root(start: Path | None = None) -> Path | None:
    """The nearest directory at or above ``start`` holding ``params.yaml`` and ``dvc.yaml``."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "params.yaml").is_file() and (d / "dvc.yaml").is_file():
            return d
    return None


def repo_root() -> Path:
    """The lab's repository root (see :func:`find_repo_root`), from the cwd or this file."""
    return find_repo_root() or find_repo_root(Path(__file__).parents[1]) or Path.cwd()


def main_repo_root(root: Path) -> Path:
    """The main checkout for a DVC experiment temp copy (``<main>/.dvc/tmp/exps/...``)."""
    parts = root.resolve().parts
    for i in range(len(parts) - 3):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root
