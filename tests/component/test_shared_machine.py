"""Shared machines (issue 34, item 3): with ``server.port`` not set (the shipped params.yaml) each
emulator launch takes a free port, so two checkouts' runs side by side both serve; an explicit
port, and real SGLang's, stays what params say. ``lab ui``'s port: tests/component/test_lab_ui.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from lab.config.loading import load_params
from lab.engine.command import build_server_command
from lab.engine.ports import launch_port, port_is_explicit
from lab.engine.process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]


def _generate(base_url: str) -> dict:
    body = json.dumps({"text": "Explain CUDA graphs.", "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    req = urllib.request.Request(base_url + "/generate", data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_two_emulators_with_default_params_get_different_ports_and_both_serve(tmp_path, monkeypatch):
    monkeypatch.delenv("LAB_SERVER_PORT", raising=False)
    params = load_params(ROOT / "params.yaml", overrides={"emulator": {"startup_delay_s": 0.0}})
    assert params.engine == "emulator" and not port_is_explicit(params.server), "params.yaml pins server.port"
    mode = next(iter(params.modes))
    a, b = (build_server_command(params, mode, port=launch_port(params)) for _ in range(2))  # as lab/pipeline/bench.py
    assert a.port != b.port and 30000 not in (a.port, b.port)
    assert a.flags[a.flags.index("--port") + 1] == str(a.port)
    with ServerProcess(a, tmp_path / "a.log", state_dir=tmp_path / "a") as sa, \
            ServerProcess(b, tmp_path / "b.log", state_dir=tmp_path / "b") as sb:
        sa.wait_ready(60)
        sb.wait_ready(60)
        for srv in (sa, sb):
            assert _generate(srv.base_url)["meta_info"]["completion_tokens"] == 4


def test_an_explicit_port_and_sglangs_default_are_kept(monkeypatch):
    monkeypatch.delenv("LAB_SERVER_PORT", raising=False)
    pinned = load_params(ROOT / "params.yaml", overrides={"server": {"port": 31234}})
    assert launch_port(pinned) == 31234
    assert build_server_command(pinned, next(iter(pinned.modes)), port=launch_port(pinned)).port == 31234
    monkeypatch.setenv("LAB_SERVER_PORT", "31235")  # a fleet job's placement is explicit too
    assert launch_port(load_params(ROOT / "params.yaml")) == 31235
    monkeypatch.delenv("LAB_SERVER_PORT")
    gpu = load_params(ROOT / "configs" / "h200" / "params-kshard.yaml")
    assert launch_port(gpu) == gpu.server.port == 30000
    unset = load_params(ROOT / "params.yaml", overrides={"engine": "sglang"})
    assert launch_port(unset) == 30000  # SGLang's own default (server_args.py port: int = 30000)
