"""The emulator as an engine (:mod:`lab.engine.registry`): ``python -m lab.emulator`` with
SGLang 0.5.23's flags plus its own (``--emulator-*``, ``--ground-truth-file``), no GPU, timings
from a cost profile (``params.emulator.profile``), ground truth recorded; it serves SGLang
0.5.23's surfaces (:data:`lab.engine.surfaces.SURFACES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.engine.registry import Engine, register
from lab.engine.surfaces import SURFACES

__all__ = ["Emulator"]


@register("emulator")
class Emulator(Engine):
    """The lab's SGLang-compatible emulator (:mod:`lab.emulator`): modelled, records ground truth,
    holds no GPU, reads ``params.emulator``, takes a free port when ``server.port`` is unset."""

    label = "emulator"
    modelled = True
    ground_truth = True
    holds_gpus = False
    params_section = "emulator"
    picks_free_port = True
    module = "lab.emulator"
    surface = SURFACES["0.5.23"]
    #: Launch-to-launch spread of decode tok/s launch means that the lab measured and documents, per
    #: cost profile: ``(cv, n launches, source)`` (:func:`lab.analysis.launches.prior_spread`).
    launch_spread_priors = {
        "kimi_k25_tp8_pcie": (
            0.022, 14, "docs/measurement.md section 4: 14 launches judged, benchmarks/sentinel_false_alarms.py"),
        "fast": (0.08, 28, "docs/measurement.md section 4: 4-8 % over 28 launches, the upper end taken"),
    }

    def flags(self, mode_name: str, *, mode: Any, model: Any, server: Any) -> list[str]:
        """SGLang 0.5.23's flags (:func:`lab.engine.command.server_flags`)."""
        from lab.engine.command import server_flags

        return server_flags(mode, model=model, server=server)

    def argv(self, mode_name: str, flags: list[str], *, python: str, own: Any = None,
             ground_truth_file: str | None = None, prompt_file: str | None = None) -> list[str]:
        """``python -m lab.emulator <flags>`` then the emulator's own: ``--emulator-profile``,
        ``--emulator-startup-delay-s``, each ``--emulator-fault`` (:mod:`lab.emulator.faults`),
        ``--ground-truth-file`` and ``--emulator-prompt-categories`` (:mod:`lab.emulator.categories`)
        when given; ``own``: ``params.emulator``."""
        e = own
        argv = [python, "-m", self.module, *flags,
                "--emulator-profile", e.profile, "--emulator-startup-delay-s", str(e.startup_delay_s)]
        for fault in e.faults:  # none by default
            argv += ["--emulator-fault", fault]
        if ground_truth_file is not None:
            argv += ["--ground-truth-file", str(ground_truth_file)]
        if prompt_file is not None:
            argv += ["--emulator-prompt-categories", str(prompt_file)]
        return argv

    def env(self, mode_name: str, *, mode: Any, server: Any) -> dict[str, str]:
        """SGLang's launch variables (:func:`lab.engine.command.sglang_env`): the emulator reads
        ``SGLANG_SIMULATE_ACC_LEN`` as SGLang does."""
        from lab.engine.command import sglang_env

        return sglang_env(mode, server=server)

    def preflight(self, modes: Mapping[str, Any], *, model: Any, server: Any, bench: Any, own: Any,
                  python: str, timeout_s: float, check_argv: bool) -> list[Any]:
        """``gpus`` skipped (no GPU, SGLang or weights needed), ``emulator`` (its cost profile,
        ``own.profile``, loads), ``context``."""
        from lab.emulator.profile import ProfileError, load_profile
        from lab.engine.preflight import OK, FAIL, SKIP, Check, context_row

        checks = [Check("gpus", SKIP, "engine emulator: no GPU, SGLang or weights needed")]
        try:
            prof, path = load_profile(own.profile)
            checks.append(Check("emulator", OK, f"profile {prof.name} v{prof.version} ({path}); its timing models "
                                f"SGLang build {prof.models_build.label!r}"))
        except ProfileError as exc:
            checks.append(Check("emulator", FAIL, str(exc), "set emulator.profile to a bundled name or a file"))
        checks.append(context_row(self, modes, model=model, server=server, bench=bench, own=own))
        return checks

    def version_tags(self, server_info: Any, python: str | None = None) -> dict[str, str]:
        """``sglang_version: emulator``: the version the emulator reports in ``/server_info`` is
        the format it serves, not a build that ran (``emulated_sglang_version`` keeps it)."""
        return {"sglang_version": "emulator",
                "emulated_sglang_version": str((server_info or {}).get("version", "unknown"))}

    def capture_environment(self, python: str, write: Any) -> tuple[dict[str, str], Any]:
        """The SGLang items recorded as not applicable."""
        from lab.engine.envcapture import NOT_AVAILABLE

        write("sglang-check-env.txt", f"{NOT_AVAILABLE}: engine emulator does not run SGLang")
        return {}, "not applicable: engine emulator"

    def input_files(self, own: Any, root: Any) -> dict[str, Any]:
        """``emulator.profile``: the cost profile's file (a bundled name or a path; a profile that
        does not load is the preflight's to report)."""
        from pathlib import Path

        from lab.emulator.profile import ProfileError, load_profile

        prof = own.profile
        cand = Path(prof) if Path(prof).is_absolute() else Path(root) / prof
        try:
            return {"emulator.profile": load_profile(cand if cand.is_file() else prof)[1].resolve()}
        except ProfileError:
            return {}

    def cost_profile(self, own: Any) -> str | None:
        """``emulator.profile`` (``own``: ``params.emulator``)."""
        return own.profile

    def launch_setup(self, own: Any) -> dict[str, Any]:
        """``emulator_profile`` (its name) and ``emulator_faults`` (``own``: ``params.emulator``)."""
        return {"emulator_profile": own.profile, "emulator_faults": list(own.faults or [])}

    def prompt_counter(self) -> Any:
        """The emulator's own rule (:func:`lab.workload.context.estimate_tokens`)."""
        from lab.workload.context import estimate_tokens

        return estimate_tokens

    def context_window(self, own: Any) -> tuple[int | None, str] | None:
        """The emulator's model window (Kimi-K2.5's, :data:`lab.emulator.args.DEFAULT_CONTEXT_LENGTH`)."""
        from lab.emulator.args import DEFAULT_CONTEXT_LENGTH

        return DEFAULT_CONTEXT_LENGTH, ("the emulator's model (Kimi-K2.5's max_position_embeddings, "
                                        "lab/emulator/args.py DEFAULT_CONTEXT_LENGTH)")
