"""Injected engine faults (lab/emulator/faults.py) against the real orchestration
(:func:`lab.pipeline.bench.run_mode`): each ends the way docs/reliability.md says, leaves no engine
process and loses no measured request."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest
from mlflow.tracking import MlflowClient

from lab.measure.point import BenchError
from lab.pipeline.bench import run_mode
from lab.emulator.faults import FaultError, parse_faults
from lab.engine.process import ServerError
from reliability_util import engines_on, lost_results, port_free, small_params, tally


def _mlflow_run(params, run_id):
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    run = client.get_run(run_id)
    return run, {a.path for a in client.list_artifacts(run_id)}


@contextmanager
def _case(case, params, out):
    """Run a fault case's documented-outcome checks, then check that no engine is left, the
    port is free and nothing was lost; tally the outcome *computed*: survived = every check
    of the case passed (a failed check is tallied as not survived, then re-raised)."""
    documented = False
    try:
        yield
        documented = True
    finally:
        deadline = time.monotonic() + 5
        while engines_on(params.server.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        leaked = len(engines_on(params.server.port))
        lost = lost_results(out)
        free = port_free(params.server.port)
        tally(case, survived=documented and leaked == 0 and lost == 0 and free, leaked=leaked, lost=lost)
    assert leaked == 0, f"{case}: engine processes survived"
    assert free, f"{case}: port {params.server.port} still bound"
    assert lost == 0, f"{case}: measured requests missing from requests.jsonl"


def _assert_failed_record(params, out):
    result = json.loads((out / "result.json").read_text())
    lean = json.loads((out / "metrics.json").read_text())
    assert result["status"] == "failed" and lean["status"] == "failed"
    assert "decode_tok_s" not in lean and "error" in lean  # nothing that looks like success
    run, arts = _mlflow_run(params, result["mlflow_run_id"])
    assert run.info.status == "FAILED"
    assert "server.log" in arts
    return result, lean


def test_fault_strings_validated():
    f = parse_faults(["crash-after=3", "stall=0.5", "ignore-sigterm"])
    assert (f.crash_after, f.stall, f.ignore_sigterm) == (3, 0.5, True)
    for bad in ("crash-after", "stall=abc", "explode", "ignore-sigterm=1", "http500-every=0"):
        with pytest.raises(FaultError, match="Fix"):
            parse_faults([bad])


def test_exit_during_startup(tmp_path):
    params = small_params(tmp_path, ["exit-on-startup"])
    out = tmp_path / "baseline"
    with _case("exit during startup", params, out):
        with pytest.raises(ServerError) as err:
            run_mode(params, "baseline", out)
        # reported because the engine exited, not by the server.startup_timeout_s=30 deadline
        # (the error says which; no wall-clock bound, so machine load cannot decide the verdict)
        assert "not ready within" not in str(err.value)
        assert "exited with code 3" in str(err.value) and "CUDA out of memory" in str(err.value)  # log tail
        _assert_failed_record(params, out)


def test_never_ready_times_out_within_deadline(tmp_path):
    params = small_params(tmp_path, ["never-ready"])
    params.server.startup_timeout_s = 3
    out = tmp_path / "baseline"
    with _case("never ready", params, out):
        with pytest.raises(ServerError, match="not ready within server.startup_timeout_s=3") as err:
            run_mode(params, "baseline", out)
        # the lab gave up at its deadline, on the engine's clock (result.json `startup.startup_s`):
        # not earlier, and not much later (one poll; the whole run_mode's wall time includes
        # MLflow's database set-up and the emulator's start, which a loaded machine stretches)
        startup_s = json.loads((out / "result.json").read_text())["startup"]["startup_s"]
        assert 3.0 <= startup_s < 3.0 + 5.0, startup_s
        assert "loading never finishes" in str(err.value)  # the log tail is in the error
        _assert_failed_record(params, out)


def test_crash_mid_benchmark_stops_at_once_and_keeps_measured(tmp_path):
    # 8 requests at concurrency 2; the engine dies when request 4 arrives. Request
    # timeouts are 120 s: finishing in seconds proves nothing waited them out.
    params = small_params(tmp_path, ["crash-after=3"], num_prompts=8, concurrency=[2], request_timeout_s=120)
    out = tmp_path / "baseline"
    with _case("crash mid-benchmark", params, out):
        t0 = time.perf_counter()
        with pytest.raises(BenchError, match=r"engine died \(exit code 70\)") as err:
            run_mode(params, "baseline", out)
        assert time.perf_counter() - t0 < 60  # half the 120 s request timeout: none was waited out
        assert "scheduler died at request 4" in str(err.value)
        result, lean = _assert_failed_record(params, out)
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        assert len(recs) == 8  # every request accounted for: ok, cut, or not sent
        assert sum(r["ok"] for r in recs) >= 2 and sum(not r["ok"] for r in recs) >= 5
        assert all(r["error"] for r in recs if not r["ok"])
        assert result["partial"]["requests_recorded"] == 8 and lean["partial"] is True


def test_http_500_counted_per_level_not_dropped(tmp_path):
    params = small_params(tmp_path, ["http500-every=3"], num_prompts=6, concurrency=[1, 2])
    out = tmp_path / "baseline"
    with _case("HTTP 500 on every 3rd request", params, out):
        result = run_mode(params, "baseline", out)
        assert result["status"] == "ok"
        for lvl in ("c1", "c2"):  # requests 3, 6 | 9, 12 fail: 2 of 6 per level
            agg = result["levels"][lvl]
            assert (agg["requests"], agg["errors"]) == (6, 2)
            assert agg["error_rate"]["mean"] == pytest.approx(1 / 3)
        lean = json.loads((out / "metrics.json").read_text())
        assert lean["c1.error_rate"] == pytest.approx(1 / 3) and lean["c2.error_rate"] == pytest.approx(1 / 3)
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        assert sum(1 for r in recs if (r["error"] or "").startswith("HTTP 500")) == 4
        from lab.analysis.comparison import load_results, runs_frame, summarize

        s = summarize(load_results(tmp_path, ["baseline"]), runs_frame(tmp_path, ["baseline"]), None)
        assert s["modes"]["baseline"]["c2"]["errors"] == 2
        assert s["modes"]["baseline"]["c2"]["error_rate"]["mean"] == pytest.approx(1 / 3)
        assert {r["errors"] for r in s["rows"]} == {2}


def test_stall_mid_stream_is_measured_not_fatal(tmp_path):
    params = small_params(tmp_path, ["stall=1.0"], num_prompts=2, concurrency=[2], request_timeout_s=30)
    out = tmp_path / "baseline"
    with _case("stream stalled 1 s mid-request", params, out):
        result = run_mode(params, "baseline", out)
        assert result["status"] == "ok" and result["levels"]["c2"]["errors"] == 0
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        gaps = [b[0] - a[0] for r in recs for a, b in zip(r["chunks"], r["chunks"][1:])]
        assert max(gaps) >= 0.95  # the stall shows in the inter-chunk latency


def test_stall_beyond_request_timeout_counts_timeouts(tmp_path):
    params = small_params(tmp_path, ["stall=3"], num_prompts=2, concurrency=[2], request_timeout_s=1)
    out = tmp_path / "baseline"
    with _case("stream stalled past the request timeout", params, out):
        with pytest.raises(BenchError, match=r"no request succeeded at c=2 repeat 0 \(2 sent\): timeout after.*Fix"):
            run_mode(params, "baseline", out)
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        assert len(recs) == 2 and all(r["error"].startswith("timeout") for r in recs)
        _assert_failed_record(params, out)


def test_slow_health_while_busy_is_not_death(tmp_path):
    params = small_params(tmp_path, ["slow-health=6"], num_prompts=4, concurrency=[2])
    out = tmp_path / "baseline"
    with _case("slow /health while busy", params, out):
        result = run_mode(params, "baseline", out)
        assert result["status"] == "ok" and result["levels"]["c2"]["errors"] == 0
        recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        # nothing waited on /health while requests ran: the whole level took well under 6 s
        assert max(r["t_end"] for r in recs) - min(r["t_dispatch"] for r in recs) < 3


def test_sigterm_ignored_needs_sigkill(tmp_path):
    params = small_params(tmp_path, ["ignore-sigterm"], num_prompts=2, concurrency=[1])
    out = tmp_path / "baseline"
    with _case("SIGTERM ignored", params, out):
        result = run_mode(params, "baseline", out)
        assert result["status"] == "ok"
        log = (out / "server.log").read_text()
        assert "ignored SIGTERM for 1 s" in log and "SIGKILLed" in log
        header = json.loads((out / "ground_truth.jsonl").read_text().splitlines()[0])
        import psutil

        assert not psutil.pid_exists(header["pid"]) or psutil.Process(header["pid"]).status() == psutil.STATUS_ZOMBIE


def test_survived_is_computed_a_failed_check_is_tallied_as_not_survived(tmp_path, monkeypatch):
    tally_file = tmp_path / "tally.jsonl"
    monkeypatch.setenv("LAB_RELIABILITY_TALLY", str(tally_file))
    params = small_params(tmp_path)
    with pytest.raises(AssertionError, match="documented outcome"):
        with _case("a case whose check fails", params, tmp_path / "none"):
            assert False, "documented outcome not met"
    with _case("a case whose checks pass", params, tmp_path / "none"):
        pass
    rows = [json.loads(line) for line in tally_file.read_text().splitlines()]
    assert [(r["case"], r["survived"]) for r in rows] == [("a case whose check fails", False),
                                                          ("a case whose checks pass", True)]
