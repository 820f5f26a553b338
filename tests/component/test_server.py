"""lab.engine.command and lab.engine.process with processes: the SGLang argv of every mode checked
by SGLang 0.5.23's own parser, and the engine process lifecycle checked with tiny fake engines
(argv and environment alone: tests/unit/test_server_offline.py).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from lab.engine.ports import free_port
from lab.config import load_params
from lab.engine.command import ServerCommand, build_server_command
from lab.engine.process import ServerError, ServerProcess, check_port_free, stop_stale_servers
from scratch import orphan_server_record
from sglang_argparser import sglang_parse

ROOT = Path(__file__).resolve().parents[2]
# sglang_nodeps: the shared fixture of tests/conftest.py


@pytest.fixture()
def params():
    return load_params(ROOT / "params.yaml")


def test_every_mode_parses_with_sglang_own_arguments(params, sglang_nodeps):
    p = params.model_copy(update={"engine": "sglang"})
    cmds = {m: build_server_command(p, m) for m in p.modes}
    for cmd in cmds.values():
        assert cmd.argv[1:3] == ["-m", "sglang.launch_server"]
    parsed = sglang_parse(sglang_nodeps, [c.argv[3:] for c in cmds.values()])
    for name, res in zip(cmds, parsed["results"]):
        assert res["ok"], f"{name}: {res['error'][-500:]}"
        args = res["args"]
        assert args["model_path"] == p.model.path
        assert args["tp_size"] == p.model.tp_size
        assert args["max_running_requests"] == p.server.max_running_requests
        assert args["cuda_graph_max_bs_decode"] == p.server.cuda_graph_max_bs_decode
        assert args["enable_metrics"] is True
        assert args["host"] == "127.0.0.1"
        mode = p.modes[name]
        if mode.is_speculative:
            assert args["speculative_algorithm"] == "EAGLE3"
            assert args["speculative_num_steps"] == mode.num_steps
            assert args["speculative_eagle_topk"] == mode.eagle_topk
            assert args["speculative_num_draft_tokens"] == mode.num_draft_tokens
            assert args["speculative_attention_mode"] == mode.attention_mode
            assert args["speculative_draft_model_path"] == p.model.draft_path
        else:
            assert args["speculative_algorithm"] is None


def test_sglang_parser_rejects_what_sglang_rejects(sglang_nodeps):
    """The check has teeth: the old ambiguous flag and a bad attention mode fail."""
    res = sglang_parse(sglang_nodeps, [
        ["--model-path", "m", "--cuda-graph-max-bs", "8"],
        ["--model-path", "m", "--speculative-attention-mode", "verify"],
    ])["results"]
    assert not res[0]["ok"] and "ambiguous" in res[0]["error"]
    assert not res[1]["ok"] and "invalid choice" in res[1]["error"]


def test_multi_node_flags_parse_with_sglang(params, sglang_nodeps):
    """Two 8-GPU nodes, TP 16: node 1's launch passes SGLang's own parser."""
    p = params.model_copy(deep=True)
    p.engine = "sglang"
    p.model.tp_size = 16
    p.server = p.server.model_copy(update={"nnodes": 2, "node_rank": 1, "dist_init_addr": "10.0.0.1:5000"})
    flags = build_server_command(p, "eagle3_decode").flags
    res = sglang_parse(sglang_nodeps, [flags])["results"][0]
    assert res["ok"], res["error"][-500:]
    a = res["args"]
    assert (a["nnodes"], a["node_rank"], a["dist_init_addr"], a["tp_size"]) == (2, 1, "10.0.0.1:5000", 16)
    assert "--nnodes" not in build_server_command(params, "baseline").flags  # single node: no flags


# --- lifecycle with fake engines -----------------------------------------------------

FAKE_ENGINE = r"""
import http.server, os, signal, sys, time
port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "child":
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print("loading", flush=True)
if mode == "die":
    print("CUDA out of memory (fake)", flush=True); sys.exit(3)
time.sleep(delay)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _fake(tmp_path, mode="ok", delay=0.2) -> ServerCommand:
    port = free_port()
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    return ServerCommand(argv=[sys.executable, str(script), str(port), str(delay), mode],
                         env={}, engine="fake", host="127.0.0.1", port=port)


def _group_pids(pgid: int) -> list[int]:
    return [p.pid for p in psutil.process_iter(["status"])
            if _safe_pgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE]


def _safe_pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_ready_then_stopped_with_children(tmp_path):
    cmd = _fake(tmp_path, mode="child")
    with ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(20)
        pgid = srv.proc.pid
        time.sleep(0.3)
        assert len(_group_pids(pgid)) >= 2  # leader + child in its own group
        assert list(tmp_path.glob("*.json")), "process group recorded on disk"
    assert _group_pids(pgid) == []
    assert not list(tmp_path.glob("*.json"))
    check_port_free("127.0.0.1", cmd.port)  # port released


def test_dead_server_reported_at_once_with_log_tail(tmp_path):
    cmd = _fake(tmp_path, mode="die")
    t0 = time.perf_counter()
    with pytest.raises(ServerError) as err, ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(60)
    assert time.perf_counter() - t0 < 30  # reported at once, not after the 60 s deadline
    assert "exited with code 3" in str(err.value)
    assert "CUDA out of memory (fake)" in str(err.value)


def test_startup_timeout_stops_group(tmp_path):
    cmd = _fake(tmp_path, delay=60)
    with pytest.raises(ServerError, match="not ready within"), \
            ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(1.0)
    assert not srv.alive()


def test_sigterm_ignored_needs_sigkill(tmp_path):
    cmd = _fake(tmp_path, mode="ignore_term")
    srv = ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path, stop_grace_s=0.5)
    with srv:
        srv.wait_ready(20)
        pgid = srv.proc.pid
    assert _group_pids(pgid) == []


def test_busy_port_refused(tmp_path):
    cmd = _fake(tmp_path)
    with ServerProcess(cmd, tmp_path / "a.log", state_dir=tmp_path / "a") as srv:
        srv.wait_ready(20)
        with pytest.raises(ServerError, match=f"port {cmd.port} on 127.0.0.1 is in use.*Fix"):
            ServerProcess(cmd, tmp_path / "b.log", state_dir=tmp_path / "b").start()


def test_stale_group_from_killed_run_is_stopped(tmp_path):
    cmd = _fake(tmp_path)
    srv = ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path).start()
    srv.wait_ready(20)
    pgid = srv.proc.pid
    messages = []
    assert stop_stale_servers(tmp_path, log=messages.append) == []  # its owner (us) lives: not stale
    assert _group_pids(pgid)
    # the notebook kernel "dies" here without stop(): its recorded owner is now a dead pid
    dead_pid = orphan_server_record(tmp_path, pgid)
    assert stop_stale_servers(tmp_path, log=messages.append) == [pgid]
    assert "stale" in messages[0] and f"owner pid {dead_pid} is gone" in messages[0]
    assert _group_pids(pgid) == []
