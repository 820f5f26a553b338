"""lab.physics.kernel_traces: the stack's torch-profiler capture and its analysis.

The capture tests need torch (skipped cleanly without it, as in tests/unit/test_physics.py); on
CUDA they also check the graph cases. The committed H200 result is re-derived from its
committed traces. Logging to MLflow is tests/component/test_physics_profile_live.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lab.physics.kernel_traces import CASES, DIFFERENCES_FROM_KIMI, capture_profiles, case_rows, markdown_report
from lab.physics.shapes import PhysicsConfig
from lab.profiling.trace import analyze_trace

ROOT = Path(__file__).resolve().parents[2]
DOC_JSON = ROOT / "docs" / "benchmarks" / "physics-h200-profile.json"
DOC_TRACES = ROOT / "docs" / "benchmarks" / "physics-h200-profile"

TINY = dict(hidden_size=64, num_layers=2, heads_per_gpu=2, head_dim=16, mlp_intermediate_per_gpu=64, kv_context=32,
            tokens=[1, 3], warmup_iters=1, timed_iters=3, dtype="float32")


def test_no_torch_is_not_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    res = capture_profiles(PhysicsConfig.from_mapping(TINY), tmp_path)
    assert res["status"] == "not run: torch not installed" and res["cases"] == {}
    assert json.loads((tmp_path / "profile.json").read_text())["status"] == res["status"]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="tp must be 1"):
        capture_profiles(PhysicsConfig.from_mapping(TINY, tp=2), tmp_path)
    with pytest.raises(ValueError, match="iters"):
        capture_profiles(PhysicsConfig.from_mapping(TINY), tmp_path, iters=0)
    with pytest.raises(ValueError, match="unknown case"):
        capture_profiles(PhysicsConfig.from_mapping(TINY), tmp_path, cases=["verify_fast"])


def test_capture_and_analysis(tmp_path):
    torch = pytest.importorskip("torch")
    cuda = torch.cuda.is_available()
    iters = 3
    res = capture_profiles(PhysicsConfig.from_mapping(TINY), tmp_path, iters=iters, allow_cpu=True)
    assert res["status"] == "ok"
    expected = [c[0] for c in CASES if cuda or not c[2]]
    assert list(res["cases"]) == expected
    for name, c in res["cases"].items():
        trace = tmp_path / c["trace"]
        assert trace.exists() and trace.read_bytes()[:2] == b"\x1f\x8b"  # gzipped
        again = analyze_trace(trace)  # the file on disk gives the same numbers
        assert again["steps"] == json.loads(json.dumps(c["steps"]))
        assert c["summary"]["n"] == iters and len(c["unprofiled_samples_ms"]) == TINY["timed_iters"]
        assert all(s["stage"] == c["stage"] for s in c["steps"])
        if cuda:
            s = c["summary"]
            assert s["kernels_p50"] > 0 and s["gpu_busy_ms_p50"] > 0
            if c["graph"]:
                assert (s["graph_launches_p50"], s["eager_launches_p50"]) == (1, 0)
            else:
                assert s["graph_launches_p50"] == 0 and s["eager_launches_p50"] >= s["kernels_p50"]
    md = (tmp_path / "profile.md").read_text()
    assert "verify_eager_T3" in md


@pytest.mark.skipif(not DOC_JSON.exists(), reason="no committed H200 profile")
def test_committed_h200_profile_matches_its_traces():
    doc = json.loads(DOC_JSON.read_text())
    assert doc["status"] == "ok" and doc["device"]["name"].startswith("NVIDIA")
    assert doc["differences_from_kimi"] == DIFFERENCES_FROM_KIMI
    for name in ("decode_graph_T1", "verify_eager_T3", "verify_graph_T3"):
        c = doc["cases"][name]
        a = analyze_trace(DOC_TRACES / c["trace"], mode=name)
        s = a["by_stage"][c["stage"]]
        for k in ("wall_ms_p50", "gpu_busy_ms_p50", "host_gap_share_p50", "kernels_p50", "eager_launches_p50",
                  "graph_launches_p50"):
            assert s[k] == pytest.approx(c["summary"][k]), (name, k)
    rows = {r["mode"]: r for r in case_rows(doc)}
    # the claim of the doc: eager verify's wall time is mostly host launch gaps, graph replays' is not
    assert rows["verify_eager_T3"]["host_gap_share_p50"] > 0.5 > rows["verify_graph_T3"]["host_gap_share_p50"]
    assert "eager verify (T=3)" in markdown_report(doc)


def test_run_physics_adds_profile_summary(tmp_path):
    pytest.importorskip("torch")
    from lab.physics import run_physics

    m = run_physics(dict(TINY, timed_iters=5), tmp_path, allow_cpu=True, figures=False, profile_iters=2,
                    log=lambda s: None)
    assert m["status"] == "ok" and m["profile"]["status"] == "ok"
    case = m["profile"]["cases"]["verify_eager_T3"]
    assert (tmp_path / "profile" / case["trace"]).exists() and case["T"] == 3 and case["graph"] is False
    off = run_physics(dict(TINY, timed_iters=5), tmp_path / "off", allow_cpu=True, figures=False, profile_iters=0,
                      log=lambda s: None)
    assert "profile" not in off and not (tmp_path / "off" / "profile").exists()
