"""`bench.launches` end to end: DVC runs the launches interleaved (A B C A B C), each launch is a
fresh engine start in its own results folder, and the comparison's intervals span the launches.

Checked against what was recorded (each launch's own result.json, the emulator's ground truth,
DVC's own run order), never against the wall clock.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scratch import repro_scratch, run_dvc, scratch_repo

pytestmark = pytest.mark.integration

MODES = ("baseline", "eagle3_decode")
BENCH = {"num_prompts": 3, "max_new_tokens": 20, "concurrency": [1], "warmup_requests": 1, "repeats": 2,
         "request_rates": [], "launches": 2, "later_launches": [2]}


def _running(stdout: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", stdout)


def test_dvc_runs_launches_interleaved_and_keeps_todays_stages_at_one(tmp_path):
    """`dvc repro --dry` (and with the compare target): launch 1 of every mode, then launch 2 of
    every mode...; with bench.launches 1 the stages are today's bench@<mode> alone."""
    def three(p):
        p["bench"].update(launches=3, later_launches=[2, 3])

    repo = scratch_repo(tmp_path / "three", three)
    (repo / "results").mkdir()  # compare's dependency, for --dry to walk past it
    modes = ["baseline", "eagle3_prefill", "eagle3_decode"]
    want = [*(f"bench@{m}" for m in modes), *(f"bench_launch@{n}-{m}" for n in (2, 3) for m in modes)]
    for target in ((), ("compare",)):
        proc = run_dvc(repo, "repro", "--dry", *target)
        assert proc.returncode == 0, proc.stderr[-3000:]
        order = [s for s in _running(proc.stdout) if s.startswith("bench")]
        assert order == want, (target, order)
    one = scratch_repo(tmp_path / "one")
    (one / "results").mkdir()
    proc = run_dvc(one, "repro", "--dry")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [s for s in _running(proc.stdout) if s.startswith("bench")] == [f"bench@{m}" for m in modes]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, str]:
    return repro_scratch(tmp_path_factory.mktemp("launches"), MODES, BENCH)


def _result(repo: Path, mode: str, launch: int) -> dict:
    d = repo / "results" / mode if launch == 1 else repo / "results" / "launches" / str(launch) / mode
    return json.loads((d / "result.json").read_text())


def _folder(repo: Path, mode: str, launch: int) -> Path:
    return repo / "results" / mode if launch == 1 else repo / "results" / "launches" / str(launch) / mode


def _truth_header(repo: Path, mode: str, launch: int) -> dict:
    """The one header of the launch's ground-truth file (one per emulator start)."""
    lines = [json.loads(ln) for ln in (_folder(repo, mode, launch) / "ground_truth.jsonl").read_text().splitlines()
             if ln.strip()]
    heads = [ln for ln in lines if ln.get("kind") == "header"]
    assert len(heads) == 1, (mode, launch, len(heads))
    return heads[0]


def _check_against_its_own_engine(repo: Path, mode: str, launch: int, res: dict) -> None:
    """The launch's measurement is of the emulator that wrote this folder's ground truth, which
    ran once: every measured request is one it served, with the tokens it gave it, and the
    accept length (a count: tokens / verify cycles, no clock) is the one it drew.

    Counts, not timings: a client timestamp of a 20-token request is a 200 ms span, in which
    a busy machine's scheduling delay of the client (10 ms) is already 5 %; the client's
    timing error is measured by benchmarks/accuracy.py and tests/component/ with longer outputs.
    """
    from lab.emulator.truth import load_truth

    _truth_header(repo, mode, launch)
    truth = load_truth(_folder(repo, mode, launch) / "ground_truth.jsonl")
    recs = [json.loads(ln) for ln in (_folder(repo, mode, launch) / "requests.jsonl").read_text().splitlines()
            if ln.strip()]
    ok = [r for r in recs if r["ok"]]
    assert len(ok) == BENCH["num_prompts"] * BENCH["repeats"], len(ok)
    for r in ok:
        assert r["completion_tokens"] == truth.requests[r["rid"]]["completion_tokens"], r["rid"]
    c1 = res["levels"]["c1"]
    if mode == "eagle3_decode":
        per_repeat = [truth.accept_length([r["rid"] for r in ok if r["repeat"] == k]) for k in range(BENCH["repeats"])]
        assert c1["accept_length"]["values"] == pytest.approx(per_repeat, rel=1e-9)
        assert res["ground_truth"]["c1"]["accept_length"] == pytest.approx(c1["accept_length"]["mean"], rel=1e-9)
    # the ground truth's decode rate is of this launch's requests (the same aggregation, its own clock)
    assert res["ground_truth"]["c1"]["decode_tok_s"] == pytest.approx(
        sum(truth.run_metrics([r["rid"] for r in ok if r["repeat"] == k],
                              t0=min(r["t_send"] for r in ok if r["repeat"] == k),
                              t1=max(r["t_end"] for r in ok if r["repeat"] == k))["decode_tok_s"]
            for k in range(BENCH["repeats"])) / BENCH["repeats"], rel=1e-9)


