"""Provenance on the real SGLang 0.5.16 results committed in docs/benchmarks/ (synthetic models
with random weights and simulated acceptance, recorded before result.json carried a provenance):
the whole compare stage in-process on a scratch copy (component tier: seconds of figures and
report; the offline parts are tests/unit/test_provenance.py)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16"


def test_the_real_sglang_0516_results_are_labelled_random_weights_and_simulated_acceptance(tmp_path):
    """The compare stage on a scratch copy of docs/benchmarks/h200-sglang-0.5.16/: every CSV row,
    summary.json, the headline metrics, the caption, the answer and report.html say sglang,
    measured, random weights and (for the EAGLE-3 modes) simulated acceptance."""
    from lab.config import load_params
    from lab.pipeline.compare import run_compare
    from lab.report.answer import WIDTH, load_answer

    shutil.copytree(H200 / "results", tmp_path / "results")
    for mode in ("baseline", "eagle3_prefill", "eagle3_decode"):
        assert "provenance" not in json.loads((tmp_path / "results" / mode / "result.json").read_text())
    params = load_params(H200 / "params.yaml")
    run_compare(params, list(params.modes), results_dir=tmp_path / "results", reports_dir=tmp_path / "reports",
                track=False)
    rep = tmp_path / "reports"
    want = {"baseline": ("sglang", "measured", "random", "n/a"),
            "eagle3_prefill": ("sglang", "measured", "random", "simulated"),
            "eagle3_decode": ("sglang", "measured", "random", "simulated")}
    for name in ("summary.csv", "concurrency.csv", "pareto.csv", "categories.csv"):
        rows = list(csv.DictReader((rep / name).open()))
        assert rows, name
        for r in rows:
            assert (r["engine"], r["timing"], r["weights"], r["acceptance"]) == want[r["mode"]], (name, r)
    assert csv.DictReader((rep / "lossless.csv").open()).fieldnames[:5] == ["mode", "engine", "timing", "weights",
                                                                           "acceptance"]
    flat = json.loads((rep / "summary.json").read_text())
    assert (flat["eagle3_decode.weights"], flat["eagle3_decode.acceptance"]) == ("random", "simulated")
    head = json.loads((rep / "headline" / "eagle3_decode.json").read_text())
    assert head["source"] == "sglang: random weights, simulated acceptance"
    comp = json.loads((rep / "comparison.json").read_text())
    assert "random weights (--load-format dummy" in comp["caption"] and "simulated acceptance" in comp["caption"]
    answer = load_answer(rep)
    flat_answer = " ".join(answer.split())
    assert "Numbers from: sglang (measured timing): random weights (--load-format dummy" in flat_answer
    assert "simulated acceptance (SGLANG_SIMULATE_ACC_LEN" in flat_answer
    assert max(len(ln) for ln in answer.splitlines()) <= WIDTH
    # the r4 cross-check flags of the real run (client vs scheduler vs GPU) reach the answer
    assert "eagle3_decode: r4: 7 flags in 3 repeats, up to 48 %" in flat_answer
    page = (rep / "report.html").read_text()
    assert "simulated acceptance" in page and "random weights" in page and "7 flags in 3 repeats" in page
