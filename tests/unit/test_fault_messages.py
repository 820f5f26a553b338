"""Faults a user meets, each failing at once with its cause and fix in the message, not a bare
traceback (issue 34, item 5): a truncated result.json in compare's preflight, a dataset that is not
UTF-8, bench.num_prompts above the dataset's prompt count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.analysis.comparison import CompareError, load_launches, load_results
from lab.config.loading import load_params
from lab.workload.dataset import DatasetError, load_prompts
from lab.workload.sources import check_prompt_count, load_bench_prompts

ROOT = Path(__file__).resolve().parents[2]


def _result(dir_: Path, text: str) -> Path:
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "result.json").write_text(text)
    return dir_ / "result.json"


@pytest.mark.parametrize("text", ['{"status": "ok", "mode": "base', "", "[1, 2]"])
def test_a_truncated_result_json_names_the_file_and_the_stage_to_rerun(tmp_path, text):
    _result(tmp_path / "baseline", text)
    with pytest.raises(CompareError) as exc:
        load_results(tmp_path, ["baseline"])
    msg = str(exc.value)
    assert str(tmp_path / "baseline" / "result.json") in msg and "Fix: re-run that mode, `dvc repro -f bench@baseline`" in msg


def test_a_truncated_later_launch_names_its_launch_stage(tmp_path):
    _result(tmp_path / "baseline", json.dumps({"status": "ok"}))
    _result(tmp_path / "launches" / "2" / "baseline", '{"status": ')
    with pytest.raises(CompareError, match=r"`dvc repro -f bench_launch@2-baseline`"):
        load_launches(tmp_path, ["baseline"], 2)


def test_invalid_utf8_in_the_dataset_names_the_line_and_the_fix(tmp_path):
    good = (ROOT / "data" / "prompts.jsonl").read_bytes().splitlines(keepends=True)
    bad = good[2].replace(b'"', b'"caf\xe9 ', 1)  # latin-1 e-acute inside the third record
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join([good[0], good[1], bad, *good[3:]]))
    with pytest.raises(DatasetError) as exc:
        load_prompts(path)
    msg = str(exc.value)
    assert f"{path}:3: not UTF-8 text at line 3" in msg and "Fix: save the file as UTF-8" in msg and "iconv" in msg


def test_num_prompts_above_the_dataset_is_refused_unless_asked_for(tmp_path):
    params = load_params(ROOT / "params.yaml", overrides={"bench": {**load_params(ROOT / "params.yaml").bench.model_dump(),
                                                                     "num_prompts": 48}})
    prompts, _ = load_bench_prompts(params.bench, ROOT)
    assert len(prompts) == 40
    with pytest.raises(DatasetError) as exc:
        check_prompt_count(params.bench, len(prompts))
    msg = str(exc.value)
    assert "bench.num_prompts is 48" in msg and "has 40 prompts" in msg
    assert "Fix: set bench.num_prompts to at most 40" in msg and "bench.repeat_prompts: true" in msg
    check_prompt_count(params.bench.model_copy(update={"num_prompts": 40}), 40)
    check_prompt_count(params.bench.model_copy(update={"repeat_prompts": True}), 40)


def test_the_preflight_keeps_the_dataset_errors_own_fix(tmp_path):
    from lab.engine.preflight import _cheap_checks
    from lab.engine.registry import engine_for

    params = load_params(ROOT / "params.yaml")
    params.bench.num_prompts = 41
    row = next(c for c in _cheap_checks(engine_for(params.engine), params.server, params.bench, tmp_path)
               if c.name == "dataset")
    assert row.status != "ok" and "41" in row.detail and "at most 40" in row.fix


def test_a_stage_failure_keeps_the_whole_reason_not_its_first_line():
    """Issue 34: `failed (PreflightError: preflight failed before launching the engine:)` and nothing
    after the colon. The preflight's table (its own format_table) must follow whole."""
    from lab.engine.preflight import FAIL, OK, Check, PreflightReport, format_table
    from lab.pipeline.stage import _short, failure_message

    table = format_table(PreflightReport(engine="emulator", checks=[Check("port", FAIL, "127.0.0.1:30000 is in use by pid 7",
                                                        "set server.port"), Check("disk", OK, "9 GiB free")]))
    detail = _short(f"PreflightError: preflight failed before launching the engine:\n{table}")
    msg = failure_message("bench@baseline", detail, "no earlier result was there")
    first, rest = msg.split("\n", 1)
    assert first == ("stage bench@baseline failed (PreflightError: preflight failed before launching the engine: "
                     "the reason follows); no earlier result was there")
    assert "127.0.0.1:30000 is in use by pid 7" in rest and "set server.port" in rest
    one = failure_message("bench@baseline", "ServerError: engine exited with code 1", "x")
    assert one == "stage bench@baseline failed (ServerError: engine exited with code 1); x"


