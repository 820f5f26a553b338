"""lab.engine.envcapture: optional commands with a clear "not available" note, secrets redacted."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from lab.engine.envcapture import capture_environment, run_optional


def test_missing_tool_is_noted():
    ok, text = run_optional(["definitely-not-a-command-xyz"])
    assert not ok and text.startswith("not available: definitely-not-a-command-xyz not found")


def test_capture_redacts_secrets_and_notes_absent_tools(tmp_path, monkeypatch):
    secret = "hf_abcdefSECRETvalue123"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    # A fake nvidia-smi that leaks the token in its output, first on PATH.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   "case \"$1\" in --query-gpu*) echo '550.54.15, NVIDIA H200'; echo '550.54.15, NVIDIA H200';;\n"
                   "*) echo \"Driver Version: 550.54.15 token=$HF_TOKEN\";; esac\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "environment"
    tags = capture_environment(out, python=sys.executable, engine="sglang",
                               server_env={"NCCL_IB_DISABLE": "1", "WANDB_API_KEY": "wandb-key-42424242"})
    files = {p.name: p.read_text() for p in out.iterdir()}
    assert {"nvidia-smi-q.txt", "nvidia-smi-topo.txt", "nccl-env.txt", "sglang-check-env.txt",
            "pip-freeze.txt", "versions.json"} <= set(files)
    everything = "\n".join(files.values())
    assert secret not in everything and "wandb-key-42424242" not in everything
    assert "token=***" in files["nvidia-smi-q.txt"]
    assert "NCCL_DEBUG=INFO" in files["nccl-env.txt"] and "NCCL_IB_DISABLE=1" in files["nccl-env.txt"]
    assert tags["env.driver_version"] == "550.54.15" and tags["env.gpu_count"] == "2"
    # no SGLang in the lab's venv: a clear note, not a crash
    if "sglang" not in files["pip-freeze.txt"].lower():
        assert files["sglang-check-env.txt"].startswith("not available")
        assert tags["env.sglang_version"] == "not available"
    assert "pydantic==" in files["pip-freeze.txt"]


def test_capture_without_gpu_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no nvidia-smi here
    tags = capture_environment(tmp_path / "env", python=sys.executable, engine="emulator")
    assert (tmp_path / "env" / "nvidia-smi-q.txt").read_text().startswith("not available: nvidia-smi not found")
    assert (tmp_path / "env" / "sglang-check-env.txt").read_text().startswith("not available: engine emulator")
    assert tags["env.driver_version"] == "not available"
