"""``lab ui``'s URL opens MLflow's runs table in headless Chromium (an MLflow server process)."""

from __future__ import annotations

from pathlib import Path

from lab.config import load_params
from lab.tracking.runs import open_run

ROOT = Path(__file__).resolve().parents[2]


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
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "ui", "--port", str(port), "--params", str(pfile)],
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