class _KilledEngine:
    """A ServerProcess whose engine was SIGKILLed: the process is gone (exit code -9)."""

    base_url = "http://127.0.0.1:9"

    class proc:  # noqa: N801 - the attribute ServerProcess has
        returncode = -9

    def alive(self) -> bool:
        return False


def test_an_engine_killed_mid_run_reads_engine_died_not_connection_reset(tmp_path, monkeypatch):
    """Issue 34: a SIGKILLed engine surfaced as a bare ConnectionResetError from /metrics
    (lab/measure/point.py); it must be "engine died (exit code -9)" with the log's tail."""
    from lab.measure import client
    from lab.measure.point import BenchError, measure_point, measurement_points
    from lab.measure.result import ModeResult

    def reset(url, timeout_s=10.0):
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(client, "fetch_text", reset)
    (tmp_path / "server.log").write_text("Decode batch ...\nKilled\n")
    bench = load_params(ROOT / "params.yaml").bench
    t0 = __import__("time").monotonic()
    with pytest.raises(BenchError) as exc, open(tmp_path / "requests.jsonl", "a") as req:
        measure_point(_KilledEngine(), measurement_points(bench)[0], 0, bench=bench, prompts=load_prompts(ROOT / "data" / "prompts.jsonl"),
                      speculative=False, out=tmp_path, req_file=req,
                      result=ModeResult(mode="baseline", engine="emulator"), count=lambda s: len(s.split()))
    assert __import__("time").monotonic() - t0 < 5
    msg = str(exc.value)
    assert msg.startswith("engine died (exit code -9) during baseline c=1 repeat 0") and "Killed" in msg
    assert "ConnectionResetError" in msg and "/metrics" in msg


def test_mlflow_tracking_uri_with_params_own_text_is_accepted_outside_the_main_checkout(tmp_path, monkeypatch):
    """Issue 34: `MLFLOW_TRACKING_URI=<params.yaml's text> dvc exp run --temp` was refused with a fix
    asking for the value already set (the temp copy's cwd resolved the relative sqlite path elsewhere)."""
    from lab.tracking.runs import TrackingError
    from lab.tracking.tracker import tracking_uri

    params = load_params(ROOT / "params.yaml")
    params.mlflow.tracking_uri = "sqlite:///mlflow.db"
    monkeypatch.chdir(tmp_path)  # where `dvc exp run --temp` runs: not the main checkout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    assert tracking_uri(params, ROOT) == f"sqlite:///{ROOT / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(TrackingError, match="Fix: set mlflow.tracking_uri"):
        tracking_uri(params, ROOT)


def test_params_edited_names_each_declared_key_that_changed():
    """The stage's end compares the params dvc.yaml declares for it (what dvc.lock records), by key:
    a mode's own section for bench@<mode> (``${key}``), the sub-keys of a whole section."""
    from lab.pipeline.stage import Stage, params_edited
    from scratch import ROOT

    def stage(name, mode=None):
        return Stage(dvc_name=name, notebook=name, parameters={"mode_name": mode} if mode else {},
                     results_dir="x", complete=lambda _: True)

    before = {"bench": {"num_prompts": 40, "repeats": 3}, "modes": {"baseline": {"algorithm": None},
              "eagle3_decode": {"num_steps": 2}}, "sweep": {"a": 1}, "physics": {"b": 1}}
    after = json.loads(json.dumps(before))
    after["modes"]["eagle3_decode"]["num_steps"] = 3
    after["sweep"]["a"] = 2
    assert params_edited(ROOT, stage("bench", "baseline"), before, after) == []  # not its mode, not its params
    assert params_edited(ROOT, stage("bench", "eagle3_decode"), before, after) == [
        "modes.eagle3_decode.num_steps: 2 -> 3"]
    after["bench"]["num_prompts"] = 20
    assert params_edited(ROOT, stage("physics"), before, after) == ["bench.num_prompts: 40 -> 20"]
    assert params_edited(ROOT, stage("compare"), before, after) == [
        "bench.num_prompts: 40 -> 20", 'modes.eagle3_decode: {"num_steps": 2} -> {"num_steps": 3}', "sweep.a: 1 -> 2"]
