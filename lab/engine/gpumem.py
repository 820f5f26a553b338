"""GPU memory between engine launches: wait until NVML shows the previous engine's memory freed.

After SGLang's process group is stopped the driver releases its GPU memory asynchronously
(seconds for a 1T-parameter model spread over 8 GPUs, longer if a rank is stuck in a CUDA
call). A launch that starts before that fails late with a CUDA out-of-memory error, after
minutes of weight loading. So :class:`lab.engine.process.ServerProcess` records, when it stops a
GPU engine, the pids of its process group and each GPU's used memory from before its launch,
and the next launch waits until no recorded pid holds a GPU context and every GPU's used
memory is back within :data:`SLACK_BYTES` of that baseline
(``nvmlDeviceGetComputeRunningProcesses``, ``nvmlDeviceGetMemoryInfo``). If that does not
happen within the timeout, the launch fails with a message naming the GPU, the memory and
the pids. Without NVML (no driver, the emulator's machine) nothing is waited for.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["GpuMemoryNotFreed", "gpu_snapshot", "wait_gpu_memory_freed", "SLACK_BYTES", "FREE_TIMEOUT_S"]

#: Used memory above the pre-launch baseline still counted as "freed" (other tenants, the
#: driver's own reservations move by a few hundred MiB).
SLACK_BYTES = 1 << 30
#: How long a launch waits for the previous engine's memory (seconds).
FREE_TIMEOUT_S = 120.0


class GpuMemoryNotFreed(RuntimeError):
    """The previous engine's GPU memory was not released in time; the message says where."""


def _nvml(nvml: Any) -> Any | None:
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        return nvml
    except Exception:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded
        return None


def gpu_snapshot(nvml: Any = None) -> dict[str, Any] | None:
    """``{"used_bytes": [per GPU], "pids": [[pids holding a context] per GPU]}``, or None
    without NVML or GPUs.

    :param nvml: an NVML module (tests inject a fake); default ``pynvml`` (nvidia-ml-py).
    """
    nv = _nvml(nvml)
    if nv is None:
        return None
    try:
        n = nv.nvmlDeviceGetCount()
        if n == 0:
            return None
        used, pids = [], []
        for i in range(n):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            used.append(int(nv.nvmlDeviceGetMemoryInfo(h).used))
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                procs = []
            pids.append(sorted({int(p.pid) for p in procs}))
        return {"used_bytes": used, "pids": pids}
    except Exception:
        return None
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _holding(snap: dict[str, Any], pids: set[int], baseline: list[int] | None, slack: int) -> list[str]:
    """Human-readable reasons the memory is not yet freed (empty: freed)."""
    out = []
    for i, used in enumerate(snap["used_bytes"]):
        still = sorted(set(snap["pids"][i]) & pids)
        over = baseline is not None and i < len(baseline) and used > baseline[i] + slack
        if still or over:
            why = f"GPU {i}: {used / 2**30:.1f} GiB used"
            if baseline is not None and i < len(baseline):
                why += f" (before the previous launch: {baseline[i] / 2**30:.1f} GiB)"
            if still:
                why += f", still held by the previous engine's pid(s) {still}"
            out.append(why)
    return out


def wait_gpu_memory_freed(pids: set[int] | list[int], baseline_used: list[int] | None, *, nvml: Any = None,
                          timeout_s: float = FREE_TIMEOUT_S, poll_s: float = 0.5,
                          slack_bytes: int = SLACK_BYTES) -> float:
    """Block until the previous engine's GPU memory is freed; returns the seconds waited.

    :param pids: the previous engine's process-group pids.
    :param baseline_used: each GPU's used bytes before the previous launch (None: pids only).
    :raises GpuMemoryNotFreed: still held after ``timeout_s`` (message: which GPU, how much,
        which pids, and the fix).
    """
    t0 = time.monotonic()
    pids = set(pids)
    reasons: list[str] = []
    while True:
        snap = gpu_snapshot(nvml)
        if snap is None:
            return time.monotonic() - t0
        reasons = _holding(snap, pids, baseline_used, slack_bytes)
        if not reasons:
            return time.monotonic() - t0
        if time.monotonic() - t0 >= timeout_s:
            raise GpuMemoryNotFreed(
                f"the previous engine's GPU memory was not freed within {timeout_s:g} s: " + "; ".join(reasons)
                + ". Fix: find the process with `nvidia-smi` and kill it (a rank stuck in a CUDA call "
                "may need `kill -9`), then run again")
        time.sleep(poll_s)
