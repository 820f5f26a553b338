"""``lab ui``'s URL opens MLflow's runs table in headless Chromium (an MLflow server process),
with the lab's columns. (Its process group stopped on a signal: tests/component/test_lab_ui.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from lab.config import load_params
from lab.tracking.tracker import Tracker
from shared import start_lab_ui


def test_lab_ui_url_opens_the_runs_table_in_chromium(tmp_path):
    """`lab ui` prints a URL that opens the experiment on its runs table in MLflow's bundled UI
    (without `workflowType=machine_learning` MLflow 3.17 opens a GenAI traces overview), with the
    headline metric, key params and provenance tags as columns (the shared view state)."""
    from browser import chromium

    exe = chromium()

    def one_run(pfile: Path) -> None:
        run = Tracker.from_params(load_params(pfile)).open_run(
            "eagle3_decode | emulator | ui-test-run",
            {"mode": "eagle3_decode", "weights": "emulated", "acceptance": "emulated"}, nested=False)
        run.log_metrics({"decode_tok_s": 96.6, "decode_tok_s_ci95_lo": 94.6, "decode_tok_s_ci95_hi": 98.7,
                         "accept_length": 1.84})
        run.log_params({"mode.algorithm": "EAGLE3", "mode.attention_mode": "decode", "mode.num_steps": "2"})
        run.finish()

    t0 = time.monotonic()
    proc, _, _, url = start_lab_ui(tmp_path, setup=one_run)
    try:
        print(f"mlflow ui up after {time.monotonic() - t0:.1f} s")
        assert url and "/runs?workflowType=machine_learning&viewStateShareKey=" in url and "127.0.0.1" in url, url
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
