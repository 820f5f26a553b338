"""Install an offline bundle (:mod:`lab.offline.bundle`) on an air-gapped GPU node, with the
Python standard library alone.

``python3 -m lab.offline.install BUNDLE_DIR [--venv .venv-node]``:

1. makes ``--venv`` with ``--system-site-packages`` if it is missing, so the node's PyTorch,
   Triton and CUDA libraries stay in use (the bundle never carries them);
2. for every part of ``bundle.json`` present in ``BUNDLE_DIR``: checks its SHA-256, then
   unpacks each distribution into the venv's site-packages (parts may arrive one at a time:
   a part not present is skipped and reported, and running the command again with the next
   part adds it);
3. writes console scripts (``dvc``, ``papermill``, ``mlflow`` ... from each distribution's
   ``entry_points.txt``) and the lab's own ``lab``, a ``.pth`` file that puts this checkout
   on ``sys.path``, and the bundle's environment (e.g. ``SGLANG_ENABLE_JIT_DEEPGEMM=0``) into
   ``bin/activate``;
4. records what it installed in ``<site-packages>/lab-bundle.json`` (``lab doctor``'s
   ``bundle`` row reads it).

Then ``source .venv-node/bin/activate && dvc repro``.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

__all__ = ["install_bundle", "InstallError", "INSTALLED", "main", "sha256_file"]

INSTALLED = "lab-bundle.json"
REPO = Path(__file__).resolve().parents[2]
_ENV_BEGIN, _ENV_END = "# >>> lab.offline bundle environment >>>", "# <<< lab.offline bundle environment <<<"


class InstallError(RuntimeError):
    """The bundle cannot be installed; the message names the cause and the fix."""


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _site_packages(venv: Path) -> Path:
    out = subprocess.run([str(_venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


_PARENT_SITES = r"""
import json, site, sys
print(json.dumps(site.getsitepackages() if sys.prefix != sys.base_prefix else []))
"""


def _ensure_venv(venv: Path, python: str, want: str) -> None:
    """Make ``venv`` (``--system-site-packages``). When ``python`` is itself a venv's (the H200
    image's ``/opt/torch/.venv``), the new venv would see only the *base* interpreter's
    packages, not torch: a ``.pth`` line then adds the parent venv's site-packages with
    ``site.addsitedir`` (after the bundle's own, so the bundle's pins win)."""
    if not _venv_python(venv).exists():
        subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
        parents = json.loads(subprocess.run([python, "-c", _PARENT_SITES], capture_output=True, text=True,
                                            check=True).stdout)
        if parents:
            lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
            (_site_packages(venv) / "lab-node-site.pth").write_text(lines)
    ver = subprocess.run([str(_venv_python(venv)), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if ver != want:
        raise InstallError(f"{venv} runs Python {ver}; the bundle was built for {want}. Fix: rebuild it with "
                           f"`lab bundle --python {ver}`, or pass --python with a {want} interpreter")


def _script(venv: Path, module: str, func: str) -> str:
    obj = func.split(".")
    call = f"{obj[0]}" + "".join(f".{o}" for o in obj[1:])
    return (f"#!{_venv_python(venv)}\nimport sys\nfrom {module} import {obj[0]}\n"
            f"if __name__ == '__main__':\n    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit({call}())\n")


def _write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _console_scripts(venv: Path, site: Path, dist_infos: list[Path]) -> list[str]:
    names = []
    for di in dist_infos:
        ep = di / "entry_points.txt"
        if not ep.exists():
            continue
        cp = configparser.ConfigParser(interpolation=None)
        cp.optionxform = str  # keep case
        cp.read_string(ep.read_text())
        if not cp.has_section("console_scripts"):
            continue
        for name, target in cp.items("console_scripts"):
            module, _, func = target.partition(":")
            _write_script(venv / "bin" / name, _script(venv, module.strip(), func.split("[")[0].strip()))
            names.append(name)
    return names


def _extract_member(data: bytes, site: Path, venv: Path) -> list[Path]:
    """Unpack one distribution archive; ``bin/`` entries go to the venv's ``bin`` with their
    ``#!`` line pointed at its Python. Returns the ``.dist-info`` folders it holds."""
    infos: set[Path] = set()
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data)), mode="r:") as tf:
        for m in tf.getmembers():
            if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
                continue
            body = tf.extractfile(m).read()
            if m.name.startswith("bin/"):
                dest = venv / m.name
                if body.startswith(b"#!") and b"python" in body.split(b"\n", 1)[0]:
                    body = f"#!{_venv_python(venv)}".encode() + b"\n" + body.split(b"\n", 1)[1]
            else:
                dest = site / m.name
                top = Path(m.name).parts[0]
                if top.endswith(".dist-info"):
                    infos.add(site / top)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(body)
            dest.chmod(m.mode & 0o777 or 0o644)
    return sorted(infos)


