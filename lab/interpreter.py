"""The lab runs in its own environment, whichever ``python`` a shell finds first.

``dvc.yaml``'s stage commands call ``python -m lab.pipeline.<stage>_stage``: a shell resolves
``python`` on PATH. Run as ``.venv/bin/dvc repro`` without activating the environment, that
``python`` is the system's, which lacks the lab's packages, and the stage died with a raw
``ModuleNotFoundError: No module named 'psutil'`` (issue 34). Importing :mod:`lab.pipeline` (every
stage's entry module is in it) calls :func:`ensure_lab_python` first; :mod:`lab` itself does not,
so :mod:`lab.physics` still imports on a GPU node's bare Python. When the interpreter lacks the lab's packages and the process
was started as ``python -m lab...`` (a stage, ``lab``'s own modules), it re-executes the same
command under the environment of the ``dvc`` that runs it (``.venv/bin/dvc``'s ``.venv/bin/python``)
or else the project's (``<repo>/.venv``, or ``$UV_PROJECT_ENVIRONMENT``, as ``uv sync`` makes it),
with that environment's ``bin`` first on PATH; otherwise it stops at once
with the interpreter, the missing packages and the fix. Only the standard library is imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["REQUIRED", "LabPythonError", "missing_packages", "project_python", "launcher_python", "has_packages",
           "ensure_lab_python"]

#: Import names of packages every stage imports (pyproject.toml ``dependencies``); probed with
#: ``importlib.util.find_spec``, which imports nothing.
REQUIRED = ("yaml", "pydantic", "psutil", "papermill", "mlflow")

#: Set in the re-executed process: a second miss there is an error, not another re-exec.
REEXEC_ENV = "LAB_REEXEC_FROM"


class LabPythonError(ImportError):
    """The interpreter lacks the lab's packages (the message names it, them, and the fix)."""


def missing_packages() -> list[str]:
    """The names of :data:`REQUIRED` this interpreter cannot import (empty: all there)."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def project_python(root: Path | None = None) -> Path | None:
    """The project environment's interpreter: ``$UV_PROJECT_ENVIRONMENT/bin/python`` when set
    (relative paths against ``root``), else ``<root>/.venv/bin/python``; None when it is not there.
    ``root`` defaults to the directory holding the ``lab`` package."""
    root = root or Path(__file__).resolve().parent.parent
    env = os.environ.get("UV_PROJECT_ENVIRONMENT")
    venv = (root / env) if env and not os.path.isabs(env) else Path(env) if env else root / ".venv"
    exe = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    return exe if exe.is_file() else None


def launcher_python(max_depth: int = 8) -> Path | None:
    """The interpreter of the ``dvc`` that runs this stage: the nearest ancestor process (through
    the shells between, read from ``/proc/<pid>/cmdline``; Linux) started as ``<bin>/python
    <bin>/dvc ...`` (a console script's shebang), its ``<bin>/python``; None when there is none
    (no ``/proc``, not under ``dvc``, a ``dvc`` that is not a console script). ``.venv-node/bin/dvc
    repro`` on a GPU node so finds ``.venv-node``, whatever the checkout's ``.venv``."""
    pid = os.getppid()
    for _ in range(max_depth):
        if pid <= 1:
            return None
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        for arg in argv[:3]:
            if os.path.basename(arg) == "dvc":
                exe = Path(arg).parent / "python"
                return exe if exe.is_file() else None
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after "(comm)": the parent's pid
        except (IndexError, ValueError):
            return None
    return None


def has_packages(python: Path) -> bool:
    """Whether the environment of ``python`` (``<prefix>/bin/python``) holds every :data:`REQUIRED`
    package in one of its ``lib/python3*/site-packages`` (files looked up, nothing run)."""
    for site in python.parent.parent.glob("lib/python3*/site-packages"):
        if all((site / name).is_dir() or (site / f"{name}.py").is_file() for name in REQUIRED):
            return True
    return False


def _started_as_lab_module() -> bool:
    """Whether this process is ``python [options] -m lab...`` (``sys.orig_argv``, Python 3.10+)."""
    argv = list(getattr(sys, "orig_argv", None) or [])[1:]
    return "-m" in argv and argv.index("-m") + 1 < len(argv) and argv[argv.index("-m") + 1].split(".")[0] == "lab"


def ensure_lab_python() -> None:
    """Return when this interpreter has the lab's packages; else re-execute a ``python -m lab...``
    process under the ``dvc``'s own interpreter (:func:`launcher_python`) or else
    :func:`project_python`, the first whose environment has them (:func:`has_packages`)
    (``os.execve``: the same arguments and working
    directory, its ``bin`` first on PATH, ``VIRTUAL_ENV`` set).

    Where it cannot (no project environment, the environment lacks them too, or a process that
    was not started as ``python -m lab...``: a library import never replaces its process) a
    ``python -m lab...`` process exits 2 with one line on stderr naming the interpreter, the
    missing packages and the fix (no traceback); an import from elsewhere raises.

    :raises LabPythonError: the packages are missing, in a process not started as ``python -m lab...``.
    """
    missing = missing_packages()
    if not missing:
        return
    found = [c for c in (launcher_python(), project_python()) if c is not None]
    target = next((c for c in found if has_packages(c)), found[0] if found else None)
    here = Path(sys.prefix).resolve()  # the environment running now (a venv's python links to its base's)
    own = target is not None and here == target.parent.parent.resolve()
    as_module = _started_as_lab_module()
    if target is not None and not own and as_module and os.environ.get(REEXEC_ENV) is None:
        env = {**os.environ, REEXEC_ENV: sys.executable or "?", "VIRTUAL_ENV": str(target.parent.parent),
               "PATH": str(target.parent) + os.pathsep + os.environ.get("PATH", "")}
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(str(target), [str(target), *sys.orig_argv[1:]], env)
    root = Path(__file__).resolve().parent.parent
    where = (f"no project environment at {root / '.venv'}" if target is None else
             f"the environment found, {target.parent.parent}, lacks them too" if own else
             f"the environment found is {target.parent.parent}")
    msg = (f"error: {sys.executable} is not the lab's Python: it cannot import {', '.join(missing)} ({where}). "
           f"Fix: `uv sync --frozen` in {root} (README's first command makes .venv), then "
           "`source .venv/bin/activate` before `dvc repro` (or put .venv/bin first on PATH)")
    if as_module:
        print(msg, file=sys.stderr, flush=True)
        raise SystemExit(2)
    raise LabPythonError(msg)
