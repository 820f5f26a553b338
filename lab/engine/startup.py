"""Startup progress: the server's phase parsed from its log while the lab waits for readiness.

SGLang 0.5.23 logs, in order (sources in :mod:`lab.emulator.sglog`, which logs the same
lines so that this runs in CI):

- ``Load weight begin. avail mem=...`` (``model_runner.py``);
- tqdm bars ``Loading safetensors checkpoint shards:  25% Completed | 16/64 [...]``
  (``weight_utils.py``, ``BAR_FORMAT`` of ``utils/common.py``; written to stderr with
  ``\\r`` between updates, so lines are split on ``\\r`` too);
- ``Load weight end. elapsed=...`` (once for the target, once for the draft model);
- ``Capture <role> <verify|decode|prefill> CUDA graph begin.`` / ``... end.``
  (``cuda_graph_setup.py``; the speculative draft has its own captures) and
  ``Capturing batches (bs=... avail_mem=...)`` progress;
- ``The server is fired up and ready to roll!`` (``http_server.py``).

Phase durations come from when the lab *observed* each boundary line (polling every
~0.25 s), so they carry that resolution; ``startup_s`` is launch to the start of the
readiness probe that succeeded (``/ready`` = 200, then confirmed by a ``/health`` whose
one-token generation takes >= 1 s and is not counted; ``lab.engine.process.ServerProcess._probe``).
Phases: ``init_s`` (launch to first weight load), ``load_weights_s`` (first ``Load weight
begin`` to last ``Load weight end`` before capture), ``cuda_graph_capture_s`` (first capture
begin to last capture end), ``ready_s`` (from the last phase boundary to readiness).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["StartupTracker", "parse_startup_line", "PHASES"]

PHASES = ("init", "load_weights", "cuda_graph_capture", "ready")

_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+)")
_CAPTURE = re.compile(r"Capture (.+?) (?:CUDA|cuda|CPU|NPU) graph (begin|end)\.")
_CAPTURING = re.compile(r"Capturing batches \(bs=(\d+)")


def parse_startup_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """Classify one log line.

    :returns: ``(event, fields)`` with event one of ``load_begin``, ``shards`` (fields
        ``percent``, ``done``, ``total``), ``load_end``, ``capture_begin`` / ``capture_end``
        (field ``what``, e.g. "target verify"), ``capturing`` (field ``bs``), ``ready``; or
        None for any other line.
    """
    if "Load weight begin" in line:
        return "load_begin", {}
    if "Load weight end" in line:
        return "load_end", {}
    m = _SHARDS.search(line)
    if m:
        return "shards", {"percent": int(m[1]), "done": int(m[2]), "total": int(m[3])}
    m = _CAPTURE.search(line)
    if m:
        return f"capture_{m[2]}", {"what": m[1]}
    m = _CAPTURING.search(line)
    if m:
        return "capturing", {"bs": int(m[1])}
    if "The server is fired up and ready to roll" in line:
        return "ready", {}
    return None


class StartupTracker:
    """Follow ``server.log`` during startup; drive a tqdm bar; time the phases.

    Use as ``srv.wait_ready(timeout, on_poll=tracker.poll)`` then ``tracker.finish(startup_s)``.

    :param log_path: the engine's log (read from its current end: earlier runs' lines are
        ignored).
    :param show: draw a tqdm progress display (percent of weight shards loaded; the bar's
        description names the phase).
    """

    def __init__(self, log_path: str | os.PathLike[str], *, show: bool = True, desc: str = "startup") -> None:
        self.path = Path(log_path)
        try:
            self._offset = self.path.stat().st_size
        except OSError:
            self._offset = 0
        self._buf = ""
        self.phase = "init"
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.percent = 0
        self._desc = desc
        self._bar = None
        if show:
            from tqdm import tqdm  # plain text bar (tqdm.auto wants ipywidgets inside a papermill kernel)

            self._bar = tqdm(total=100, desc=f"{desc}: init", unit="%", leave=True,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}]")

    def _read_new(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        text = self._buf + data.decode(errors="replace")
        parts = re.split(r"[\r\n]", text)
        self._buf = parts.pop()  # an unterminated line waits for its end
        return parts

    def poll(self, elapsed_s: float) -> None:
        """Read new log lines, record phase events at ``elapsed_s`` (seconds since launch)."""
        for line in self._read_new():
            ev = parse_startup_line(line)
            if ev is None:
                continue
            name, fields = ev
            self.events.append((elapsed_s, name, fields))
            if name in ("load_begin", "shards", "load_end"):
                self.phase = "load_weights"
                if name == "shards":
                    self.percent = fields["percent"]
            elif name in ("capture_begin", "capturing", "capture_end"):
                self.phase = "cuda_graph_capture"
            elif name == "ready":
                self.phase = "ready"
        self._draw()

    def _draw(self) -> None:
        if self._bar is None:
            return
        label = {"init": "init", "load_weights": f"loading weights ({self.percent}% of shards)",
                 "cuda_graph_capture": "capturing CUDA graphs", "ready": "ready"}[self.phase]
        self._bar.set_description_str(f"{self._desc}: {label}", refresh=False)
        target = 100 if self.phase == "ready" else self.percent
        if target > self._bar.n:
            self._bar.update(target - self._bar.n)
        else:
            self._bar.refresh()

    def finish(self, startup_s: float) -> dict[str, Any]:
        """Final poll at ``startup_s`` and the phase durations.

        :returns: ``{"startup_s", "phases": {"init_s", "load_weights_s",
            "cuda_graph_capture_s", "ready_s"}, "weight_shards": int | None, "captures":
            [names], "events": n, "resolution": str}``; a phase whose boundary lines never
            appeared is None (e.g. ``cuda_graph_capture_s`` with ``--disable-cuda-graph``).
        """
        self.poll(startup_s)
        self.phase = "ready"
        self._draw()
        if self._bar is not None:
            self._bar.close()
        first = {}
        last = {}
        for t, name, _ in self.events:
            first.setdefault(name, t)
            last[name] = t
        load_start = first.get("load_begin", first.get("shards"))
        load_end = last.get("load_end")
        cap_start, cap_end = first.get("capture_begin"), last.get("capture_end")
        if load_end is not None and cap_start is not None and load_end > cap_start:
            # the draft's weights load after the target's graphs: count to the first capture
            load_end = max((t for t, n, _ in self.events if n == "load_end" and t <= cap_start), default=load_end)
        boundary = max([t for t in (load_end, cap_end, load_start) if t is not None], default=0.0)
        shards = [f["total"] for _, n, f in self.events if n == "shards"]
        return {
            "startup_s": startup_s,
            "phases": {
                "init_s": load_start if load_start is not None else None,
                "load_weights_s": (load_end - load_start) if load_start is not None and load_end is not None else None,
                "cuda_graph_capture_s": (cap_end - cap_start) if cap_start is not None and cap_end is not None else None,
                "ready_s": max(0.0, startup_s - boundary),
            },
            "weight_shards": shards[0] if shards else None,
            "captures": sorted({f["what"] for _, n, f in self.events if n == "capture_begin"}),
            "events": len(self.events),
            "resolution": "boundaries observed by polling the log (~0.25 s)",
        }
