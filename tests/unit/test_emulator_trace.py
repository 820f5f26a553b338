"""The emulator's modelled profiler trace (lab/emulator/modelled_trace.py), built from hand-made iterations
and the kernel counts of its cost profile. The capture against a live emulator and the check
against SGLang's source are tests/component/test_emulator_trace_live.py.
"""

from __future__ import annotations

import gzip
import json
import time
from types import SimpleNamespace

import pytest

from lab.emulator.profile import load_profile
from lab.emulator.modelled_trace import EmulatorProfiler, ProfileRequestError, build_trace, trace_file_name
from lab.profiling.trace import analyze_trace
# sglang_nodeps: the shared fixture of tests/conftest.py (SGLang 0.5.23's source, no deps)

KIMI, _ = load_profile("kimi_k25_tp8_pcie")
K = KIMI.kernels


def _args(tp=8, steps=2, mode="prefill"):
    return SimpleNamespace(tp_size=tp, speculative_num_steps=steps, speculative_attention_mode=mode)


def _spec_iteration(start, graph, verify_s=0.029, draft_s=0.0006, extend_s=0.0003):
    phases = [("eagle_draft", draft_s), ("target_verify", verify_s), ("eagle_draft_extend", extend_s)]
    end = start + 0.00015 + sum(s for _, s in phases)
    return ({"kind": "spec", "start": start, "end": end, "batch": 1, "graph": graph}, phases)


def test_kernel_counts_in_profile_are_sourced_and_modelled():
    assert K is not None
    for name, v in K:
        assert v.value >= 1 and v.source, name
    assert "MODELLED" in K.target_forward.source and "physics-h200-profile" in K.target_forward.source
    assert K.allreduce_per_target_forward.value == 61  # seeds: 61 NCCL all-reduce launches per verify


def test_eager_verify_trace_model():
    iters = [_spec_iteration(10.0 + 0.05 * i, graph=False) for i in range(4)]
    a = analyze_trace(build_trace(iters, KIMI, _args()), mode="eagle3_prefill")
    v = a["by_stage"]["VERIFY"]
    assert v["n"] == 4
    assert v["wall_ms_p50"] == pytest.approx(29.0, abs=1e-6)
    assert v["kernels_p50"] == K.target_forward.value and v["eager_launches_p50"] == K.target_forward.value
    assert v["graph_launches_p50"] == 0
    assert v["allreduce_count_p50"] == K.allreduce_per_target_forward.value  # tp 8
    busy = KIMI.verify.graph_ms_ref.value / KIMI.verify.eager_ms_ref.value
    assert v["gpu_busy_ms_p50"] == pytest.approx(29.0 * busy, rel=1e-6)
    # every idle gap of the eager model is the GPU waiting for the next launch
    assert v["host_gap_ms_p50"] == pytest.approx(29.0 * (1 - busy), rel=1e-6)
    assert v["attention_kernels"] == {"modelled::attention[prefill backend]": 4 * K.attention_per_target_forward.value}
    d = a["by_stage"]["DRAFT"]
    assert d["n"] == 8  # draft + draft extend per cycle
    assert sorted(r["kernels"] for r in a["steps"] if r["stage"] == "DRAFT")[:2] == [K.draft_forward.value] * 2
    assert len(a["cycles"]) == 3 and a["cycles"][0]["wall_ms"] == pytest.approx(50.0)


def test_graph_verify_and_tp1_have_no_allreduce_and_one_replay():
    iters = [_spec_iteration(1.0 + 0.03 * i, graph=True, verify_s=0.01831) for i in range(3)]
    a = analyze_trace(build_trace(iters, KIMI, _args(tp=1, mode="decode")))
    v = a["by_stage"]["VERIFY"]
    assert (v["graph_launches_p50"], v["eager_launches_p50"], v["allreduce_count_p50"]) == (1, 0, 0)
    assert v["kernels_p50"] == K.target_forward.value
    assert v["idle_share_p50"] < 0.01
    assert "modelled::attention[decode backend]" in v["attention_kernels"]


def test_trace_says_modelled_and_cpu_only_activity():
    t = build_trace([_spec_iteration(0.0, graph=False)], KIMI, _args(), activities=["CPU"])
    assert t["modelled"] is True and "modelled" in t["traceName"]
    assert t["emulator"]["kernel_counts"]["target_forward"]["value"] == K.target_forward.value
    assert not [e for e in t["traceEvents"] if e.get("cat") == "kernel"]


def test_profiler_state_machine(tmp_path):
    p = EmulatorProfiler(KIMI, _args())
    with pytest.raises(ProfileRequestError, match="not in progress") as e:
        p.stop()
    assert e.value.status == 500
    with pytest.raises(ProfileRequestError, match="unknown ProfileReq field") as e:
        p.start({"outputdir": "x"})
    assert e.value.status == 400
    with pytest.raises(ProfileRequestError, match="start_step"):
        p.start({"start_step": 3})
    p.start({"output_dir": str(tmp_path), "profile_id": "abc", "profile_prefix": "lab"})
    with pytest.raises(ProfileRequestError, match="already in progress"):
        p.start({})
    it, phases = _spec_iteration(5.0, graph=False)
    p.on_iteration(it, dict(phases))
    path = p.stop()
    assert path == tmp_path / trace_file_name("abc", "lab") == tmp_path / "lab-abc-TP-0.trace.json.gz"
    assert json.loads(gzip.decompress(path.read_bytes()))["emulator"]["iterations"] == 1
    # num_steps: stops by itself after that many iterations and writes the file
    p.start({"output_dir": str(tmp_path), "profile_id": "auto", "num_steps": 2})
    for i in range(3):
        it, phases = _spec_iteration(6.0 + i, graph=True)
        p.on_iteration(it, dict(phases))
    deadline = time.monotonic() + 10
    while not (tmp_path / "auto-TP-0.trace.json.gz").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    t = json.loads(gzip.decompress((tmp_path / "auto-TP-0.trace.json.gz").read_bytes()))
    assert t["emulator"]["iterations"] == 2 and not p.active
