"""lab.engine.window: a ``bench.context_tokens`` length the served model cannot hold is refused
before any launch, naming the key, the window and the fix (issue 30, item 1). The rule is
SGLang 0.5.16's ``TokenizerManager._validate_one_request`` (``input + reserved + max_new_tokens
<= context_len``, reserved = the EAGLE draft slots); the window is ``--context-length``, else the
model config's length by SGLang's ``get_context_length``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.config import ParamsError, load_params
from lab.engine.preflight import FAIL, OK, SKIP, context_check
from lab.engine.window import check_context_window, config_context_length, reserved_tokens, served_window

ROOT = Path(__file__).resolve().parents[2]


def _params(**bench):
    return load_params(ROOT / "params.yaml", overrides={"bench": bench} if bench else None)


def test_config_context_length_follows_sglang():
    assert config_context_length({"max_position_embeddings": 8192}) == 8192
    # the first of CONTEXT_LENGTH_KEYS wins; text_config of a multimodal config is read
    assert config_context_length({"seq_length": 4096, "max_position_embeddings": 8192}) == 4096
    assert config_context_length({"text_config": {"max_position_embeddings": 262144}}) == 262144
    # YaRN-style factor multiplies, unless original_max_position_embeddings is given
    assert config_context_length({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4}}) == 16384
    assert config_context_length({"max_position_embeddings": 4096, "rope_scaling": {
        "factor": 4, "original_max_position_embeddings": 4096}}) == 4096
    assert config_context_length({}) == 2048


def test_emulator_window_and_refusal_names_key_and_fix():
    p = _params(context_tokens=[0, 4096])
    win = check_context_window(p)
    assert win.tokens == 262144 and "emulator" in win.source
    too_long = _params(context_tokens=[0, 262144 - 64])  # 64 output tokens, + 3 draft slots: 3 over
    with pytest.raises(ParamsError) as e:
        check_context_window(too_long)
    msg = str(e.value)
    assert "bench.context_tokens" in msg and "262144" in msg and "Fix:" in msg
    assert f"at most {262144 - 64 - reserved_tokens(too_long.mode('eagle3_decode'))}" in msg
    # the baseline alone reserves no draft slots: the same length fits it
    assert check_context_window(too_long, ["baseline"]).tokens == 262144


def test_server_context_length_and_synthetic_window():
    p = load_params(ROOT / "params.yaml", overrides={"server": {"context_length": 2048},
                                                      "bench": {"context_tokens": [0, 2048]}})
    assert served_window(p).tokens == 2048
    c = context_check(p, list(p.modes))
    assert c.status == FAIL and "2048" in c.detail and "at most" in c.fix
    kshard = load_params(ROOT / "configs/h200/params-kshard-context.yaml")
    win = served_window(kshard)
    assert win.tokens == 8192 and "kshard" in win.source  # lab/engine/synthetic.py max_position_embeddings
    assert context_check(kshard, list(kshard.modes)).status == OK  # 4096 + 64 + 3 fits
    far = load_params(ROOT / "configs/h200/params-kshard-context.yaml", overrides={"bench": {"context_tokens": [8192]}})
    assert context_check(far, list(far.modes)).status == FAIL


def test_real_model_window_from_its_config(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    p = load_params(ROOT / "params.yaml", overrides={"engine": "sglang", "model": {"path": "org/m"},
                                                      "bench": {"context_tokens": [0, 16384]}})
    assert context_check(p, list(p.modes)).status == SKIP  # config not here: SGLang refuses at request time
    snap = cache / "models--org--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 8192}}))
    assert served_window(p).tokens == 8192
    with pytest.raises(ParamsError, match="bench.context_tokens: 16384"):
        check_context_window(p)
