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


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
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
