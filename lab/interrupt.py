"""Signals to a pipeline stage reach the engine: no engine outlives an interrupted run.

Process tree of ``dvc repro`` (each arrow a fork; kernels and engines start new sessions)::

    dvc ─► python -m lab.stage bench (papermill) ─► ipykernel (own session)
                                                     └─► engine (own session, recorded in .cache/servers)

What reaches the engine, per signal (``tests/test_interrupt.py`` proves each):

- Ctrl-C in the terminal sends SIGINT to dvc's process group: dvc and the stage get it,
  the kernel (own session) does not. The stage's handler (:func:`forward_signals`)
  interrupts the kernel (SIGINT, what Jupyter's "interrupt" does): ``run_mode`` sees
  KeyboardInterrupt, marks the run failed and stops the engine group in its ``finally``.
- SIGTERM to the stage: same forwarding. SIGTERM to dvc alone: the stage asked Linux for
  ``PR_SET_PDEATHSIG`` = SIGTERM (:func:`die_with_parent`), so dvc's death reaches it.
- SIGINT/SIGTERM to the kernel: ``run_mode`` turns SIGTERM into SystemExit; both unwind
  through the ``with ServerProcess`` block, which stops the group.
- SIGKILL to the kernel: no ``finally`` runs. The engine got ``PR_SET_PDEATHSIG`` =
  SIGTERM from its launcher (``lab.server``), so it stops by itself; an engine that ignores
  SIGTERM is stopped by the stage right after papermill returns
  (:func:`lab.server.stop_stale_servers`: its recorded owner is dead), and if the stage
  died too, by the next launch, which says so.

A second signal while the kernel is still winding down raises KeyboardInterrupt in the
stage at once.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Iterator

import psutil

__all__ = ["forward_signals", "die_with_parent", "kernel_children"]


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies (``prctl(2)``
    ``PR_SET_PDEATHSIG``); returns False where unsupported."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.prctl(1, int(sig), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # parent already gone before prctl took effect
        os.kill(os.getpid(), sig)
    return True


def kernel_children() -> list[psutil.Process]:
    """Jupyter kernels started by this process (papermill/nbclient): ``ipykernel`` children."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("ipykernel" in part for part in child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


@contextmanager
def forward_signals(log=lambda m: print(m, file=sys.stderr, flush=True)) -> Iterator[list[int]]:
    """While active, SIGINT and SIGTERM to this process interrupt its notebook kernels
    (SIGINT to each kernel) instead of killing this process, so the kernel's ``finally``
    stops the engine; the yielded list collects the signals received (empty: none). With
    no kernel running yet, or on a second signal, KeyboardInterrupt is raised here.
    Only in the main thread (elsewhere it is a no-op)."""
    received: list[int] = []

    def handler(signum, frame):
        received.append(signum)
        kernels = kernel_children()
        if len(received) > 1 or not kernels:
            raise KeyboardInterrupt(f"signal {signum}")
        log(f"[lab] {signal.Signals(signum).name} received: interrupting the notebook kernel "
            f"(pid {', '.join(str(k.pid) for k in kernels)}) so it stops the engine")
        for k in kernels:
            try:
                k.send_signal(signal.SIGINT)
            except psutil.Error:
                pass

    try:
        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield received
        return
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)
