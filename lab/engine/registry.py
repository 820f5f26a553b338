"""The engines the lab can launch, behind one interface: :func:`engine_for` is the only place
that branches on ``params.engine``.

An :class:`Engine` knows which preflight rows apply to it (through :attr:`Engine.holds_gpus`), whether its numbers are measured or modelled, whether it writes a ground
truth, which GPU resources its process group holds, and what its weights and acceptance are.
What the running engine then serves is read through the SGLang contract of the version it
reports (:mod:`lab.engine.surfaces`: readiness, capture lines, argument resolution), so the
emulator (which serves SGLang 0.5.23's surfaces) and each SGLang build differ only there.

The set is closed (the emulator and SGLang), so a module-level mapping is the registry
(``shared/STYLE.md`` practice 10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.config import LabParams

__all__ = ["Engine", "ENGINES", "engine_for", "provenance"]


@dataclass(frozen=True)
class Engine:
    """One engine kind.

    :ivar name: ``params.engine`` value (``emulator`` / ``sglang``); what ``python -m`` runs for
        it is :data:`lab.engine.command.ENGINE_MODULE` (the bench stage's concern only).
    :ivar modelled: its timings come from a cost profile, not a GPU (results, captions and
        MLflow say "modelled"/"emulator"; such numbers are never GPU numbers).
    :ivar ground_truth: it records what it actually did (``ground_truth.jsonl``), which the lab's
        own measurement is checked against.
    :ivar holds_gpus: its process group holds GPU memory the next launch must wait for.
    :ivar params_section: the params.yaml section only this engine reads (logged with its runs).
    """

    name: str
    modelled: bool
    ground_truth: bool
    holds_gpus: bool
    params_section: str | None


ENGINES: dict[str, Engine] = {
    "emulator": Engine("emulator", modelled=True, ground_truth=True, holds_gpus=False,
                       params_section="emulator"),
    "sglang": Engine("sglang", modelled=False, ground_truth=False, holds_gpus=True,
                     params_section=None),
}


def engine_for(params_or_name: "LabParams | str") -> Engine:
    """The :class:`Engine` of ``params.engine`` (or of a name).

    :raises KeyError: an engine the registry does not hold (config validation rejects it first).
    """
    name = params_or_name if isinstance(params_or_name, str) else params_or_name.engine
    return ENGINES[name]


def provenance(params: "LabParams", mode_name: str | None = None) -> dict[str, Any]:
    """What a result's numbers stand on, for every CSV, summary, caption and MLflow tag:

    - ``engine``: ``emulator`` or ``sglang``;
    - ``timing``: ``modelled`` (the emulator's cost profile) or ``measured`` (a real server);
    - ``weights``: ``emulated`` (no model at all), ``random`` (``model.synthetic``:
      ``--load-format dummy``) or ``real``;
    - ``acceptance``: ``emulated`` (the profile's acceptance model), ``simulated``
      (``SGLANG_SIMULATE_ACC_LEN`` pins it: draft tokens accepted unverified) or ``real``;
      for a plain-decoding mode ``n/a``; with no mode named, the modes' acceptances joined.
    """
    eng = engine_for(params)
    if eng.modelled:
        weights = "emulated"
    else:
        weights = "random" if params.model.synthetic else "real"

    def acc(m) -> str:
        if not m.is_speculative:
            return "n/a"
        if eng.modelled:
            return "emulated"
        return "simulated" if m.simulate_accept_length is not None else "real"

    if mode_name is not None:
        acceptance = acc(params.mode(mode_name))
    else:
        kinds = sorted({acc(m) for m in params.modes.values()} - {"n/a"})
        acceptance = "/".join(kinds) or "n/a"
    return {"engine": eng.name, "timing": "modelled" if eng.modelled else "measured", "weights": weights,
            "acceptance": acceptance}