def _activate_env(venv: Path, env: dict[str, str]) -> None:
    act = venv / "bin" / "activate"
    text = act.read_text()
    if _ENV_BEGIN in text:
        text = text.split(_ENV_BEGIN)[0] + text.split(_ENV_END, 1)[1].lstrip("\n")
    lines = [_ENV_BEGIN] + [f"export {k}={v!s}" for k, v in sorted(env.items())] + [
        # SGLang's kernel JIT (tvm-ffi, Triton) needs nvcc: find it as the recipe did
        'command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH; }',
        'if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then export CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); fi',
        _ENV_END]
    act.write_text(text.rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def install_bundle(bundle: str | os.PathLike[str], *, venv: str | os.PathLike[str] = ".venv-node",
                   python: str = sys.executable, log=print) -> dict:
    """Install every part of ``bundle`` that is present (see the module docstring).

    :returns: the installed record (``lab-bundle.json``): parts, distributions, environment.
    :raises InstallError: no ``bundle.json``, a part whose SHA-256 differs (a broken copy), or
        a venv of another Python version.
    """
    bdir, venv = Path(bundle), Path(venv).absolute()
    try:
        manifest = json.loads((bdir / "bundle.json").read_text())
    except (OSError, ValueError) as exc:
        raise InstallError(f"no readable bundle.json in {bdir}: {exc}. Fix: copy the whole bundle folder "
                           "(bundle.json and its part-*.tar files)") from exc
    _ensure_venv(venv, python, manifest["python"])
    site = _site_packages(venv)
    rec_path = site / INSTALLED
    record = json.loads(rec_path.read_text()) if rec_path.exists() else {"parts": [], "dists": {}}
    missing = []
    for part in manifest["parts"]:
        path = bdir / part["file"]
        if part["file"] in record["parts"]:
            continue
        if not path.exists():
            missing.append(part["file"])
            continue
        if sha256_file(path) != part["sha256"]:
            raise InstallError(f"{path}: SHA-256 differs from bundle.json (a broken or partial copy). Fix: copy it again")
        infos: list[Path] = []
        with tarfile.open(path, "r:") as outer:
            for m in outer.getmembers():
                infos += _extract_member(outer.extractfile(m).read(), site, venv)
                d = manifest["dists"].get(m.name, {})
                record["dists"][d.get("name", m.name)] = d.get("version")
        scripts = _console_scripts(venv, site, infos)
        record["parts"].append(part["file"])
        log(f"[install] {part['file']}: {len(part['members'])} distributions, {len(scripts)} scripts")
    (site / "lab-repo.pth").write_text(str(REPO) + "\n")
    for name, target in tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("scripts", {}).items():
        module, _, func = target.partition(":")
        _write_script(venv / "bin" / name, _script(venv, module, func))
    _activate_env(venv, manifest["sglang"]["env"])
    record.update(sglang=manifest["sglang"], python=manifest["python"], lock=manifest["lock"],
                  missing_parts=missing, repo=str(REPO))
    rec_path.write_text(json.dumps(record, indent=1) + "\n")
    if missing:
        log(f"[install] not here yet: {', '.join(missing)}; copy them into {bdir} and run this again")
    log(f"[install] {len(record['parts'])}/{len(manifest['parts'])} parts installed in {venv}. "
        f"Next: source {venv}/bin/activate && lab doctor")
    return record


def main(argv: list[str] | None = None) -> int:
    """``python3 -m lab.offline.install``: exit 0 when installed, 2 with the error's fix."""
    ap = argparse.ArgumentParser(prog="python3 -m lab.offline.install", description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", help="the folder holding bundle.json and part-*.tar")
    ap.add_argument("--venv", default=".venv-node", help="the environment to install into (made if missing)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that makes the venv (the node's, with PyTorch)")
    a = ap.parse_args(argv)
    try:
        install_bundle(a.bundle, venv=a.venv, python=a.python)
    except InstallError as exc:
        print(f"[install] {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
