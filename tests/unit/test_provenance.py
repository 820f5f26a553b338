"""What each mode's numbers stand on (lab/analysis/provenance.py) reaches every output of the
comparison: replayed on the real SGLang 0.5.16 results committed in docs/benchmarks/ (synthetic
models with random weights and simulated acceptance, recorded before result.json carried a
provenance), on a scratch copy, and on synthetic result dicts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lab.analysis.provenance import provenance_sentence, result_provenance, short_label, tag_rows

ROOT = Path(__file__).resolve().parents[2]


def test_result_provenance_recorded_or_read_off_the_result():
    rec = {"engine": "sglang", "provenance": {"engine": "sglang", "timing": "measured", "weights": "real",
                                              "acceptance": "real"}}
    assert result_provenance(rec) == rec["provenance"]
    emu = result_provenance({"engine": "emulator", "server_command": "python -m lab.emulator --speculative-algorithm EAGLE3"})
    assert emu == {"engine": "emulator", "timing": "modelled", "weights": "emulated", "acceptance": "emulated"}
    cmd = ("SGLANG_SIMULATE_ACC_LEN=1.85 python -m sglang.launch_server --model-path x --load-format dummy "
           "--speculative-algorithm EAGLE3")
    assert result_provenance({"engine": "sglang", "server_command": cmd}) == {
        "engine": "sglang", "timing": "measured", "weights": "random", "acceptance": "simulated"}
    assert result_provenance({"engine": "sglang", "server_command": "python -m sglang.launch_server --model-path x"}) \
        == {"engine": "sglang", "timing": "measured", "weights": "real", "acceptance": "n/a"}
    assert short_label(emu) == "emulator"
    assert short_label({"engine": "sglang", "weights": "random", "acceptance": "n/a"}) == "sglang: random weights"


def test_provenance_sentence_names_the_modes_where_they_differ():
    prov = {"baseline": {"engine": "sglang", "timing": "measured", "weights": "real", "acceptance": "n/a"},
            "sim": {"engine": "sglang", "timing": "measured", "weights": "real", "acceptance": "simulated"},
            "own": {"engine": "sglang", "timing": "measured", "weights": "real", "acceptance": "real"}}
    text = provenance_sentence(prov)
    assert text.startswith("sglang (measured timing): real weights; simulated acceptance")
    assert "in sim" in text and "in own" in text
    assert tag_rows([{"mode": "sim", "x": 1}], prov) == [{"mode": "sim", "engine": "sglang", "timing": "measured",
                                                          "weights": "real", "acceptance": "simulated", "x": 1}]


@pytest.mark.parametrize("name", ["summary.csv", "pareto.csv", "categories.csv", "lossless.csv"])
def test_committed_reports_carry_the_engine(name):
    """Every CSV the committed default run left in reports/ says which engine and inputs made it."""
    rows = list(csv.DictReader((ROOT / "reports" / name).open()))
    header = csv.DictReader((ROOT / "reports" / name).open()).fieldnames
    assert {"engine", "timing", "weights", "acceptance"} <= set(header), header
    assert all(r["engine"] == "emulator" and r["timing"] == "modelled" for r in rows)
