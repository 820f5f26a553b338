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

:func:`parse_faults` validates the strings (the lab's params use it too); the emulator's
HTTP layer and ``__main__`` call the small hooks of :class:`Faults`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

__all__ = ["FAULTS", "Faults", "FaultError", "parse_faults", "parse_fault"]


class FaultError(ValueError):
    """A fault string is malformed; the message names it and the accepted forms."""


#: fault name -> (value type or None for a bare flag, one-line description)
FAULTS: dict[str, tuple[type | None, str]] = {
    "exit-on-startup": (None, "exit with code 3 while loading"),
    "never-ready": (None, "never bind the port (startup hangs)"),
    "crash-after": (int, "die abruptly when request N+1 arrives"),
    "stall": (float, "pause each stream S seconds once, mid-request"),
    "http500-every": (int, "answer every K-th /generate with HTTP 500"),
    "slow-health": (float, "/health takes S seconds while requests run"),
    "ignore-sigterm": (None, "ignore SIGTERM/SIGINT (needs SIGKILL)"),
    "orphan-child": (None, "rank 0's scheduler child outlives the launcher"),
    "diverge-at": (int, "speculative outputs differ from plain decoding from token K on"),
    "diverge-share": (float, "share of prompts diverge-at alters (0 < F <= 1)"),
}

#: Faults whose value may be 0.
_ZERO_OK = ("crash-after", "diverge-at")


def _forms() -> str:
    return ", ".join(n if t is None else f"{n}=<{t.__name__}>" for n, (t, _) in FAULTS.items())


def parse_fault(text: str) -> tuple[str, float | int | None]:
    """``"crash-after=5"`` -> ``("crash-after", 5)``; ``"ignore-sigterm"`` -> ``(..., None)``.

    :raises FaultError: unknown name, missing/extra value, or a value that is not a
        positive number (``crash-after`` accepts 0).
    """
    name, sep, raw = str(text).partition("=")
    name = name.strip()
    if name not in FAULTS:
        raise FaultError(f"unknown emulator fault {text!r}. Fix: use one of {_forms()}")
    typ, _ = FAULTS[name]
    if typ is None:
        if sep:
            raise FaultError(f"emulator fault {name!r} takes no value (got {text!r}). Fix: write just {name}")
        return name, None
    try:
        value = typ(raw)
    except ValueError:
        raise FaultError(f"emulator fault {text!r} needs a {typ.__name__} value. Fix: e.g. {name}=2") from None
    if value < 0 or (value == 0 and name not in _ZERO_OK):
        raise FaultError(f"emulator fault {text!r}: value must be positive. Fix: e.g. {name}=2")
    if name == "diverge-share" and value > 1:
        raise FaultError(f"emulator fault {text!r}: a share is at most 1. Fix: e.g. diverge-share=0.5")
    return name, value


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
