"""Every parameter of the default params.yaml appears in MLflow with its value, and only
credentials are redacted (lab.redact, lab.tracking.params_log): both directions."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.config import load_params
from lab.redact import is_secret_name, redact_argv, redact_env, redact_text
from lab.tracking.runs import flatten_params

ROOT = Path(__file__).resolve().parents[2]

CREDENTIALS = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY",
               "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_PASSWORD", "DB_PASSWD", "AUTH_TOKEN", "hfToken",
               "server.env.HF_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "Authorization", "api_key", "secret"]
NOT_CREDENTIALS = ["num_draft_tokens", "mode.num_draft_tokens", "effective.speculative_num_draft_tokens",
                   "bench.max_new_tokens", "bench.context_tokens", "bench.output_tokens",
                   "bench.output_tokens_spread", "physics.tokens", "physics.verify_tokens",
                   "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "SGLANG_SIMULATE_ACC_LEN", "keyboard_layout",
                   "monkey", "max_running_requests"]


@pytest.mark.parametrize("name", CREDENTIALS)
def test_credentials_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", NOT_CREDENTIALS)
def test_token_counts_and_settings_are_not_secret(name):
    assert not is_secret_name(name)


def test_redaction_both_directions_on_env_argv_and_text():
    env = {"HF_TOKEN": "hf_abcdef123", "TOKENIZERS_PARALLELISM": "false", "WANDB_API_KEY": "k-999999"}
    assert redact_env(env) == {"HF_TOKEN": "***", "TOKENIZERS_PARALLELISM": "false", "WANDB_API_KEY": "***"}
    argv = ["--speculative-num-draft-tokens", "3", "--api-key", "sk-1234", "--hf-token=hf_x1234", "--max-new-tokens", "64"]
    assert redact_argv(argv) == ["--speculative-num-draft-tokens", "3", "--api-key", "***", "--hf-token=***",
                                 "--max-new-tokens", "64"]
    text = redact_text("tok hf_abcdef123 parallel false", env)
    assert "hf_abcdef123" not in text and "false" in text  # TOKENIZERS_PARALLELISM's value is no secret


def _leaves(obj, prefix=""):
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, obj


def _expected(value) -> str:
    return flatten_params({"x": value})["x"]


def test_every_default_param_reaches_a_run_with_its_value():
    """Walk the default params.yaml: each leaf is in the params of the runs that log it (its
    mode's run; physics.* in the physics run; sweep.* in the comparison run, the one stage that
    declares it) with its value, never ``***``."""
    from lab.tracking.params_log import compare_run_params, mode_run_params

    params = load_params(ROOT / "params.yaml")
    raw = params.model_dump()
    physics = flatten_params({"physics": params.physics.model_dump()})  # what lab.tracking.physics_log.log_physics logs
    logged = {m: mode_run_params(params, m) for m in params.modes}
    missing = []
    for name, value in _leaves(raw):
        top = name.split(".")[0]
        if top == "modes":
            _, mode, key = name.split(".", 2)
            checks = [(logged[mode], f"mode.{key}")]
        elif top == "physics":
            checks = [(physics, name)]
        elif top == "sweep":
            checks = [(compare_run_params(params), name)]
        else:
            checks = [(run, name) for run in logged.values()]
        for run, key in checks:
            if run.get(key) != _expected(value):
                missing.append(f"{key}: logged {run.get(key)!r}, params.yaml {_expected(value)!r}")
    assert not missing, missing
    assert logged["eagle3_decode"]["mode.num_draft_tokens"] == "3"
    assert logged["eagle3_decode"]["bench.max_new_tokens"] == str(params.bench.max_new_tokens)


def test_tracking_uri_password_is_the_only_part_hidden():
    from lab.tracking.params_log import mode_run_params

    params = load_params(ROOT / "params.yaml").model_copy(deep=True)
    params.mlflow.tracking_uri = "postgresql://lab:s3cr3t-pw@db.internal:5432/mlflow"
    params.server.env = {"HF_TOKEN": "hf_verysecret", "TOKENIZERS_PARALLELISM": "false"}
    logged = mode_run_params(params, "baseline")
    assert logged["mlflow.tracking_uri"] == "postgresql://lab:***@db.internal:5432/mlflow"
    assert logged["server.env.HF_TOKEN"] == "***"
    assert logged["server.env.TOKENIZERS_PARALLELISM"] == "false"
    assert "s3cr3t-pw" not in str(logged) and "hf_verysecret" not in str(logged)
