"""Fault injection for the emulator: the failures a real SGLang node produces, on demand.

Each fault is one ``--emulator-fault NAME[=VALUE]`` flag (repeatable; emulator-only, never
passed to SGLang). ``params.yaml`` reaches them through ``emulator.faults`` (a list of the
same strings, default empty), so a pipeline run can inject them too.

========================  =================================================================
``exit-on-startup``       log an error during the fake model loading and exit with code 3
                          (a CUDA OOM or a bad checkpoint while loading)
``never-ready``           keep "loading" forever: the port is never bound, ``/health``
                          never answers (a hung weight download, a NCCL init deadlock)
``crash-after=N``         the process dies (``os._exit(70)``, no cleanup) when the
                          ``N+1``-th ``/generate`` request arrives; in-flight streams are
                          cut (a scheduler segfault or an NCCL timeout mid-benchmark)
``stall=S``               every streamed request pauses ``S`` seconds once, mid-stream
                          (at half its tokens) before its next chunk (a GC pause, a
                          preemption, a slow all-reduce)
``http500-every=K``       every ``K``-th ``/generate`` request is answered HTTP 500
                          (SGLang's ``ORJSONResponse({"error": ...}, 500)`` on an
                          internal error)
``slow-health=S``         ``/health`` takes ``S`` seconds while requests are running (a
                          server whose health probe queues behind a busy scheduler)
``ignore-sigterm``        SIGTERM and SIGINT are ignored, so stopping needs SIGKILL (a
                          wedged process stuck in a CUDA call)
``orphan-child``          rank 0's scheduler child has no parent-death signal, so it
                          outlives a crashed launcher (the group leader is gone, a child
                          of the group lives on: what an SGLang crash can leave)
``diverge-at=K``          a speculative server's output differs from plain decoding from
                          token position ``K`` (0-based) on, for the prompts that
                          ``diverge-share`` selects (a verify bug, a numerics difference:
                          what the lab's lossless check, ``lab/analysis/lossless.py``,
                          must catch); plain-decoding servers are unaffected
``diverge-share=F``       share of prompts ``diverge-at`` alters, ``0 < F <= 1`` (default
                          1): a prompt is altered when the hash of its text, as a fraction
                          of 2^64, is below ``F`` (:meth:`Faults.diverges_at`), so the same
                          prompts are altered in every launch and repeat
========================  =================================================================

The strings' grammar is :mod:`lab.config.emulator_faults` (params validation uses it too);
:func:`parse_faults` turns them into a :class:`Faults`, whose small hooks the emulator's HTTP
layer and ``__main__`` call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

from lab.config.emulator_faults import FAULTS, FaultError, parse_fault  # the grammar, shared with params.yaml

__all__ = ["FAULTS", "Faults", "FaultError", "parse_faults", "parse_fault"]


def parse_faults(texts: list[str] | tuple[str, ...] | None) -> "Faults":
    """A :class:`Faults` from ``--emulator-fault`` strings (later duplicates win).

    :raises FaultError: see :func:`parse_fault`.
    """
    f = Faults()
    for t in texts or ():
        name, value = parse_fault(t)
        setattr(f, name.replace("-", "_"), True if value is None else value)
    return f


def _active(value: object) -> bool:
    """A fault field is set: not None and not False (``0`` is a value: ``crash-after=0``,
    ``diverge-at=0``; ``0 in (None, False)`` would be True)."""
    return value is not None and value is not False


@dataclasses.dataclass
class Faults:
    """The active faults of one emulator process, and their hooks (all no-ops by default)."""

    exit_on_startup: bool = False
    never_ready: bool = False
    crash_after: int | None = None
    stall: float | None = None
    http500_every: int | None = None
    slow_health: float | None = None
    ignore_sigterm: bool = False
    orphan_child: bool = False
    diverge_at: int | None = None
    diverge_share: float | None = None
    generate_count: int = 0

    def any(self) -> bool:
        """True if any fault is active."""
        return any(_active(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "generate_count")

    def describe(self) -> str:
        """``"crash-after=3, ignore-sigterm"``: the active faults as flags."""
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "generate_count" or not _active(v):
                continue
            out.append(f.name.replace("_", "-") + ("" if v is True else f"={v}"))
        return ", ".join(out)

    # ---------------------------------------------------------------- process hooks
    def on_process_start(self, log) -> None:
        """Before loading: install the SIGTERM/SIGINT-ignoring handlers if asked."""
        if self.any():
            log.warning(f"emulator fault injection active: {self.describe()}")
        if self.ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_loaded(self, log) -> None:
        """After the fake model loading, before the port is bound: exit or hang if asked."""
        if self.exit_on_startup:
            log.error("fault exit-on-startup: torch.OutOfMemoryError: CUDA out of memory while loading "
                      "weights (injected)")
            for h in log.handlers:
                h.flush()
            os._exit(3)
        if self.never_ready:
            log.warning("fault never-ready: loading never finishes (injected)")
            while True:
                time.sleep(3600)

    def wants_signal_handlers(self) -> bool:
        """False when SIGTERM must stay ignored (the event loop must not install a handler)."""
        return not self.ignore_sigterm

    # ---------------------------------------------------------------- request hooks
    def on_generate(self, log) -> int | None:
        """Count a ``/generate`` request; die if past ``crash-after``.

        :returns: an HTTP status to answer instead of serving (500), or None.
        """
        self.generate_count += 1
        n = self.generate_count
        if self.crash_after is not None and n > self.crash_after:
            log.error(f"fault crash-after={self.crash_after}: scheduler died at request {n} (injected)")
            for h in log.handlers:
                h.flush()
            os._exit(70)
        if self.http500_every and n % self.http500_every == 0:
            return 500
        return None

    async def maybe_stall(self, ct: int, max_new_tokens: int, stalled: list[bool]) -> None:
        """Pause once per stream, at half its tokens (``stalled`` is the per-request flag)."""
        if self.stall and not stalled[0] and ct >= max(1, max_new_tokens // 2):
            stalled[0] = True
            await asyncio.sleep(self.stall)

    def diverges_at(self, prompt_digest: str, speculative: bool) -> int | None:
        """Token position from which this request's output is altered, or None.

        :param prompt_digest: hex digest of the prompt (:func:`lab.emulator.http.prompt_digest`,
            16 hex digits); the prompt is selected when ``int(digest, 16) / 2**64 <
            diverge_share`` (share 1 when unset).
        :param speculative: only speculative servers are altered (plain decoding is the reference).
        """
        if self.diverge_at is None or not speculative:
            return None
        share = 1.0 if self.diverge_share is None else self.diverge_share
        frac = int(prompt_digest, 16) / 2.0 ** (4 * len(prompt_digest))  # may round up to 1.0
        return self.diverge_at if share >= 1.0 or frac < share else None

    async def on_health(self, busy: bool) -> None:
        """Delay ``/health`` while requests run."""
        if self.slow_health and busy:
            await asyncio.sleep(self.slow_health)
