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


_SCREEN_PROBE = ("<script>window.addEventListener('load', () => { const r = e => { if (!e) return null; "
                 "const b = e.getBoundingClientRect(); return [Math.round(b.top), Math.round(b.bottom), "
                 "Math.round(b.right)]; }; const d = document.querySelector('details.warnings'); "
                 "const img = document.querySelector('img'); "
                 "document.body.setAttribute('data-screen-check', JSON.stringify({inner: [window.innerWidth, "
                 "window.innerHeight], verdict: r(document.querySelector('.verdict')), "
                 "modes: r(document.querySelector('ul.modes')), first_img: r(img), "
                 "first_img_alt: img ? img.alt : null, first_img_loaded: img ? img.complete && img.naturalWidth > 0 : false, "
                 "warnings: r(d), warnings_open: d ? d.open : null, "
                 "warnings_unfolded_height: d ? (d.open = true, Math.round(d.getBoundingClientRect().height)) : null, "
                 "scroll_width: document.documentElement.scrollWidth})); });</script>")


def screen_report(page: Path, window: tuple[int, int] = (1280, 1000), timeout_s: int = 120) -> dict:
    """Where the top of ``page`` lands in a ``window`` (width, height CSS px) before any scrolling:
    ``{inner: [w, h], verdict, modes, first_img, warnings: [top, bottom, right] or None,
    first_img_alt, first_img_loaded, warnings_open (as the page opens), warnings_unfolded_height,
    scroll_width}`` (``verdict``: ``.verdict``; ``modes``: ``ul.modes``; ``first_img``: the page's
    first ``<img>``; ``warnings``: ``details.warnings``, folded as the page opens).

    :raises AssertionError: Chromium failed or the probe did not run.
    """
    with tempfile.TemporaryDirectory(prefix="lab-chromium-") as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page.read_text().replace("</body>", _SCREEN_PROBE + "</body>"))
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp}/profile",
                               f"--window-size={window[0]},{window[1]}", "--dump-dom", copy.as_uri()],
                              capture_output=True, text=True, timeout=timeout_s)
    m = re.search(r'data-screen-check="([^"]*)"', proc.stdout)
    assert m, f"chromium rc={proc.returncode}; no probe result: {proc.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))
