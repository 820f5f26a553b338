"""The lab runs in its own environment, whichever ``python`` a shell finds first.

``dvc.yaml``'s stage commands call ``python -m lab.pipeline.<stage>_stage``: a shell resolves
``python`` on PATH. Run as ``.venv/bin/dvc repro`` without activating the environment, that
``python`` is the system's, which lacks the lab's packages, and the stage died with a raw
``ModuleNotFoundError: No module named 'psutil'`` (issue 34). Importing :mod:`lab.pipeline` (every
stage's entry module is in it) calls :func:`ensure_lab_python` first; :mod:`lab` itself does not,
so :mod:`lab.physics` still imports on a GPU node's bare Python. When the interpreter lacks the lab's packages and the process
was started as ``python -m lab...`` (a stage, ``lab``'s own modules), it re-executes the same
command under the project's environment (``<repo>/.venv``, or ``$UV_PROJECT_ENVIRONMENT``, as
``uv sync`` makes it), with that environment's ``bin`` first on PATH; otherwise it stops at once
with the interpreter, the missing packages and the fix. Only the standard library is imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["REQUIRED", "LabPythonError", "missing_packages", "project_python", "ensure_lab_python"]

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


def _started_as_lab_module() -> bool:
    """Whether this process is ``python [options] -m lab...`` (``sys.orig_argv``, Python 3.10+)."""
    argv = list(getattr(sys, "orig_argv", None) or [])[1:]
    return "-m" in argv and argv.index("-m") + 1 < len(argv) and argv[argv.index("-m") + 1].split(".")[0] == "lab"


def ensure_lab_python() -> None:
    """Return when this interpreter has the lab's packages; else re-execute a ``python -m lab...``
    process under :func:`project_python` (``os.execve``: the same arguments and working
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
    target = project_python()
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
             f"the project's environment {target.parent.parent} lacks them too" if own else
             f"the project's environment is {target.parent.parent}")
    msg = (f"error: {sys.executable} is not the lab's Python: it cannot import {', '.join(missing)} ({where}). "
           f"Fix: `uv sync --frozen` in {root} (README's first command makes .venv), then "
           "`source .venv/bin/activate` before `dvc repro` (or put .venv/bin first on PATH)")
    if as_module:
        print(msg, file=sys.stderr, flush=True)
        raise SystemExit(2)
    raise LabPythonError(msg)
