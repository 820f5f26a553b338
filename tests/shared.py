"""Helpers that tests of more than one tier use (tests/unit, tests/component, tests/e2e).

- :class:`Server`: a running ``python -m lab.emulator`` subprocess on a free port, with its
  ground-truth file and log (component tests only: it starts a process);
- :data:`DECODE_LINE`: SGLang 0.5.23's "Decode batch" log line, as the emulator must write it;
- :data:`PHYSICS_RATIO_3_OVER_1`: the T=3 / T=1 CUDA-graph forward ratio the default profile's
  decode-mode verify cost comes from;
- :data:`PHYSICS_TINY` and :func:`numbers`: a small physics layer stack and "every number in a
  result" (a not-run result must carry none);
- :func:`start_lab_ui`: ``lab ui`` on a temp store, up and answering (component and e2e
  tests: it starts processes);
- :func:`source_tree`: a source file's syntax tree, parsed once per run.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from lab.engine.ports import free_port

ROOT = Path(__file__).resolve().parents[1]

PHYSICS_RATIO_3_OVER_1 = 9.399 / 6.16  # /work/shared/physics-h200.json graph_ms T=3 / T=1
DECODE_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, "
    r"(accept len: \d+\.\d\d, accept rate: \d+\.\d\d, )?cuda graph: (True|False), gen throughput \(token/s\): \d+\.\d\d, "
    r"#queue-req: \d+(, fwd occupancy: \d+\.\d\d%, fwd\+idle occupancy: \d+\.\d\d%)?$"
)
PHYSICS_TINY = dict(hidden_size=64, num_layers=3, heads_per_gpu=2, head_dim=16, mlp_intermediate_per_gpu=48,
                    kv_context=8, tokens=[1, 2, 3], warmup_iters=1, timed_iters=5)


def markdown_rows(table: str) -> list[dict[str, str]]:
    """The rows of a Markdown table (header line, separator, rows) as ``{header: cell}`` dicts,
    cells stripped, so a test finds a column by its header, never by its position (a new
    catalog column then moves nothing a test reads).

    :raises ValueError: the text has no header and separator line, or a row's cell count
        differs from the header's.
    """
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    if len(lines) < 2 or not set(lines[1]) <= set("|-: "):
        raise ValueError(f"not a Markdown table: {table[:200]!r}")

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    header = cells(lines[0])
    rows = []
    for line in lines[2:]:
        row = cells(line)
        if len(row) != len(header):
            raise ValueError(f"{len(row)} cells under {len(header)} headers: {line!r}")
        rows.append(dict(zip(header, row)))
    return rows


def numbers(obj, skip=("params",)):
    """Every int/float (not bool) in obj, outside the keys in skip."""
    if isinstance(obj, dict):
        return [n for k, v in obj.items() if k not in skip for n in numbers(v, ())]
    if isinstance(obj, list):
        return [n for v in obj for n in numbers(v, ())]
    return [obj] if isinstance(obj, (int, float)) and not isinstance(obj, bool) else []


class Server:
    """A running ``python -m lab.emulator`` subprocess."""

    def __init__(self, tmp: Path, name: str, extra: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.truth_path = tmp / f"{name}.truth.jsonl"
        self.log_path = tmp / f"{name}.log"
        argv = [sys.executable, "-m", "lab.emulator", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
                "--host", "127.0.0.1", "--port", str(self.port), "--enable-metrics", "--decode-log-interval", "5",
                "--max-running-requests", "48", "--cuda-graph-max-bs-decode", "48",
                "--ground-truth-file", str(self.truth_path), "--emulator-startup-delay-s", "0", *extra]
        e = {**os.environ, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", "SGLANG_RECORD_STEP_TIME": "1", **(env or {})}
        self.log_f = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=e, stdout=self.log_f, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    async def wait_ready(self, timeout: float = 20.0) -> None:
        t0 = time.monotonic()
        async with aiohttp.ClientSession() as s:
            while time.monotonic() - t0 < timeout:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"emulator exited {self.proc.returncode}: {self.log_path.read_text()}")
                try:
                    async with s.get(self.url + "/ready") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise TimeoutError(self.log_path.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.log_f.close()


def start_lab_ui(tmp_path: Path, setup=None) -> tuple[subprocess.Popen, int, int, str | None]:
    """``lab ui`` on a temp store and a free port, in its own session (as from a terminal);
    ``setup(params_file)`` runs first. Returns ``(process, port, the mlflow server's process
    group, the URL it printed)`` once MLflow answers ``/health``.

    :raises pytest.fail: ``lab ui`` exited, or MLflow did not answer within 120 s (its log attached).
    """
    import urllib.request

    import psutil
    import pytest
    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "ui-test"}
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(raw, sort_keys=False))
    if setup is not None:
        setup(pfile)
    port = free_port()
    log = tmp_path / "lab-ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "ui", "--port", str(port), "--params", str(pfile)],
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except Exception:
            if proc.poll() is not None:
                pytest.fail(f"lab ui exited with {proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"mlflow ui did not answer: {log.read_text()[-2000:]}")
    url = next((ln.split(": ", 1)[1].strip() for ln in log.read_text().splitlines() if ln.startswith("[lab] open: ")),
               None)
    children = psutil.Process(proc.pid).children()
    assert len(children) == 1, children
    return proc, port, children[0].pid, url


@functools.cache
def source_tree(path: Path) -> ast.Module:
    """``ast.parse`` of a Python source file, parsed once per test run: the layout, DVC-deps and
    bad-input checks each walk every module of lab/ (0.6 s a full parse). Callers only read it."""
    return ast.parse(Path(path).read_text(), filename=str(path))


@functools.cache
def load_script(path: Path):
    """A file under ``scripts/`` or ``benchmarks/`` imported as a module, once per test run
    (by path: those folders are not packages). Callers only read it.

    :raises FileNotFoundError: no such file.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
