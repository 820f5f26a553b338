"""lab.engine.preflight and ``lab doctor``: readable table, clear verdict, fast failure.

SGLang's parser check is exercised with tiny fake ``sglang`` packages written from SGLang
0.5.23's real signature ``sglang.srt.server_args.prepare_server_args(argv: list[str]) ->
ServerArgs`` (``srt/server_args.py``): one accepts the lab's flags (argparse, rejecting
unknown ones like SGLang does), one raises in ``ServerArgs.__post_init__`` the way SGLang's
validation does.
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from lab.cli import main as lab_main
from lab.config import load_params
from lab.engine.preflight import FAIL, OK, SKIP, argv_check, run_preflight, sglang_check
from lab.engine.command import build_server_command

ROOT = Path(__file__).resolve().parents[2]

_ACCEPTING = '''
import argparse
from dataclasses import dataclass, field

@dataclass
class ServerArgs:
    model_path: str
    tp_size: int = 1
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_attention_mode: str = "prefill"
    max_running_requests: int | None = None
    cuda_graph_max_bs_decode: int | None = None
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None

    def __post_init__(self):
        """0.5.23: construction leaves the record unresolved (server_args.py ~241-242)."""

    def resolve_once(self):
        """Like 0.5.23's resolution: the topk-1 rewrite (speculative_hook.py ~1255-1266) and
        the attention backend (MLA on Hopper: fa3); per-phase backends stay null unless set."""
        self._resolved = {k: getattr(self, k) for k in FIELDS}
        if self.speculative_algorithm and self.speculative_eagle_topk == 1:
            self._resolved["speculative_num_draft_tokens"] = self.speculative_num_steps + 1
        if self.attention_backend is None:
            self._resolved["attention_backend"] = "fa3"
        self._resolved["cuda_graph_config"] = {"decode": {"backend": "full", "bs": [1, 2, 48]}}

    def resolved_dict(self):
        return dict(self._resolved)

FIELDS = ("model_path", "tp_size", "speculative_algorithm", "speculative_num_steps",
          "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_attention_mode",
          "max_running_requests", "cuda_graph_max_bs_decode", "attention_backend",
          "prefill_attention_backend", "decode_attention_backend")

def prepare_server_args(argv: list[str]) -> ServerArgs:
    p = argparse.ArgumentParser(prog="sglang serve")
    p.add_argument("--model-path", required=True)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--speculative-attention-mode", choices=["prefill", "decode"], default="prefill")
    for f in ("--host", "--port", "--mem-fraction-static", "--decode-log-interval", "--context-length",
              "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
              "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--max-running-requests",
              "--cuda-graph-max-bs-decode", "--attention-backend", "--prefill-attention-backend",
              "--decode-attention-backend", "--speculative-draft-attention-backend", "--nnodes",
              "--node-rank", "--dist-init-addr"):
        p.add_argument(f, type=int if f.endswith(("steps", "topk", "tokens", "requests", "decode")) else str)
    for f in ("--trust-remote-code", "--enable-metrics", "--disable-cuda-graph"):
        p.add_argument(f, action="store_true")
    ns = p.parse_args(argv)
    return ServerArgs(**{k: getattr(ns, k) for k in FIELDS if getattr(ns, k) is not None})
'''

_RAISING = '''
def prepare_server_args(argv: list[str]):
    raise ValueError("speculative_eagle_topk > 1 is not supported with speculative_attention_mode=decode")
'''


def _fake_sglang(root: Path, server_args_src: str) -> Path:
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.5.23"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(textwrap.dedent(server_args_src))
    return root


@pytest.fixture()
def params():
    return load_params(ROOT / "params.yaml").model_copy(update={"engine": "sglang"})


def test_doctor_emulator_ready(capsys, tmp_path):
    import socket

    import yaml

    with socket.socket() as s:  # another checkout's `dvc repro` may hold the default port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["server"]["port"] = port
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    assert lab_main(["doctor", "--engine", "emulator", "--params", str(tmp_path / "params.yaml")]) == 0
    out = capsys.readouterr().out
    assert "READY: engine emulator" in out and "NOT READY" not in out
    assert "port" in out and "disk" in out and "dataset" in out


def test_doctor_sglang_without_gpu_fails_fast_and_readably(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    t0 = time.monotonic()
    rc = lab_main(["doctor", "--engine", "sglang"])
    elapsed = time.monotonic() - t0
    out = capsys.readouterr().out
    assert rc == 1
    assert elapsed < 60
    assert "NOT READY: engine sglang" in out
    gpu_line = next(line for line in out.splitlines() if line.startswith("gpus"))
    assert "FAIL" in gpu_line and "no NVIDIA GPU" in gpu_line and "tp_size=8" in gpu_line
    assert "hf download moonshotai/Kimi-K2.5" in out
    assert "hf download lightseekorg/kimi-k2.5-eagle3-mla" in out


def test_argv_check_accepts_with_fake_sglang(params, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(tmp_path, _ACCEPTING)))
    assert sglang_check(sys.executable, 60).status == OK
    flags = build_server_command(params, "eagle3_decode").flags
    i = flags.index("--speculative-num-draft-tokens")
    flags = flags[: i + 1] + ["5"] + flags[i + 2:]  # raw input 5; SGLang runs 3 (topk 1)
    c = argv_check("eagle3_decode", flags, sys.executable, 60)
    assert c.status == OK, c.detail
    assert "resolved by resolve_once()" in c.detail
    assert "speculative_num_draft_tokens=3" in c.detail and "attention_backend=fa3" in c.detail
    assert "speculative_num_draft_tokens=5" not in c.detail
    assert "decode_attention_backend=" not in c.detail  # null unless set, as in 0.5.23
    assert "cuda_graph_config.decode.bs=[1, 2, 48]" in c.detail
    bad = argv_check("x", flags + ["--no-such-flag"], sys.executable, 60)
    assert bad.status == FAIL and "SGLang's parser rejected" in bad.detail


def test_argv_check_reports_sglang_validation_error(params, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(tmp_path, _RAISING)))
    c = argv_check("eagle3_decode", build_server_command(params, "eagle3_decode").flags, sys.executable, 60)
    assert c.status == FAIL
    assert "ValueError" in c.detail and "not supported with speculative_attention_mode=decode" in c.detail
    report = run_preflight(params, ["eagle3_decode"], timeout_s=60)
    rows = {r.name: r for r in report.checks}
    assert rows["sglang"].status == OK and rows["argv[eagle3_decode]"].status == FAIL
    assert not report.ok


def test_argv_check_times_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(
        tmp_path, "import time\ndef prepare_server_args(argv: list[str]):\n    time.sleep(30)\n")))
    c = argv_check("m", ["--model-path", "m"], sys.executable, 2)
    assert c.status == FAIL and "timed out after 2 s" in c.detail


def test_sglang_missing_skips_argv(params, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    report = run_preflight(params, ["baseline"], timeout_s=60)
    rows = {r.name: r for r in report.checks}
    if rows["sglang"].status == FAIL:  # the lab's venv has no SGLang
        assert rows["argv[baseline]"].status == SKIP


def test_run_mode_stops_in_seconds_on_failed_preflight(tmp_path, monkeypatch):
    """engine sglang on a machine without GPUs: the stage fails before any launch, with the
    table in result.json and a failed metrics.json."""
    import json

    from lab.pipeline.bench import run_mode
    from lab.engine.preflight import PreflightError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    base = load_params(ROOT / "params.yaml")
    p = load_params(ROOT / "params.yaml", overrides={
        "engine": "sglang", "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "t"}})
    out = tmp_path / "baseline"
    t0 = time.monotonic()
    with pytest.raises(PreflightError, match="no NVIDIA GPU"):
        run_mode(p, "baseline", out, log=lambda *a: None)
    assert time.monotonic() - t0 < 60
    assert json.loads((out / "metrics.json").read_text())["status"] == "failed"
    res = json.loads((out / "result.json").read_text())
    assert res["preflight"]["ok"] is False and "NOT READY" in res["preflight"]["verdict"]
    assert not (out / "server.log").exists()  # nothing was launched
    assert base.engine == "emulator"


def test_argv_check_says_raw_input_when_resolution_cannot_run(params, tmp_path, monkeypatch):
    src = _ACCEPTING.replace('        """Like 0.5.23', '        raise RuntimeError("no CUDA device")\n        """Like 0.5.23')
    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(tmp_path, src)))
    c = argv_check("eagle3_decode", build_server_command(params, "eagle3_decode").flags, sys.executable, 60)
    assert c.status == "warn" and "RAW INPUT" in c.detail and "no CUDA device" in c.detail
