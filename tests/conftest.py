"""Fixtures shared by every test module.

- ``sglang_nodeps`` / ``sglang_nodeps_0516`` / ``sglang_nodeps_each``: SGLang 0.5.23's / 0.5.16's /
  each supported version's own source (no dependencies; :func:`sglang_nodeps_dir`), so tests can
  judge the lab against SGLang's real parser and code. Installed once per version under
  ``.cache/`` with the ``uv`` that README's commands provide; no other installer is ever used.
- MLflow's telemetry is off (``MLFLOW_DISABLE_TELEMETRY``): no test sends anything anywhere.
- ``_project_stores_untouched`` (autouse, session): fails the session's last test at
  teardown when the suite wrote into the project's own ``mlflow.db``, ``mlruns/``,
  ``results/`` or ``reports/`` (tests use ``tmp_path`` stores and scratch copies).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# MLflow starts a telemetry client that resolves and calls a remote host from a background
# thread unless it sees a test or CI (mlflow/telemetry/utils.py _is_ci_env_or_testing, which
# checks PYTEST_CURRENT_TEST, unset while modules are collected). Tests send nothing anywhere,
# and a unit test must open no socket (tests/unit/conftest.py): off for the whole run.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

ROOT = Path(__file__).resolve().parents[1]
SGLANG_VERSION = "0.5.23"
#: Every SGLang build the lab supports (``lab/engine/surfaces.py``); contract tests run each one's code.
SGLANG_VERSIONS = ("0.5.23", "0.5.16")

#: Paths of the project that tests must leave as they found them (issue 11, item 3).
PROJECT_STORES = ("mlflow.db", "mlruns", "mlartifacts", "results", "reports")


def find_uv() -> str | None:
    """The ``uv`` binary README's commands provide, or None.

    Order: ``$UV`` (``uv run`` sets it to its own path for the processes it starts, so
    ``uv run pytest`` always finds it), ``.cache/uv/bin/uv`` (where README's commands
    install it), then ``uv`` on PATH.
    """
    for cand in (os.environ.get("UV"), str(ROOT / ".cache" / "uv" / "bin" / "uv"), shutil.which("uv")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def install_nodeps(target: Path, pkgs: list[str]) -> Path:
    """``uv pip install --no-deps --target target pkgs`` (skipped when ``target`` exists).

    :raises pytest.fail: no ``uv`` found (README's commands put it in ``.cache/uv/bin``).
    """
    marker = target / ".lab-installed"
    if marker.is_file():
        return target
    uv = find_uv()
    if uv is None:
        pytest.fail("uv not found ($UV, .cache/uv/bin/uv or PATH). Fix: run the tests as README says "
                    "(.cache/uv/bin/uv run --frozen pytest -q)")
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([uv, "pip", "install", "--quiet", "--no-deps", "--python", sys.executable,
                    "--target", str(tmp), *pkgs], check=True, timeout=600)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # a half-finished install is never taken for a complete one
    marker.write_text(" ".join(pkgs) + "\n")
    return target


def sglang_nodeps_dir(version: str) -> Path:
    """Directory holding SGLang ``version`` (+ msgspec) installed without dependencies.

    Put it on ``PYTHONPATH`` of a subprocess (or ``sys.path``) to import SGLang's pure-Python
    modules (``sglang.srt.server_args``...) and read its source (``<dir>/sglang/srt/...``).
    It lives under ``.cache/sglang-nodeps-<version>`` (git-ignored) and is installed once per
    checkout by the ``uv`` from :func:`find_uv`. SGLang itself is not a locked dependency: with
    its dependencies it needs CUDA wheels (torch...), which a CPU machine does not install.
    """
    return install_nodeps(ROOT / ".cache" / f"sglang-nodeps-{version}", [f"sglang=={version}", "msgspec"])


@pytest.fixture(scope="session")
def sglang_nodeps() -> Path:
    """SGLang 0.5.23 without dependencies (:func:`sglang_nodeps_dir`)."""
    return sglang_nodeps_dir(SGLANG_VERSION)


@pytest.fixture(scope="session")
def sglang_nodeps_0516() -> Path:
    """SGLang 0.5.16 without dependencies (:func:`sglang_nodeps_dir`): the build the real
    captures of ``tests/fixtures/sglang-0.5.16/`` came from."""
    return sglang_nodeps_dir("0.5.16")


@pytest.fixture(scope="session", params=SGLANG_VERSIONS)
def sglang_nodeps_each(request) -> tuple[str, Path]:
    """``(version, directory)`` for each of :data:`SGLANG_VERSIONS` (the test runs once per version)."""
    return request.param, sglang_nodeps_dir(request.param)


def _snapshot() -> dict[str, tuple[int, int]]:
    """``relative path -> (size, mtime_ns)`` of every file under :data:`PROJECT_STORES`."""
    out: dict[str, tuple[int, int]] = {}
    for name in PROJECT_STORES:
        p = ROOT / name
        files = [p] if p.is_file() else (sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [])
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out[str(f.relative_to(ROOT))] = (st.st_size, st.st_mtime_ns)
    return out


def store_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """Files added, changed or removed between two :func:`_snapshot` results."""
    return sorted({k for k in set(before) | set(after) if before.get(k) != after.get(k)})


@pytest.fixture(scope="session", autouse=True)
def _project_stores_untouched():
    """Tests never write into the project's own tracking store or outputs (issue 11, item 3)."""
    before = _snapshot()
    yield
    changed = store_changes(before, _snapshot())
    assert not changed, (f"the test run changed the project's own stores ({', '.join(PROJECT_STORES)}): "
                         f"{changed[:20]}. Fix: the test must use a tmp_path store or a scratch copy")


#: fixture -> the SGLang versions it installs (:func:`sglang_nodeps_dir`)
_NODEPS_FIXTURES = {"sglang_nodeps": (SGLANG_VERSION,), "sglang_nodeps_0516": ("0.5.16",),
                    "sglang_nodeps_each": SGLANG_VERSIONS}


E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config, items):
    """Every test under ``tests/e2e/`` is in the ``slow`` tier (pyproject's markers: README's test
    command runs ``-m "not slow"``, .ci/run then ``-m slow``)."""
    for item in items:
        if E2E in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session):
    """Install the SGLang-without-dependencies folders the collected tests need before any test
    runs: on a fresh clone the first install is a ``uv pip install`` subprocess, which the unit
    tier's guard (``tests/unit/conftest.py``) refuses inside a test, so a unit test reading SGLang's
    source would otherwise fail there (and, the fixture being session-scoped, every later one)."""
    versions = {v for item in session.items for name in getattr(item, "fixturenames", ())
                for v in _NODEPS_FIXTURES.get(name, ())}
    for v in sorted(versions):
        sglang_nodeps_dir(v)
