"""A metric declared once in lab/catalog.py reaches every place it names, through real stages:
two emulator launches (lab.pipeline.bench.run_mode), the compare stage
(lab.pipeline.compare.run_compare) and their MLflow runs. The metric here is p90 TTFT, which
every run already computes (lab.measure.records.summarize_run) and no place showed: one
declaration puts it in result.json, metrics.json, the mode's MLflow run, summary.csv,
report.html, summary.md and the comparison's MLflow run (the offline part is
tests/unit/test_catalog.py)."""

from __future__ import annotations

import csv
import json

import pytest

from lab import catalog

P90_TTFT = catalog.Metric("p90_ttft_ms", "TTFT p90", "ms", "client", shown=frozenset(catalog.PLACES) - {catalog.ANSWER, catalog.HEADLINE})


@pytest.mark.integration
def test_a_metric_added_in_the_catalog_reaches_files_report_and_mlflow(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from lab.pipeline.bench import run_mode
    from lab.pipeline.compare import run_compare
    from reliability_util import small_params

    monkeypatch.setitem(catalog.METRICS, P90_TTFT.name, P90_TTFT)
    modes = ["baseline", "eagle3_decode"]
    params = small_params(tmp_path, num_prompts=4, concurrency=[2], max_new_tokens=8, repeats=2)
    results = {m: run_mode(params, m, tmp_path / "results" / m, log=lambda s: None) for m in modes}
    res = results["eagle3_decode"]
    runs = json.loads((tmp_path / "results" / "eagle3_decode" / "runs.json").read_text())
    per_repeat = [r["p90_ttft_ms"] for r in runs]
    assert res["levels"]["c2"]["p90_ttft_ms"]["values"] == per_repeat  # result.json
    lean = json.loads((tmp_path / "results" / "eagle3_decode" / "metrics.json").read_text())
    assert lean["p90_ttft_ms"] == pytest.approx(sum(per_repeat) / 2)  # metrics.json (DVC)
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    assert client.get_run(res["mlflow_run_id"]).data.metrics["c2.p90_ttft_ms"] == pytest.approx(lean["p90_ttft_ms"])

    summary = run_compare(params, modes, tmp_path / "results", tmp_path / "reports")
    with open(tmp_path / "reports" / "summary.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["mode"] == "eagle3_decode")
    assert float(row["p90_ttft_ms_mean"]) == pytest.approx(lean["p90_ttft_ms"])  # summary.csv
    assert "TTFT p90 ms" in (tmp_path / "reports" / "report.html").read_text()  # report.html
    assert "TTFT p90 ms" in (tmp_path / "reports" / "summary.md").read_text()  # summary.md, lab summary
    compare_run = client.get_run(summary["mlflow_run_id"]).data.metrics
    assert compare_run["eagle3_decode.c2.p90_ttft_ms"] == pytest.approx(lean["p90_ttft_ms"])  # comparison's run
    assert json.loads((tmp_path / "reports" / "summary.json").read_text())["eagle3_decode.c2.p90_ttft_ms"] == \
        pytest.approx(lean["p90_ttft_ms"])  # summary.json (DVC)
