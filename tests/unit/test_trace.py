"""lab.profiling.trace on a small synthetic Chrome trace built here, every number derived by hand."""

from __future__ import annotations

import gzip
import json

import pytest

from lab.profiling.trace import (
    TraceError,
    analyze_trace,
    load_trace,
    short_kernel_name,
    summarize_rows,
)

CPU, GPU = 100, 0  # pids: host process, GPU 0


def X(name, cat, ts, dur, pid=CPU, tid=1, corr=None, **args):
    a = dict(args)
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": a}


def synthetic_trace():
    """VERIFY (eager) at 0 us, DRAFT at 150, DRAFT-in-graph at 200, VERIFY at 300.

    VERIFY #1 (span 0..100): launches at 10 (k1: 20..30), 40 (k2 NCCL all-reduce: 50..70),
    45 (k3 flash attention: 70..80), 50 (k4: 90..95).
      wall = max(100, 95) - 0 = 100 us; busy = 10 + 20 + 10 + 5 = 45 us; idle = 55 us.
      host gaps: 0->20 (k1 launched at 10 >= 0), 30->50 (k2 launched at 40 >= 30) = 40 us;
      80->90 is not (k4 launched at 50 < 80: the GPU had it queued).
    DRAFT (span 150..160): one launch at 152 (k5: 170..175): wall 25, busy 5, host gap 20.
    DRAFT (span 200..210): cudaGraphLaunch at 202 (k6 220..230, k7 230..240, k8 245..250):
      wall 50, busy 25, host gap 20 (200->220; 240->245 is not: launched at 202).
    VERIFY #2 (span 300..310): one launch at 301 (k9: 305..308).
    """
    ev = [
        X("step[VERIFY bs=1]", "user_annotation", 0, 100),
        X("nested", "user_annotation", 5, 3),
        X("cudaLaunchKernel", "cuda_runtime", 10, 5, corr=1),
        X("cudaLaunchKernel", "cuda_runtime", 40, 3, corr=2),
        X("cudaLaunchKernelExC", "cuda_runtime", 45, 3, corr=3),
        X("cuLaunchKernel", "cuda_driver", 50, 3, corr=4),
        X("void gemm<128>(Params)", "kernel", 20, 10, pid=GPU, tid=7, corr=1),
        X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", 50, 20,
          pid=GPU, tid=7, corr=2),
        X("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128> >(Flash_fwd_params)", "kernel", 70, 10,
          pid=GPU, tid=7, corr=3),
        X("void rmsnorm<float>(float*)", "kernel", 90, 5, pid=GPU, tid=7, corr=4),
        X("step[DRAFT bs=1]", "user_annotation", 150, 10),
        X("cudaLaunchKernel", "cuda_runtime", 152, 2, corr=5),
        X("void draft_gemm(P)", "kernel", 170, 5, pid=GPU, tid=7, corr=5),
        X("step[DRAFT bs=1]", "user_annotation", 200, 10),
        X("cudaGraphLaunch", "cuda_runtime", 202, 5, corr=10),
        X("void g1()", "kernel", 220, 10, pid=GPU, tid=7, corr=10),
        X("void g2()", "kernel", 230, 10, pid=GPU, tid=7, corr=10),
        X("void g3()", "kernel", 245, 5, pid=GPU, tid=7, corr=10),
        X("step[VERIFY bs=1]", "user_annotation", 300, 10),
        X("cudaLaunchKernel", "cuda_runtime", 301, 2, corr=11),
        X("void gemm<128>(Params)", "kernel", 305, 3, pid=GPU, tid=7, corr=11),
        {"ph": "s", "name": "flow", "cat": "ac2g", "ts": 10, "id": 1, "pid": CPU, "tid": 1},
        {"ph": "M", "name": "process_name", "pid": GPU, "args": {"name": "GPU 0"}},
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_step_rows_by_hand():
    a = analyze_trace(synthetic_trace(), mode="eagle3_prefill")
    assert a["mode"] == "eagle3_prefill"
    steps = a["steps"]
    assert [r["stage"] for r in steps] == ["VERIFY", "DRAFT", "DRAFT", "VERIFY"]  # "nested" is no step span
    v = steps[0]
    assert v["wall_ms"] == pytest.approx(0.100)
    assert v["host_ms"] == pytest.approx(0.100)
    assert v["gpu_busy_ms"] == pytest.approx(0.045)
    assert v["idle_ms"] == pytest.approx(0.055)
    assert v["idle_share"] == pytest.approx(0.55)
    assert v["host_gap_ms"] == pytest.approx(0.040)
    assert v["host_gap_share"] == pytest.approx(0.40)
    assert (v["kernels"], v["eager_launches"], v["graph_launches"]) == (4, 4, 0)
    assert v["allreduce_count"] == 1 and v["allreduce_ms"] == pytest.approx(0.020) and v["nccl_kernels"] == 1
    assert v["attention_kernels"] == {"flash::flash_fwd_kernel": 1}
    d = steps[1]
    assert (d["wall_ms"], d["gpu_busy_ms"], d["host_gap_ms"]) == pytest.approx((0.025, 0.005, 0.020))
    g = steps[2]
    assert g["wall_ms"] == pytest.approx(0.050) and g["gpu_busy_ms"] == pytest.approx(0.025)
    assert g["host_gap_ms"] == pytest.approx(0.020)
    assert (g["kernels"], g["eager_launches"], g["graph_launches"]) == (3, 0, 1)


