"""`lab ui` stops its whole process group on a signal: the MLflow server it starts (its own
process group: server and workers) goes with it and the port is free again. (The URL it
prints opening the runs table in Chromium: tests/e2e/test_mlflow_view_e2e.py.)
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from reliability_util import port_free
from shared import start_lab_ui


def _pgid(p) -> int | None:
    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.slow)])  # ~35 s each
def test_lab_ui_stops_its_whole_process_group_on_a_signal(tmp_path, sig):
    """The signal goes to `lab ui` alone (a service manager's SIGTERM, a kill): the MLflow
    server it started (its own process group, about 10 processes: server and workers) must
    go with it, and the port must be free."""
    proc, port, pgid, _ = start_lab_ui(tmp_path)
    group = [p for p in psutil.process_iter() if _pgid(p) == pgid]
    assert len(group) >= 2, group  # the server and at least one worker: there is a tree to stop
    try:
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in group) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p.pid for p in group if _alive(p)]
    for pid in left:  # never leave one behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == [] and port_free(port)


def _ui_params(tmp_path):
    import yaml

    from shared import ROOT

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "ui-test"}
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(raw, sort_keys=False))
    return pfile


def test_lab_ui_refuses_a_taken_port_at_once_naming_the_fix(tmp_path, capsys):
    """Issue 34: with another checkout's UI on the port, `lab ui` printed a URL to it and exited 0."""
    import socket

    from lab.cli import ui

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.monotonic()
        assert ui(str(_ui_params(tmp_path)), port) == 2
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "Fix: `lab ui` without --port" in err


def test_lab_ui_exits_non_zero_when_mlflow_exits_by_itself(tmp_path, capsys, monkeypatch):
    """MLflow losing the bind (or failing otherwise) after the URL is printed: non-zero, with why.
    (A stand-in for `mlflow ui` that exits 0 at once, as the issue saw; the port default is a free one.)"""
    import subprocess
    import sys

    from lab import cli

    seen = {}
    real = subprocess.Popen

    def fake(cmd, **kw):
        seen["cmd"] = cmd
        return real([sys.executable, "-c", "pass"], **kw)

    monkeypatch.setattr(subprocess, "Popen", fake)
    assert cli.ui(str(_ui_params(tmp_path)), None) == 1
    port = int(seen["cmd"][seen["cmd"].index("--port") + 1])
    assert port != 5000
    out = capsys.readouterr()
    assert f"127.0.0.1:{port}" in out.out
    assert "exited by itself (exit code 0)" in out.err
