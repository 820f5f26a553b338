"""The offline bundle for air-gapped GPU nodes (lab/offline): uv.lock's closure, the plan of what
travels, the packing into parts, and the standard-library install (issue 24, item 3)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from lab.offline import bundle as B
from lab.offline.install import InstallError, install_bundle
from lab.offline.lockfile import LockError, lock_closure, target_env

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "uv.lock"


def test_closure_of_the_real_lock_for_the_node():
    full = {d.name: d for d in lock_closure(LOCK, env=target_env("3.12"))}
    assert "pywin32" not in full and "appnope" not in full  # markers for Windows / macOS are evaluated
    assert "mlflow" in full and "dvc" in full and "papermill" in full
    assert full["numpy"].version == "2.3.5"  # uv.lock: numpy 2.3.5 for python < 3.13, 2.4.6 above
    assert all(h.startswith("sha256:") for d in full.values() for h in d.hashes)
    no_ui = {d.name for d in lock_closure(LOCK, env=target_env("3.12"), omit=("jupyterlab",))}
    assert "jupyterlab" not in no_ui and "jupyter-server" not in no_ui  # only jupyterlab needed it
    assert {"ipykernel", "jupyter-client", "tornado"} <= no_ui  # papermill's kernel still needs these
    assert [d.name for d in full.values() if not d.has_wheels] == ["antlr4-python3-runtime"]  # sdist only


def test_closure_errors_name_the_fix(tmp_path):
    with pytest.raises(LockError, match="Fix: run from the project checkout"):
        lock_closure(tmp_path / "uv.lock")


def test_plan_pins_win_and_node_packages_are_left_out(tmp_path):
    spec = B.load_spec("0.5.16")
    node = tmp_path / "node.txt"
    node.write_text("numpy==2.3.5\npandas==0.1\nscipy\n# comment\n")
    plan = B.plan_bundle(LOCK, spec, node_packages=B.read_node_packages(node))
    sg = {d.name: d.version for d in plan.sglang}
    lab = {d.name for d in plan.lab}
    assert sg["sglang"] == "0.5.16" and sg["tokenizers"] == "0.22.2" and sg["transformers"] == "5.12.1"
    assert any("tokenizers: uv.lock has 0.23.2" in n and "the node gets 0.22.2" in n for n in plan.notes)
    assert "tokenizers" not in lab  # one version of each travels
    assert sg["pydantic"] == {d.name: d.version for d in lock_closure(LOCK, env=target_env("3.12"))}["pydantic"]
    gone = {r["name"]: r["reason"] for r in plan.left_out}
    assert gone["numpy"].startswith("on the node already (2.3.5)")  # same version: left out
    assert "pandas" in lab  # the node's pandas 0.1 is not the locked one: it travels
    assert gone["scipy"] == "on the node already (version not given)"
    assert gone["jupyterlab"].startswith("omitted")


def test_spec_errors_name_the_fix(tmp_path):
    with pytest.raises(B.BundleError, match=r"Fix: use one of \['0.5.16'\]"):
        B.load_spec("0.4.0")
    spec = B.load_spec("0.5.16")
    bad = B.SglangSpec(**{**spec.__dict__, "from_lab_lock": spec.from_lab_lock + ("no-such-package",)})
    with pytest.raises(B.BundleError, match=r"no-such-package.*Fix: pin it in the spec"):
        B.plan_bundle(LOCK, bad)


def test_pack_parts_groups_first_and_fits():
    members = [("sglang", "a", 40), ("sglang", "b", 30), ("sglang", "c", 25), ("lab", "d", 50), ("lab", "e", 10)]
    parts = B.pack_parts(members, 60)
    assert [[m[1] for m in p] for p in parts] == [["a"], ["b", "c"], ["d", "e"]]
    assert all(sum(m[2] for m in p) <= 60 for p in parts)
    with pytest.raises(B.BundleError, match="Fix: raise --part-mib"):
        B.pack_parts([("lab", "big", 61)], 60)


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


def test_bundle_checks_name_missing_flags(tmp_path):
    from lab.engine.preflight import bundle_checks

    (tmp_path / "lab-bundle.json").write_text(json.dumps({
        "parts": ["p1"], "missing_parts": [],
        "sglang": {"version": "0.5.16", "requires_flags": {"--grammar-backend": ["none"],
                                                           "--attention-backend": ["triton", "flashinfer"]}}}))
    rows = bundle_checks({"good": ["--attention-backend", "triton", "--grammar-backend", "none"],
                          "bad": ["--attention-backend", "fa3"]}, site=tmp_path)
    assert [r.name for r in rows] == ["bundle", "bundle[bad]"] and rows[0].status == "ok"
    assert rows[1].status == "FAIL" and "--grammar-backend none (not set)" in rows[1].detail
    assert "(have fa3)" in rows[1].detail and "server.extra_args" in rows[1].fix
    assert bundle_checks({"m": []}, site=tmp_path / "no-bundle-here") == []
