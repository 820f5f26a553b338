"""The lossless check with live emulators: the same output ids cumulative or incremental, and
the modes agree unless the ``diverge-at`` fault makes them differ, which the check catches,
judged against the emulator's ground truth (offline part: tests/unit/test_lossless.py).
"""

from __future__ import annotations

import json

import pytest

from lab.emulator.request import token_id

@pytest.mark.integration
def test_emulator_streams_the_same_ids_cumulative_or_incremental(tmp_path):
    """A live emulator with and without --incremental-streaming-output, read by the lab's client:
    the same ids for the same prompt, in the text's order, whatever the rid, concurrency or mode."""
    import asyncio

    from lab.measure.client import run_requests_sync
    from shared import Server

    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--emulator-profile", "fast"]
    srv = {"cum": Server(tmp_path, "cum", ["--emulator-profile", "fast"]),
           "inc": Server(tmp_path, "inc", spec + ["--incremental-streaming-output"])}
    try:
        async def ready():
            await asyncio.gather(*(s.wait_ready() for s in srv.values()))

        asyncio.run(ready())
        texts = [(i, f"prompt {i % 3}") for i in range(6)]
        out = {name: run_requests_sync(s.url, texts, concurrency=c, max_new_tokens=24, temperature=0.0, timeout_s=30,
                                       rid_prefix=f"{name}-c{c}-r0")
               for (name, s), c in zip(srv.items(), (1, 3))}
    finally:
        for s in srv.values():
            s.stop()
    for name, recs in out.items():
        assert all(r.ok and len(r.output_ids) == 24 for r in recs), name
        assert all(r.output_ids == [token_id(w) for w in r.output_text.split()] for r in recs), name
    assert [r.output_ids for r in out["cum"]] == [r.output_ids for r in out["inc"]]
    assert out["cum"][0].output_ids == out["cum"][3].output_ids != out["cum"][1].output_ids


@pytest.mark.integration
@pytest.mark.slow  # ~30 s on 2 cores
def test_emulator_modes_agree_and_the_check_catches_the_diverge_fault(tmp_path):
    """Real emulator launches through run_mode, then the compare stage: baseline and
    eagle3_decode agree 100 %, with no looping-output flag; a launch with ``diverge-at=3,
    diverge-share=0.5`` is caught, and the warning names exactly the prompts the emulator's
    ground truth says it altered, in summary.md, report.html, summary.json and MLflow."""
    from mlflow.tracking import MlflowClient

    from lab.pipeline.compare import run_compare
    from lab.emulator.truth import load_truth
    from lab.pipeline.bench import run_mode
    from lab.workload.dataset import load_prompts
    from reliability_util import ROOT, small_params

    k = 3
    faulty = small_params(tmp_path, ["diverge-at=3", "diverge-share=0.5"], num_prompts=8)
    clean = small_params(tmp_path, num_prompts=8)
    res = tmp_path / "results"
    run_mode(faulty, "baseline", res / "baseline")  # the fault leaves plain decoding alone
    run_mode(clean, "eagle3_decode", res / "eagle3_decode")
    run_mode(faulty, "eagle3_prefill", res / "eagle3_prefill")
    modes = ["baseline", "eagle3_decode", "eagle3_prefill"]
    records = {m: [json.loads(line) for line in (res / m / "requests.jsonl").read_text().splitlines()] for m in modes}
    for m in modes:
        assert all(r["ok"] and r["output_ids"] and r["output_ids"] == [token_id(w) for w in r["output_text"].split()]
                   for r in records[m]), m  # ids recorded, consistent with the text
        for run in json.loads((res / m / "runs.json").read_text()):
            assert run["hygiene"]["degenerate"]["degenerate"] is False, m
    truth = {m: load_truth(res / m / "ground_truth.jsonl").requests for m in modes}
    assert all(t.get("diverged_from") is None for m in ("baseline", "eagle3_decode") for t in truth[m].values())
    altered = {r["prompt_index"] for r in records["eagle3_prefill"]
               if truth["eagle3_prefill"][r["rid"]]["diverged_from"] is not None}
    sent = {r["prompt_index"] for r in records["eagle3_prefill"]}
    assert 0 < len(altered) < len(sent)  # the share selects some prompts, not all
    summary = run_compare(clean, modes, res, tmp_path / "reports")  # the compare stage
    ll = summary["lossless"]
    ok, bad = ll["modes"]["eagle3_decode"], ll["modes"]["eagle3_prefill"]
    assert (ok["status"], ok["identical_share"], ok["pairs"]) == ("checked", 1.0, 16) and ok["warning"] is None
    assert bad["status"] == "checked" and bad["first_divergence_token_min"] == k
    assert {p["prompt_index"] for p in bad["prompts"] if p["identical"] < p["pairs"]} == altered
    assert all(d["first_divergence_token"] == k for d in bad["divergent"])
    assert bad["identical"] == sum(r["prompt_index"] not in altered for r in records["eagle3_prefill"])
    heads = {i: p.messages[-1]["content"] for i, p in enumerate(load_prompts(ROOT / clean.bench.dataset))}
    [w] = ll["warnings"]["eagle3_prefill"]
    assert w in summary["warnings"]["eagle3_prefill"]  # beside the run's hygiene warnings
    for pi in altered:
        assert f'#{pi} "{" ".join(heads[pi].split())[:20]}' in w
    for pi in sent - altered:
        assert f"#{pi} " not in w
    assert "eagle3_decode" not in ll["warnings"]
    assert not any("lossless" in x for x in summary["warnings"].get("eagle3_decode", []))
    rows = {(r["mode"], r["point"]): r for r in summary["rows"]}
    assert rows[("eagle3_decode", "c1")]["lossless_identical_share"] == 1.0
    assert "lossless_identical_share" not in rows[("baseline", "c1")]
    md = (tmp_path / "reports" / "summary.md").read_text()
    assert "  - lossless: 16/16 identical to baseline's token for token (100.0 %) of 16 request pairs" in md
    assert f"- (eagle3_prefill) {w}" in md
    html = (tmp_path / "reports" / "report.html").read_text()
    assert "output token ids against the baseline's (lossless check)" in html and "lossless check: " in html
    flat = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert flat["eagle3_decode.lossless.identical_share"] == 1.0
    assert flat["eagle3_prefill.lossless.first_divergence_token_min"] == k
    assert flat["eagle3_prefill.lossless.divergent_prompts"] == len(altered)
    metrics = MlflowClient(tracking_uri=clean.mlflow.tracking_uri).get_run(summary["mlflow_run_id"]).data.metrics
    assert metrics["eagle3_prefill.lossless.identical_share"] == pytest.approx(bad["identical_share"])
    assert "lossless_identical_share" in (tmp_path / "reports" / "summary.csv").read_text().splitlines()[0]
    import csv

    with open(tmp_path / "reports" / "lossless.csv", newline="") as f:  # dvc plots
        plotted = {(r["mode"], r["point"]): r for r in csv.DictReader(f)}
    assert float(plotted[("eagle3_decode", "c1")]["identical_share"]) == 1.0
    assert float(plotted[("eagle3_prefill", "c1")]["identical_share"]) == bad["points"]["c1"]["identical_share"] < 1.0
    assert not [k for k in plotted if k[0] == "baseline"]
