"""SGLang 0.5.16's adaptive speculation (``--speculative-adaptive``, ``--speculative-adaptive-config``)
as the emulator runs it: which ``num_steps`` tier serves each speculative iteration.

Implemented from ``sglang/srt/speculative/adaptive_spec_params.py`` of SGLang 0.5.16 (line
numbers of that file; ``tests/unit/test_adaptive_spec.py`` runs SGLang's own module on recorded
inputs against this one):

- config (``_load_adaptive_config`` ~91-128): the JSON's integer-string keys are batch-size
  slots, each with ``candidate_steps`` (non-negative ints); the other top-level keys are defaults
  every slot inherits (``{**cfg, **entry}`` ~283); without a file, ``DEFAULT_ADAPTIVE_CONFIG``
  (~22-47: slot 1 ``[1, 3, 7]`` with ``down_hysteresis -0.25``, slot 8 ``[0, 1, 3]``, slot 32
  ``[0, 1]``, slot 64 ``[0]``: speculation off from 64 requests);
- one slot (``AdaptiveStepSlot`` ~140-259): knobs ``ema_alpha`` 0.2, ``update_interval`` 5,
  ``warmup_batches`` 10, ``down_hysteresis`` -0.25, ``up_hysteresis`` 0, ``ceiling_coeff`` 0;
  starts at the launch's ``--speculative-num-steps`` when it is a candidate, else the middle
  candidate; EMA of the batch-mean correct drafts starts at ``steps - 1``; each verify updates
  the EMA (only while steps > 0) and counts a batch; after the warm-up, every
  ``update_interval``-th batch recomputes: from 0 steps, probe the next candidate (EMA reset to
  ``target - 1`` if negative); else step down while ``EMA <= (0.5 if prev == 0 else prev - 0.5)
  + down_hysteresis``, otherwise step up while ``EMA > current - 0.5 + up_hysteresis``; a positive
  ``ceiling_coeff`` caps a non-rising target at ``max(1, ceil(EMA * coeff))``;
- routing (``AdaptiveSpeculativeParams`` ~262-345): a batch size is padded up to the next
  captured CUDA-graph batch size (when graphs are on), then served by the largest slot key not
  above it (the smallest slot below all keys).

In SGLang the worker calls ``activate_step_by_batch(bs)`` before drafting and
``on_verify_complete(correct drafts per request, len(reqs))`` once the verify's results reach the
CPU (``eagle_worker_v2.py`` ~1160, ``batch_result_processor.py`` ~564); at 0 steps it skips the
draft and verifies one token (a plain decode through the verify path, ``eagle_worker_v2.py``
~1179-1182, draft-extend still run). The emulator feeds each verify's result before the next
iteration; SGLang's overlap scheduler can feed it one iteration late (a deviation of at most one
batch in when a switch lands). Each switch is logged like SGLang's ``log_info_on_rank0`` line:
``Adaptive spec params updated: steps A -> B (ema_accept_len=X.XX)``.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_CONFIG", "AdaptiveConfigError", "load_config", "candidate_steps", "Slot", "AdaptiveSteps",
           "switch_message"]

#: ``DEFAULT_ADAPTIVE_CONFIG`` of SGLang 0.5.16 (``adaptive_spec_params.py`` ~22-47).
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}


class AdaptiveConfigError(ValueError):
    """An adaptive config SGLang would refuse; the message names the key and the fix."""


def load_config(path: str | Path | None) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """``(whole config, {slot batch size: entry})`` of a ``--speculative-adaptive-config`` file
    (None: :data:`DEFAULT_CONFIG`).

    :raises AdaptiveConfigError: a slot's ``candidate_steps`` is not a non-empty list of ints >= 0,
        or no integer-string key exists (SGLang raises ValueError for both, ~108-127).
    :raises OSError, json.JSONDecodeError: the file cannot be read or parsed.
    """
    cfg = json.loads(Path(path).read_text()) if path is not None else DEFAULT_CONFIG
    slots: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise AdaptiveConfigError(f"adaptive config slot {key}: candidate_steps must be a list of non-negative ints, "
                                      f"got {steps!r}. Fix: e.g. \"candidate_steps\": [1, 3]")
        slots[int(key)] = entry
    if not slots:
        raise AdaptiveConfigError(f"adaptive config has no integer-string batch-size key (keys {list(cfg)}). Fix: "
                                  'e.g. {"1": {"candidate_steps": [1, 3, 7]}}')
    return dict(cfg), slots


def candidate_steps(path: str | Path | None) -> list[int]:
    """Union of every slot's candidates (SGLang's ``resolve_candidate_steps_from_config``); the
    launch sizes its draft-token buffers to ``max + 1`` (``server_args.py`` ~7527-7540)."""
    return sorted({s for e in load_config(path)[1].values() for s in e["candidate_steps"]})


def switch_message(old: int, new: int, ema: float) -> str:
    """SGLang's log line of a switch (``_apply_target_steps`` ~250-259)."""
    return f"Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"


