"""docs/benchmarks/h200-sglang-0.5.16-launches.md holds exactly what scripts/h200_launches.py prints
from the committed real-GPU launches: no number in the doc without the command that produced it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16-launches"


def test_doc_tables_are_the_scripts_output(capsys):
    spec = importlib.util.spec_from_file_location("h200_launches", ROOT / "scripts" / "h200_launches.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main() == 0
    printed = capsys.readouterr().out
    doc = (ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16-launches.md").read_text()
    body = doc.split("<!-- tables -->\n", 1)[1].split("<!-- /tables -->", 1)[0]
    assert body == printed


def test_the_two_launches_are_real_sglang_and_one_pipeline():
    """Both results are a real SGLang 0.5.16 server's (random weights), launches 1 and 2 of one
    configuration, their MLflow runs under one pipeline parent."""
    one = json.loads((RUN / "results" / "baseline" / "result.json").read_text())
    two = json.loads((RUN / "results" / "launches" / "2" / "baseline" / "result.json").read_text())
    for n, r in ((1, one), (2, two)):
        assert r["status"] == "ok" and r["launch"] == n and r["launches"] == 2
        assert r["provenance"] == {"engine": "sglang", "timing": "measured", "weights": "random", "acceptance": "n/a"}
        assert "sglang.launch_server" in r["server_command"] and "--load-format dummy" in r["server_command"]
    recs = [json.loads((d / "mlflow_run.json").read_text())
            for d in (RUN / "results" / "baseline", RUN / "results" / "launches" / "2" / "baseline")]
    parents = {rec.get("parent_run_id") or rec.get("tags", {}).get("mlflow.parentRunId") for rec in recs}
    assert len(parents) == 1 and None not in parents, parents
