"""``lab ui``'s URL opens MLflow's runs table in headless Chromium (an MLflow server process)."""

from __future__ import annotations

from pathlib import Path

from lab.config import load_params
from lab.tracking.runs import open_run

ROOT = Path(__file__).resolve().parents[2]


def test_lab_ui_url_opens_the_runs_table_in_chromium(tmp_path):
    """`lab ui` prints a URL that opens the experiment on its runs table in MLflow's bundled UI
    (without `workflowType=machine_learning` MLflow 3.17 opens a GenAI traces overview), with the
    headline metric, key params and provenance tags as columns (the shared view state)."""
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
    run = open_run(params, run_name="eagle3_decode | emulator | ui-test-run",
                   tags={"mode": "eagle3_decode", "weights": "emulated", "acceptance": "emulated"})
    run.log_metrics({"decode_tok_s": 96.6, "decode_tok_s_ci95_lo": 94.6, "decode_tok_s_ci95_hi": 98.7,
                     "accept_length": 1.84})
    run.log_params({"mode.algorithm": "EAGLE3", "mode.attention_mode": "decode", "mode.num_steps": "2"})
    run.finish()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "ui", "--port", str(port), "--params", str(pfile)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        url, t0 = None, time.monotonic()
        for line in proc.stdout:
            if line.startswith("[lab] open: "):
                url = line.split(": ", 1)[1].strip()
                break
        assert url and "/runs?workflowType=machine_learning&viewStateShareKey=" in url and "127.0.0.1" in url, url
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
        # a wide window: the grid renders only the columns in view
        dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                              "--window-size=1920,1080", "--virtual-time-budget=25000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180).stdout
        print(f"chromium {time.monotonic() - t_dom:.1f} s")
        assert "Run Name" in dom and "ui-test-run" in dom, dom[-2000:]
        # the lab's view (lab.tracking.runs_view.install_runs_view): the headline metric, its interval, a key param and the
        # provenance tags are columns of the table, with the run's values in them
        # (the tag columns lie beyond the window, which the grid does not render: tests/unit/test_mlflow_view.py)
        for shown in ("decode_tok_s", "decode_tok_s_ci95_lo", "accept_length", "mode.attention_mode", "96.6",
                      "94.6", "1.84"):
            assert shown in dom, (shown, dom[-3000:])
        assert "Error loading shared view state" not in dom and "viewing a shared view" in dom
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
