"""lab.catalog: each metric declared once, and every consumer reading the declaration.

A metric added to the catalog (here: p90 TTFT, which :func:`lab.measure.records.summarize_run`
already computes per run) appears in the mode's aggregates and headline, the comparison's
rows (summary.csv), the report's table and the flat MLflow numbers without another edit; the
live path through a bench stage, the compare stage and its MLflow run is
tests/component/test_catalog_live.py.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lab import catalog
from lab.analysis import stats
from lab.analysis.aggregate import aggregate_levels, headline
from lab.analysis.comparison import lean_numbers, summarize
from lab.measure.goodput import run_load_metrics
from lab.measure.crosscheck import add_cross_checks
from lab.measure.prometheus import SERVER_TIMING_KEYS
from lab.measure.records import summarize_run
from lab.report.html import summary_html
from lab.report.tables import summary_markdown

P90_TTFT = catalog.Metric("p90_ttft_ms", "TTFT p90", "ms", "client",
                          shown=frozenset({catalog.RESULT, catalog.SUMMARY, catalog.REPORT, catalog.TABLE,
                                           catalog.MLFLOW}))


def _record(i: int, t0: float, tokens: int = 6) -> dict:
    chunks = [[t0 + 0.05 + 0.012 * k, 1] for k in range(tokens)]
    return {"rid": f"m-c1-r0-{i}", "ok": True, "t_dispatch": t0, "t_send": t0, "t_end": chunks[-1][0] + 0.001,
            "chunks": chunks, "completion_tokens": tokens, "meta_info": {"completion_tokens": tokens},
            "mode": "m", "concurrency": 1, "repeat": 0}


def _runs(mode: str, scale: float) -> list[dict]:
    """Per-repeat run summaries of one point, with every client metric of summarize_run."""
    rows = []
    for rep in range(3):
        recs = [_record(i, i * 1.0) for i in range(4)]
        s = summarize_run(recs, wall_s=4.0).to_dict()
        s = {k: (v * scale * (1 + 0.01 * rep) if isinstance(v, float) and k.endswith(("_tok_s", "_ms")) else v)
             for k, v in s.items()}
        rows.append({**s, "mode": mode, "point": "c1", "concurrency": 1, "repeat": rep})
    return rows


def test_every_declared_metric_is_produced_by_its_source():
    recs = [_record(i, i * 1.0) for i in range(3)]
    produced = {
        "client": set(summarize_run(recs, wall_s=3.0).to_dict()),
        "server_info": set(summarize_run(recs, wall_s=3.0, server={"step_time_ms": {"a": [1.0]}}).to_dict()),
        "metrics": set(SERVER_TIMING_KEYS),
        "log": set(add_cross_checks(summarize_run(recs, wall_s=3.0).to_dict())),
        "load": set(run_load_metrics(recs, 3.0, {"ttft_ms": 500.0, "tpot_ms": 20.0})),
    }
    missing = [f"{m.name} ({m.source})" for m in catalog.METRICS.values() if m.name not in produced[m.source]]
    assert not missing, f"declared but not produced by their source: {missing}"
    assert set(run_load_metrics(recs, 3.0, {"ttft_ms": 500.0})) == {
        m.name for m in catalog.METRICS.values() if m.source == "load"}


def test_interval_kind_comes_from_the_declaration():
    """slo_attainment is a share: its interval stays inside [0, 1] (issue 20: it went above 1)."""
    assert catalog.interval_kind("slo_attainment") == "fraction"
    _, lo, hi = stats.metric_ci("slo_attainment", [1.0, 1.0, 0.75])
    assert 0.0 <= lo and hi == 1.0
    _, lo, hi = stats.metric_ci("crosscheck_disagreements", [0, 0, 0])  # a count: exact Poisson, never below 0
    assert lo == 0.0 and hi > 0.0
    _, lo, hi = stats.metric_ci("decode_tok_s", [80.0, 82.0, 90.0])
    assert lo > 0 and hi > 90.0


def test_sentinel_watches_what_the_catalog_marks():
    assert catalog.sentinel_metrics() == {"decode_tok_s": True, "output_tok_s": True, "accept_length": True,
                                          "cycle_ms": False, "p50_ttft_ms": False}


def test_bad_declaration_is_refused():
    with pytest.raises(ValueError, match="unknown place"):
        catalog.Metric("x_ms", "x", "ms", "client", shown=frozenset({"nowhere"}))
    with pytest.raises(ValueError, match="better direction"):
        catalog.Metric("x", "x", "share", "client", better=None, sentinel=True)
    with pytest.raises(KeyError, match="declare it in lab/catalog.py"):
        catalog.metric("p90_ttft_ms")


def test_a_metric_added_in_one_place_reaches_every_place_it_names(monkeypatch):
    monkeypatch.setitem(catalog.METRICS, P90_TTFT.name, P90_TTFT)
    runs = {"baseline": _runs("baseline", 1.0), "eagle3": _runs("eagle3", 0.8)}
    levels = aggregate_levels(runs["eagle3"])
    assert levels["c1"]["p90_ttft_ms"]["mean"] == pytest.approx(
        sum(r["p90_ttft_ms"] for r in runs["eagle3"]) / 3)  # result.json levels
    assert "p90_ttft_ms" in headline(levels) and "c1.p90_ttft_ms" in headline(levels)  # metrics.json, mode run
    frame = pd.DataFrame([r for rows in runs.values() for r in rows])
    results = {m: {"engine": "emulator", "effective_config": None} for m in runs}
    summary = summarize(results, frame, "baseline")
    row = next(r for r in summary["rows"] if r["mode"] == "eagle3")
    assert math.isclose(row["p90_ttft_ms_mean"], levels["c1"]["p90_ttft_ms"]["mean"])  # summary.csv
    assert {"p90_ttft_ms_ci95_lo", "p90_ttft_ms_ci95_hi"} <= set(row)
    assert "TTFT p90 ms" in summary_html(summary)  # report.html's table
    assert "TTFT p90 ms" in summary_markdown(summary["rows"], "baseline").splitlines()[0]  # summary.md, lab summary
    assert lean_numbers(summary)["eagle3.c1.p90_ttft_ms"] == row["p90_ttft_ms_mean"]  # summary.json, MLflow


def test_without_the_declaration_the_metric_is_nowhere():
    """The same runs without the added declaration: p90 TTFT is computed per run but shown nowhere."""
    runs = _runs("eagle3", 1.0)
    assert "p90_ttft_ms" in runs[0]
    assert "p90_ttft_ms" not in aggregate_levels(runs)["c1"]
