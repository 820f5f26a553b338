"""Server command: the engine's argv and environment for each mode (no process handling).

:func:`build_server_command` asks the engine (:mod:`lab.engine.registry`) for them. Both built-in
engines take the same SGLang 0.5.23 flags (``docs/contracts.md``, :func:`server_flags`): the real
server is ``python -m sglang.launch_server <flags>``, the emulator ``python -m lab.emulator <flags>``
plus its own flags (``--emulator-*``, ``--ground-truth-file``: :mod:`lab.engine.emulator_engine`). Each mode's speculative flags
come from one table, :data:`MODE_FLAGS`, so a mode's launch is readable in one place.
Starting, watching and stopping the command is :mod:`lab.engine.process`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from lab.config import LabParams, ModelParams, ModeParams, ServerParams
from lab.engine.registry import Engine, engine_for
from lab.redact import redact_argv, redact_env

__all__ = ["ServerCommand", "MODE_FLAGS", "BASE_ENV", "build_server_command", "launch_command", "server_flags", "model_paths",
           "flag_value", "sglang_env"]

# Mode field -> SGLang 0.5.23 flag (sglang/srt/arg_groups/fields/spec.py, model.py).
MODE_FLAGS: dict[str, str] = {
    "algorithm": "--speculative-algorithm",
    "num_steps": "--speculative-num-steps",
    "eagle_topk": "--speculative-eagle-topk",
    "num_draft_tokens": "--speculative-num-draft-tokens",
    "attention_mode": "--speculative-attention-mode",
    "attention_backend": "--attention-backend",
    "draft_attention_backend": "--speculative-draft-attention-backend",
    "prefill_attention_backend": "--prefill-attention-backend",
    "decode_attention_backend": "--decode-attention-backend",
}

# Always set for both engines: per-category GPU time in /metrics and step_time_dict in
# /server_info (sglang/srt/managers/scheduler_components/metrics_reporter.py).
BASE_ENV = {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", "SGLANG_RECORD_STEP_TIME": "1"}


@dataclass(frozen=True)


class ServerCommand:
    """A fully resolved engine launch.

    :ivar argv: the process argv (a list; never a shell string).
    :ivar env: variables added to the inherited environment.
    :ivar engine: ``params.engine`` (a name :mod:`lab.engine.registry` holds).
    :ivar host, port: where it will listen.
    """

    argv: list[str]
    env: dict[str, str]
    engine: str
    host: str
    port: int
    flags: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server (IPv6 hosts bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def display(self) -> str:
        """The launch as a copy-pasteable line, secrets redacted."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(redact_env(self.env).items()))
        return f"{env} {shlex.join(redact_argv(self.argv))}".strip()


def model_paths(mode: ModeParams, model: ModelParams) -> tuple[str, str | None]:
    """``(target, draft)`` paths the launch of ``mode`` names: ``model.path`` and the mode's (or the
    model's) ``draft_path``, or with ``model.synthetic`` the generated folders of
    :func:`lab.engine.synthetic.model_dir` (written by :func:`lab.engine.synthetic.write_model`
    before preflight; this only names them).

    :param mode: the mode's :class:`lab.config.ModeParams`; ``model``: ``params.model``.
    """
    m = model
    if m.synthetic:
        from lab.config import repo_root
        from lab.engine.synthetic import model_dir

        d = model_dir(m.synthetic, repo_root())
        return str(d / "target"), str(d / "draft")
    return m.path, (mode.draft_path or m.draft_path)


def flag_value(flags: Sequence[str], name: str) -> str | None:
    """The value after the last ``name`` (or of ``name=value``) in launch ``flags``, else None
    (argparse's rule: a later occurrence wins)."""
    value = None
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif f.startswith(name + "="):
            value = f.split("=", 1)[1]
    return value


def server_flags(mode: ModeParams, *, model: ModelParams, server: ServerParams) -> list[str]:
    """SGLang 0.5.23 flags for ``mode`` (identical for both engines).

    ``--max-running-requests`` and ``--cuda-graph-max-bs-decode`` are set in every mode:
    with speculation and no cap SGLang limits running requests to 48, the baseline not.

    :param mode: the mode's :class:`lab.config.ModeParams`; ``model``, ``server``: ``params.model``,
        ``params.server`` (its ``port`` the one the launch listens on).
    """
    m, s = model, server
    target, draft = model_paths(mode, model)
    flags = ["--model-path", target, "--tp-size", str(m.tp_size)]
    if m.synthetic:  # config-only model: SGLang initialises random weights (model_loader/loader.py DummyModelLoader)
        flags += ["--load-format", "dummy"]
    if m.trust_remote_code:
        flags.append("--trust-remote-code")
    flags += ["--host", s.host, "--port", str(s.port)]
    if s.mem_fraction_static is not None:
        flags += ["--mem-fraction-static", str(s.mem_fraction_static)]
    flags += [
        "--max-running-requests", str(s.max_running_requests),
        "--cuda-graph-max-bs-decode", str(s.cuda_graph_max_bs_decode),
        "--enable-metrics",
        "--decode-log-interval", str(s.decode_log_interval),
    ]
    if s.context_length is not None:
        flags += ["--context-length", str(s.context_length)]
    if s.nnodes > 1:
        flags += ["--nnodes", str(s.nnodes), "--node-rank", str(s.node_rank)]
    if s.dist_init_addr:
        flags += ["--dist-init-addr", s.dist_init_addr]
    if mode.is_speculative:
        flags += [MODE_FLAGS["algorithm"], str(mode.algorithm)]
        flags += ["--speculative-draft-model-path", str(draft)]
    for key, flag in MODE_FLAGS.items():
        value = getattr(mode, key)
        if key != "algorithm" and value is not None:
            flags += [flag, str(value)]
    return flags + list(s.extra_args) + list(mode.extra_args)


