"""lab.engine.startup: phases parsed from SGLang-format startup logs (real strings of SGLang
0.5.23). The emulator, which logs the same lines, is tests/component/test_startup_live.py.
"""

from __future__ import annotations

import pytest

from lab.engine.startup import StartupTracker, parse_startup_line

# As SGLang 0.5.23 writes them (model_runner.py, weight_utils.py BAR_FORMAT via tqdm on
# stderr with \r updates, cuda_graph_setup.py, http_server.py).
SGLANG_LOG = [
    "[2026-01-05 10:00:00 TP0] Load weight begin. avail mem=139.31 GB\n",
    "\rLoading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]",
    "\rLoading safetensors checkpoint shards:  50% Completed | 32/64 [00:30<00:30,  1.05it/s]",
    "\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [01:00<00:00,  1.06it/s]\n",
    "[2026-01-05 10:01:01 TP0] Load weight end. elapsed=61.20 s, type=DeepseekV3ForCausalLM, avail mem=63.20 GB, mem usage=76.11 GB.\n",
    "[2026-01-05 10:01:05 TP0] Capture target verify CUDA graph begin. backend=fa3, num_tokens_per_req=3, avail mem=20.10 GB\n",
    "Capturing batches (bs=48 avail_mem=20.05 GB):   0%|          | 0/10 [00:00<?, ?it/s]\n",
    "[2026-01-05 10:01:35 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 8], elapsed=30.00 s, mem usage=1.20 GB, avail mem=18.90 GB.\n",
    "[2026-01-05 10:01:50 TP0] The server is fired up and ready to roll!\n",
]


def test_parse_real_lines():
    assert parse_startup_line(SGLANG_LOG[2].strip()) == ("shards", {"percent": 50, "done": 32, "total": 64})
    assert parse_startup_line(SGLANG_LOG[5])[0] == "capture_begin"
    assert parse_startup_line(SGLANG_LOG[5])[1] == {"what": "target verify"}
    assert parse_startup_line(SGLANG_LOG[6]) == ("capturing", {"bs": 48})
    assert parse_startup_line(SGLANG_LOG[8]) == ("ready", {})
    assert parse_startup_line("[x] Prefill batch, #new-seq: 1") is None


def test_phases_timed_from_observation(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("earlier run: The server is fired up and ready to roll!\n")
    tr = StartupTracker(log, show=False)
    times = [1.0, 11.0, 41.0, 71.0, 72.0, 80.0, 81.0, 110.0, 125.0]
    seen = []
    for t, chunk in zip(times, SGLANG_LOG):
        with open(log, "a") as f:
            f.write(chunk)
        tr.poll(t)
        seen.append(tr.phase)
    assert seen[1] == "load_weights" and tr.percent == 100
    assert seen[5] == "cuda_graph_capture" and seen[-1] == "ready"
    res = tr.finish(126.0)
    ph = res["phases"]
    assert ph["init_s"] == pytest.approx(1.0)
    assert ph["load_weights_s"] == pytest.approx(71.0)   # 72 - 1
    assert ph["cuda_graph_capture_s"] == pytest.approx(30.0)  # 110 - 80
    assert ph["ready_s"] == pytest.approx(16.0)  # 126 - 110
    assert res["weight_shards"] == 64 and res["captures"] == ["target verify"]
