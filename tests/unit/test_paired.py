"""Paired per-prompt speedup (lab.analysis.paired): matching, the interval on known data, and the
summary/markdown/report/MLflow-flat plumbing."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lab.analysis.paired import load_request_speeds, paired_part, paired_speedup
from shared import markdown_rows


def _record(mode: str, point: str, rep: int, slot: int, prompt: int, tok_s: float, n: int = 33,
            ok: bool = True) -> dict:
    """A client record whose decode_tok_s is exactly ``tok_s``: n tokens, first chunk at 0.1 s."""
    t0 = 0.1
    return {"rid": f"{mode}-{point}-r{rep}-{slot}", "mode": mode, "concurrency": 1, "repeat": rep,
            "prompt_index": prompt, "point": point, "t_dispatch": 0.0, "t_send": 0.0,
            "t_end": t0 + (n - 1) / tok_s, "chunks": [[t0, 1], [t0 + (n - 1) / tok_s, n - 1]],
            "completion_tokens": n, "meta_info": {}, "ok": ok, "error": None}


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _workload(tmp_path, ratio=1.2, noise=0.01, prompts=8, repeats=3, seed=0):
    """base and spec streams of the same prompts; prompt speeds differ by +-30 %, the
    per-request ratio is ``ratio`` with log-normal noise ``noise``."""
    rng = np.random.default_rng(seed)
    speed = rng.uniform(60, 110, prompts)
    base, spec = [], []
    for rep in range(repeats):
        order = rng.permutation(prompts)
        for slot, p in enumerate(order):
            b = speed[p] * math.exp(rng.normal(0, noise))
            base.append(_record("base", "c1", rep, slot, int(p), b))
            spec.append(_record("spec", "c1", rep, slot, int(p), speed[p] * ratio * math.exp(rng.normal(0, noise))))
    base.append({"rid": "base-warmup0-0", "ok": True, "prompt_index": 0})  # warm-up: no point, skipped
    _write(tmp_path / "base" / "requests.jsonl", base)
    _write(tmp_path / "spec" / "requests.jsonl", spec)


def test_load_request_speeds_reads_slots_and_speed(tmp_path):
    _write(tmp_path / "r.jsonl", [_record("m", "c8.ctx2048", 2, 5, 17, 80.0), {"rid": "m-warmup0-1", "ok": True}])
    rows = load_request_speeds(tmp_path / "r.jsonl")
    assert len(rows) == 1
    assert rows[0]["point"] == "c8.ctx2048" and (rows[0]["repeat"], rows[0]["slot"], rows[0]["prompt_index"]) == (2, 5, 17)
    assert rows[0]["decode_tok_s"] == pytest.approx(80.0)
    assert load_request_speeds(tmp_path / "missing.jsonl") == []


def test_paired_interval_is_tight_where_prompts_vary(tmp_path):
    _workload(tmp_path)
    base = load_request_speeds(tmp_path / "base" / "requests.jsonl")
    spec = load_request_speeds(tmp_path / "spec" / "requests.jsonl")
    p = paired_speedup(base, spec, "c1")
    assert p["n_prompts"] == 8 and p["n_pairs"] == 24 and p["unmatched"] == 0
    assert p["ci95_lo"] < 1.2 < p["ci95_hi"] and p["ratio"] == pytest.approx(1.2, rel=0.01)
    assert p["ci95_hi"] / p["ci95_lo"] < 1.03 and p["verdict"] == "faster"
    # unpaired, the +-30 % prompt mix would swamp the same 20 % difference
    from lab.analysis.stats import ratio_ci

    _, lo, hi = ratio_ci([r["decode_tok_s"] for r in base], [r["decode_tok_s"] for r in spec])
    assert hi / lo > 1.1


def test_paired_coverage_at_least_93_percent(tmp_path):
    """Per-prompt ratios log-normal around 0.75: the interval covers 0.75 at its level."""
    rng = np.random.default_rng(11)
    hits = 0
    trials = 400
    for _ in range(trials):
        base, spec = [], []
        for p in range(8):
            b = rng.uniform(60, 110)
            base.append({"point": "c1", "repeat": 0, "slot": p, "prompt_index": p, "decode_tok_s": b})
            spec.append({"point": "c1", "repeat": 0, "slot": p, "prompt_index": p,
                         "decode_tok_s": b * 0.75 * math.exp(rng.normal(0, 0.05))})
        r = paired_speedup(base, spec, "c1")
        hits += r["ci95_lo"] <= 0.75 <= r["ci95_hi"]
    assert hits / trials >= 0.93


def test_mismatched_or_failed_requests_are_counted_not_paired():
    base = [{"point": "c1", "repeat": 0, "slot": i, "prompt_index": i, "decode_tok_s": 80.0} for i in range(4)]
    spec = [{"point": "c1", "repeat": 0, "slot": 0, "prompt_index": 0, "decode_tok_s": 96.0},
            {"point": "c1", "repeat": 0, "slot": 1, "prompt_index": 9, "decode_tok_s": 96.0},  # other prompt
            {"point": "c1", "repeat": 0, "slot": 2, "prompt_index": 2, "decode_tok_s": None}]  # failed
    p = paired_speedup(base, spec, "c1")
    assert p["n_pairs"] == 1 and p["unmatched"] == 3 and p["ratio"] == pytest.approx(1.2)
    assert p["ci95_lo"] is None and p["verdict"] is None and "no verdict" in p["note"]
    assert paired_speedup(base, [], "c1")["ratio"] is None


def test_summary_rows_markdown_and_flat_metrics_carry_the_paired_speedup(tmp_path):
    from lab.analysis.comparison import lean_numbers, summarize
    from lab.report.tables import summary_markdown
    from lab.report.html import speedup_html

    _workload(tmp_path, ratio=1.25)
    runs = pd.DataFrame([
        *({"mode": "base", "point": "c1", "concurrency": 1, "decode_tok_s": v} for v in (80.0, 82.0, 84.0)),
        *({"mode": "spec", "point": "c1", "concurrency": 1, "decode_tok_s": v} for v in (99.0, 103.0, 104.0))])
    summary = summarize({"base": {}, "spec": {}}, runs, "base")
    part = paired_part(summary.modes, tmp_path, "base")
    assert set(part) == {("spec", "c1")} and "paired_speedup_decode_tok_s" not in summary.modes["spec"]["c1"]  # a part
    summary.merge(part)
    entry = summary["modes"]["spec"]["c1"]["paired_speedup_decode_tok_s"]
    assert entry["ratio"] == pytest.approx(1.25, rel=0.01) and entry["n_prompts"] == 8
    assert "paired_speedup_decode_tok_s" not in summary["modes"]["base"]["c1"]
    row = [r for r in summary["rows"] if r["mode"] == "spec"][0]
    assert row["paired_speedup_decode_tok_s"] == entry["ratio"] and row["paired_n_prompts"] == 8
    spec = next(r for r in markdown_rows(summary_markdown(summary["rows"], "base")) if r["mode"] == "spec")
    paired = spec["paired per prompt, decode tok/s [95 % CI]"]
    assert paired.startswith("1.25x [") and paired.endswith("]")  # beside the verdict, not a second one
    # one launch, no launch spread: no verdict word on either (issue 32)
    assert spec["speedup, decode tok/s [95 % CI], verdict"].endswith("]")
    # the row's "intervals" cell says the scope
    assert spec["intervals"] == "within one launch" and entry["scope"] == "within one launch" and entry["unit"] == "prompt"
    flat = lean_numbers(summary)
    assert flat["spec.c1.paired_speedup_decode_tok_s"] == entry["ratio"]
    assert flat["spec.c1.paired_speedup_decode_tok_s_ci95_lo"] == entry["ci95_lo"]
    assert "paired per prompt, decode tok/s" in speedup_html(summary) and "1.25x<span class=\"ci\">[" in speedup_html(summary)
