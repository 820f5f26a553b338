"""docs/benchmarks/h200-sglang-0.5.16.md holds exactly what scripts/h200_report.py prints from the
committed real-GPU files: no number in the doc without the command that produced it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_doc_tables_are_the_scripts_output():
    spec = importlib.util.spec_from_file_location("h200_report", ROOT / "scripts" / "h200_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16.md").read_text()
    body = doc.split("<!-- tables -->\n", 1)[1].split("<!-- /tables -->", 1)[0]
    assert body == mod.render()
    # the real run's headline is what the doc's prose quotes
    assert "| eagle3_decode | c1 | 164.6 [157.2, 172.0] | 1.10x [1.05, 1.15] faster |" in body
