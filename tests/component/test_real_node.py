"""The real process tree and the real node (issue 12): the emulator starts like SGLang
(launcher + one scheduler child per TP rank + detokenizer, one process group), no child
survives any stop path, a crashed launcher's orphaned child is cleaned by the next launch,
shell-exported secrets never reach server.log or error messages, readiness copes with a
``/health`` that runs a one-token generation, and the OpenAI surfaces clients touch first
(``/v1/models``, ``/v1/completions``) answer in SGLang's shapes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from lab.emulator.proctree import CHILD_NAMES
from lab.engine.command import ServerCommand, build_server_command
from lab.engine.process import ServerError, ServerProcess, stop_stale_servers
from reliability_util import small_params
from scratch import orphan_server_record


def _group(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["status", "name"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def _emulator(tmp_path: Path, faults: list[str] | None = None, mode: str = "eagle3_decode") -> ServerCommand:
    return build_server_command(small_params(tmp_path, faults), mode)


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.05)
    return alive


def test_emulator_process_tree_like_sglang_and_normal_stop(tmp_path):
    cmd = _emulator(tmp_path)
    with ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(30)
        members = _group(srv.proc.pid)
        names = sorted(p.info["name"] for p in members if p.pid != srv.proc.pid)
        assert names == sorted(CHILD_NAMES(8))  # TP 8: 8 schedulers + detokenizer
        assert len(members) == 10
        pids = [p.pid for p in members]
    assert _wait_gone(pids) == []
    assert "emulator process tree" in (tmp_path / "server.log").read_text()


def _tree_from_log(log: Path, srv: ServerProcess, timeout: float = 30.0) -> list[int]:
    """The launcher's pid and its children's, as the emulator itself logs them once it has
    forked them (``emulator process tree: launcher pid P, children [...]``,
    lab/emulator/__main__.py): what the process tree was, however early the launcher exits
    afterwards. Waits for the line (or the launcher's exit) with no fixed sleep."""
    import re

    deadline = time.monotonic() + timeout
    while True:
        exited = srv.proc.poll() is not None  # checked before reading: a line logged before exit is seen
        text = log.read_text(errors="replace") if log.exists() else ""
        m = re.search(r"emulator process tree: launcher pid (\d+), children \[([\d, ]*)\]", text)
        if m:
            return [int(m.group(1)), *(int(x) for x in m.group(2).split(",") if x.strip())]
        if exited or time.monotonic() > deadline:
            raise AssertionError(f"no process-tree line in {log} (launcher exited: {exited}): {text[-2000:]}")
        time.sleep(0.02)


@pytest.mark.parametrize("faults", [["ignore-sigterm"], ["exit-on-startup"], ["crash-after=0"], ["never-ready"]])
def test_no_child_survives_any_stop_path(tmp_path, faults):
    """SIGKILL after an ignored SIGTERM, a crash while loading, a crash mid-benchmark, a
    startup timeout. The tree is read from the emulator's own log line (every pid it forked),
    so a launcher that exits within milliseconds is observed as fully as a slow one; after
    the stop no process of its group is left and none of those pids lives."""
    cmd = _emulator(tmp_path, faults)
    log = tmp_path / "server.log"
    srv = ServerProcess(cmd, log, state_dir=tmp_path, stop_grace_s=1.0)
    pids: list[int] = []
    try:
        srv.start()
        pids = _tree_from_log(log, srv)
        assert pids[0] == srv.proc.pid and len(pids) == 10  # launcher + TP 8 schedulers + detokenizer
        if faults == ["exit-on-startup"]:
            with pytest.raises(ServerError, match="exited with code 3"):
                srv.wait_ready(30)
        elif faults == ["never-ready"]:
            with pytest.raises(ServerError, match="not ready within"):
                srv.wait_ready(1.5)
        else:
            srv.wait_ready(30)
            assert sorted(p.pid for p in _group(srv.proc.pid)) == sorted(pids)
            if faults == ["crash-after=0"]:
                body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
                with pytest.raises(Exception):
                    urllib.request.urlopen(urllib.request.Request(srv.base_url + "/generate", data=body), timeout=10)
                srv.proc.wait(10)
    finally:
        srv.stop()
    assert _wait_gone(pids) == []
    assert _group(pids[0]) == []


def test_stale_group_whose_leader_exited_but_child_lives_is_stopped(tmp_path):
    """The shape an SGLang crash leaves (issue 12): the group leader is gone, a scheduler
    child of the group lives on; the next launch's cleanup stops it."""
    cmd = _emulator(tmp_path, ["orphan-child"])
    srv = ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path).start()
    srv.wait_ready(30)
    pgid = srv.proc.pid
    os.kill(pgid, signal.SIGKILL)  # the launcher crashes; its recorded owner (a kernel) dies too
    srv.proc.wait(10)
    time.sleep(0.3)
    left = _group(pgid)
    assert [p.info["name"] for p in left] == ["sgl::sched_TP0"]  # the others died with their parent
    orphan_server_record(tmp_path, pgid)
    messages: list[str] = []
    assert stop_stale_servers(tmp_path, log=messages.append) == [pgid]
    assert "leader exited, a child lives on" in messages[0]
    assert _wait_gone([p.pid for p in left]) == []
    assert not (tmp_path / f"{pgid}.json").exists()


