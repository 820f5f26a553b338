"""Scratch copies of the lab for tests that run DVC stages (pipeline, experiments,
interruption, PostgreSQL-backed MLflow), and the helpers they share."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn at random *below*
    the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768 up by
    default). Ports from ``bind(0)`` come from that range, so a notebook kernel's ZMQ
    sockets, opened between this call and the engine's launch, cannot take the port (seen
    in tests/test_interrupt.py, which starts nine kernels at once)."""
    lo = 32768
    try:
        lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, lo // 2), lo)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # nothing free below the range: any free port
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dvc_env() -> dict[str, str]:
    """Environment for DVC: dvc.yaml runs `python -m lab.pipeline.stage`, so the lab's interpreter
    must come first on PATH."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_dvc(repo: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the lab's `dvc` in ``repo``; returns the completed process (output captured)."""
    dvc = Path(sys.executable).with_name("dvc")
    return subprocess.run([str(dvc), *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, env=dvc_env())


def scratch_repo(repo: Path, edit: Callable[[dict], None] | None = None,
                 extra_files: tuple[str, ...] = ()) -> Path:
    """Copy the lab (code, notebooks, data, DVC config) into ``repo`` and ``git init`` it.

    :param edit: changes the loaded params.yaml dict in place; the server port is always
        set to a free one first.
    :param extra_files: more top-level files to copy (e.g. ``.gitignore``).
    """
    repo.mkdir(parents=True, exist_ok=True)
    for name in ("lab", "notebooks", "data"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore", *extra_files):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["server"]["port"] = free_port()
    if edit is not None:
        edit(params)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def orphan_server_record(records_dir: Path, pgid: int) -> int:
    """Make an engine group's on-disk record look like its owner (a notebook kernel) died
    without stopping it: point ``owner_pid`` at a pid that has exited. Returns that pid."""
    import json

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rec_path = records_dir / f"{pgid}.json"
    rec = json.loads(rec_path.read_text())
    rec["owner_pid"] = dead.pid
    rec_path.write_text(json.dumps(rec))
    return dead.pid
