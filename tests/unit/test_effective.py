"""lab.engine.effective: the resolved configuration read from a recorded SGLang /server_info, and
the plain-words "identical effective configuration" notice of the compare stage. The same path
through live emulators (params -> argv -> engine -> /server_info -> effective_config ->
compare.summarize) is tests/component/test_effective_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.engine.effective import effective_config, identical_modes

FX = Path(__file__).resolve().parents[1] / "fixtures"


def test_effective_config_from_sglang_server_info():
    info = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    assert info["cuda_graph_bs_decode"] is None and info["prefill_attention_backend"] is None  # 0.5.23 shape
    log = ("[2026-01-05 10:00:00 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 8], elapsed=1.00 s, "
           "mem usage=1.20 GB, avail mem=18.90 GB.\n")
    eff = effective_config(info, log)
    assert eff["speculative_num_draft_tokens"] == 3
    assert eff["verify_attention_backend"] == "fa3"  # prefill backend null -> attention_backend
    assert eff["cuda_graph_bs_decode"] == [*range(1, 9), *range(10, 33, 2), 40, 44, 48]  # cuda_graph_config.decode.bs
    assert eff["captured_cuda_graph_bs"] == [1, 2, 4, 8]  # what the log says was captured
    assert eff["max_running_requests"] == 48 and eff["effective_max_running_requests"] == 48
    assert eff["disable_cuda_graph"] is False and eff["decode_cuda_graph_disabled"] is False
    assert eff["engine_version"] == "0.5.23"
    off = effective_config({**info, "cuda_graph_backend_decode": "disabled",
                            "cuda_graph_config": {"decode": {"backend": "disabled", "bs": [1]}}})
    assert off["decode_cuda_graph_disabled"] is True and off["disable_cuda_graph"] is False


def test_identical_notice_only_where_the_build_makes_the_mode_pick_a_backend_only():
    """Issue 12 item 7: in 0.5.23 two modes with the same backends run the same code; in the
    seeds' older build (the emulator's default profile) the attention mode changes the verify
    path, so no "identical" notice even where every resolved key matches."""
    info = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    dec = {**info, "speculative_attention_mode": "decode"}
    assert identical_modes({"p": effective_config(info), "d": effective_config(dec)}) == [["p", "d"]]
    old = {"version": "seeds-build (older than 0.5.23)", "emulator_models_build": "seeds-build (older than 0.5.23)"}
    assert identical_modes({"p": effective_config({**info, **old}), "d": effective_config({**dec, **old})}) == []
