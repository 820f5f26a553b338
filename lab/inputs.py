"""The files that params point at, which change what a bench stage measures.

``emulator.profile`` (a bundled name or a path to a cost profile; emulator runs only),
``bench.dataset`` (a local prompt file; a Hugging Face id is no file), and any value of
``server.extra_args`` or ``server.env`` that names an existing file (a chat template, a
JSON override file). :func:`param_files` lists them; the bench stage refuses one that
lies outside its ``dvc.yaml`` dependencies (``data/``, ``lab/emulator/``...), since DVC would
not see it change (:func:`outside_deps`), and the regression sentinel hashes each one's
content (:func:`file_digests`), so two different files under one name are two configurations.
Model weights are directories named by path (and revision), not files: they are neither.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["param_files", "launch_files", "outside_deps", "file_digests"]


def param_files(params, root: Path) -> dict[str, Path]:
    """``{param: absolute path}`` of every file a param points at (module docstring).

    :param params: :class:`lab.config.LabParams`.
    :param root: the repository root relative paths resolve against (the engine's cwd).
    """
    from lab.engine.registry import engine_for

    eng = engine_for(params.engine)
    return launch_files(eng, own=eng.own_section(params), bench=params.bench, server=params.server, root=root)


def launch_files(eng, *, own, bench, server, root: Path) -> dict[str, Path]:
    """:func:`param_files` from the engine and the sections that name files.

    :param eng: the :class:`lab.engine.registry.Engine` (its :meth:`~lab.engine.registry.Engine.input_files`).
    :param own: ``eng.own_section(params)``; ``bench``, ``server``: ``params.bench``, ``params.server``.
    :param root: as :func:`param_files`'.
    :returns: ``{param: absolute path}``.
    """
    from lab.config import is_hf_id

    out: dict[str, Path] = {}

    def add(name: str, value: str) -> None:
        if not value or "\0" in value:
            return
        p = Path(value).expanduser()
        p = p if p.is_absolute() else root / p
        try:
            if p.is_file():
                out[name] = p.resolve()
        except OSError:  # a value that is no path (too long a name...)
            pass

    out.update(eng.input_files(own, root))  # the emulator's cost profile
    if not is_hf_id(bench.dataset):
        add("bench.dataset", bench.dataset)
    for i, arg in enumerate(server.extra_args or []):
        add(f"server.extra_args[{i}]", arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg)
    for k, v in (server.env or {}).items():
        add(f"server.env.{k}", str(v))
    return out


def outside_deps(files: dict[str, Path], root: Path, deps: list[str]) -> dict[str, Path]:
    """The entries of ``files`` that lie under none of ``deps`` (paths relative to ``root``,
    files or directories, as ``dvc.yaml`` lists them)."""
    covered = [(root / d).resolve() for d in deps]
    return {k: p for k, p in files.items()
            if not any(p == c or c in p.parents for c in covered)}


def file_digests(files: dict[str, Path], root: Path) -> dict[str, dict[str, str]]:
    """``{param: {"path": path relative to root when inside it, "sha256": hex}}`` for the sentinel's hash."""
    from lab.analysis.sentinel import file_sha256

    out = {}
    for k, p in sorted(files.items()):
        try:
            shown = str(p.relative_to(root.resolve()))
        except ValueError:
            shown = str(p)
        out[k] = {"path": shown, "sha256": file_sha256(p)}
    return out
