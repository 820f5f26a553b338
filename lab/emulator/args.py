"""Command line of the emulator: SGLang 0.5.23 launch flags plus ``--emulator-*`` flags.

:func:`parse_args` accepts the argv of ``docs/contracts.md`` and returns resolved
:class:`ServerArgs` with SGLang's snake_case names, after SGLang's resolution rules:

- ``--speculative-eagle-topk 1`` rewrites ``--speculative-num-draft-tokens`` to
  ``num_steps + 1`` (SGLang ``arg_groups/fields/spec.py`` resolution hook);
- with speculation and no ``--max-running-requests`` the cap is 48 (DESIGN.md, SGLang
  facts); without speculation and no flag it is unlimited (reported as 4096 here);
- ``attention_backend`` defaults to ``fa3`` (Kimi-K2.5 MLA on H200 in SGLang 0.5.23), or to the profile's ``attention_backend`` (``lab.emulator.__main__``);
  ``prefill_attention_backend`` / ``decode_attention_backend`` stay null unless set;
- decode CUDA graphs resolve into ``cuda_graph_config.decode`` (``backend``, ``max_bs``,
  ``bs``) while ``cuda_graph_bs_decode`` keeps the raw input (null unless set).

Unknown flags are returned (the caller logs them) rather than rejected, so the same argv
works for SGLang and the emulator.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["ServerArgs", "parse_args", "sglang_refuses", "sglang_options", "build_parser", "SPEC_MAX_RUNNING_CAP", "DEFAULT_ATTENTION_BACKEND",
           "DEFAULT_CONTEXT_LENGTH",
           "decode_graph_batch_sizes"]

SPEC_MAX_RUNNING_CAP = 48  # source: DESIGN.md "SGLang 0.5.23 facts": speculative servers cap at 48
NO_SPEC_MAX_RUNNING = 4096  # emulator stand-in for "bounded by KV pool only"
DEFAULT_ATTENTION_BACKEND = "fa3"  # source: DESIGN.md: Kimi-K2.5 (MLA) on H200 uses fa3
DEFAULT_CONTEXT_LENGTH = 262144  # Kimi-K2.5's max_position_embeddings: the served length without --context-length




def decode_graph_batch_sizes(max_bs: int, speculative: bool) -> list[int]:
    """SGLang 0.5.23's decode CUDA-graph batch sizes for ``max_bs`` (no padding flag).

    Copied from ``arg_groups/cuda_graph_hook.py`` ~500-533
    (``generate_decode_cuda_graph_batch_sizes``); ``tests/component/test_sglang_contract.py`` runs
    SGLang's own function and compares. Speculative, max 48: 1..8, 10..32 step 2, 40, 44, 48.
    """
    if not speculative:
        bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    else:
        bs = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
              + list(range(272, max_bs + 1, 16)))
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


@dataclasses.dataclass
class ServerArgs:
    """Resolved server arguments (SGLang names); see :func:`parse_args`."""

    model_path: str
    tp_size: int
    host: str
    port: int
    trust_remote_code: bool
    mem_fraction_static: float | None
    max_running_requests: int
    cuda_graph_max_bs_decode: int | None
    cuda_graph_bs_decode: list[int] | None  # raw input; null unless set, as in 0.5.23
    disable_cuda_graph: bool
    cuda_graph_backend_decode: str | None
    cuda_graph_config: dict[str, dict[str, Any]]  # resolved: {"decode": {backend, max_bs, bs}, "prefill": {...}}
    enable_metrics: bool
    decode_log_interval: int
    context_length: int | None  # raw input; null unless set (the model's length is resolved outside ServerArgs)
    speculative_algorithm: str | None
    speculative_draft_model_path: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    speculative_attention_mode: str
    speculative_draft_attention_backend: str | None  # raw input: EAGLE3 leaves it unresolved (0.5.23 and 0.5.16)
    attention_backend: str
    prefill_attention_backend: str | None  # null unless set (0.5.23 resolves attention_backend only)
    decode_attention_backend: str | None
    served_model_name: str
    random_seed: int
    emulator_profile: str
    ground_truth_file: str | None
    emulator_startup_delay_s: float
    emulator_faults: list[str] = dataclasses.field(default_factory=list)
    emulator_output: str = "random"
    emulator_prompt_categories: str | None = None  # JSONL prompt file: prompt text -> category (categories.py)
    incremental_streaming_output: bool = False
    speculative_adaptive: bool = False  # 0.5.16 adaptive tiers (lab/emulator/adaptive.py)
    speculative_adaptive_config: str | None = None

    @property
    def is_speculative(self) -> bool:
        return self.speculative_algorithm is not None

    @property
    def decode_graph_bs(self) -> list[int]:
        """Captured decode batch sizes ([] when decode graphs are disabled)."""
        dec = self.cuda_graph_config["decode"]
        return [] if dec["backend"] == "disabled" else list(dec["bs"] or [])

    def verify_backend(self) -> str:
        """The attention backend serving target-verify in this attention mode."""
        per_mode = self.prefill_attention_backend if self.speculative_attention_mode == "prefill" else self.decode_attention_backend
        return per_mode or self.attention_backend

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (flags of docs/contracts.md plus ``--random-seed``)."""
    p = argparse.ArgumentParser(prog="python -m lab.emulator", description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", default="moonshotai/Kimi-K2.5")
    a("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    a("--trust-remote-code", action="store_true")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--disable-cuda-graph", action="store_true", help="deprecated in SGLang 0.5.23")
    a("--disable-decode-cuda-graph", action="store_true")
    a("--cuda-graph-backend-decode", default=None, choices=["full", "breakable", "disabled"])
    a("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
    a("--enable-metrics", action="store_true")
    a("--decode-log-interval", type=int, default=40)
    a("--context-length", type=int, default=None)
    a("--served-model-name", default=None)
    a("--random-seed", type=int, default=0)
    a("--speculative-algorithm", default=None, choices=["EAGLE", "EAGLE3"])
    a("--speculative-draft-model-path", default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--speculative-attention-mode", default="prefill", choices=["prefill", "decode"])
    a("--speculative-draft-attention-backend", default=None)
    a("--speculative-adaptive", action="store_true",
      help="SGLang 0.5.16: switch num_steps among batch-size tiers at runtime (lab/emulator/adaptive.py)")
    a("--speculative-adaptive-config", default=None, help="SGLang 0.5.16: JSON tier table for --speculative-adaptive")
    a("--attention-backend", default=None)
    a("--prefill-attention-backend", default=None)
    a("--decode-attention-backend", default=None)
    a("--emulator-profile", default="kimi_k25_tp8_pcie", help="bundled profile name or path to a JSON profile")
    a("--ground-truth-file", default=None, help="JSONL ground truth (docs/contracts.md)")
    a("--emulator-startup-delay-s", type=float, default=0.5, help="seconds of fake startup logging before the port is bound")
    a("--emulator-fault", dest="emulator_faults", action="append", default=[],
      help="inject a fault (repeatable): see lab/emulator/faults.py")
    a("--incremental-streaming-output", action="store_true",
      help="SGLang flag: stream each chunk's new text only (default: cumulative text)")
    a("--emulator-prompt-categories", default=None,
      help="JSONL prompt file (data/prompts.jsonl format): each request's category, for the profile's "
           "acceptance.per_category (lab/emulator/categories.py)")
    a("--emulator-output", default="random", choices=["random", "loop"],
      help="generated text: random words (default) or a looping phrase (tests the degenerate-output check)")
    return p


def _cuda_graph_config(ns: argparse.Namespace, spec: bool, max_running: int) -> dict[str, dict[str, Any]]:
    """Resolved ``cuda_graph_config`` as 0.5.23's ``resolved_dict()`` shows it (the fields of
    ``model_executor/cuda_graph_config.py`` ``PhaseConfig``), with the precedence of
    ``cuda_graph_hook.py:parse_cuda_graph_config`` ~56-79 (legacy ``--disable-cuda-graph`` <
    ``--disable-decode-cuda-graph`` < ``--cuda-graph-backend-decode``) and the max-bs default
    of ``memory_hook.py`` ~179-188 (160 without GPU-memory info, capped at
    ``max_running_requests``; the emulator has no GPU memory to size it from)."""
    backend = "full"
    if ns.disable_cuda_graph or ns.disable_decode_cuda_graph:
        backend = "disabled"
    if ns.cuda_graph_backend_decode is not None:
        backend = ns.cuda_graph_backend_decode
    if ns.cuda_graph_bs_decode:
        bs = sorted(ns.cuda_graph_bs_decode)
        max_bs = max(bs)
    else:
        max_bs = ns.cuda_graph_max_bs_decode or min(160, max_running)
        bs = decode_graph_batch_sizes(max_bs, spec)
    phase = {"tc_compiler": "eager", "max_context_size": None, "full_prefill_max_req": None,
             "full_prefill_prefix_chunk_tokens": None, "max_seq_len": None}
    return {"decode": {"backend": backend, "max_bs": max_bs, "bs": bs, **phase},
            "prefill": {"backend": "disabled" if ns.disable_cuda_graph else "breakable", "max_bs": None, "bs": None,
                        **phase}}


def parse_args(argv: list[str]) -> tuple[ServerArgs, list[str]]:
    """Parse and resolve ``argv``.

    :returns: ``(ServerArgs, unknown_flags)``.
    :raises SystemExit: (argparse) on a malformed known flag or an impossible spec combination.
    """
    p = build_parser()
    ns, unknown = p.parse_known_args(argv)
    spec = ns.speculative_algorithm
    steps = topk = ndraft = None
    if spec:
        steps = ns.speculative_num_steps or 3
        topk = ns.speculative_eagle_topk or 1
        ndraft = ns.speculative_num_draft_tokens or steps + 1
        if topk == 1:
            ndraft = steps + 1  # SGLang rewrites num_draft_tokens for chain drafts
        if ndraft > steps * topk + 1:
            p.error(f"--speculative-num-draft-tokens {ndraft} > num_steps*topk+1 = {steps * topk + 1}")
        if not ns.speculative_draft_model_path:
            p.error("--speculative-draft-model-path is required with --speculative-algorithm")
    mrr = ns.max_running_requests or (SPEC_MAX_RUNNING_CAP if spec else NO_SPEC_MAX_RUNNING)
    attn = ns.attention_backend or DEFAULT_ATTENTION_BACKEND
    args = ServerArgs(
        model_path=ns.model_path,
        tp_size=ns.tp_size,
        host=ns.host,
        port=ns.port,
        trust_remote_code=ns.trust_remote_code,
        mem_fraction_static=ns.mem_fraction_static,
        max_running_requests=mrr,
        cuda_graph_max_bs_decode=ns.cuda_graph_max_bs_decode,
        cuda_graph_bs_decode=ns.cuda_graph_bs_decode,
        disable_cuda_graph=ns.disable_cuda_graph,
        cuda_graph_backend_decode=ns.cuda_graph_backend_decode,
        cuda_graph_config=_cuda_graph_config(ns, bool(spec), mrr),
        enable_metrics=ns.enable_metrics,
        decode_log_interval=max(1, ns.decode_log_interval),
        context_length=ns.context_length,
        speculative_algorithm=spec,
        speculative_draft_model_path=ns.speculative_draft_model_path if spec else None,
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=ndraft,
        speculative_attention_mode=ns.speculative_attention_mode,
        # raw input, as in SGLang's /server_info: 0.5.23 resolves it for DFLASH/DSPARK/SM100-NVFP4 only
        # (arg_groups/speculative_hook.py ~886-986, kimi_k3_hook.py ~40-50, kv_cache_hook.py ~205-223);
        # a real 0.5.16 EAGLE-3 server reports null (tests/fixtures/sglang-0.5.16/tiny/eagle3_*/server_info.*.json)
        speculative_draft_attention_backend=ns.speculative_draft_attention_backend if spec else None,
        attention_backend=attn,
        prefill_attention_backend=ns.prefill_attention_backend,
        decode_attention_backend=ns.decode_attention_backend,
        served_model_name=ns.served_model_name or ns.model_path,
        random_seed=ns.random_seed,
        emulator_profile=ns.emulator_profile,
        ground_truth_file=ns.ground_truth_file,
        emulator_startup_delay_s=max(0.0, ns.emulator_startup_delay_s),
        emulator_faults=list(ns.emulator_faults),
        emulator_output=ns.emulator_output,
        emulator_prompt_categories=ns.emulator_prompt_categories,
        incremental_streaming_output=ns.incremental_streaming_output,
        speculative_adaptive=bool(spec) and ns.speculative_adaptive,
        speculative_adaptive_config=ns.speculative_adaptive_config if spec and ns.speculative_adaptive else None,
    )
    if args.speculative_adaptive:
        from lab.emulator.adaptive import AdaptiveConfigError, candidate_steps

        if topk != 1:  # adaptive_unsupported_reason (adaptive_spec_params.py ~50-56)
            p.error(f"--speculative-adaptive needs --speculative-eagle-topk 1 (got {topk})")
        try:
            cands = candidate_steps(args.speculative_adaptive_config)
        except (AdaptiveConfigError, OSError, ValueError) as exc:
            p.error(f"--speculative-adaptive-config: {exc}")
        if steps not in cands:  # _init_adaptive_speculative_params (0.5.16 speculative_hook.py:752-757)
            p.error(f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps {cands}. "
                    "Pass one of those values.")
    return args, unknown


def sglang_options() -> dict[str, frozenset[str]]:
    """``version -> every option string`` of SGLang's ``launch_server`` parser, for each build in
    ``lab/emulator/sglang_options.json`` (made with SGLang's own ``ServerArgs.add_cli_args`` by
    ``tests/sglang_argparser.py``; ``tests/component/test_emulator_flags.py`` keeps it equal)."""
    import json
    from pathlib import Path

    raw = json.loads((Path(__file__).with_name("sglang_options.json")).read_text())
    return {v: frozenset(opts) for v, opts in raw.items() if not v.startswith("_")}


def sglang_refuses(unknown: list[str]) -> list[str]:
    """The flags among ``unknown`` (what the emulator's own parser left: flags it does not model
    and their values) that SGLang's parser refuses in every build listed, as argparse would:
    an exact option, or an unambiguous prefix of one (argparse's ``allow_abbrev``), passes.
    Values (tokens not starting with ``--``) and ``--flag=value`` values are not judged.

    :returns: the refused flags, in order (empty: SGLang would accept them all).
    """
    builds = sglang_options().values()
    refused = []
    for token in unknown:
        if not token.startswith("--") or token == "--":
            continue
        flag = token.split("=", 1)[0]

        def accepts(opts: frozenset[str]) -> bool:
            return flag in opts or len([o for o in opts if o.startswith(flag)]) == 1

        if not any(accepts(opts) for opts in builds):
            refused.append(flag)
    return refused
