"""A full disk mid-benchmark (issue 34, item 5): the emulator's engine thread dies on ENOSPC while
writing its ground-truth file (lab/emulator/truth.py); its HTTP server kept answering and each
request waited out its timeout (600 s). Now the server exits (code 1) as SGLang's does when its
scheduler dies, so requests fail at once and the lab reads "engine died"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from lab.config.loading import load_params
from lab.engine.command import build_server_command
from lab.engine.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

#: ``python -m lab.emulator`` whose ground-truth writes hit ENOSPC after the header line (the disk
#: filling up mid-run), as ``write(2)`` reports it.
FULL_DISK = """
import errno, sys
from lab.emulator import truth
real = truth.TruthWriter.write
calls = []
def write(self, obj, flush=False):
    calls.append(1)
    if len(calls) > 1:
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(self, obj, flush)
truth.TruthWriter.write = write
from lab.emulator.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_engine_thread_dying_on_enospc_ends_the_server_and_fails_requests_fast(tmp_path):
    params = load_params(ROOT / "params.yaml", overrides={"emulator": {"startup_delay_s": 0.0}})
    cmd = build_server_command(params, next(iter(params.modes)), ground_truth_file=tmp_path / "truth.jsonl",
                               port=free_port())
    assert cmd.argv[1:3] == ["-m", "lab.emulator"]
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", FULL_DISK, *cmd.argv[3:]], env={**__import__("os").environ, **cmd.env},
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:  # ready: /health answers (its one-token generation may already kill the engine)
            try:
                urllib.request.urlopen(cmd.base_url + "/v1/models", timeout=2)
                break
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None or time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-2000:]
                if proc.poll() is not None:
                    break
                time.sleep(0.2)
        body = json.dumps({"text": "Explain CUDA graphs.", "sampling_params": {"max_new_tokens": 16}}).encode()
        t0 = time.monotonic()
        try:
            req = urllib.request.Request(cmd.base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=60).read()
            answered = True
        except (urllib.error.URLError, OSError, ConnectionError):
            answered = False
        assert not answered, "a request was served although the engine thread is dead"
        assert time.monotonic() - t0 < 10, "the request waited for its timeout"
        assert proc.wait(timeout=10) == 1
        text = (tmp_path / "server.log").read_text()
        assert "emulator engine thread died" in text and "No space left on device" in text
        assert "the server exits (exit code 1)" in text
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
