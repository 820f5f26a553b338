"""lab.engine.effective: the resolved configuration read back from /server_info, and the plain-words
"identical effective configuration" notice of the compare stage.

The emulator serves SGLang's /server_info, so the whole path is exercised: params -> argv ->
engine -> /server_info -> effective_config -> compare.summarize.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lab.measure import client
from lab.analysis.comparison import summarize
from lab.config import load_params
from lab.engine.effective import effective_config, identical_modes, identical_notice
from lab.engine.command import build_server_command
from lab.engine.process import ServerProcess
from lab.engine.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
_free_port = free_port  # lab.engine.ports


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
    # no backend set: the profile's (the backend its costs were measured on), else the surfaces' fa3
    from lab.emulator.args import DEFAULT_ATTENTION_BACKEND
    from lab.emulator.profile import load_profile

    prof = load_profile(load_params(ROOT / "params.yaml").emulator.profile)[0]
    assert emulator_configs["decode_a"]["verify_attention_backend"] == (prof.attention_backend or DEFAULT_ATTENTION_BACKEND)
    assert emulator_configs["baseline"]["verify_attention_backend"] is None
    assert emulator_configs["decode_a"]["cuda_graph_bs_decode"][-1] == 48
    assert emulator_configs["decode_a"]["decode_attention_backend"] is None  # null unless set (0.5.23)


def test_emulator_names_the_modelled_build_and_notice_follows_it(tmp_path):
    """The default profile models the seeds' older build: /server_info says so, and the two
    EAGLE-3 modes are never called identical although their resolved arguments match; the
    0.5.23-faithful profile is called identical (graph-captured verify in both modes)."""
    base = load_params(ROOT / "params.yaml")
    out = {}
    for prof in ("kimi_k25_tp8_pcie", "kimi_k25_tp8_h200_0523"):
        params = load_params(ROOT / "params.yaml", overrides={
            "server": {**base.server.model_dump(), "port": _free_port()},
            "emulator": {**base.emulator.model_dump(), "startup_delay_s": 0.0, "profile": prof}})
        for mode in ("eagle3_prefill", "eagle3_decode"):
            with ServerProcess(build_server_command(params, mode), tmp_path / f"{prof}-{mode}.log",
                               state_dir=tmp_path) as srv:
                srv.wait_ready(60)
                info = client.fetch_json(srv.base_url + "/server_info")
            log = (tmp_path / f"{prof}-{mode}.log").read_text()
            out[(prof, mode)] = (info, log, effective_config(info, log))
    info, log, eff = out[("kimi_k25_tp8_pcie", "eagle3_prefill")]
    assert info["version"] != "0.5.23" and "older than 0.5.23" in info["emulator_models_build"]
    assert info["emulator_models_build"] in log  # log and /server_info agree
    assert "Capture target verify CUDA graph" not in log  # this build runs prefill-mode verify eagerly
    assert eff["captured_cuda_graph_bs"] is None
    assert "Capture target verify CUDA graph end" in out[("kimi_k25_tp8_pcie", "eagle3_decode")][1]
    old = {m: out[("kimi_k25_tp8_pcie", m)][2] for m in ("eagle3_prefill", "eagle3_decode")}
    assert identical_modes(old) == []
    new = {m: out[("kimi_k25_tp8_h200_0523", m)][2] for m in ("eagle3_prefill", "eagle3_decode")}
    assert out[("kimi_k25_tp8_h200_0523", "eagle3_prefill")][0]["version"] == "0.5.23"
    assert all(e["captured_cuda_graph_bs"] == e["cuda_graph_bs_decode"] for e in new.values())
    assert identical_modes(new) == [["eagle3_prefill", "eagle3_decode"]]


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
