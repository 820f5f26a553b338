"""One generation request as the engine sees it, and the fake tokens it generates.

Generated tokens: one word per token from :data:`VOCAB`, drawn by a ``random.Random``
seeded with ``crc32(f"{random_seed}:{token_key}")``. ``token_key``
(:func:`lab.emulator.http.token_key`) is a function of the prompt and the sampling
parameters, so at temperature 0 the same prompt yields the same token stream in every
mode, repeat and batch order, as greedy decoding does (EAGLE-3 is lossless: the lab's
lossless check, :mod:`lab.analysis.lossless`, relies on this); with sampling the key also
holds the request id (a fresh draw per request). With ``loop=True``
(``--emulator-output loop``) the 6-word :data:`LOOP_PHRASE` repeats, a degenerate output for
the lab's looping check. Each word has a token id (:func:`token_id`), so ``output_ids`` and
``text`` always agree. ``diverge_at`` (the ``diverge-at`` fault, :mod:`lab.emulator.faults`)
replaces every token from that position on with another word (:data:`VOCAB`'s next one), a
speculative output that is not the plain-decoding one. The client counts tokens from
``meta_info.completion_tokens``, never from words.
"""

from __future__ import annotations

import dataclasses
import random
import time
import zlib
from typing import Any

__all__ = ["Request", "VOCAB", "token_id", "TOKEN_ID_BASE"]

VOCAB = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have "
    "an they you were her she there been one all we their has would when if so no will more about can "
    "model token draft verify graph kernel batch layer memory cache tensor server request stream latency "
    "throughput decode prefill attention expert router weight shard rank step cycle window context prompt "
    "answer question reason result number value table figure measure time speed error ratio mean median "
    "river mountain garden window letter village morning evening summer winter friend story music color "
    "quiet bright simple careful rapid gentle ancient modern useful certain common public private early "
    "build run read write check compare explain describe improve reduce increase observe predict follow"
).split()


#: The word standing for token id 100, what SGLang's default simulated-acceptance mode emits
#: at every position (``speculative/spec_utils.py`` ~568: ``predict.fill_(100)``).
FIXED_TOKEN_WORD = "<100>"

#: The phrase a looping request repeats (``--emulator-output loop``).
LOOP_PHRASE = ("the", "answer", "is", "the", "same", "answer")

#: Token id of ``VOCAB[0]``; word ``i`` of :data:`_ID_WORDS` is id ``TOKEN_ID_BASE + i``
#: (any fixed map works: the lab compares ids between modes, never decodes them).
TOKEN_ID_BASE = 1000
#: SGLang's simulated-acceptance token (``speculative/spec_utils.py`` ~568: ``predict.fill_(100)``).
FIXED_TOKEN_ID = 100
_ID_WORDS = VOCAB + [w for w in dict.fromkeys(LOOP_PHRASE) if w not in VOCAB]
_WORD_ID = {w: TOKEN_ID_BASE + i for i, w in enumerate(_ID_WORDS)}


def token_id(word: str) -> int:
    """The token id the emulator streams for ``word`` (:data:`FIXED_TOKEN_WORD` -> 100).

    :raises KeyError: a word the emulator never generates.
    """
    return FIXED_TOKEN_ID if word == FIXED_TOKEN_WORD else _WORD_ID[word]


@dataclasses.dataclass(eq=False)
class Request:
    """One generation request. Times are perf_counter seconds; token counts are ints.

    ``sink`` is an opaque handle for the engine's ``deliver`` callback (the HTTP layer
    uses an ``asyncio.Queue``). The engine thread mutates the counters; the HTTP layer
    reads ``words[:ct]`` with ``ct`` from each event, and the spec counters once finished.
    """

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    stream: bool = True
    arrival: float = dataclasses.field(default_factory=time.perf_counter)
    sink: Any = None  # opaque handle for the deliver callback (e.g. an asyncio.Queue)
    completion_tokens: int = 0
    spec_verify_ct: int = 0
    num_correct_drafts: int = 0
    histogram: list[int] = dataclasses.field(default_factory=list)
    first_token: float | None = None
    last_token: float | None = None
    words: list[str] = dataclasses.field(default_factory=list)
    finished: bool = False
    aborted: bool = False  # set by the HTTP layer when the client went away
    loop: bool = False  # generate LOOP_PHRASE repeatedly instead of random words
    accept_key: str = ""  # key of this request's acceptance draws (lab.emulator.http.accept_key)
    fixed_token: bool = False  # SGLang's simulated-acceptance default: every output token is id 100
    category: str | None = None  # task category of the prompt (lab.emulator.categories), for per-category acceptance
    internal: bool = False  # a /health probe: not in metrics nor ground truth (SGLang log_metrics=False)
    token_key: str = ""  # key of the generated tokens (lab.emulator.http.token_key); "" = the rid
    diverge_at: int | None = None  # fault diverge-at: tokens from this position on are altered
    ids: list[int] = dataclasses.field(default_factory=list)  # token ids, one per entry of words
    _rng: random.Random | None = None

    def add_tokens(self, n: int, seed: int) -> None:
        """Append ``n`` generated tokens (words and ids); ``seed`` is ``--random-seed``."""
        if self.fixed_token:  # SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed: token id 100 everywhere
            new = [FIXED_TOKEN_WORD] * n
        elif self.loop:
            k = len(self.words)
            new = [LOOP_PHRASE[(k + i) % len(LOOP_PHRASE)] for i in range(n)]
        else:
            if self._rng is None:
                self._rng = random.Random(zlib.crc32(f"{seed}:{self.token_key or self.rid}".encode()))
            new = []
            for _ in range(n):
                j = self._rng.randrange(len(VOCAB))  # the plain-decoding token at this position
                if self.diverge_at is not None and len(self.words) + len(new) >= self.diverge_at:
                    j = (j + 1) % len(VOCAB)  # injected fault: a different token from diverge_at on
                new.append(VOCAB[j])
        self.words.extend(new)
        self.ids.extend(token_id(w) for w in new)
        self.completion_tokens += n

    @property
    def text(self) -> str:
        return " ".join(self.words)
