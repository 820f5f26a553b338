"""lab.engine.telemetry: per-GPU samples through an NVML interface, and the explicit "no GPU
telemetry" note on a machine without GPUs (this one)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from lab.engine.telemetry import GpuSampler


class FakeNvml:
    """The subset of pynvml the sampler calls, for two GPUs with fixed readings."""

    NVML_CLOCK_SM = 1

    def __init__(self):
        self.shutdown = False

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shutdown = True
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return b"NVIDIA H200"
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return 1980
    def nvmlDeviceGetClockInfo(self, h, kind): return 1881 if h == 0 else 990
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=97, memory=40)
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(used=120 * 2**30)
    def nvmlDeviceGetPowerUsage(self, h): return 550_000  # milliwatts


def test_samples_and_summary_with_fake_nvml():
    nv = FakeNvml()
    with GpuSampler(0.05, nvml=nv) as s:
        time.sleep(0.3)
    summ = s.summary()
    assert summ["available"] and summ["samples"] >= 8 and nv.shutdown
    g0, g1 = summ["gpus"]
    assert g0["name"] == "NVIDIA H200" and g0["power_w_mean"] == pytest.approx(550.0)
    assert g0["sm_clock_frac_of_max"] == pytest.approx(1881 / 1980)  # 95 %: the seeds' check
    assert g1["sm_clock_frac_of_max"] == pytest.approx(0.5)
    assert g0["mem_used_gib_max"] == pytest.approx(120.0)
    steps = s.step_metrics()
    assert steps[0][0] == 0 and steps[0][1]["gpu1.sm_clock_mhz"] == 990


def test_no_gpu_gives_a_note_not_zeros():
    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")
    with GpuSampler(0.1, nvml=NoNvml()) as s:
        pass
    summ = s.summary()
    assert summ == {"available": False, "note": "no GPU telemetry: NVML unavailable (NVML Shared Library Not Found)"}
    assert s.step_metrics() == []


def test_this_machine_real_pynvml():
    with GpuSampler(0.1) as s:
        time.sleep(0.05)
    summ = s.summary()
    if not summ["available"]:  # CPU CI machine
        assert summ["note"].startswith("no GPU telemetry")
    else:
        assert summ["gpus"]


def test_interval_validated():
    with pytest.raises(ValueError, match="interval_s"):
        GpuSampler(2.0)
