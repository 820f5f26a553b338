"""The offline bundle for air-gapped GPU nodes (lab/offline): uv.lock's closure, the plan of what
travels, the packing into parts, the bundle's checks (issue 24, item 3). The standard-library
install, which runs a Python process, is tests/component/test_offline_live.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.offline import bundle as B
from lab.offline.lockfile import LockError, lock_closure, target_env

ROOT = Path(__file__).resolve().parents[2]
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
