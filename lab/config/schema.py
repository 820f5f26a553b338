"""The schema of ``params.yaml``: one pydantic model per section and :class:`LabParams`, the whole file.

Everything that starts a server, a benchmark or a figure reads its settings through
:func:`load_params`, which validates the whole file with pydantic before anything runs.
An unknown key, a wrong type or an impossible combination raises :class:`ParamsError`
whose message names the key (``modes.eagle3_prefill.num_draft_tokens``) and the fix.

The speculative rules mirror SGLang 0.5.23 (``sglang/srt/arg_groups/fields/spec.py`` and
its speculative resolution hook): with ``--speculative-eagle-topk 1`` SGLang rewrites
``--speculative-num-draft-tokens`` to ``num_steps + 1``, and in general it needs
``num_steps * topk + 1 >= num_draft_tokens``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lab.config.base import Strict
from lab.config.dataset_rules import check_dataset_params
from lab.config.emulator_faults import parse_fault
from lab.config.paths import RESERVED_RESULT_DIRS
from lab.config.physics_model import PhysicsParams
from lab.config.tracking_uri import resolve_tracking_uri

__all__ = ["ParamsError", "ModelParams", "ServerParams", "EmulatorParams", "ModeParams", "SloParams", "DatasetColumns",
           "BenchParams", "LosslessParams", "MlflowParams", "PhysicsParams", "LabParams"]


class ParamsError(ValueError):
    """``params.yaml`` (or a parameter injected into a notebook) is invalid.

    The message lists every problem as ``<key>: <problem>. Fix: <what to do>``.
    """


class ModelParams(Strict):
    """Target and draft model.

    ``path`` and ``draft_path`` are local directories or Hugging Face repo ids (SGLang
    ``--model-path`` / ``--speculative-draft-model-path``). The emulator never loads them.
    ``synthetic`` (``kshard``, ``kimi-e64`` or ``tiny``, :mod:`lab.engine.synthetic`) serves a config-only
    target and draft with random weights (``--load-format dummy``) instead of ``path`` and
    ``draft_path``: the real server on a node without weights. Speculative modes must then pin
    acceptance with ``simulate_accept_length``.
    """

    path: str = "moonshotai/Kimi-K2.5"
    draft_path: str | None = "lightseekorg/kimi-k2.5-eagle3-mla"
    tp_size: int = Field(8, ge=1)
    trust_remote_code: bool = True
    synthetic: Literal["kshard", "kimi-e64", "tiny"] | None = None


class ServerParams(Strict):
    """Server launch settings shared by every mode (SGLang flags in DESIGN.md).

    ``max_running_requests`` and ``cuda_graph_max_bs_decode`` are applied identically to
    every mode: SGLang caps speculative servers at 48 running requests when unset, and the
    baseline has no cap, so leaving them unset compares different schedulers.
    ``host`` other than loopback exposes the engine (a warning is printed at launch);
    ``stop_grace_s`` is the wait between SIGTERM and SIGKILL of the engine's process group.
    """

    host: str = "127.0.0.1"
    port: int = Field(30000, ge=1024, le=65535)
    mem_fraction_static: float | None = Field(0.85, gt=0.0, lt=1.0)
    max_running_requests: int = Field(48, ge=1)
    cuda_graph_max_bs_decode: int = Field(48, ge=1)
    decode_log_interval: int = Field(40, ge=1)
    context_length: int | None = Field(None, ge=1)
    startup_timeout_s: float = Field(1800.0, gt=0)
    stop_grace_s: float = Field(20.0, gt=0)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Multi-node pass-through (SGLang --nnodes/--node-rank/--dist-init-addr); see docs/gpu-node.md.
    nnodes: int = Field(1, ge=1)
    node_rank: int = Field(0, ge=0)
    dist_init_addr: str | None = None

    @model_validator(mode="after")
    def _multi_node(self) -> "ServerParams":
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank={self.node_rank} with nnodes={self.nnodes}. Fix: use 0..{self.nnodes - 1}")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("nnodes > 1 needs dist_init_addr. Fix: set it to host:port of node 0, e.g. 10.0.0.1:5000")
        return self


class EmulatorParams(Strict):
    """Emulator settings (ignored with ``engine: sglang``).

    ``profile`` is the name of a bundled cost profile (``lab/emulator/profiles/<name>.json``)
    or a path to a profile file.
    """

    profile: str = "kimi_k25_tp8_pcie"
    startup_delay_s: float = Field(0.5, ge=0)
    faults: list[str] = Field(default_factory=list)

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, v: list[str]) -> list[str]:
        """Each entry is an ``--emulator-fault`` string (``lab/emulator/faults.py``)."""
        for f in v:
            parse_fault(f)  # FaultError (a ValueError) names the fault and the accepted forms
        return v


_MODE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ModeParams(Strict):
    """One server configuration to compare (one server launch).

    ``algorithm`` null is plain decoding. With ``EAGLE3``, ``num_steps``, ``eagle_topk`` and
    ``num_draft_tokens`` map to ``--speculative-num-steps`` / ``-eagle-topk`` /
    ``-num-draft-tokens`` and ``attention_mode`` to ``--speculative-attention-mode``.
    ``attention_backend`` (``--attention-backend``: every role's default), ``prefill_attention_backend``,
    ``decode_attention_backend`` and ``draft_attention_backend`` (``--speculative-draft-attention-backend``)
    pick the attention kernels; null leaves SGLang's default.
    """

    algorithm: Literal["EAGLE3"] | None = None
    draft_path: str | None = None
    num_steps: int | None = Field(None, ge=1)
    eagle_topk: int | None = Field(None, ge=1)
    num_draft_tokens: int | None = Field(None, ge=2)
    attention_mode: Literal["prefill", "decode"] | None = None
    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    simulate_accept_length: float | None = Field(None, ge=1.0)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _speculative_rules(self) -> "ModeParams":
        spec_fields = ("num_steps", "eagle_topk", "num_draft_tokens", "attention_mode")
        if self.algorithm is None:
            set_ = [f for f in spec_fields if getattr(self, f) is not None]
            if set_:
                raise ValueError(
                    f"{', '.join(set_)} set without algorithm. Fix: set algorithm: EAGLE3, "
                    "or remove the speculative keys from this plain-decoding mode"
                )
            if self.simulate_accept_length is not None:
                raise ValueError(
                    "simulate_accept_length needs a speculative mode. Fix: remove it or set algorithm: EAGLE3"
                )
            return self
        missing = [f for f in ("num_steps", "eagle_topk", "num_draft_tokens") if getattr(self, f) is None]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} missing for algorithm {self.algorithm}. Fix: set them, "
                "e.g. num_steps: 2, eagle_topk: 1, num_draft_tokens: 3 (the seeds' configuration)"
            )
        assert self.num_steps and self.eagle_topk and self.num_draft_tokens
        if self.eagle_topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError(
                f"num_draft_tokens={self.num_draft_tokens} with eagle_topk=1 and num_steps="
                f"{self.num_steps}: a chain draft verifies exactly num_steps + 1 tokens, and "
                "SGLang silently rewrites num_draft_tokens to that, so the run would not be what "
                f"params.yaml says. Fix: set num_draft_tokens: {self.num_steps + 1}"
            )
        if self.num_steps * self.eagle_topk + 1 < self.num_draft_tokens:
            raise ValueError(
                f"num_draft_tokens={self.num_draft_tokens} exceeds num_steps*eagle_topk+1="
                f"{self.num_steps * self.eagle_topk + 1} (SGLang's rule). Fix: lower "
                "num_draft_tokens or raise num_steps/eagle_topk"
            )
        if self.simulate_accept_length is not None and self.simulate_accept_length > self.num_draft_tokens:
            raise ValueError(
                f"simulate_accept_length={self.simulate_accept_length} exceeds num_draft_tokens="
                f"{self.num_draft_tokens}. Fix: use a value in 1..num_draft_tokens"
            )
        return self

    @property
    def is_speculative(self) -> bool:
        """True for EAGLE-3 modes (a draft + verify cycle per iteration)."""
        return self.algorithm is not None


class SloParams(Strict):
    """Service-level objectives for goodput (:mod:`lab.analysis.load`): a request is *good*
    when its TTFT and its TPOT (DESIGN.md definitions, per request) are both within the
    limits, as in vLLM's ``--goodput ttft:<ms> tpot:<ms>`` (``vllm/benchmarks/serve.py``
    ``calculate_metrics``). ``null`` drops that limit; at least one must be set."""

    ttft_ms: float | None = Field(500.0, gt=0)
    tpot_ms: float | None = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _one_limit(self) -> "SloParams":
        if self.ttft_ms is None and self.tpot_ms is None:
            raise ValueError("no limit set. Fix: set ttft_ms and/or tpot_ms (milliseconds), e.g. 500 and 20")
        return self


class DatasetColumns(Strict):
    """Which columns of a Hugging Face dataset hold the prompt, its category and its id
    (``bench.dataset_columns``; :mod:`lab.workload.sources`). ``prompt``'s value may be a
    string, a list of turns (the first is sent) or a list of ``{role, content}`` messages."""

    prompt: str = Field(min_length=1)
    category: str | None = None
    id: str | None = None


class BenchParams(Strict):
    """Client-side workload, swept inside one server launch.

    Each (concurrency level, repeat) sends ``num_prompts`` requests with at most
    ``concurrency`` in flight, after ``warmup_requests`` unmeasured ones.
    """

    dataset: str = "data/prompts.jsonl"
    # A Hugging Face dataset instead of the local JSONL (lab/workload/sources.py): bench.dataset
    # is then its id (owner/name), loaded with `datasets` (extra `hf`) on the bench node.
    dataset_split: str | None = None          # e.g. train, test
    dataset_subset: str | None = None         # the HF config name, e.g. main for openai/gsm8k
    dataset_revision: str | None = None       # a commit or tag; pin it for reproducible runs
    dataset_columns: DatasetColumns | None = None
    dataset_category: str | None = None       # fixed category of a single-task set, e.g. math
    num_prompts: int = Field(8, ge=1)
    # more requests per repeat than the dataset has prompts: refused (lab/workload/sources.py
    # check_prompt_count) unless true, when each pass over the set is a fresh permutation
    repeat_prompts: bool = False
    max_new_tokens: int = Field(64, ge=2)
    concurrency: list[int] = Field(default_factory=lambda: [1, 8])
    warmup_requests: int = Field(2, ge=0)
    repeats: int = Field(3, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    seed: int = 0
    request_timeout_s: float = Field(600.0, gt=0)
    # Client-side axes inside one launch (lab.workload.context): prompts padded to about N tokens
    # (0 = the prompt as is) and output lengths (null = [max_new_tokens]). The first value
    # of each is the primary point: the c<N> keys and the speedups use it.
    context_tokens: list[int] = Field(default_factory=lambda: [0])
    output_tokens: list[int] | None = None
    # Per-request output lengths drawn uniformly from [L x (1 - spread), L] (the same draws
    # in every mode; lab.workload.dataset.output_lengths); 0 = every request decodes exactly L.
    output_tokens_spread: float = Field(0.0, ge=0.0, lt=1.0)
    # Profiler trace (lab/measure/trace_capture.py), off by default: after the measured levels,
    # ``trace_requests`` requests of ``trace_max_new_tokens`` at concurrency 1 between
    # SGLang's /start_profile and /stop_profile; per-step analysis in result.json and the report.
    # ("profile" is the emulator's cost profile, emulator.profile; this is a profiler trace.)
    trace: bool = False
    trace_requests: int = Field(2, ge=1)
    trace_max_new_tokens: int = Field(16, ge=2)
    # Open-loop points (lab.workload.arrivals, lab.measure.client ``arrivals=``), measured in the
    # same launch after the concurrency levels: ``num_prompts`` requests per repeat arriving at
    # each rate (requests/s) with gamma inter-arrival times of shape ``burstiness`` (1.0 =
    # Poisson; vLLM's --burstiness), seeded by seed + repeat; at most ``rate_max_concurrency``
    # in flight (0 = no cap). Goodput is counted under ``slo``.
    request_rates: list[float] = Field(default_factory=list)
    burstiness: float = Field(1.0, gt=0, allow_inf_nan=False)
    rate_max_concurrency: int = Field(0, ge=0)
    slo: SloParams = Field(default_factory=SloParams)

    @field_validator("request_rates")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        import math

        if any(not math.isfinite(r) or r <= 0 for r in v) or len({f"{r:g}" for r in v}) != len(v):
            raise ValueError(f"{v}: need distinct finite rates > 0 (requests/s). Fix: e.g. [4, 12], or [] for none")
        return v

    @model_validator(mode="after")
    def _dataset_source(self) -> "BenchParams":
        check_dataset_params(self)  # ValueError names the key and the fix
        return self

    @field_validator("context_tokens")
    @classmethod
    def _context_levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 0 for c in v) or len(set(v)) != len(v):
            raise ValueError(f"{v}: need distinct integers >= 0. Fix: e.g. [0, 4096, 16384]")
        return v

    @field_validator("output_tokens")
    @classmethod
    def _output_levels(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(c < 2 for c in v) or len(set(v)) != len(v)):
            raise ValueError(f"{v}: need distinct integers >= 2. Fix: e.g. [64, 256], or null")
        return v

    @property
    def output_levels(self) -> list[int]:
        """Output lengths to sweep (``output_tokens``, or ``[max_new_tokens]``)."""
        return list(self.output_tokens or [self.max_new_tokens])

    # Hygiene (lab/measure/hygiene.py): warm-up batches of ``warmup_requests`` until the per-request
    # mean ICL of the last ``warmup_window`` requests has CV < ``warmup_cv_threshold``, at
    # most ``warmup_max_requests``; looping outputs (repeated ``ngram_n``-gram share >
    # ``ngram_repeat_threshold`` in more than ``degenerate_max_fraction`` of outputs) mark a run.
    warmup_cv_threshold: float = Field(0.05, gt=0)
    warmup_window: int = Field(3, ge=2)
    warmup_max_requests: int = Field(16, ge=0)
    ngram_n: int = Field(4, ge=1)
    ngram_repeat_threshold: float = Field(0.5, ge=0.0, le=1.0)
    degenerate_max_fraction: float = Field(0.25, ge=0.0, le=1.0)
    # Regression sentinel (lab/analysis/sentinel.py): compare this launch's mean with those of up to
    # ``sentinel_history_runs`` earlier launches of the same config hash; flag when it is
    # outside their (1 - ``sentinel_alpha``) prediction interval and the relative change
    # exceeds ``sentinel_min_effect``.
    sentinel_history_runs: int = Field(5, ge=1)
    sentinel_alpha: float = Field(0.01, gt=0.0, lt=1.0)
    sentinel_min_effect: float = Field(0.02, ge=0.0)
    # Engine launches per mode (docs/measurement.md, "Launches"): each a fresh engine start. DVC runs
    # launch 1 of every mode (stages bench@<mode>, results in results/<mode>/), then launch 2 of
    # every mode (bench_launch@2-<mode>, results/launches/2/<mode>/), and so on: A B C A B C, so
    # drift hits every mode alike. With launches >= 2 the comparison's units are the launch means.
    launches: int = Field(1, ge=1, le=99)
    # The launch numbers of the bench_launch@<n>-<mode> stages (dvc.yaml's matrix reads this list:
    # DVC cannot count): exactly [2, ..., launches]. `lab launches N` sets both keys.
    later_launches: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _launch_stages(self) -> "BenchParams":
        want = list(range(2, self.launches + 1))
        if self.later_launches != want:
            raise ValueError(
                f"later_launches is {self.later_launches} but launches is {self.launches}: dvc.yaml makes one "
                f"bench_launch@<n>-<mode> stage per entry, so it must be {want}. Fix: run `lab launches "
                f"{self.launches}` (sets both), or with dvc exp run pass -S bench.launches={self.launches} "
                f"-S 'bench.later_launches={want}'")
        return self

    @field_validator("concurrency")
    @classmethod
    def _positive_levels(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("empty list. Fix: give at least one level, e.g. [1, 8]")
        bad = [c for c in v if c < 1]
        if bad:
            raise ValueError(f"levels {bad} are not positive. Fix: use integers >= 1, e.g. [1, 8]")
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate levels in {v}. Fix: list each level once")
        return v


class LosslessParams(Strict):
    """The lossless check of the compare stage (:mod:`lab.analysis.lossless`).

    At temperature 0 a speculative mode whose share of outputs identical to the baseline's,
    token for token, is below ``min_identical_share`` gets a warning naming the divergent
    prompts (1.0: every output must match; EAGLE-3 is lossless). Its own section, not
    ``bench``: only the compare stage reads it, so editing it re-runs ``compare`` alone and
    leaves the bench stages and the sentinel's configuration hash (``bench`` is part of it)
    as they are.
    """

    min_identical_share: float = Field(1.0, ge=0.0, le=1.0)


class MlflowParams(Strict):
    """MLflow tracking.

    ``tracking_uri`` may be a relative ``sqlite:///file.db``: it is resolved against the
    *main* repository root (also from inside a DVC experiment's temporary copy under
    ``.dvc/tmp/exps/``) so that every run writes to the same database.
    """

    tracking_uri: str = "sqlite:///mlflow.db"
    experiment: str = "eagle-verify-lab"

    def resolved_tracking_uri(self, root: Path | None = None) -> str:
        """The tracking URI with a relative SQLite path made absolute
        (:func:`lab.config.tracking_uri.resolve_tracking_uri`).

        Returns e.g. ``sqlite:////abs/path/mlflow.db``; other URIs are returned unchanged.
        """
        return resolve_tracking_uri(self.tracking_uri, root)


class LabParams(Strict):
    """The whole ``params.yaml``."""

    # A registered engine's name (lab.engine.registry, which lab.config does not import: an
    # unregistered name fails at the first question asked of it, lab.engine.registry.engine_for).
    engine: str = Field("emulator", pattern=r"^[a-z][a-z0-9_]*$")
    model: ModelParams = Field(default_factory=ModelParams)
    server: ServerParams = Field(default_factory=ServerParams)
    emulator: EmulatorParams = Field(default_factory=EmulatorParams)
    modes: dict[str, ModeParams]
    bench: BenchParams = Field(default_factory=BenchParams)
    lossless: LosslessParams = Field(default_factory=LosslessParams)
    mlflow: MlflowParams = Field(default_factory=MlflowParams)
    physics: PhysicsParams = Field(default_factory=PhysicsParams)
    # Grid of extra modes, expanded into `modes` by `lab sweep` (validated by lab.pipeline.sweep).
    sweep: dict[str, Any] | None = None

    @field_validator("modes")
    @classmethod
    def _mode_names(cls, v: dict[str, ModeParams]) -> dict[str, ModeParams]:
        if not v:
            raise ValueError("no modes. Fix: define at least `baseline: {algorithm: null}`")
        for name in v:
            if not _MODE_NAME.match(name) or name in RESERVED_RESULT_DIRS:
                raise ValueError(
                    f"mode name {name!r} is not usable as a stage and results folder name. "
                    "Fix: use lowercase letters, digits and underscores, starting with a letter "
                    f"(not {' or '.join(repr(n) for n in RESERVED_RESULT_DIRS)})"
                )
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> "LabParams":
        missing = [n for n, m in self.modes.items() if m.is_speculative and not (m.draft_path or self.model.draft_path)]
        if missing:
            raise ValueError(
                f"{', '.join('modes.' + n for n in missing)}: EAGLE-3 needs a draft model. Fix: set "
                "model.draft_path (e.g. lightseekorg/kimi-k2.5-eagle3-mla) or <mode>.draft_path"
            )
        if self.model.synthetic:
            unpinned = [n for n, m in self.modes.items() if m.is_speculative and m.simulate_accept_length is None]
            if unpinned:
                raise ValueError(
                    f"{', '.join('modes.' + n for n in unpinned)}: model.synthetic={self.model.synthetic} serves "
                    "random weights, whose draft tokens are never accepted. Fix: set simulate_accept_length "
                    "(SGLANG_SIMULATE_ACC_LEN), e.g. 1.85 as the seeds measured"
                )
        return self

    def mode(self, name: str) -> ModeParams:
        """The mode called ``name``; raises :class:`ParamsError` naming the known modes."""
        try:
            return self.modes[name]
        except KeyError:
            raise ParamsError(
                f"modes.{name}: no such mode. Fix: use one of {sorted(self.modes)} or add it to params.yaml"
            ) from None

    @property
    def baseline_mode(self) -> str | None:
        """Name of the first plain-decoding mode (the reference for speedups), if any."""
        return next((n for n, m in self.modes.items() if not m.is_speculative), None)
