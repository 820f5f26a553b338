"""Open an HTML file in headless Chromium and report how each <img> rendered."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=15000"]

_PROBE = ("<script>window.addEventListener('load', () => { document.body.setAttribute('data-img-check', "
          "JSON.stringify(Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth]))); });</script>")


def chromium() -> str:
    """The Chromium binary; the test fails, naming the install, when it is missing."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe:
        return exe
    pytest.fail("chromium not found. Fix: sh scripts/need-system-packages.sh (the first step of README's test command)")


def image_report(page: Path, timeout_s: int = 120) -> list[list]:
    """``[[alt, complete, naturalWidth], ...]`` for every image of ``page`` once loaded.

    A copy of the page gets a load-event probe; Chromium's ``--dump-dom`` prints the DOM
    after it ran. :raises AssertionError: Chromium failed or the probe did not run.
    """
    with tempfile.TemporaryDirectory(prefix="lab-chromium-") as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp}/profile", "--dump-dom",
                               copy.as_uri()], capture_output=True, text=True, timeout=timeout_s)
    m = re.search(r'data-img-check="([^"]*)"', proc.stdout)
    assert m, f"chromium rc={proc.returncode}; no probe result: {proc.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


_WIDTH_PROBE = ("<script>window.addEventListener('load', () => { const w = Array.from(document.querySelectorAll("
                "'table, figure, section')).map(e => Math.ceil(e.getBoundingClientRect().right)); "
                "document.body.setAttribute('data-width-check', JSON.stringify([document.documentElement.scrollWidth, "
                "Math.max(0, ...w)])); });</script>")


def page_width(page: Path, window_px: int = 1280, timeout_s: int = 120) -> tuple[int, int]:
    """``(scrollWidth, rightmost table/figure/section edge)`` of ``page`` in a window
    ``window_px`` wide, CSS pixels: a page that fits has both <= ``window_px``.

    :raises AssertionError: Chromium failed or the probe did not run.
    """
    with tempfile.TemporaryDirectory(prefix="lab-chromium-") as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page.read_text().replace("</body>", _WIDTH_PROBE + "</body>"))
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={window_px},900",
                               "--dump-dom", copy.as_uri()], capture_output=True, text=True, timeout=timeout_s)
    m = re.search(r'data-width-check="([^"]*)"', proc.stdout)
    assert m, f"chromium rc={proc.returncode}; no probe result: {proc.stderr[-2000:]}"
    scroll, right = json.loads(html.unescape(m.group(1)))
    return int(scroll), int(right)
