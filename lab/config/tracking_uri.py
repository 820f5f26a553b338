"""The MLflow tracking URI a run writes to: a relative ``sqlite:///file.db`` resolved against the
*main* repository root (also from inside a DVC experiment's temporary copy under
``.dvc/tmp/exps/``), so that every run of every copy writes to the same database."""

from __future__ import annotations

from pathlib import Path

from lab.config.paths import main_repo_root, repo_root

__all__ = ["resolve_tracking_uri"]


def resolve_tracking_uri(uri: str, root: Path | None = None) -> str:
    """``uri`` with a relative SQLite path made absolute against the main checkout of ``root``
    (default: :func:`lab.config.paths.repo_root`).

    :returns: e.g. ``sqlite:////abs/path/mlflow.db``; other URIs unchanged.
    """
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        base = main_repo_root(root or repo_root())
        return prefix + str((base / uri[len(prefix):]).resolve())
    return uri