def test_each_launch_is_its_own_engine_start_run_in_interleaved_order(repo):
    repo, stdout = repo
    assert [s for s in _running(stdout) if s.startswith("bench")] == [
        "bench@baseline", "bench@eagle3_decode", "bench_launch@2-baseline", "bench_launch@2-eagle3_decode"]
    runs = {}
    for mode in MODES:
        for n in (1, 2):
            res = _result(repo, mode, n)
            assert res["status"] == "ok" and (res["launch"], res["launches"]) == (n, 2)
            runs[(mode, n)] = res["mlflow_run_id"]
            _check_against_its_own_engine(repo, mode, n, res)
    assert len(set(runs.values())) == 4  # four MLflow runs, one per engine start
    pids = {_truth_header(repo, m, n)["pid"] for m in MODES for n in (1, 2)}
    assert len(pids) == 4, pids  # four emulator processes
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    for (mode, n), run_id in runs.items():
        run = client.get_run(run_id)
        assert run.data.tags["launch"] == str(n) and run.data.tags["mode"] == mode
        assert run.info.run_name.endswith(f"| launch {n}/2")
    # the sentinel hashes one configuration for both launches of a mode (launches not hashed)
    assert _result(repo, "baseline", 1)["sentinel"]["config_hash"] == _result(repo, "baseline", 2)["sentinel"][
        "config_hash"]


def test_the_comparison_spans_the_launches(repo):
    repo, stdout = repo
    comp = json.loads((repo / "reports" / "comparison.json").read_text())
    e = comp["modes"]["eagle3_decode"]["c1"]
    assert e["launches"] == 2 and e["interval_scope"] == "across 2 launches"
    sp = e["speedup_decode_tok_s"]
    assert sp["scope"] == "across 2 launches" and sp["unit"] == "launch"
    # the ratio of the means of each launch's own mean, read from the launches' result.json files
    means = {m: [_result(repo, m, n)["levels"]["c1"]["decode_tok_s"]["mean"] for n in (1, 2)] for m in MODES}
    assert sp["ratio"] == pytest.approx(sum(means["eagle3_decode"]) / sum(means["baseline"]), rel=1e-9)
    assert e["decode_tok_s"]["mean"] == pytest.approx(sum(means["eagle3_decode"]) / 2, rel=1e-9)
    # and the emulator's ground truth of the same launches: its speedup lies in the interval across
    # the launches (the client's timing error under load is inside the launches' own spread, not
    # a fixed 5 % of a 200 ms span), and the accept length it drew is the comparison's, exactly
    truth = {m: sum(_result(repo, m, n)["ground_truth"]["c1"]["decode_tok_s"] for n in (1, 2)) for m in MODES}
    assert sp["ci95_lo"] <= truth["eagle3_decode"] / truth["baseline"] <= sp["ci95_hi"], (sp, truth)
    drawn = [_result(repo, "eagle3_decode", n)["ground_truth"]["c1"]["accept_length"] for n in (1, 2)]
    assert e["accept_length"]["mean"] == pytest.approx(sum(drawn) / 2, rel=1e-9)
    paired = e["paired_speedup_decode_tok_s"]
    assert paired["unit"] == "launch" and paired["n_units"] == 2 and paired["n_pairs"] == 2 * 2 * 3
    # every place that shows the interval says what it spans
    # the answer dvc repro ends with: the mode's one line ends with the interval's scope
    assert any(ln.strip().startswith("eagle3_decode: ") and ln.rstrip().endswith(", across 2 launches")
               for ln in stdout.splitlines()), stdout[-3000:]
    summary_json = json.loads((repo / "reports" / "summary.json").read_text())
    assert summary_json["eagle3_decode.c1.speedup_decode_tok_s_scope"] == "across 2 launches"
    assert summary_json["eagle3_decode.c1.launches"] == 2.0
    assert "| across 2 launches |" in (repo / "reports" / "summary.md").read_text()
    assert "across 2 launches" in (repo / "reports" / "report.html").read_text()
    csv_head = (repo / "reports" / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"launches", "interval_scope", "speedup_decode_tok_s_scope"} <= set(csv_head)
    # dvc metrics show: one headline per mode, saying how many launches it spans, not a row per launch
    shown = run_dvc(repo, "metrics", "show", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "results/launches" not in shown.stdout
    head = json.loads((repo / "reports" / "headline" / "eagle3_decode.json").read_text())
    assert head["headline"].endswith(", 2 launches"), head
