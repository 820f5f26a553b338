"""The lab's locked environment as a list of exact files: uv.lock's dependency closure for a
target interpreter and platform.

uv.lock (TOML, uv's universal lock) lists every package with its version, dependencies (with
PEP 508 markers) and the files PyPI serves (``wheels`` / ``sdist`` with ``hash``). The closure
starts from the project's own dependencies (no dev group, no extras unless asked), evaluates
markers for the *target* (e.g. CPython 3.12 on Linux x86-64, the GPU node), and drops what
``omit`` names together with what only it needed.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LockedDist", "LockError", "target_env", "lock_closure", "normalize"]


class LockError(ValueError):
    """uv.lock is missing, unreadable, or does not hold what was asked for."""


def normalize(name: str) -> str:
    """PEP 503 normalized project name (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    import re
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockedDist:
    """One locked distribution.

    :ivar name: normalized project name. :ivar version: exact version.
    :ivar hashes: ``sha256:<hex>`` of every file uv.lock lists for that version (wheels + sdist).
    :ivar has_wheels: False when PyPI serves only an sdist (it must be built into a wheel).
    """

    name: str
    version: str
    hashes: tuple[str, ...] = field(default=())
    has_wheels: bool = True

    def requirement(self) -> str:
        """A pip ``--require-hashes`` line: ``name==version --hash=sha256:...``."""
        return f"{self.name}=={self.version} " + " ".join(f"--hash={h}" for h in self.hashes)


def target_env(python: str = "3.12", machine: str = "x86_64") -> dict[str, str]:
    """PEP 508 marker environment of a CPython ``python`` on Linux ``machine``."""
    return {"implementation_name": "cpython", "implementation_version": f"{python}.0",
            "os_name": "posix", "platform_machine": machine, "platform_release": "",
            "platform_system": "Linux", "platform_version": "", "python_full_version": f"{python}.0",
            "platform_python_implementation": "CPython", "python_version": python,
            "sys_platform": "linux", "extra": ""}


@functools.lru_cache(maxsize=1024)
def _marker(marker: str):
    """A parsed PEP 508 marker (uv.lock repeats a few dozen across thousands of edges)."""
    from packaging.markers import Marker  # packaging: present wherever pip is
    return Marker(marker)


def _marker_ok(marker: str | None, env: dict[str, str]) -> bool:
    if not marker:
        return True
    return _marker(marker).evaluate(env)


@functools.lru_cache(maxsize=4)
def _parsed_lock(path: str, mtime_ns: int, size: int) -> dict:
    """uv.lock parsed once per version of the file (``mtime_ns``, ``size``: a rewritten lock is
    parsed again); callers only read it."""
    return tomllib.loads(Path(path).read_text())


def lock_closure(lock_path: str | Path, *, env: dict[str, str] | None = None, omit: tuple[str, ...] = (),
                 extras: tuple[str, ...] = ()) -> list[LockedDist]:
    """The project's runtime closure from ``uv.lock`` for ``env``.

    :param lock_path: the project's ``uv.lock``.
    :param env: marker environment (:func:`target_env`; default CPython 3.12, Linux x86-64).
    :param omit: project names left out with everything only they pulled in (e.g. ``jupyterlab``:
        a headless GPU node runs ``dvc repro``, not the notebook UI).
    :param extras: the project's optional-dependency groups to include.
    :returns: the distributions, sorted by name; the project itself is not among them.
    :raises LockError: no lock, no editable project in it, or a dependency the lock lacks.
    """
    path = Path(lock_path)
    try:
        st = path.stat()
        lock = _parsed_lock(str(path.resolve()), st.st_mtime_ns, st.st_size)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LockError(f"cannot read {path}: {exc}. Fix: run from the project checkout (uv.lock is committed)") from exc
    env = env or target_env()
    pkgs = lock.get("package", [])
    by_name: dict[str, list[dict]] = {}
    for p in pkgs:
        by_name.setdefault(normalize(p["name"]), []).append(p)
    roots = [p for p in pkgs if isinstance(p.get("source"), dict) and ("editable" in p["source"] or "virtual" in p["source"])]
    if not roots:
        raise LockError(f"{path} holds no editable project entry. Fix: regenerate it with `uv lock`")
    project = roots[0]
    omitted = {normalize(o) for o in omit}

    def pick(dep: dict) -> dict:
        cands = by_name.get(normalize(dep["name"]))
        if not cands:
            raise LockError(f"{dep['name']} is a dependency in {path} but has no package entry. Fix: `uv lock`")
        if "version" in dep:
            cands = [c for c in cands if c["version"] == dep["version"]] or cands
        return cands[0]

    start = list(project.get("dependencies", []))
    for ex in extras:
        start += project.get("optional-dependencies", {}).get(ex, [])
    seen: dict[str, dict] = {}
    stack = [d for d in start if _marker_ok(d.get("marker"), env) and normalize(d["name"]) not in omitted]
    while stack:
        dep = stack.pop()
        pkg = pick(dep)
        key = normalize(pkg["name"])
        if key in seen:
            continue
        seen[key] = pkg
        for sub in pkg.get("dependencies", []):
            if normalize(sub["name"]) in omitted or not _marker_ok(sub.get("marker"), env):
                continue
            stack.append(sub)
        for ex in dep.get("extra", []):
            for sub in pkg.get("optional-dependencies", {}).get(ex, []):
                if _marker_ok(sub.get("marker"), env):
                    stack.append(sub)
    out = []
    for key, pkg in sorted(seen.items()):
        files = list(pkg.get("wheels", [])) + ([pkg["sdist"]] if "sdist" in pkg else [])
        out.append(LockedDist(name=key, version=pkg["version"],
                              hashes=tuple(f["hash"] for f in files if "hash" in f),
                              has_wheels=bool(pkg.get("wheels"))))
    return out
