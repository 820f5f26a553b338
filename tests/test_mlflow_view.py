"""How lab runs read in MLflow: artifacts beside a SQLite store (never in the project's
mlruns/), intervals and warnings on mode runs, the runs-table URL, and `lab ui`: it opens
on the runs table and a signal stops its whole process group."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lab.config import load_params
from lab.tracking.mlflow_view import interval_metrics, runs_table_url, warning_tags
from lab.tracking.runs import artifact_location
from lab.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parents[1]


def test_sqlite_store_keeps_artifacts_beside_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # as under pytest: the current directory is the project
    before = set((ROOT / "mlruns").rglob("*")) if (ROOT / "mlruns").is_dir() else set()
    params = load_params(overrides={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "t"}})
    run = Tracker.from_params(params).open_run("x", {}, nested=False)
    f = tmp_path / "note.txt"
    f.write_text("x")
    run.log_artifact(f)
    run.finish()
    assert list((tmp_path / "mlruns").rglob("note.txt"))
    after = set((ROOT / "mlruns").rglob("*")) if (ROOT / "mlruns").is_dir() else set()
    assert after == before
    assert artifact_location("sqlite:////a/b/mlflow.db") == "file:///a/b/mlruns"
    assert artifact_location("http://127.0.0.1:5000") is None


def test_interval_metrics_and_warning_tags():
    levels = {"c1": {"concurrency": 1, "decode_tok_s": {"mean": 82.0, "ci95_lo": 81.0, "ci95_hi": 83.0},
                     "crosscheck_flags": ["repeat 0: icl vs cycle 9 %"]},
              "c8": {"concurrency": 8, "decode_tok_s": {"mean": 77.0, "ci95_lo": math.nan, "ci95_hi": math.nan}}}
    m = interval_metrics(levels)
    assert m == {"c1.decode_tok_s_ci95_lo": 81.0, "c1.decode_tok_s_ci95_hi": 83.0,
                 "decode_tok_s_ci95_lo": 81.0, "decode_tok_s_ci95_hi": 83.0}
    tags = warning_tags({"warnings": ["c=8: one wave"], "levels": levels})
    assert tags["warnings"] == "c=8: one wave" and tags["warnings_count"] == "2"
    assert tags["crosscheck_flags"] == "c1: repeat 0: icl vs cycle 9 %"
    assert "- c=8: one wave" in tags["mlflow.note.content"] and "icl vs cycle" in tags["mlflow.note.content"]
    clean = warning_tags({"warnings": [], "levels": {}})
    assert clean["warnings"] == "none" and clean["warnings_count"] == "0"


def test_runs_table_url():
    assert runs_table_url("http://127.0.0.1:5000/", "3") == "http://127.0.0.1:5000/#/experiments/3?workflowType=machine_learning"


def test_lab_ui_url_opens_the_runs_table_in_chromium(tmp_path):
    """`lab ui` prints a URL that opens the experiment on its runs table in MLflow's bundled UI
    (without `workflowType=machine_learning` MLflow 3.17 opens a GenAI traces overview)."""
    import os
    import signal
    import subprocess
    import time

    from browser import chromium

    exe = chromium()

    def one_run(pfile: Path) -> None:
        run = Tracker.from_params(load_params(pfile)).open_run("eagle3_decode | emulator | ui-test-run",
                                                               {"mode": "eagle3_decode"}, nested=False)
        run.log_metrics({"decode_tok_s": 96.6, "decode_tok_s_ci95_lo": 94.6, "decode_tok_s_ci95_hi": 98.7})
        run.finish()

    proc, _, _, url = _start_ui(tmp_path, setup=one_run)
    try:
        assert url and url.endswith("?workflowType=machine_learning") and "127.0.0.1" in url, url
        t_dom = time.monotonic()
        dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                              "--virtual-time-budget=25000", "--dump-dom", url], capture_output=True, text=True,
                             timeout=180).stdout
        print(f"chromium {time.monotonic() - t_dom:.1f} s")
        assert "Run Name" in dom and "ui-test-run" in dom, dom[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def _start_ui(tmp_path: Path, setup=None):
    """``lab ui`` on a temp store and a free port, in its own session (as from a terminal);
    ``setup(params_file)`` runs first. Returns ``(process, port, the mlflow server's process
    group, the URL it printed)`` once MLflow answers."""
    import subprocess
    import sys
    import time
    import urllib.request

    import psutil
    import yaml

    from scratch import free_port

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "ui-test"}
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(raw, sort_keys=False))
    if setup is not None:
        setup(pfile)
    port = free_port()
    log = tmp_path / "lab-ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lab.pipeline.cli", "ui", "--port", str(port), "--params",
                                 str(pfile)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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
    url = next((ln.split(": ", 1)[1].strip() for ln in log.read_text().splitlines() if ln.startswith("[lab] open: ")), None)
    children = psutil.Process(proc.pid).children()
    assert len(children) == 1, children
    return proc, port, children[0].pid, url


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_lab_ui_stops_its_whole_process_group_on_a_signal(tmp_path, sig):
    """The signal goes to `lab ui` alone (a service manager's SIGTERM, a kill): the MLflow
    server it started (its own process group, about 10 processes: server and workers) must
    go with it, and the port must be free."""
    import os
    import signal
    import time

    import psutil

    from reliability_util import port_free

    proc, port, pgid, _ = _start_ui(tmp_path)
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


def _pgid(p) -> int | None:
    import os

    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
