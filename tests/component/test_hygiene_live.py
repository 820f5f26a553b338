"""Workload hygiene end to end: a looping emulator run is marked degenerate in result.json and
metrics.json (the checks themselves: tests/unit/test_hygiene.py).
"""

from __future__ import annotations

import pytest



@pytest.mark.integration
def test_bench_marks_a_looping_emulator_run(tmp_path):
    """End to end: the emulator loops (--emulator-output loop, delta text streaming); the run is marked."""
    import json

    from lab.measure.accuracy import free_port
    from lab.pipeline.bench import run_mode
    from lab.config import load_params
    from lab.emulator.request import LOOP_PHRASE

    params = load_params(overrides={
        "mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "hygiene-test"},
        "emulator": {"profile": "fast", "startup_delay_s": 0.0},
        "bench": {"dataset": "data/prompts.jsonl", "num_prompts": 2, "max_new_tokens": 24, "concurrency": [2],
                  "warmup_requests": 1, "warmup_max_requests": 2, "repeats": 1},
        "server": {"port": free_port(), "extra_args": ["--emulator-output", "loop", "--incremental-streaming-output"]}})
    res = run_mode(params, "eagle3_decode", tmp_path / "out", log=lambda s: None)
    assert any("degenerate (looping) outputs at c=2 repeat 0" in w for w in res["warnings"]), res["warnings"]
    assert res["levels"]["c2"]["degenerate_output"] is True
    assert res["levels"]["c2"]["token_accounting_ok"] is True
    lean = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert "degenerate" in lean["warnings"]
    rec = json.loads((tmp_path / "out" / "requests.jsonl").read_text().splitlines()[0])
    words = rec["output_text"].split()
    assert len(words) == 24 and words[:6] == list(LOOP_PHRASE)  # delta text reassembled word for word