def test_cycles_anchor_on_verify():
    a = analyze_trace(synthetic_trace())
    (c,) = a["cycles"]  # two VERIFY spans -> one cycle
    assert c["anchor"] == "VERIFY"
    assert c["wall_ms"] == pytest.approx(0.300)
    # every GPU op starting in [0, 300): 45 + 5 + 25 us
    assert c["gpu_busy_ms"] == pytest.approx(0.075)
    assert c["idle_share"] == pytest.approx(1 - 75 / 300)
    assert c["stages"] == {"DRAFT": 2, "VERIFY": 1}
    assert (c["kernels"], c["eager_launches"], c["graph_launches"], c["allreduce_count"]) == (8, 5, 1, 1)
    assert c["forward_ms"] == pytest.approx(0.100 + 0.025 + 0.050)
    # host gaps: VERIFY's 40 us, 95->170 (k5 launched at 152), 175->220 (graph launched at 202)
    assert c["host_gap_ms"] == pytest.approx(0.160)
    a2 = analyze_trace(synthetic_trace(), anchor="DECODE")
    assert a2["cycles"] == []  # no DECODE span: no cycle
    t = synthetic_trace()
    t["traceEvents"].append(X("step[EXTEND bs=1 toks=5]", "user_annotation", 250, 5))
    assert analyze_trace(t)["cycles"] == []  # a prefill inside: a request boundary, not a steady cycle


def test_summary_medians_and_attention_union():
    a = analyze_trace(synthetic_trace())
    s = a["by_stage"]["VERIFY"]
    assert s["n"] == 2
    assert s["wall_ms_p50"] == pytest.approx((0.100 + 0.010) / 2)  # VERIFY #2: span 300..310 outlasts k9
    assert s["kernels_p50"] == pytest.approx(2.5)
    assert s["attention_kernels"] == {"flash::flash_fwd_kernel": 1}
    assert summarize_rows([])["n"] == 0 and summarize_rows([])["wall_ms_p50"] is None


def test_gzip_and_plain_files(tmp_path):
    t = synthetic_trace()
    (tmp_path / "t.json").write_text(json.dumps(t))
    (tmp_path / "t.trace.json.gz").write_bytes(gzip.compress(json.dumps(t).encode()))
    a = analyze_trace(tmp_path / "t.json")
    b = analyze_trace(tmp_path / "t.trace.json.gz")
    assert a["steps"] == b["steps"]
    assert load_trace(t["traceEvents"])["traceEvents"] == t["traceEvents"]  # bare event list


def test_bad_traces_fail_clearly(tmp_path):
    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(TraceError, match="not a .*JSON"):
        load_trace(tmp_path / "x.json")
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.json")
    with pytest.raises(TraceError, match="traceEvents"):
        load_trace({"foo": 1})
    with pytest.raises(TraceError, match="no step spans"):
        analyze_trace({"traceEvents": [X("cudaLaunchKernel", "cuda_runtime", 0, 1, corr=1)]})


def test_short_kernel_name():
    assert short_kernel_name("void flash::flash_fwd_kernel<T<1>, 2>(Params)") == "flash::flash_fwd_kernel"
    assert short_kernel_name("nvjet_sm90_tst_64x8") == "nvjet_sm90_tst_64x8"
