"""The task mix with live emulators: the emulator's per-category acceptance against its ground
truth, and the path from the bench stage to the report, MLflow and categories.csv (served from
the project's own data/prompts.jsonl; offline part: tests/unit/test_taskmix.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lab.analysis.taskmix import MIN_PROMPTS, category_rows
from lab.workload.dataset import load_prompts, render_prompt

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- emulator vs ground truth
def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    import urllib.request

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(log.read_text())


@pytest.mark.integration
def test_emulator_per_category_acceptance_matches_ground_truth(tmp_path):
    """The emulator maps each prompt (padded or not) to its category and draws with that
    category's accept probability; the lab's per-category accept length equals what the
    emulator actually did (its ground truth), prompt by prompt."""
    from lab.analysis.comparison import requests_frame
    from lab.emulator.truth import load_truth
    from lab.engine.ports import free_port
    from lab.measure.client import run_requests_sync
    from lab.workload.context import pad_prompt

    raw = json.loads((ROOT / "lab/emulator/profiles/fast.json").read_text())
    raw["acceptance"]["per_category"] = {"coding": {"value": 0.9, "source": "test"},
                                         "writing": {"value": 0.1, "source": "test"}}
    profile = tmp_path / "percat.json"
    profile.write_text(json.dumps(raw))
    dataset = ROOT / "data/prompts.jsonl"
    prompts = load_prompts(dataset)
    port, truth_path, log = free_port(), tmp_path / "truth.jsonl", tmp_path / "emu.log"
    argv = [sys.executable, "-m", "lab.emulator", "--port", str(port), "--emulator-startup-delay-s", "0",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3", "--emulator-profile", str(profile),
            "--ground-truth-file", str(truth_path), "--emulator-prompt-categories", str(dataset)]
    with open(log, "w") as lf:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=lf, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, proc, log)
            # every prompt once as is, every third one also padded into a long context
            texts = [(i, render_prompt(p)) for i, p in enumerate(prompts)]
            texts += [(i, pad_prompt(render_prompt(p), 600)) for i, p in enumerate(prompts) if i % 3 == 0]
            recs = run_requests_sync(url, texts, concurrency=8, max_new_tokens=24, temperature=0.0, timeout_s=60,
                                     rid_prefix="spec-c1-r0", mode="spec")
        finally:
            proc.kill()
            proc.wait(5)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok][:3]
    out = tmp_path / "results" / "spec"
    out.mkdir(parents=True)
    with open(out / "requests.jsonl", "w") as f:
        for r in recs:
            f.write(json.dumps({**r.to_json(), "concurrency": 1, "point": "c1"}) + "\n")
    truth = load_truth(truth_path)
    cats = [p.category for p in prompts]
    for r in recs:  # the emulator saw each prompt's category, padded or not
        assert truth.requests[r.rid]["category"] == cats[r.prompt_index], r.rid
    rows = {r["category"]: r for r in category_rows(requests_frame(out.parent, ["spec"]), {}, cats, ["spec"], None)}
    for cat in set(cats):
        per_prompt = []
        for i in sorted({r.prompt_index for r in recs if cats[r.prompt_index] == cat}):
            per_prompt.append(truth.accept_length([r.rid for r in recs if r.prompt_index == i]))
        assert rows[cat]["accept_length"] == pytest.approx(sum(per_prompt) / len(per_prompt), rel=1e-12), cat
        assert rows[cat]["accept_n_prompts"] == len(per_prompt) >= MIN_PROMPTS
    # the profile's categories differ as set (E = 1 + p + p^2: 2.71 vs 1.11), others use the global p
    assert rows["coding"]["accept_length_ci95_lo"] > rows["math"]["accept_length_ci95_hi"]
    assert rows["math"]["accept_length_ci95_lo"] > rows["writing"]["accept_length_ci95_hi"]
    by_cat = truth.accept_length_by_category()
    assert by_cat["coding"] > 2.3 and by_cat["writing"] < 1.3


# --------------------------------------------------------------------------- bench -> compare -> report
@pytest.mark.integration
def test_task_mix_from_bench_to_report_mlflow_and_csv(tmp_path):
    """Two modes on the default profile (per-category acceptance) through run_mode and
    run_compare: the per-category accept length equals the emulator's ground truth prompt by
    prompt, and the task mix reaches categories.csv, summary.md, report.html, the figure and
    the comparison run's MLflow metrics; the dataset record reaches result.json and MLflow."""
    from mlflow.tracking import MlflowClient

    from lab.emulator.truth import load_truth
    from lab.pipeline.bench import run_mode
    from lab.pipeline.compare import run_compare
    from reliability_util import small_params

    modes = ["baseline", "eagle3_decode"]
    params = small_params(tmp_path, num_prompts=40, concurrency=[4], max_new_tokens=8)
    results = {m: run_mode(params, m, tmp_path / "results" / m, log=lambda s: None) for m in modes}
    cats = [p.category for p in load_prompts(ROOT / params.bench.dataset)]
    ds = results["eagle3_decode"]["dataset"]
    assert ds["source"] == "file" and ds["categories"] == cats and len(ds["prompts_sha256"]) == 64
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    mode_run = client.get_run(results["eagle3_decode"]["mlflow_run_id"])
    assert mode_run.data.params["dataset.prompts_sha256"] == ds["prompts_sha256"]

    summary = run_compare(params, modes, tmp_path / "results", tmp_path / "reports")
    rows = {r["category"]: r for r in summary["taskmix"]["rows"] if r["mode"] == "eagle3_decode"}
    assert set(rows) == set(cats)
    truth = load_truth(tmp_path / "results" / "eagle3_decode" / "ground_truth.jsonl")
    recs = [json.loads(line) for line in open(tmp_path / "results" / "eagle3_decode" / "requests.jsonl")]
    recs = [r for r in recs if r.get("point") == "c4" and r["ok"]]
    for cat, row in rows.items():
        idx = sorted({r["prompt_index"] for r in recs if cats[r["prompt_index"]] == cat})
        per_prompt = [truth.accept_length([r["rid"] for r in recs if r["prompt_index"] == i]) for i in idx]
        assert row["accept_length"] == pytest.approx(sum(per_prompt) / len(per_prompt), rel=1e-12)
        assert all(truth.requests[r["rid"]]["category"] == cat for r in recs if r["prompt_index"] in idx)
        assert row["speedup_n_prompts"] == len(idx)
    csv_rows = pd.read_csv(tmp_path / "reports" / "categories.csv")
    assert set(csv_rows["category"]) == set(cats) and (csv_rows["mode"] == "eagle3_decode").all()
    md = (tmp_path / "reports" / "summary.md").read_text()
    assert "Per task category" in md and "eagle3_decode c4: writing " in md
    html = (tmp_path / "reports" / "report.html").read_text()
    assert "Per task category" in html and Path(summary["figures"]["taskmix"]).is_file()
    metrics = client.get_run(summary["mlflow_run_id"]).data.metrics
    assert metrics["eagle3_decode.c4.category.coding.accept_length"] == pytest.approx(rows["coding"]["accept_length"])
    lo = rows["coding"]["speedup_decode_tok_s_ci95_lo"]
    assert metrics.get("eagle3_decode.c4.category.coding.speedup_decode_tok_s_ci95_lo") == (
        pytest.approx(lo) if lo is not None else None)
