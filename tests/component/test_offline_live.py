"""The offline bundle's standard-library install (lab/offline/install.py) in a fresh Python
process, and its refusal of a broken copy (the rest of the bundle: tests/unit/test_offline.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from lab.offline import bundle as B
from lab.offline.install import InstallError, install_bundle

def _wheel(path: Path) -> Path:
    """A minimal wheel: a module, a console script entry point and a .data script."""
    whl = path / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("demo_pkg/__init__.py", "def main():\n    print('demo-ok')\n    return 0\n")
        zf.writestr("demo_pkg/big_ops.so", b"\0" * 100)
        zf.writestr("demo_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        zf.writestr("demo_pkg-1.0.dist-info/entry_points.txt", "[console_scripts]\ndemo = demo_pkg:main\n")
        zf.writestr("demo_pkg-1.0.data/scripts/demo-sh", "#!/usr/bin/python3\nprint('script-ok')\n")
    return whl


def _bundle(tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    (out / "members").mkdir(parents=True)
    data, trimmed, _ = B._unpack(_wheel(tmp_path), ["demo_pkg/big_ops.so"])
    assert trimmed == ["demo_pkg/big_ops.so"]
    (out / "members" / "demo-pkg-1.0.tar.xz").write_bytes(data)
    st, _ = B._standins_archive()
    (out / "members" / "lab-standins.tar.xz").write_bytes(st)
    parts = []
    for i, name in enumerate(["demo-pkg-1.0.tar.xz", "lab-standins.tar.xz"]):
        part = out / f"part-0{i + 1}.tar"
        with tarfile.open(part, "w") as tf:
            tf.add(out / "members" / name, arcname=name)
        parts.append({"file": part.name, "group": "x", "bytes": part.stat().st_size,
                      "sha256": hashlib.sha256(part.read_bytes()).hexdigest(), "members": [name]})
    (out / "bundle.json").write_text(json.dumps({
        "python": "%d.%d" % sys.version_info[:2], "parts": parts, "lock": {}, "left_out": [],
        "dists": {"demo-pkg-1.0.tar.xz": {"name": "demo-pkg", "version": "1.0"}},
        "sglang": {"version": "0.5.16", "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
                   "requires_flags": {"--grammar-backend": ["none"]}}}))
    return out


def test_install_with_the_standard_library(tmp_path):
    """Part by part, as a node behind a transfer limit receives it; then the venv runs what it holds."""
    bdir = _bundle(tmp_path)
    held = bdir / "part-02.tar"
    aside = tmp_path / "part-02.tar"
    held.rename(aside)
    venv = tmp_path / "venv"
    rec = install_bundle(bdir, venv=venv, python=sys.executable, log=lambda *_: None)
    assert rec["parts"] == ["part-01.tar"] and rec["missing_parts"] == ["part-02.tar"]
    aside.rename(held)
    rec = install_bundle(bdir, venv=venv, python=sys.executable, log=lambda *_: None)
    assert rec["parts"] == ["part-01.tar", "part-02.tar"] and rec["missing_parts"] == []
    py = venv / "bin" / "python"
    assert subprocess.run([str(venv / "bin" / "demo")], capture_output=True, text=True).stdout.strip() == "demo-ok"
    assert subprocess.run([str(venv / "bin" / "demo-sh")], capture_output=True, text=True).stdout.strip() == "script-ok"
    probe = ("import demo_pkg, xgrammar, deep_gemm, os, lab.offline; "
             "print(os.path.exists(os.path.join(os.path.dirname(demo_pkg.__file__), 'big_ops.so')))")
    assert subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path).stdout.strip() == "False"
    assert "export SGLANG_ENABLE_JIT_DEEPGEMM=0" in (venv / "bin" / "activate").read_text()
    assert (venv / "bin" / "lab").exists()  # the project's own console script


def test_install_refuses_a_broken_copy(tmp_path):
    bdir = _bundle(tmp_path)
    with open(bdir / "part-01.tar", "ab") as f:
        f.write(b"x")
    with pytest.raises(InstallError, match="SHA-256 differs.*Fix: copy it again"):
        install_bundle(bdir, venv=tmp_path / "venv", python=sys.executable, log=lambda *_: None)
    with pytest.raises(InstallError, match="no readable bundle.json.*Fix"):
        install_bundle(tmp_path / "nowhere", venv=tmp_path / "venv2", python=sys.executable, log=lambda *_: None)
