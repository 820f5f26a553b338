"""What SGLang does with ``--speculative-adaptive`` that a launch cannot see until it fails.

SGLang 0.5.16 refuses at argument resolution a ``--speculative-num-steps`` outside the union of
the tiers' ``candidate_steps`` (``srt/arg_groups/speculative_hook.py:752-757``; SGLang's own
message, 24 s into a launch on the H200). The emulator and SGLang's parser in the preflight's argv
check both refuse it; this module adds the one refusal no parser gives:

- **0.5.16 only, decode CUDA graphs on**: the shared logits buffer of every CUDA-graph runner is
  sized ``max(capture bs) * (speculative_num_draft_tokens)`` rows
  (``srt/model_executor/model_runner.py:722-726``, ``max_decode_logits_rows``), from the launch's
  ``num_steps + 1`` alone, while the adaptive runtime captures a draft-extend graph per candidate,
  ``max bs * (steps + 1)`` rows each (``srt/speculative/eagle_draft_extend_cuda_graph_runner.py:233``).
  A candidate above the launch's ``num_steps`` then fails the capture with ``AssertionError: shared
  logits buffer holds 256 rows but caller needs 512`` (``srt/model_executor/graph_shared_output.py:56``),
  about 200 s into the launch (``tests/fixtures/sglang-0.5.16/kshard-adaptive.tar.xz``,
  ``failed/steps3_logits_buffer/server.log``). 0.5.23 sizes it over every candidate
  (``model_runner.py:905-917``), so the rule is 0.5.16's.
"""

from __future__ import annotations

from collections.abc import Sequence

from lab.engine.command import flag_value

__all__ = ["adaptive_launch_refusal"]


def adaptive_launch_refusal(flags: Sequence[str], version: str) -> str | None:
    """Why SGLang ``version`` would fail this launch under ``--speculative-adaptive``, or None.

    :param flags: the launch argv after ``-m sglang.launch_server``.
    :param version: ``sglang.__version__`` of the Python that will serve (e.g. ``"0.5.16"``).
    :returns: the problem and its fix in one sentence: a ``num_steps`` outside the candidates (every
        version), or on 0.5.16 with decode CUDA graphs one below the largest candidate; None otherwise
        (also without ``--speculative-adaptive``).
    :raises AdaptiveConfigError, OSError, ValueError: the ``--speculative-adaptive-config`` file is bad
        (:func:`lab.emulator.adaptive.load_config`).
    """
    if "--speculative-adaptive" not in flags:
        return None
    from lab.emulator.adaptive import candidate_steps

    cands = candidate_steps(flag_value(flags, "--speculative-adaptive-config"))
    raw = flag_value(flags, "--speculative-num-steps")
    steps = int(raw) if raw is not None else cands[len(cands) // 2]
    if steps not in cands:
        return (f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps {cands}: SGLang "
                f"refuses the launch (speculative_hook.py:752-757). Fix: num_steps: one of {cands} "
                f"(num_draft_tokens: num_steps + 1)")
    graphs = not ("--disable-cuda-graph" in flags or "--disable-decode-cuda-graph" in flags)
    if not str(version).startswith("0.5.16") or not graphs or steps >= max(cands):
        return None
    return (f"SGLang 0.5.16 with --speculative-adaptive and decode CUDA graphs sizes the shared logits buffer "
            f"from --speculative-num-steps {steps} alone, and the capture of candidate {max(cands)} steps fails "
            f"~200 s into the launch (AssertionError in graph_shared_output.py:56; model_runner.py:722-726). "
            f"Fix: num_steps: {max(cands)} and num_draft_tokens: {max(cands) + 1} (the largest of the tiers' "
            f"candidate_steps {cands}), or a --speculative-adaptive-config whose candidates are at most "
            f"{steps}, or SGLang 0.5.23")
