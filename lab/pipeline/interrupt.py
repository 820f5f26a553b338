"""Signals to a pipeline stage reach the engine: no engine outlives an interrupted run.

Process tree of ``dvc repro`` (each arrow a fork; kernels and engines start new sessions)::

    dvc ─► python -m lab.pipeline.bench_stage (papermill) ─► ipykernel (own session)
                                                     └─► engine (own session, recorded in .cache/servers)

What reaches the engine, per signal (``tests/e2e/test_interrupt.py`` proves each):

- Ctrl-C in the terminal sends SIGINT to dvc's process group: dvc and the stage get it,
  the kernel (own session) does not. The stage's handler (:func:`forward_signals`)
  interrupts the kernel (SIGINT, what Jupyter's "interrupt" does): ``run_mode`` sees
  KeyboardInterrupt, marks the run failed and stops the engine group in its ``finally``.
- SIGTERM to the stage: same forwarding. SIGTERM to dvc alone: the stage asked Linux for
  ``PR_SET_PDEATHSIG`` = SIGTERM (:func:`die_with_parent`), so dvc's death reaches it. DVC
  runs the command through ``$SHELL -c`` (``/bin/sh`` when unset); a shell that does not
  ``exec`` its one command stays alive as the stage's parent when dvc dies, so
  :func:`die_with_launcher` also watches the first non-shell ancestor (dvc) and the shells
  in between, and sends the same SIGTERM when one of them is gone.
- SIGINT/SIGTERM to the kernel: ``run_mode`` turns SIGTERM into SystemExit; both unwind
  through the ``with ServerProcess`` block, which stops the group.
- SIGKILL to the kernel: no ``finally`` runs. The engine got ``PR_SET_PDEATHSIG`` =
  SIGTERM from its launcher (``lab.engine.process``), so it stops by itself; an engine that ignores
  SIGTERM is stopped by the stage right after papermill returns
  (:func:`lab.engine.process.stop_stale_servers`: its recorded owner is dead), and if the stage
  died too, by the next launch, which says so.

A second signal while the kernel is still winding down raises KeyboardInterrupt in the
stage at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import psutil

__all__ = ["forward_signals", "die_with_parent", "die_with_launcher", "launcher_chain", "kernel_children"]

#: Process names treated as a shell between dvc and the stage (``dvc/stage/run.py`` runs
#: ``[$SHELL, -c, cmd]``, ``/bin/sh`` when ``SHELL`` is unset).
SHELL_NAMES = frozenset({"sh", "dash", "bash", "zsh", "fish", "ash", "ksh", "mksh", "busybox"})


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


def launcher_chain(proc: psutil.Process | None = None) -> list[psutil.Process]:
    """The ancestors of ``proc`` (default: this process) up to and including the first one
    that is not a shell (:data:`SHELL_NAMES`), nearest first: ``[sh, dvc]`` under
    ``dvc repro`` with a non-exec'ing ``/bin/sh``, ``[dvc]`` when the shell exec'd, ``[]``
    when the parent is init (pid 1). Raises nothing; unreadable ancestors end the chain."""
    chain: list[psutil.Process] = []
    try:
        parent = (proc or psutil.Process()).parent()
        while parent is not None and parent.pid > 1:
            chain.append(parent)
            if parent.name() not in SHELL_NAMES:
                break
            parent = parent.parent()
    except psutil.Error:
        pass
    return chain


def die_with_launcher(sig: int = signal.SIGTERM, poll_s: float = 0.5) -> list[int]:
    """:func:`die_with_parent`, and, when run by DVC (``DVC_STAGE`` set, ``dvc/stage/run.py``),
    a daemon thread that sends ``sig`` to this process once any ancestor of
    :func:`launcher_chain` above the parent is gone (checked every ``poll_s`` seconds; pid
    and create time compared, so a reused pid does not count as alive). Covers the shell
    that ``dvc repro`` may leave between itself and the stage. Returns the watched pids
    (empty when nothing beyond the parent needs watching)."""
    # the parent's own death is the kernel's PR_SET_PDEATHSIG job: watching it too would
    # deliver a second signal, which forward_signals treats as "stop now"
    chain = launcher_chain()[1:] if die_with_parent(sig) else launcher_chain()
    if not chain or "DVC_STAGE" not in os.environ:
        return []  # only under `dvc repro`: a stage run by hand under nohup survives its shell

    def watch() -> None:
        import time

        while True:
            time.sleep(poll_s)
            for p in chain:
                try:
                    alive = p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                except psutil.Error:
                    alive = False
                if not alive:
                    os.kill(os.getpid(), sig)
                    return

    threading.Thread(target=watch, name="lab-launcher-watch", daemon=True).start()
    return [p.pid for p in chain]


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
