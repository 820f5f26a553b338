"""lab.engine.startup on a live emulator: it logs the same startup lines as SGLang 0.5.23, so the
tracker times the same phases (parsing alone: tests/unit/test_startup.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

from lab.config import load_params
from lab.engine.command import build_server_command
from lab.engine.process import ServerProcess
from lab.engine.startup import StartupTracker

ROOT = Path(__file__).resolve().parents[2]

def test_emulator_logs_the_same_phases(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = load_params(ROOT / "params.yaml")
    params = load_params(ROOT / "params.yaml", overrides={
        "server": {**base.server.model_dump(), "port": port},
        "emulator": {**base.emulator.model_dump(), "startup_delay_s": 1.0}})
    tr = StartupTracker(tmp_path / "server.log", show=False)
    with ServerProcess(build_server_command(params, "eagle3_decode"), tmp_path / "server.log", state_dir=tmp_path) as srv:
        startup_s = srv.wait_ready(60, poll_s=0.05, on_poll=tr.poll)
    res = tr.finish(startup_s)
    assert res["weight_shards"] == 64
    # the target's verify graph, then the draft's decode and extend graphs, as a real server logs them
    # (tests/fixtures/sglang-0.5.16/tiny/eagle3_decode/server.log)
    assert res["captures"] == ["draft decode", "draft extend", "target verify"]
    ph = res["phases"]
    assert ph["load_weights_s"] is not None and ph["cuda_graph_capture_s"] is not None
    assert 0 < ph["load_weights_s"] < startup_s and 0 < ph["cuda_graph_capture_s"] < startup_s
