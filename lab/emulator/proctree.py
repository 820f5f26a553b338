"""The emulator's process tree, shaped like SGLang's: a launcher with one scheduler child
per TP rank and a detokenizer child, all in the launcher's process group.

SGLang 0.5.23 ``launch_server`` starts ``sglang::scheduler_TP<r>`` processes
(``managers/scheduler.py`` ~6269-6294) and ``sglang::detokenizer``
(``managers/detokenizer_manager.py`` ~550-551); each calls ``kill_itself_when_parent_died``
(``utils/common.py`` ~3432-3437: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``). The emulator's
children do the same and nothing else (they sleep: the work stays in the launcher's engine
thread), so the lab's lifecycle code (process-group stop, stale-group cleanup) meets the
real tree at almost no cost (one ``fork`` each, pages shared copy-on-write).

Fault ``orphan-child`` (:mod:`lab.emulator.faults`) leaves the parent-death signal off in
rank 0's scheduler, so it outlives a crashed launcher: the shape a scheduler stuck in a CUDA
call leaves behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

__all__ = ["spawn_children", "CHILD_NAMES"]

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15


def CHILD_NAMES(tp_size: int) -> list[str]:  # noqa: N802 (a name list, read like a constant)
    """Process names (``comm``, at most 15 bytes) of the children for ``tp_size`` ranks."""
    return [f"sgl::sched_TP{r}" for r in range(max(1, tp_size))] + ["sgl::detok"]


def _prctl(option: int, arg) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _child(name: str, parent: int, pdeath: bool) -> None:
    """Body of a forked child: never returns."""
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _prctl(PR_SET_NAME, name.encode()[:15])
        if pdeath:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the launcher died before prctl took effect
                os._exit(0)
        while True:
            time.sleep(3600)
    finally:
        os._exit(0)


def spawn_children(tp_size: int, *, orphan_rank0: bool = False) -> list[int]:
    """Fork the scheduler (one per TP rank) and detokenizer children; returns their pids.

    Call before any thread starts (``fork`` copies only the calling thread). The children
    stay in the caller's process group and session.
    """
    parent = os.getpid()
    pids = []
    for i, name in enumerate(CHILD_NAMES(tp_size)):
        pid = os.fork()
        if pid == 0:
            _child(name, parent, pdeath=not (orphan_rank0 and i == 0))
        pids.append(pid)
    return pids
