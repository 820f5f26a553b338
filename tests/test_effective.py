"""lab.effective: the resolved configuration read back from /server_info, and the plain-words
"identical effective configuration" notice of the compare stage.

The emulator serves SGLang's /server_info, so the whole path is exercised: params -> argv ->
engine -> /server_info -> effective_config -> compare.summarize.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pandas as pd
import pytest

from lab import client
from lab.compare import summarize
from lab.config import load_params
from lab.effective import effective_config, identical_modes, identical_notice
from lab.server import ServerProcess, build_server_command

ROOT = Path(__file__).resolve().parents[1]
FX = Path(__file__).parent / "fixtures"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_effective_config_from_sglang_server_info():
    info = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    eff = effective_config(info)
    assert eff["speculative_num_draft_tokens"] == 3
    assert eff["verify_attention_backend"] == "fa3"  # prefill mode -> prefill backend
    assert eff["cuda_graph_bs_decode"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    assert eff["max_running_requests"] == 48 and eff["effective_max_running_requests"] == 48
    assert eff["disable_cuda_graph"] is False


@pytest.fixture(scope="module")
def emulator_configs(tmp_path_factory):
    """Effective configs of four emulator launches: two identical decode-mode twins, one with
    a different decode backend, and a baseline."""
    base = load_params(ROOT / "params.yaml")
    modes = {
        "decode_a": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
                     "attention_mode": "decode"},
        "decode_b": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
                     "attention_mode": "decode"},
        "decode_flashinfer": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
                              "attention_mode": "decode", "decode_attention_backend": "flashinfer"},
        "baseline": {"algorithm": None},
    }
    params = load_params(ROOT / "params.yaml", overrides={
        "modes": modes, "server": {**base.server.model_dump(), "port": _free_port()},
        "emulator": {**base.emulator.model_dump(), "startup_delay_s": 0.0}})
    tmp = tmp_path_factory.mktemp("eff")
    out = {}
    for name in modes:
        cmd = build_server_command(params, name)
        assert "--decode-attention-backend" in cmd.argv if name == "decode_flashinfer" else True
        with ServerProcess(cmd, tmp / f"{name}.log", state_dir=tmp) as srv:
            srv.wait_ready(60)
            out[name] = effective_config(client.fetch_json(srv.base_url + "/server_info"))
    return out


def test_backend_per_mode_reaches_emulator_server_info(emulator_configs):
    assert emulator_configs["decode_flashinfer"]["decode_attention_backend"] == "flashinfer"
    assert emulator_configs["decode_flashinfer"]["verify_attention_backend"] == "flashinfer"
    assert emulator_configs["decode_a"]["verify_attention_backend"] == "fa3"
    assert emulator_configs["baseline"]["verify_attention_backend"] is None
    assert emulator_configs["decode_a"]["cuda_graph_bs_decode"][-1] == 48


def test_identical_notice_when_two_modes_resolve_alike(emulator_configs):
    groups = identical_modes(emulator_configs)
    assert groups == [["decode_a", "decode_b"]]
    notice = identical_notice(groups)
    assert notice.startswith("Identical effective configuration: decode_a and decode_b resolved")
    assert "flashinfer" not in notice and "baseline" not in notice
    # the compare stage says it too (same measured graph share for both)
    results = {m: {"engine": "emulator", "effective_config": eff, "headline": {"verify_graph_fraction": 1.0}}
               for m, eff in emulator_configs.items()}
    summary = summarize(results, pd.DataFrame({"mode": [], "concurrency": []}), "baseline")
    assert summary["identical_effective_config"] == [["decode_a", "decode_b"]]
    assert "decode_a and decode_b" in summary["notice"]


def test_no_notice_when_modes_differ(emulator_configs):
    differ = {k: v for k, v in emulator_configs.items() if k != "decode_b"}
    assert identical_modes(differ) == []
    assert identical_notice(identical_modes(differ)) is None
