"""bench.trace end to end on the CPU: emulator -> /start_profile .. /stop_profile -> trace ->
analysis in result.json -> MLflow artifact and metrics -> compare: report section and figure.

The trace is checked against what the emulator actually ran (its ground-truth file), never
against its plan, so the verdict does not depend on how busy the machine is.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from lab.pipeline.bench import run_mode
from lab.pipeline.compare import run_compare
from lab.emulator.profile import load_profile
from lab.emulator.truth import load_truth
from reliability_util import small_params

MODES = ["baseline", "eagle3_prefill"]


@pytest.mark.integration
def test_bench_trace_through_report(tmp_path):
    params = small_params(tmp_path, num_prompts=2, concurrency=[1], max_new_tokens=8, trace=True,
                          trace_requests=2, trace_max_new_tokens=10)
    assert params.emulator.profile == "kimi_k25_tp8_pcie"
    kernels = load_profile(params.emulator.profile)[0].kernels
    results = {m: run_mode(params, m, tmp_path / "results" / m, log=lambda s: None) for m in MODES}

    for mode, res in results.items():
        prof = res["trace"]
        assert prof["status"] == "ok", prof["status"]
        assert prof["modelled"] is True and prof["requests_ok"] == 2
        trace = Path(prof["file"])
        assert trace.parent == tmp_path / "results" / mode / "trace"
        assert json.loads(gzip.decompress(trace.read_bytes()))["modelled"] is True
        truth = load_truth(tmp_path / "results" / mode / "ground_truth.jsonl")
        ran = [it for it in truth.iterations if it["tokens"] and all("-trace-" in r for r in it["tokens"])]
        steps = prof["analysis"]["steps"]
        stage, key = ("VERIFY", "verify_s") if mode != "baseline" else ("DECODE", "decode_s")
        traced = [s for s in steps if s["stage"] == stage]
        expect = [it[key] * 1e3 for it in ran if it["kind"] != "prefill"]
        assert len(traced) == len(expect) >= 2 * 3
        assert [s["wall_ms"] for s in traced] == pytest.approx(expect, abs=1e-3)  # what it ran, step by step
        assert all(s["kernels"] == kernels.target_forward.value for s in traced)
        assert all(s["allreduce_count"] == kernels.allreduce_per_target_forward.value for s in traced)  # tp 8
        if mode == "baseline":  # decode replays its graph; prefill-mode verify launches eagerly
            assert all((s["graph_launches"], s["eager_launches"]) == (1, 0) for s in traced)
        else:
            assert all((s["graph_launches"], s["eager_launches"]) == (0, kernels.target_forward.value) for s in traced)
            assert prof["analysis"]["by_stage"]["VERIFY"]["host_gap_share_p50"] > 0.3
        # the measured levels are untouched by the profiling requests
        assert res["levels"]["c1"]["requests"] == 2

    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    run = client.get_run(results["eagle3_prefill"]["mlflow_run_id"])
    assert [a.path for a in client.list_artifacts(run.info.run_id, "trace")] == \
        [f"trace/{Path(results['eagle3_prefill']['trace']['file']).name}"]
    assert run.data.metrics["trace.verify.kernels_p50"] == kernels.target_forward.value

    summary = run_compare(params, MODES, tmp_path / "results", tmp_path / "reports")
    sec = summary["trace"]
    assert sec["modelled"] and not sec["failed"]
    assert sec["sentences"]["eagle3_prefill"].startswith("In eagle3_prefill, verify takes")
    assert "host launch gaps" in sec["sentences"]["eagle3_prefill"] and "modelled" in sec["sentences"]["eagle3_prefill"]
    assert Path(summary["figures"]["verify_time_breakdown"]).is_file()
    html = (tmp_path / "reports" / "report.html").read_text()
    assert "Where the verify time goes" in html and "MODELLED by the emulator" in html
    cmp_run = client.get_run(summary["mlflow_run_id"])
    figs = [a.path for a in client.list_artifacts(cmp_run.info.run_id, "figures")]
    assert "figures/verify_time_breakdown.png" in figs
    assert json.loads((tmp_path / "reports" / "comparison.json").read_text())["trace"]["modelled"] is True