def build_server_command(
    params: LabParams,
    mode_name: str,
    *,
    ground_truth_file: str | os.PathLike[str] | None = None,
    python: str = sys.executable,
    prompt_file: str | os.PathLike[str] | None = None,
    port: int | None = None,
) -> ServerCommand:
    """The engine launch for ``mode_name`` under ``params.engine``: the engine's own
    :meth:`~lab.engine.registry.Engine.flags`, :meth:`~lab.engine.registry.Engine.argv` and
    :meth:`~lab.engine.registry.Engine.env`.

    :param ground_truth_file: an engine that records ground truth: where it writes what it actually did.
    :param python: the interpreter that runs the server.
    :param prompt_file: a modelled engine's: the JSONL prompt file whose categories set per-category
        acceptance (``--emulator-prompt-categories``, :mod:`lab.emulator.categories`).
    :param port: listen here instead of ``server.port``: what a launch passes,
        :func:`lab.engine.ports.launch_port` (a free port for the emulator when ``server.port`` is
        not set); read the URL from the command (``base_url``), not from params.
    :returns: a :class:`ServerCommand` (argv list + added environment).
    :raises ParamsError: unknown mode.
    """
    eng = engine_for(params.engine)
    mode = params.mode(mode_name)  # ParamsError for an unknown mode, before anything is built
    return launch_command(eng, mode_name, mode, model=params.model, server=params.server,
                          own=eng.own_section(params), ground_truth_file=ground_truth_file, python=python,
                          prompt_file=prompt_file, port=port)


def launch_command(eng: Engine, mode_name: str, mode: ModeParams, *, model: ModelParams, server: ServerParams,
                   own=None, ground_truth_file: str | os.PathLike[str] | None = None, python: str = sys.executable,
                   prompt_file: str | os.PathLike[str] | None = None, port: int | None = None) -> ServerCommand:
    """:func:`build_server_command` from the engine and the sections a launch reads: what a stage
    that resolved the engine once calls (:func:`lab.pipeline.bench.run_mode`).

    :param eng: the :class:`lab.engine.registry.Engine` (``engine_for(params.engine)``).
    :param mode: ``params.mode(mode_name)``; ``model``, ``server``: ``params.model``, ``params.server``;
        ``own``: ``eng.own_section(params)`` (:meth:`lab.engine.registry.Engine.own_section`).
    :param ground_truth_file, python, prompt_file, port: as :func:`build_server_command`'s.
    :returns: a :class:`ServerCommand`.
    """
    if port is not None and port != server.port:
        server = server.model_copy(update={"port": port})
        server.__pydantic_fields_set__.add("port")
    flags = eng.flags(mode_name, mode=mode, model=model, server=server)
    argv = eng.argv(mode_name, flags, python=python, own=own,
                    ground_truth_file=None if ground_truth_file is None else str(ground_truth_file),
                    prompt_file=None if prompt_file is None else str(prompt_file))
    return ServerCommand(argv=argv, env=eng.env(mode_name, mode=mode, server=server), engine=eng.name,
                         host=server.host, port=server.port, flags=flags)


def sglang_env(mode: ModeParams, *, server: ServerParams) -> dict[str, str]:
    """The variables an SGLang-compatible launch of ``mode`` adds (:data:`BASE_ENV`, then
    ``server.env``, the mode's ``env``, and ``SGLANG_SIMULATE_ACC_LEN`` for a mode that pins its
    accept length).

    :param mode: the mode's :class:`lab.config.ModeParams`; ``server``: ``params.server``.
    """
    env = dict(BASE_ENV)
    env.update(server.env)
    env.update(mode.env)
    if mode.simulate_accept_length is not None:
        env["SGLANG_SIMULATE_ACC_LEN"] = str(mode.simulate_accept_length)
        # SGLang's default simulated-token mode emits token id 100 at every position
        # (speculative/spec_utils.py ~568), which the degenerate-output check would flag;
        # real-draft-token keeps the real tokens and is allowed with topk 1
        # (speculative/eagle_utils.py ~818-823). With topk > 1 SGLang refuses it, so the
        # run keeps token 100 and its outputs are (correctly) reported degenerate.
        if (mode.eagle_topk or 1) == 1:
            env.setdefault("SGLANG_SIMULATE_ACC_TOKEN_MODE", "real-draft-token")
    return env
