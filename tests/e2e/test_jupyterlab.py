"""JupyterLab from the locked environment (issue 11, item 9): `jupyter lab` serves the
notebooks on 127.0.0.1 with a token, headless Chromium renders notebooks/bench.ipynb, and its
parameters cell runs in the project's kernel.

Chromium is driven through its DevTools protocol (``--remote-debugging-port``, a WebSocket
with aiohttp from the lock): JupyterLab runs with ``expose_app_in_browser`` so the page's
``window.jupyterapp`` can select the cell tagged ``parameters`` and run the JupyterLab command
``notebook:run-cell``, as Shift+Enter would. The server's root is a temporary copy of
``notebooks/`` (running a cell marks the notebook dirty; nothing must autosave into the
project). Skips without Chromium locally, fails under CI (tests/browser.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from browser import FLAGS, chromium
from scratch import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

# Runs in the page: wait for the notebook and its kernel, run the parameters cell through the
# JupyterLab command, then ask that kernel for its interpreter and the cell's variables.
_JS = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  let app = null, panel = null;
  for (let i = 0; i < 600; i++) {
    app = window.jupyterapp;
    panel = app && app.shell.currentWidget;
    if (panel && panel.content && panel.content.widgets && panel.content.widgets.length && panel.sessionContext
        && panel.sessionContext.session && panel.sessionContext.session.kernel) break;
    await sleep(100);
  }
  if (!panel || !panel.sessionContext) return JSON.stringify({error: "notebook or kernel not ready", app: !!app});
  await panel.sessionContext.ready;
  const nb = panel.content;
  const tags = c => (c.model.getMetadata ? c.model.getMetadata("tags") : (c.model.metadata || {}).tags) || [];
  const idx = nb.widgets.findIndex(c => c.model.type === "code" && tags(c).includes("parameters"));
  nb.activeCellIndex = idx;
  await app.commands.execute("notebook:run-cell");
  const cell = nb.widgets[idx];
  for (let i = 0; i < 600 && !cell.model.executionCount; i++) await sleep(100);
  const kernel = panel.sessionContext.session.kernel;
  const fut = kernel.requestExecute({code: "import sys, json; print(json.dumps([sys.executable, sys.prefix, mode_name, results_dir]))"});
  let out = "";
  fut.onIOPub = msg => { if (msg.header.msg_type === "stream") out += msg.content.text; };
  await fut.done;
  const rendered = Array.from(document.querySelectorAll(".jp-Cell")).map(e => e.innerText).join("\n");
  return JSON.stringify({idx, count: cell.model.executionCount, kernel: kernel.name, out, cells: nb.widgets.length,
                         rendered_title: rendered.includes("Bench one mode"),
                         rendered_params: rendered.includes("mode_name")});
})()
"""


async def _evaluate(ws_url: str, expression: str, timeout_s: float) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, max_msg_size=0) as ws:
        await ws.send_json({"id": 1, "method": "Runtime.evaluate",
                            "params": {"expression": expression, "awaitPromise": True, "returnByValue": True}})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = await ws.receive_json(timeout=deadline - time.monotonic())
            if msg.get("id") == 1:
                return msg
    raise TimeoutError("no DevTools answer")


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout_s} s: {log.read_text()[-3000:]}")


def test_jupyterlab_renders_bench_notebook_and_runs_its_parameters_cell(tmp_path):
    exe = chromium()
    jupyter = Path(sys.executable).with_name("jupyter")
    assert jupyter.is_file(), "jupyter not in the locked environment. Fix: uv sync --frozen"
    root = tmp_path / "root"
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings")}
    # jupyter_server's kernel spec `python3` is the server's own interpreter: the project env
    spec = json.loads(subprocess.run([str(jupyter), "kernelspec", "list", "--json"], capture_output=True, text=True,
                                     env=env, check=True, timeout=120).stdout)["kernelspecs"]["python3"]
    log = tmp_path / "jupyter.log"
    with open(log, "w") as lf:
        lab = subprocess.Popen([str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                                f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                                "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False",
                                *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI containers run as root
                               cwd=root, env=env, stdout=lf, stderr=subprocess.STDOUT)
    browser = None
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/api/status?token={token}", 120, lab, log)
        with pytest.raises(Exception):  # the token is required
            urllib.request.urlopen(f"{base}/api/sessions", timeout=5)
        assert "127.0.0.1" in log.read_text()
        dport = free_port()
        browser = subprocess.Popen([exe, *[f for f in FLAGS if not f.startswith("--virtual-time-budget")],
                                    f"--user-data-dir={tmp_path / 'chrome'}", f"--remote-debugging-port={dport}",
                                    "--window-size=1400,1000",
                                    f"{base}/lab/tree/notebooks/bench.ipynb?token={token}"],
                                   stdout=subprocess.DEVNULL, stderr=open(tmp_path / "chromium.log", "w"))
        deadline, page = time.monotonic() + 60, None
        while page is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{dport}/json/list", timeout=2) as r:
                    page = next((t for t in json.load(r) if t.get("type") == "page"), None)
            except Exception:
                time.sleep(0.3)
        assert page, (tmp_path / "chromium.log").read_text()[-2000:]
        # JupyterLab may still redirect or reload the page while it starts (slower on a busy
        # machine): DevTools then answers with an error ("context destroyed"); ask again.
        for _attempt in range(10):
            msg = asyncio.run(_evaluate(page["webSocketDebuggerUrl"], _JS, 240))
            if "result" in msg:
                break
            time.sleep(2)
        assert "result" in msg, msg
        assert "exceptionDetails" not in msg.get("result", {}), msg
        res = json.loads(msg["result"]["result"]["value"])
        assert "error" not in res, (res, log.read_text()[-3000:])
        assert res["rendered_title"] and res["rendered_params"], res  # the notebook rendered
        assert res["idx"] >= 0 and res["count"] == 1, res  # its parameters cell ran, first
        exe_path, prefix, mode_name, results_dir = json.loads(res["out"].strip().splitlines()[-1])
        # the `python3` kernel spec; jupyter_client starts its `python` as the server's interpreter
        assert res["kernel"] == "python3" and spec["spec"]["argv"][0] in ("python", sys.executable)
        assert Path(prefix).resolve() == Path(sys.prefix).resolve(), (exe_path, prefix)  # the project's env
        assert (mode_name, results_dir) == ("baseline", "results/baseline")  # the cell's own defaults
    finally:
        if browser is not None:
            browser.kill()
            browser.wait(10)
        lab.terminate()
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            lab.kill()
            lab.wait(10)
    # the project's notebook is untouched (the server's root was a copy)
    assert (ROOT / "notebooks" / "bench.ipynb").read_bytes() == (ROOT / "notebooks" / "bench.ipynb").read_bytes()
