"""Acceptance model of a speculative cycle: how many tokens one verify yields per request.

Chain draft (topk 1): draft token k is accepted iff tokens 1..k-1 were and an independent
Bernoulli(p) succeeds; the verify always adds one bonus token, so the accept length
(tokens per cycle) is ``1 + #consecutive accepted drafts`` in ``[1, num_steps + 1]`` with
mean ``1 + p + ... + p**num_steps`` (1.85 at 2 steps gives p = 0.5488; 1.85 is derived from the
seeds' 59-61 tok/s at a ~30 ms cycle, not stated in them: profile ``kimi_k25_tp8_pcie``).

Tree draft (topk > 1): a step succeeds if any of its ``topk`` candidates is right,
``1 - (1 - p)**topk`` (independence ASSUMPTION), capped at ``num_draft_tokens``.

Without simulation, draws are keyed (:meth:`AcceptanceModel.draw_keyed`): a function of
(seed, prompt, repeat, position), never of a process-wide stream, so both EAGLE-3 modes see
the same accept lengths whatever the warm-up length and batch order.

``SGLANG_SIMULATE_ACC_LEN = x > 0`` pins the mean like SGLang's default
``match-expected`` method (``sglang/srt/speculative/spec_utils.py:sample_simulated_acc_len``):
``floor(x)`` or ``floor(x) + 1`` with probability ``x - floor(x)``, clamped to
``[1, num_draft_tokens]``, one draw per step for the whole batch like SGLang
(``spec_utils.py`` ~505-559), from the seeded process stream.
"""

from __future__ import annotations

import hashlib
import math
import random

__all__ = ["AcceptanceModel"]


def _uniform(text: str) -> float:
    """A uniform in [0, 1) from the first 53 bits of BLAKE2b(text)."""
    return (int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 11) / float(1 << 53)


class AcceptanceModel:
    """Draws accept lengths (tokens per cycle, bonus included).

    :param p: per-draft-token accept probability (profile ``acceptance``).
    :param num_steps: ``--speculative-num-steps`` (draft depth).
    :param topk: ``--speculative-eagle-topk``.
    :param num_draft_tokens: resolved ``--speculative-num-draft-tokens``.
    :param simulate_acc_len: ``SGLANG_SIMULATE_ACC_LEN`` or None (off when <= 0).
    :param rng: a seeded ``random.Random``.
    """

    def __init__(self, p: float, num_steps: int, topk: int, num_draft_tokens: int,
                 simulate_acc_len: float | None, rng: random.Random) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"accept probability {p} not in [0, 1]")
        self.num_steps = num_steps
        self.topk = topk
        self.max_len = min(num_steps + 1, num_draft_tokens)
        self.step_p = 1.0 - (1.0 - p) ** topk
        self.simulate = simulate_acc_len if simulate_acc_len and simulate_acc_len > 0 else None
        self.rng = rng

    @property
    def expected_length(self) -> float:
        """Analytic mean accept length (tokens per cycle)."""
        if self.simulate is not None:
            return max(1.0, min(float(self.max_len), self.simulate))
        return sum(self.step_p**k for k in range(self.max_len))

    def draw_keyed(self, key: str, position: int) -> int:
        """One accept length in ``[1, max_len]``, a pure function of (``key``, ``position``).

        ``key`` names the request (seed, prompt, repeat: :func:`lab.emulator.http.accept_key`),
        ``position`` is its completion length when the cycle starts. Draft step ``k``
        succeeds iff ``u_k < step_p`` with ``u_k`` a uniform from BLAKE2b of
        ``key|position|k``; so two modes, two batch orders or two warm-up lengths give the
        same lengths at the same positions.
        """
        n = 1
        while n < self.max_len and _uniform(f"{key}|{position}|{n}") < self.step_p:
            n += 1
        return n

    def draw(self) -> int:
        """One accept length in ``[1, max_len]``."""
        if self.simulate is not None:
            x = max(1.0, min(float(self.max_len), self.simulate))
            lo = int(math.floor(x))
            if lo < self.max_len and self.rng.random() < x - lo:
                return lo + 1
            return lo
        n = 1
        while n < self.max_len and self.rng.random() < self.step_p:
            n += 1
        return n