class Slot:
    """One batch-size slot (module docstring; ``AdaptiveStepSlot``).

    :param initial_steps: the launch's ``--speculative-num-steps``. :param cfg: the slot's entry
        merged over the config's defaults.
    """

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidates = sorted(set(cfg["candidate_steps"]))
        self.alpha = cfg.get("ema_alpha", 0.2)
        self.interval = cfg.get("update_interval", 5)
        self.warmup = cfg.get("warmup_batches", 10)
        self.down = cfg.get("down_hysteresis", -0.25)
        self.up = cfg.get("up_hysteresis", 0.0)
        self.ceiling = cfg.get("ceiling_coeff", 0)
        self.steps = initial_steps if initial_steps in self.candidates else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0

    def observe(self, correct: Sequence[int]) -> int | None:
        """Feed one verify's correct drafts per request; the new step count when it switched, else None."""
        if not correct:
            return None
        if self.steps > 0:
            self.ema = (1 - self.alpha) * self.ema + self.alpha * (sum(correct) / len(correct))
        self.batches += 1
        if self.batches <= self.warmup or (self.batches - self.warmup) % self.interval:
            return None
        new = self._target()
        if new == self.steps:
            return None
        self.steps = new
        return new

    def _target(self) -> int:
        c, i = self.candidates, self.candidates.index(self.steps)
        if self.steps == 0:  # probe the next candidate after a no-speculation interval
            t = c[min(i + 1, len(c) - 1)]
            if t > 0 and self.ema < 0:
                self.ema = float(t - 1)
            return t
        start = i
        while i > 0 and self.ema <= (0.5 if c[i - 1] == 0 else c[i - 1] - 0.5) + self.down:
            i -= 1
        if i == start:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.up:
                i += 1
        t = c[i]
        if self.ceiling > 0:
            cap = max(1, math.ceil(self.ema * self.ceiling))
            if cap < t <= self.steps:
                while i > 0 and c[i] > cap:
                    i -= 1
                t = c[i]
        return t


class AdaptiveSteps:
    """Routes batch sizes to slots (module docstring; ``AdaptiveSpeculativeParams``).

    :param initial_steps: ``--speculative-num-steps``. :param config_path: the config file or None.
    :param cuda_graph_bs: captured decode batch sizes (None or []: graphs off, no padding).
    :param log: called with :func:`switch_message` on each switch.
    :raises AdaptiveConfigError: as :func:`load_config`.
    """

    def __init__(self, initial_steps: int, config_path: str | Path | None = None,
                 cuda_graph_bs: Sequence[int] | None = None, log: Callable[[str], None] | None = None) -> None:
        cfg, slots = load_config(config_path)
        self.keys = sorted(slots)
        self.slots = {k: Slot(initial_steps, {**cfg, **slots[k]}) for k in self.keys}
        self.graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None
        self.log = log

    @property
    def candidate_steps(self) -> list[int]:
        """Union of the slots' candidates."""
        return sorted({s for sl in self.slots.values() for s in sl.candidates})

    def slot_key(self, batch_size: int) -> int:
        """The slot serving ``batch_size`` (padded to the captured graph sizes first)."""
        bs = batch_size
        if self.graph_bs is not None:
            j = bisect.bisect_left(self.graph_bs, batch_size)
            bs = self.graph_bs[j] if j < len(self.graph_bs) else batch_size
        return self.keys[max(0, bisect.bisect_right(self.keys, bs) - 1)]

    def steps_for(self, batch_size: int) -> int:
        """``num_steps`` of the next iteration of ``batch_size`` sequences."""
        return self.slots[self.slot_key(batch_size)].steps

    def on_verify(self, correct: Sequence[int], batch_size: int) -> int | None:
        """Feed one verify's correct drafts per request to its slot; the new steps on a switch."""
        sl = self.slots[self.slot_key(batch_size)]
        old = sl.steps
        new = sl.observe(correct)
        if new is not None and self.log is not None:
            self.log(switch_message(old, new, sl.ema))
        return new
