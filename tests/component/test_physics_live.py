"""lab.physics in processes: the package imports without torch, pydantic or lab.config's schema (in a
fresh interpreter), the CLI module without a GPU, and, with torch, the TP all-reduce and a CPU
smoke run over gloo (skipped cleanly without torch, which is not a lab dependency).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lab.physics as phys
from lab.physics import stack_bench as bench
from lab.physics.shapes import PhysicsConfig
from shared import PHYSICS_TINY, numbers

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- CLI


def test_package_imports_without_torch_pydantic_or_the_params_schema():
    # of lab.config only its standard-library physics_config (and the package's lazy __init__)
    code = ("import sys, lab.physics, lab.physics.stack_cli, lab.physics.stack_bench; "
            "bad = [m for m in ('torch', 'pydantic', 'matplotlib') if m in sys.modules]; "
            "bad += [m for m in sys.modules if m.startswith('lab.config.') and m != 'lab.config.physics_config']; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_cli_module_without_gpu(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lab.physics", "--out", str(tmp_path), "--params", "params.yaml"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())
    if m["status"] != "ok":  # no torch or no CUDA here: said plainly
        assert m["status"] in (phys.STATUS_NO_TORCH, phys.STATUS_NO_CUDA)
        assert f"status: {m['status']}" in r.stdout
        assert numbers(m) == []


# ---------------------------------------------------------------- with torch (CPU), skipped without it


def test_tp_allreduce_math_gloo():
    pytest.importorskip("torch")
    cfg = PhysicsConfig.from_mapping(PHYSICS_TINY, dtype="float32", tp=2)
    for T in (1, 3):
        assert bench.tp_reference_check(cfg, T=T) < 1e-5


def test_cpu_smoke_run_with_gloo_tp(tmp_path):
    pytest.importorskip("torch")
    m = phys.run_physics(dict(PHYSICS_TINY, dtype="float32", tp=2), tmp_path, allow_cpu=True, figures=False,
                         log=lambda s: None)
    assert m["status"] == "ok" and m["device"]["type"] == "cpu" and m["all_reduce_check"] == 2.0
    assert [r["T"] for r in m["rows"]] == [1, 2, 3]
    for r in m["rows"]:
        assert r["eager_ms_p50"] > 0 and r["graph_ms_p50"] is None and r["output_finite"]
        assert len(r["samples_ms"]["eager"]) == PHYSICS_TINY["timed_iters"]
