"""What a mode's MLflow run logs as params: every leaf of ``params.yaml`` that shapes it.

A mode run logs ``engine``, ``mode_name``, ``model.*``, ``server.*``, its own mode slice as
``mode.*`` (the same column name in every mode run, so MLflow's compare view lines modes up),
``bench.*``, ``emulator.*`` (emulator runs), ``sweep.*`` and ``mlflow.*``; ``physics.*`` is
logged by the physics stage's own run (:func:`lab.tracking.physics_log.log_physics`). Values are the
validated ones (``null``, ``true``/``false``, lists as text), flattened by
:func:`lab.tracking.runs.flatten_params`, which redacts credentials only (:mod:`lab.redact`):
``mode.num_draft_tokens`` or ``bench.max_new_tokens`` show their numbers. A tracking URI's
password (``postgresql://user:pw@host/db``) is replaced by ``***``.

``tests/unit/test_params_logged.py`` walks the default ``params.yaml`` and checks that every leaf
appears in MLflow with its value.
"""

from __future__ import annotations

from typing import Any

from lab.engine.registry import engine_for
from lab.redact import redact_url

__all__ = ["mode_run_params", "compare_run_params", "redact_url"]


def mode_run_params(params, mode_name: str) -> dict[str, str]:
    """The flat ``{name: value}`` params of mode ``mode_name``'s MLflow run: the params.yaml
    sections its ``bench@<mode>`` stage declares in ``dvc.yaml`` (engine, model, server, this
    mode, bench, emulator, mlflow), nothing else (no ``sweep``: a sweep edit re-runs no bench).

    :param params: :class:`lab.config.LabParams`.
    :raises lab.config.ParamsError: ``mode_name`` is not in ``params.modes``.
    """
    from lab.tracking.runs import flatten_params

    def dump(x: Any) -> Any:
        return x.model_dump() if hasattr(x, "model_dump") else x

    mlflow: dict[str, Any] = dict(dump(params.mlflow))
    mlflow["tracking_uri"] = redact_url(str(mlflow.get("tracking_uri")))
    return flatten_params({
        "engine": params.engine, "mode_name": mode_name, "model": params.model.model_dump(),
        "server": params.server.model_dump(), "mode": params.mode(mode_name).model_dump(),
        "bench": params.bench.model_dump(), "lossless": params.lossless.model_dump(),
        **({sec: getattr(params, sec).model_dump()} if (sec := engine_for(params.engine).params_section) else {}),
        "mlflow": mlflow})


def compare_run_params(params) -> dict[str, str]:
    """The flat ``{name: value}`` params of the comparison's MLflow run: the ``sweep`` section
    (``sweep.prefix``, ``sweep.grid.num_steps``...), which only the ``compare`` stage declares
    in ``dvc.yaml`` (it checks the generated modes against it); every other section is on the
    mode runs (:func:`mode_run_params`). Empty without a sweep section.

    :param params: :class:`lab.config.LabParams`.
    """
    from lab.tracking.runs import flatten_params

    sweep = params.sweep
    return flatten_params({"sweep": sweep.model_dump() if hasattr(sweep, "model_dump") else sweep}) if sweep else {}