PRINTS_TOKEN = r"""
import os, sys, time
print("server_args: hf_token env", os.environ.get("HF_TOKEN"), flush=True)
if sys.argv[1] == "die":
    print("fatal: could not download with token " + os.environ.get("HF_TOKEN", ""), flush=True)
    sys.exit(3)
time.sleep(60)
"""


@pytest.mark.parametrize("path", ["die", "stop"])
def test_shell_exported_hf_token_never_reaches_log_or_error(tmp_path, monkeypatch, path):
    """docs/gpu-node.md: ``export HF_TOKEN=...`` in the shell. The engine inherits it and may
    print it; server.log (an MLflow artifact) and the error message (notebook output,
    result.json) must not hold it."""
    secret = "hf_exportedInTheShell123"
    monkeypatch.setenv("HF_TOKEN", secret)
    script = tmp_path / "engine.py"
    script.write_text(PRINTS_TOKEN)
    cmd = ServerCommand(argv=[sys.executable, str(script), path], env={}, engine="fake", host="127.0.0.1",
                        port=small_params(tmp_path).server.port)
    srv = ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path, stop_grace_s=1.0)
    with srv:
        if path == "die":
            with pytest.raises(ServerError) as err:
                srv.wait_ready(30)
            assert secret not in str(err.value) and "could not download" in str(err.value)
        else:
            time.sleep(1.0)
    log = (tmp_path / "server.log").read_text()
    assert secret not in log and "***" in log


def _get(url: str, timeout: float = 30):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read(), time.perf_counter() - t0


def _post(url: str, body: dict):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def test_health_generates_ready_is_cheap_and_openai_surfaces(tmp_path):
    cmd = _emulator(tmp_path)
    with ServerProcess(cmd, tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(30)
        truth_before = (tmp_path / "server.log").stat().st_size
        status, _, dt_ready = _get(srv.base_url + "/ready")
        assert status == 200 and dt_ready < 0.5
        status, _, dt_health = _get(srv.base_url + "/health")
        assert status == 200 and dt_health >= 1.0  # SGLang: one-token generation, checked each second
        status, body, _ = _get(srv.base_url + "/v1/models")
        models = json.loads(body)
        assert models["object"] == "list"
        card = models["data"][0]
        assert card["id"] == "moonshotai/Kimi-K2.5" and card["object"] == "model" and card["owned_by"] == "sglang"
        assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}
        out = json.loads(_post(srv.base_url + "/v1/completions",
                               {"model": card["id"], "prompt": "Say hi", "max_tokens": 5,
                                "return_spec_tokens_details": True}))
        assert out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 5
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["sglext"]["spec_tokens_details"]["spec_verify_ct"] >= 1
        stream = _post(srv.base_url + "/v1/completions", {"prompt": "Say hi", "max_tokens": 6, "stream": True,
                                                          "stream_options": {"include_usage": True}})
        events = [line[6:] for line in stream.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "text_completion" for c in chunks)
        assert chunks[-1]["usage"]["completion_tokens"] == 6
        assert truth_before > 0


class FakeNvml:
    """A fake of the nvidia-ml-py calls lab.engine.gpumem makes: 2 GPUs whose used memory and
    compute processes a test scripts over time (``hold_until``: monotonic time until which
    ``holders`` keep ``held`` bytes on each GPU)."""

    class _Mem:
        def __init__(self, used):
            self.used, self.total, self.free = used, 141 << 30, (141 << 30) - used

    class _Proc:
        def __init__(self, pid):
            self.pid, self.usedGpuMemory = pid, 70 << 30

    def __init__(self, base: int = 1 << 29):
        self.base, self.held, self.holders, self.hold_until = base, 0, set(), 0.0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def _holding(self):
        return time.monotonic() < self.hold_until

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._Mem(self.base + (self.held if self._holding() else 0))

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [self._Proc(p) for p in self.holders] if self._holding() else []


