"""The grammar of ``emulator.faults`` entries and ``--emulator-fault`` flags: ``NAME`` or
``NAME=VALUE`` of the faults :mod:`lab.emulator.faults` injects (what each does is described
there). Params validation and the emulator's own argument parsing share it."""

from __future__ import annotations

__all__ = ["FAULTS", "FaultError", "parse_fault"]


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
