"""bench.trace's capture (lab/measure/trace_capture.py) against a live emulator, and the profiling
surfaces against SGLang 0.5.23's source.

The test starts ``python -m lab.emulator``, profiles two requests through /start_profile and
/stop_profile the way ``bench.trace`` does, and checks the trace against the emulator's
ground-truth file (what it actually ran) and the kernel counts of its cost profile.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab.emulator.profile import load_profile
from lab.emulator.truth import load_truth
from lab.engine.ports import free_port
from lab.measure.trace_capture import TRACE_PREFIX, capture_trace, start_profile_body
# sglang_nodeps: the shared fixture of tests/conftest.py (SGLang 0.5.23's source, no deps)

ROOT = Path(__file__).resolve().parents[2]
KIMI, _ = load_profile("kimi_k25_tp8_pcie")
K = KIMI.kernels


_free_port = free_port  # lab.engine.ports


def _post(url, body=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else b"", method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.integration
def test_capture_against_live_emulator(tmp_path):
    port = _free_port()
    truth_path = tmp_path / "truth.jsonl"
    argv = [sys.executable, "-m", "lab.emulator", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
            "--host", "127.0.0.1", "--port", str(port), "--max-running-requests", "48",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x",
            "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
            "--speculative-attention-mode", "prefill", "--ground-truth-file", str(truth_path),
            "--emulator-startup-delay-s", "0"]
    log = open(tmp_path / "emulator.log", "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/ready", timeout=2) as r:  # the cheap probe (/health generates)
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "emulator.log").read_text()
            time.sleep(0.05)
        assert _post(url + "/stop_profile") == (500, "Profiling is not in progress. Call /start_profile first.")
        res = capture_trace(url, tmp_path / "trace", mode="eagle3_prefill", modelled=True,
                              texts=[(0, "Explain CUDA graphs."), (1, "What is speculative decoding?")],
                              max_new_tokens=12, temperature=0.0, request_timeout_s=60, log=lambda s: None)
        assert res["status"] == "ok", res["status"]
        assert res["requests_ok"] == 2
        trace = Path(res["file"])
        assert trace.name.startswith(f"{TRACE_PREFIX}-eagle3_prefill-") and trace.name.endswith("-TP-0.trace.json.gz")
        assert json.loads(gzip.decompress(trace.read_bytes()))["modelled"] is True
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    truth = load_truth(truth_path)
    spec = [it for it in truth.iterations if it["kind"] == "spec"]
    steps = res["analysis"]["steps"]
    verify = [s for s in steps if s["stage"] == "VERIFY"]
    # one VERIFY span per spec iteration the emulator ran, each exactly as long as its verify phase
    assert len(verify) == len(spec) >= 2 * 3
    for s, it in zip(verify, spec):
        assert s["wall_ms"] == pytest.approx(it["verify_s"] * 1e3, abs=1e-3)
        assert s["kernels"] == K.target_forward.value and s["eager_launches"] == K.target_forward.value
        assert s["allreduce_count"] == K.allreduce_per_target_forward.value
    assert sum(1 for s in steps if s["stage"] == "EXTEND") == sum(1 for it in truth.iterations if it["kind"] == "prefill")
    # the spans tile each iteration the emulator ran: DRAFT, VERIFY, DRAFT (extend), ending at its end
    spans = [s for s in steps if s["stage"] in ("DRAFT", "VERIFY")]
    assert len(spans) == 3 * len(spec)
    for i, it in enumerate(spec):
        d1, v, d2 = spans[3 * i:3 * i + 3]
        assert (d1["stage"], v["stage"], d2["stage"]) == ("DRAFT", "VERIFY", "DRAFT")
        assert d1["start_us"] == pytest.approx((it["end"] - it["draft_s"] - it["verify_s"]) * 1e6, abs=1.0)
        assert d1["host_ms"] + d2["host_ms"] == pytest.approx(it["draft_s"] * 1e3, abs=1e-3)
        assert d2["start_us"] + d2["host_ms"] * 1e3 == pytest.approx(it["end"] * 1e6, abs=1.0)
    # cycles: VERIFY start to VERIFY start of consecutive spec iterations (no prefill between)
    iters = truth.iterations
    vstart = {id(it): spans[3 * i + 1]["start_us"] for i, it in enumerate(spec)}
    expect = [(vstart[id(b)] - vstart[id(a)]) / 1e3 for a, b in zip(iters, iters[1:]) if a["kind"] == b["kind"] == "spec"]
    cyc = res["analysis"]["cycles"]
    assert len(cyc) == len(expect) >= 2 * 2
    assert [c["wall_ms"] for c in cyc] == pytest.approx(expect, abs=1e-6)
    assert all(c["stages"] == {"DRAFT": 2, "VERIFY": 1} for c in cyc)
    body = start_profile_body(tmp_path, "x")
    assert body["activities"] == ["CPU", "GPU"] and body["with_stack"] is False and Path(body["output_dir"]).is_absolute()


def test_profile_surfaces_match_sglang_source(sglang_nodeps):
    """The lab's request body and the emulator's surfaces against SGLang 0.5.23's own source."""
    import ast

    from lab.emulator import modelled_trace as et

    srt = sglang_nodeps / "sglang" / "srt"
    tree = ast.parse((srt / "managers" / "io_struct.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ProfileReq")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    assert et._KNOWN_FIELDS == fields
    assert set(start_profile_body(Path("/x"), "id")) <= fields
    http = (srt / "entrypoints" / "http_server.py").read_text()
    for route in ('@app.api_route("/start_profile", methods=["GET", "POST"])',
                  '@app.api_route("/stop_profile", methods=["GET", "POST"])',
                  'content="Start profiling.\\n"', 'content="Stop profiling. This will take some time.\\n"'):
        assert route in http, route
    pm = (srt / "managers" / "scheduler_components" / "profiler_manager.py").read_text()
    for text in ("Profiling is already in progress. Call /stop_profile first.",
                 "Profiling is not in progress. Call /start_profile first.",
                 'filename_parts = [self.profile_id, f"TP-{get_parallel().tp_rank}"]', '+ ".trace.json.gz"',
                 'stage_prefix = self.profile_prefix + "-"', 'os.getenv("SGLANG_TORCH_PROFILER_DIR", "/tmp")'):
        assert text in pm, text
    spans = (srt / "utils" / "profile_utils.py").read_text()
    assert 'stage = "VERIFY"' in spans and 'stage = "DRAFT"' in spans and 'base = f"step[{stage} bs={bs}"' in spans
