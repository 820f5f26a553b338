"""``lab calibrate`` reads results with ``engine: sglang`` (no ground-truth file) from SGLang-format
``/metrics`` scrapes and request records (tests/fixtures: SGLang 0.5.23's metric names, labels and
``meta_info`` fields, as tests/unit/test_metrics.py and tests/unit/test_crosscheck.py use them)."""

from __future__ import annotations

import json
from pathlib import Path

from lab.calibrate.fit import calibrate
from lab.calibrate.observe import read_results
from lab.measure.prometheus import server_timing
from lab.measure.records import summarize_run

FX = Path(__file__).resolve().parents[1] / "fixtures"


def _sglang_result(d: Path) -> Path:
    before, after = (FX / "metrics_eagle3_before.prom").read_text(), (FX / "metrics_eagle3_after.prom").read_text()
    recs = [json.loads(x) for x in (FX / "requests_eagle3_c1.jsonl").read_text().splitlines()]
    for r in recs:
        r.update(point="c1", context_tokens=0, max_new_tokens=37, request_rate=None)
    row = summarize_run(recs, wall_s=2.0, server=server_timing(before, after, speculative=True)).to_dict()
    row.update(point="c1", repeat=0, concurrency=1, context_tokens=0, max_new_tokens=37, request_rate=None)
    d.mkdir(parents=True)
    eff = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
           "speculative_num_draft_tokens": 3, "speculative_attention_mode": "prefill", "attention_backend": "fa3",
           "verify_attention_backend": "fa3", "cuda_graph_bs_decode": [1, 2, 4, 8], "decode_cuda_graph_disabled": False,
           "max_running_requests": 48, "engine_version": "0.5.16"}
    (d / "result.json").write_text(json.dumps({"status": "ok", "mode": d.name, "engine": "sglang",
                                               "engine_version": "0.5.16", "effective_config": eff,
                                               "server_command": "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 python -m sglang.launch_server",
                                               "levels": {}}))
    (d / "runs.json").write_text(json.dumps([row]))
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def test_prefill_passes_are_recorded_in_the_window_deltas():
    st = server_timing((FX / "metrics_eagle3_before.prom").read_text(), (FX / "metrics_eagle3_after.prom").read_text())
    assert st["deltas"]["prefill_none_passes"] == 8.0  # 28 - 20 (sglang:cuda_graph_passes_total{mode="prefill_none"})
    assert st["deltas"]["prefill_cuda_graph_passes"] is None  # no such series in the scrape


def test_sglang_results_calibrate_without_ground_truth(tmp_path):
    d = _sglang_result(tmp_path / "eagle3_prefill")
    obs = read_results([d])
    (w,) = obs.windows
    assert obs.configs["eagle3_prefill"].engine == "sglang"
    assert w.iters == 1000.0 and w.graph_frac == 0.75
    assert w.forward_ms["target_verify"] == 29000.0 and w.prefill_passes == 8.0
    assert w.chunks_per_iteration  # one chunk per verify cycle: 20 chunks after the first, spec_verify_ct 20
    acc = obs.acceptance["eagle3_prefill"]
    assert acc.method == "chunks" and acc.requests == 2 and acc.cycles == 40
    cal = calibrate([d])
    assert cal.engine == "sglang" and cal.engine_versions == ["0.5.16"]
    # one window of one configuration: most constants cannot be determined, and say so
    c = cal.constants()
    assert not c["verify.per_extra_token_ms"]["determined"] and not c["decode.graph_ms_bs1"]["determined"]
