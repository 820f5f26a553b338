"""GPU telemetry during a measured window: SM clock, utilization, memory and power per GPU.

A background thread samples every GPU through nvidia-ml-py (NVML) every ``interval_s``
(default 0.5 s). The seeds' engineer checked by hand that clocks stayed at ~95 % of their
maximum; :func:`GpuSampler.summary` reports exactly that ratio per GPU
(``sm_clock_mhz`` mean / ``nvmlDeviceGetMaxClockInfo(SM)``).

GPU energy over the window comes from each GPU's energy counter
(``nvmlDeviceGetTotalEnergyConsumption``: millijoules since the driver loaded, Volta and newer),
read at the window's start and end: ``energy_j`` per GPU and ``energy_j_total`` in the summary
(None where a GPU has no counter). Energy per output token is that total over the window's
completion tokens (:func:`energy_per_token_mj`; AIPerf and InferenceX report the same quantity).

Without GPUs (no NVML library, no driver, zero devices) the sampler records nothing and
its summary says so: ``{"available": False, "note": "no GPU telemetry: ..."}``, never zeros.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["GpuSampler", "FIELDS", "energy_per_token_mj"]

#: Per-GPU sample fields, with units in the names.
FIELDS = ("sm_clock_mhz", "gpu_util_pct", "mem_util_pct", "mem_used_gib", "power_w")


class GpuSampler:
    """Context manager sampling all GPUs in a thread.

    ``with GpuSampler(0.5) as s: ...`` then ``s.samples`` (list of ``{"t_s": seconds since
    start, "gpu": i, <FIELDS>}``) and ``s.summary()``.

    :param interval_s: sampling period, seconds (<= 1 per DESIGN; default 0.5).
    :param nvml: an NVML module (tests inject a fake); default ``pynvml`` from nvidia-ml-py.
    """

    def __init__(self, interval_s: float = 0.5, *, nvml: Any = None) -> None:
        if not 0 < interval_s <= 1.0:
            raise ValueError(f"interval_s={interval_s}: use a period in (0, 1] seconds")
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.note: str | None = None
        self._nvml = nvml
        self._handles: list[Any] = []
        self._max_sm: list[float | None] = []
        self._names: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._energy0: list[float | None] = []
        self._energy_j: list[float | None] = []

    def _energy_mj(self) -> list[float | None]:
        out: list[float | None] = []
        for h in self._handles:
            try:
                out.append(float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)))
            except Exception:  # no counter on this GPU (pre-Volta) or a fake without it
                out.append(None)
        return out

    def _init(self) -> bool:
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            n = self._nvml.nvmlDeviceGetCount()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded
            self.note = f"no GPU telemetry: NVML unavailable ({exc})"
            return False
        if n == 0:
            self.note = "no GPU telemetry: NVML sees 0 GPUs"
            return False
        nv = self._nvml
        for i in range(n):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            name = nv.nvmlDeviceGetName(h)
            self._names.append(name.decode() if isinstance(name, bytes) else str(name))
            try:
                self._max_sm.append(float(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)))
            except Exception:
                self._max_sm.append(None)
        return True

    def _sample_once(self) -> None:
        nv = self._nvml
        t = time.perf_counter() - self._t0
        for i, h in enumerate(self._handles):
            row: dict[str, Any] = {"t_s": t, "gpu": i}
            for key, fn in (
                ("sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
                ("gpu_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                ("mem_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).memory)),
                ("mem_used_gib", lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**30),
                ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ):
                try:
                    row[key] = fn()
                except Exception:  # a field the device does not support stays absent
                    row[key] = None
            self.samples.append(row)

    def _loop(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self._sample_once()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.perf_counter()))

    def __enter__(self) -> "GpuSampler":
        self._t0 = time.perf_counter()
        if self._init():
            self._energy0 = self._energy_mj()
            self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._sample_once()  # the window's last state
            self._energy_j = [None if a is None or b is None else (b - a) / 1000.0
                              for a, b in zip(self._energy0, self._energy_mj())]
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def summary(self) -> dict[str, Any]:
        """Per-GPU mean/min/max of each field over the window, and SM clock / max clock.

        :returns: ``{"available": True, "interval_s", "samples": n, "gpus": [{"gpu", "name",
            "<field>_mean", "<field>_min", "<field>_max", "sm_clock_frac_of_max", "energy_j"}],
            "energy_j_total"}`` (energy over the window, joules; None without counters), or
            ``{"available": False, "note": "no GPU telemetry: ..."}``.
        """
        if not self.samples:
            return {"available": False, "note": self.note or "no GPU telemetry: no samples taken"}
        gpus = []
        for i, name in enumerate(self._names):
            rows = [r for r in self.samples if r["gpu"] == i]
            g: dict[str, Any] = {"gpu": i, "name": name}
            for f in FIELDS:
                vals = [r[f] for r in rows if r.get(f) is not None]
                if vals:
                    g[f"{f}_mean"] = sum(vals) / len(vals)
                    g[f"{f}_min"] = min(vals)
                    g[f"{f}_max"] = max(vals)
            mx = self._max_sm[i]
            g["sm_clock_frac_of_max"] = g["sm_clock_mhz_mean"] / mx if mx and "sm_clock_mhz_mean" in g else None
            g["energy_j"] = self._energy_j[i] if i < len(self._energy_j) else None
            gpus.append(g)
        energies = [g["energy_j"] for g in gpus]
        total = sum(energies) if energies and all(e is not None for e in energies) else None
        return {"available": True, "interval_s": self.interval_s, "samples": len(self.samples), "gpus": gpus,
                "energy_j_total": total}

    def step_metrics(self) -> list[tuple[int, dict[str, float]]]:
        """MLflow step metrics: ``[(step, {"gpu<i>.<field>": value})]``, one step per sampling
        tick (step = tick index since the window's start)."""
        out: dict[int, dict[str, float]] = {}
        for r in self.samples:
            step = int(round(r["t_s"] / self.interval_s))
            for f in FIELDS:
                if r.get(f) is not None:
                    out.setdefault(step, {})[f"gpu{r['gpu']}.{f}"] = r[f]
        return sorted(out.items())


def energy_per_token_mj(summary: dict[str, Any], completion_tokens: int) -> float | None:
    """GPU energy per output token over a window, millijoules: all GPUs' ``energy_j_total``
    (:meth:`GpuSampler.summary`) x 1000 / the window's completion tokens.

    :returns: None without an energy counter or without tokens.
    """
    total = summary.get("energy_j_total") if summary.get("available") else None
    if total is None or completion_tokens <= 0:
        return None
    return total * 1000.0 / completion_tokens