def test_wait_gpu_memory_freed_with_fake_nvml():
    from lab.engine.gpumem import GpuMemoryNotFreed, wait_gpu_memory_freed

    nv = FakeNvml()
    nv.held, nv.holders, nv.hold_until = 70 << 30, {4242}, time.monotonic() + 1.0
    waited = wait_gpu_memory_freed({4242}, [nv.base, nv.base], nvml=nv, timeout_s=10, poll_s=0.05)
    assert 0.9 <= waited < 5
    nv.hold_until = time.monotonic() + 60
    with pytest.raises(GpuMemoryNotFreed) as err:
        wait_gpu_memory_freed({4242}, [nv.base, nv.base], nvml=nv, timeout_s=0.3, poll_s=0.05)
    msg = str(err.value)
    assert "GPU 0: 70.5 GiB used" in msg and "pid(s) [4242]" in msg and "nvidia-smi" in msg
    assert wait_gpu_memory_freed({1}, None, nvml=FakeNvml(), timeout_s=0.1) < 0.1  # nothing held


def test_next_gpu_launch_waits_for_previous_engines_memory(tmp_path):
    """engine sglang: stop() records the group's pids and the pre-launch baseline; the next
    start() waits for NVML to show them gone, and fails clearly if they stay."""
    nv = FakeNvml()
    script = tmp_path / "engine.py"
    script.write_text("import time\nprint('loading', flush=True)\ntime.sleep(60)\n")

    def cmd():
        return ServerCommand(argv=[sys.executable, str(script)], env={}, engine="sglang", host="127.0.0.1",
                             port=small_params(tmp_path).server.port)

    first = ServerProcess(cmd(), tmp_path / "a.log", state_dir=tmp_path, nvml=nv, stop_grace_s=1.0).start()
    assert first._gpu_baseline == [nv.base, nv.base]
    nv.held, nv.holders = 70 << 30, {first.proc.pid}
    nv.hold_until = time.monotonic() + 3600
    first.stop()
    rec = json.loads((tmp_path / "last_gpu_engine.state").read_text())
    assert first.proc.pid in rec["pids"] and rec["baseline_used"] == [nv.base, nv.base]
    nv.hold_until = time.monotonic() + 1.5  # the driver frees it 1.5 s after the stop
    t0 = time.monotonic()
    second = ServerProcess(cmd(), tmp_path / "b.log", state_dir=tmp_path, nvml=nv, stop_grace_s=1.0).start()
    assert time.monotonic() - t0 >= 1.0
    nv.holders, nv.hold_until = {second.proc.pid}, time.monotonic() + 3600
    second.stop()
    with pytest.raises(ServerError, match=r"not freed within 0.5 s: GPU 0: .*still held by the previous engine"):
        ServerProcess(cmd(), tmp_path / "c.log", state_dir=tmp_path, nvml=nv, gpu_free_timeout_s=0.5).start()


def test_simulated_accept_length_keeps_real_tokens_with_topk1(tmp_path):
    """Issue 12 item 4: SGLang's default simulated-token mode emits token id 100 everywhere
    (spec_utils.py ~568), which the degenerate check flags; the lab asks for
    real-draft-token (allowed with topk 1, eagle_utils.py ~818-823). The emulator models both."""
    from lab.measure.hygiene import degenerate_check

    p = small_params(tmp_path)
    p.modes["eagle3_decode"].simulate_accept_length = 2.0
    cmd = build_server_command(p, "eagle3_decode")
    assert cmd.env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token"
    outs = {}
    for token_mode in ("real-draft-token", "fixed"):
        c = ServerCommand(argv=cmd.argv, env={**cmd.env, "SGLANG_SIMULATE_ACC_TOKEN_MODE": token_mode},
                          engine=cmd.engine, host=cmd.host, port=cmd.port)
        with ServerProcess(c, tmp_path / f"{token_mode}.log", state_dir=tmp_path) as srv:
            srv.wait_ready(30)
            outs[token_mode] = [json.loads(_post(srv.base_url + "/generate", {
                "text": f"prompt {i}", "sampling_params": {"max_new_tokens": 24}}))["text"] for i in range(4)]
    recs = {m: [{"ok": True, "rid": str(i), "output_text": t} for i, t in enumerate(texts)] for m, texts in outs.items()}
    assert not degenerate_check(recs["real-draft-token"])["degenerate"]
    assert degenerate_check(recs["fixed"])["degenerate"]
