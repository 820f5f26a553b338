"""How lab runs read in MLflow: artifacts beside a SQLite store (never in the project's
mlruns/), intervals and warnings on mode runs, the runs-table URL."""

from __future__ import annotations

import math
from pathlib import Path

from lab.config import load_params
from lab.tracking.mlflow_view import interval_metrics, runs_table_url, warning_tags
from lab.tracking.runs import artifact_location, open_run

ROOT = Path(__file__).resolve().parents[1]


def test_sqlite_store_keeps_artifacts_beside_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # as under pytest: the current directory is the project
    before = set((ROOT / "mlruns").rglob("*")) if (ROOT / "mlruns").is_dir() else set()
    params = load_params(overrides={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "t"}})
    run = open_run(params, run_name="x", tags={})
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
    assert len(warning_tags({"warnings": ["x" * 9000]})["warnings"]) < 8000  # MLflow's tag limit


def test_runs_table_url():
    assert runs_table_url("http://127.0.0.1:5000/", "3") == "http://127.0.0.1:5000/#/experiments/3?workflowType=machine_learning"


def test_lab_ui_url_opens_the_runs_table_in_chromium(tmp_path):
    """`lab ui` prints a URL that opens the experiment on its runs table in MLflow's bundled UI
    (without `workflowType=machine_learning` MLflow 3.17 opens a GenAI traces overview)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    import pytest
    import yaml

    from browser import chromium
    from scratch import free_port

    exe = chromium()
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path / 'm.db'}", "experiment": "ui-test"}
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(raw, sort_keys=False))
    params = load_params(pfile)
    run = open_run(params, run_name="eagle3_decode | emulator | ui-test-run", tags={"mode": "eagle3_decode"})
    run.log_metrics({"decode_tok_s": 96.6, "decode_tok_s_ci95_lo": 94.6, "decode_tok_s_ci95_hi": 98.7})
    run.finish()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lab.pipeline.cli", "ui", "--port", str(port), "--params", str(pfile)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        url, t0 = None, time.monotonic()
        for line in proc.stdout:
            if line.startswith("[lab] open: "):
                url = line.split(": ", 1)[1].strip()
                break
        assert url and url.endswith("?workflowType=machine_learning") and "127.0.0.1" in url, url
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow ui did not answer")
        print(f"mlflow ui up after {time.monotonic() - t0:.1f} s")
        t_dom = time.monotonic()
        dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                              "--virtual-time-budget=25000", "--dump-dom", url], capture_output=True, text=True,
                             timeout=180).stdout
        print(f"chromium {time.monotonic() - t_dom:.1f} s")
        assert "Run Name" in dom and "ui-test-run" in dom, dom[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
