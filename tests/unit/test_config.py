"""lab.config: params.yaml validation errors name the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.config import ParamsError, load_params, main_repo_root

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, mutate) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    mutate(raw)
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_repo_params_are_valid():
    p = load_params(ROOT / "params.yaml")
    assert list(p.modes) == ["baseline", "eagle3_prefill", "eagle3_decode"]
    assert p.engine == "emulator" and p.server.host == "127.0.0.1"
    assert p.baseline_mode == "baseline"


@pytest.mark.parametrize("mutate, key, words", [
    (lambda r: r["server"].update(prot=1), "server.prot", "unknown key"),
    (lambda r: r["bench"].update(num_promts=8), "bench.num_promts", "did you mean 'num_prompts'"),
    (lambda r: r["bench"].update(concurrency=8), "bench.concurrency", "give a list, e.g. [8]"),
    (lambda r: r["bench"].update(num_prompts="many"), "bench.num_prompts", "integer"),
    (lambda r: r["bench"].update(concurrency=[1, 0]), "bench.concurrency", "not positive"),
    (lambda r: r["bench"].update(output_tokens_spread=1.0), "bench.output_tokens_spread", "less than 1"),
    (lambda r: r["bench"].update(concurrency=[]), "bench.concurrency", "at least one level"),
    (lambda r: r["modes"]["eagle3_prefill"].update(num_draft_tokens=4), "modes.eagle3_prefill",
     "set num_draft_tokens: 3"),
    (lambda r: r["modes"]["eagle3_prefill"].update(eagle_topk=2, num_draft_tokens=6), "modes.eagle3_prefill",
     "num_steps*eagle_topk+1=5"),
    (lambda r: r["modes"]["baseline"].update(num_steps=2), "modes.baseline", "without algorithm"),
    (lambda r: r["modes"]["eagle3_decode"].update(attention_mode="verify"), "modes.eagle3_decode.attention_mode", "prefill"),
    (lambda r: r["model"].update(draft_path=None), "modes.eagle3_prefill", "needs a draft model"),
    (lambda r: r["modes"].update({"Bad-Name": {"algorithm": None}}), "modes", "not usable as a stage"),
])
def test_bad_params_name_key_and_fix(tmp_path, mutate, key, words):
    with pytest.raises(ParamsError) as err:
        load_params(write(tmp_path, mutate))
    msg = str(err.value)
    assert key in msg and words in msg, msg
    assert "Fix" in msg or "Input should be" in msg


def test_unregistered_engine_names_key_and_fix(tmp_path):
    """``engine`` is any registered engine's name (lab.config does not import the registry, so an
    unregistered one fails at the first question asked of it, naming the registered ones)."""
    from lab.engine.command import build_server_command
    from lab.engine.preflight import run_preflight
    from lab.engine.registry import EngineError

    p = load_params(write(tmp_path, lambda r: r.update(engine="vllm")))
    for ask in (lambda: build_server_command(p, "baseline"), lambda: run_preflight(p)):
        with pytest.raises(ParamsError) as err:
            ask()
        assert isinstance(err.value, EngineError)
        msg = str(err.value)
        # the registered names, whatever else a test file registered (test_third_engine's fakeeng)
        named = msg.split("one of ", 1)[-1].split(" (", 1)[0].split(", ")
        assert "engine" in msg and "'vllm'" in msg and {"emulator", "sglang"} <= set(named) and "Fix" in msg, msg
    with pytest.raises(ParamsError, match="engine"):
        load_params(write(tmp_path, lambda r: r.update(engine="Not A Name")))


def test_missing_and_malformed_file(tmp_path):
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "params.yaml"
    bad.write_text("engine: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)


def test_injected_mode_slice_overrides_and_is_validated():
    p = load_params(ROOT / "params.yaml", overrides={"modes": {"eagle3_decode": {
        "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "attention_mode": "decode"}}})
    assert p.modes["eagle3_decode"].num_steps == 3
    with pytest.raises(ParamsError, match="num_draft_tokens"):
        load_params(ROOT / "params.yaml", overrides={"modes": {"eagle3_decode": {
            "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 3}}})


def test_sqlite_uri_resolves_to_main_repo_from_dvc_exp_tempdir(tmp_path):
    p = load_params(ROOT / "params.yaml")
    exp_dir = tmp_path / "repo" / ".dvc" / "tmp" / "exps" / "tmpabc123"
    assert main_repo_root(exp_dir) == tmp_path / "repo"
    assert p.mlflow.resolved_tracking_uri(exp_dir) == f"sqlite:///{tmp_path / 'repo' / 'mlflow.db'}"
    assert p.mlflow.resolved_tracking_uri(tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_a_renamed_key_names_its_new_name(tmp_path):
    """bench.profile (a profiler trace) became bench.trace: "profile" is the emulator's cost profile."""
    p = write(tmp_path, lambda r: r["bench"].update(profile=True, profile_requests=3))
    with pytest.raises(ParamsError) as err:
        load_params(p)
    assert "bench.profile: renamed. Fix: call it bench.trace" in str(err.value)
    assert "bench.profile_requests: renamed. Fix: call it bench.trace_requests" in str(err.value)
