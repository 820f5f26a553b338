"""Environment capture per run: what the machine and the software stack were.

Writes one text file per item under ``<results>/<mode>/environment/`` (logged as MLflow
artifacts) and returns short MLflow tags. Every command is optional: a missing tool or a
failure writes ``not available: <reason>`` into its file, never stops the run. Every output
passes through :func:`lab.redact.redact_text` with the process environment, and variable
listings through :func:`lab.redact.redact_env`, so HF_TOKEN and other TOKEN/KEY/SECRET/
PASSWORD values never reach an artifact.

Items: ``nvidia-smi -q``, ``nvidia-smi topo -m``, driver and CUDA versions
(``nvidia-smi --query-gpu=driver_version,name``; CUDA from ``torch.version.cuda`` of the
server's Python, else ``nvcc --version``), ``NCCL_*`` variables (of this process and those
the server is given), SGLang version and git commit when SGLang is a source checkout,
``python -m sglang.check_env``, pip freeze (``python -m pip freeze``, else the
``importlib.metadata`` distributions of the server's Python).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from lab.redact import redact_env, redact_text
from lab.engine.registry import engine_for

__all__ = ["capture_environment", "run_optional", "NOT_AVAILABLE", "SGLANG_INFO"]

NOT_AVAILABLE = "not available"
_TIMEOUT_S = 60.0

SGLANG_INFO = r"""
import json, os, subprocess
try:
    import importlib.util
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        raise ImportError("sglang is not installed")
    d = os.path.dirname(spec.origin)
    try:
        import importlib.metadata as md
        v = md.version("sglang")
    except Exception:
        v = None
    try:
        c = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        commit = c.stdout.strip() if c.returncode == 0 else None
    except Exception:
        commit = None
    print(json.dumps({"version": v, "dir": d, "git_commit": commit}))
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""

_FREEZE = r"""
import importlib.metadata as md
print("\n".join(sorted({f"{d.metadata['Name']}=={d.version}" for d in md.distributions() if d.metadata['Name']}, key=str.lower)))
"""


def run_optional(argv: list[str], *, timeout_s: float = _TIMEOUT_S, env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Run a command; ``(True, stdout)`` on exit 0, else ``(False, "not available: <why>")``."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, **(env or {})})
    except FileNotFoundError:
        return False, f"{NOT_AVAILABLE}: {argv[0]} not found"
    except subprocess.TimeoutExpired:
        return False, f"{NOT_AVAILABLE}: {' '.join(argv[:4])} timed out after {timeout_s:g} s"
    except OSError as exc:
        return False, f"{NOT_AVAILABLE}: {exc}"
    if p.returncode != 0:
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        return False, f"{NOT_AVAILABLE}: {' '.join(argv[:4])} exited {p.returncode}: {tail}"
    return True, p.stdout


def capture_environment(out_dir: str | os.PathLike[str], *, python: str = sys.executable,
                        server_env: Mapping[str, str] | None = None, engine: str = "sglang") -> dict[str, str]:
    """Capture the environment into ``out_dir`` (created); returns MLflow tags.

    :param python: the interpreter that runs the server (its SGLang and packages are recorded).
    :param server_env: variables added to the server's environment (NCCL_* shown from it too).
    :param engine: ``params.engine``: its own items (:meth:`lab.engine.registry.Engine.capture_environment`;
        the emulator records the SGLang items as not applicable).
    :returns: tags ``env.driver_version``, ``env.cuda_version``, ``env.gpu_name``,
        ``env.gpu_count``, ``env.sglang_version``, ``env.sglang_git_commit`` (value
        ``not available`` when unknown).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(server_env or {})}

    def write(name: str, text: str) -> None:
        (out / name).write_text(redact_text(text, full_env).rstrip() + "\n")

    tags = {k: NOT_AVAILABLE for k in ("env.driver_version", "env.cuda_version", "env.gpu_name",
                                       "env.gpu_count", "env.sglang_version", "env.sglang_git_commit")}
    ok, text = run_optional(["nvidia-smi", "-q"])
    write("nvidia-smi-q.txt", text)
    ok, text = run_optional(["nvidia-smi", "topo", "-m"])
    write("nvidia-smi-topo.txt", text)
    ok, text = run_optional(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"])
    if ok and text.strip():
        rows = [r.split(",") for r in text.strip().splitlines()]
        tags["env.driver_version"] = rows[0][0].strip()
        tags["env.gpu_name"] = rows[0][-1].strip()
        tags["env.gpu_count"] = str(len(rows))
    ok, cuda = run_optional([python, "-c", "import torch; print(torch.version.cuda or '')"])
    if ok and cuda.strip():
        tags["env.cuda_version"] = cuda.strip() + " (torch)"
    else:
        ok, nvcc = run_optional(["nvcc", "--version"])
        m = re.search(r"release ([\d.]+)", nvcc) if ok else None
        if m:
            tags["env.cuda_version"] = m[1] + " (nvcc)"
    versions = {"driver_version": tags["env.driver_version"], "cuda_version": tags["env.cuda_version"],
                "gpu_name": tags["env.gpu_name"], "gpu_count": tags["env.gpu_count"]}
    nccl = {k: v for k, v in sorted(full_env.items()) if k.startswith("NCCL_")}
    write("nccl-env.txt", "\n".join(f"{k}={v}" for k, v in redact_env(nccl).items())
          or "no NCCL_* variables set (NCCL defaults apply)")
    own_tags, versions["sglang"] = engine_for(engine).capture_environment(python, write)
    tags.update(own_tags)
    write("versions.json", json.dumps(versions, indent=2))
    ok, text = run_optional([python, "-m", "pip", "freeze"])
    if not ok:
        ok2, text2 = run_optional([python, "-c", _FREEZE])
        text = ("# pip unavailable in this Python; distributions from importlib.metadata\n" + text2) if ok2 else text
    write("pip-freeze.txt", text)
    return tags
