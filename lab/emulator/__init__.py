"""SGLang-compatible emulator: ``python -m lab.emulator <sglang launch flags>``.

An HTTP server speaking SGLang 0.5.23's surfaces (``/generate``, ``/server_info``,
``/metrics``, "Decode batch" log lines, ...) whose step timing comes from a cost profile
(:mod:`lab.emulator.profile`) instead of a GPU. It records what it actually did in a
ground-truth JSONL file (:mod:`lab.emulator.truth`) that the benchmark client never reads.
Everything it produces is labelled ``engine=emulator``.
"""

from lab.emulator.profile import CostProfile, ProfileError, load_profile
from lab.emulator.truth import Truth, load_truth

__all__ = ["CostProfile", "ProfileError", "load_profile", "Truth", "load_truth"]
