"""Typed view of ``params.yaml``: the lab's single source of truth.

Everything that starts a server, a benchmark or a figure reads its settings through
:func:`load_params`, which validates the whole file with pydantic before anything runs.
An unknown key, a wrong type or an impossible combination raises :class:`ParamsError`
whose message names the key (``modes.eagle3_prefill.num_draft_tokens``) and the fix.

One module per concern, each importing no other lab package (``tests/unit/test_layout.py``):

- :mod:`lab.config.schema`: the section models and :class:`LabParams` (speculative rules of SGLang 0.5.23);
- :mod:`lab.config.loading`: :func:`load_params` and its error messages;
- :mod:`lab.config.dataset_rules`: ``bench.dataset`` as a local file or a Hugging Face id;
- :mod:`lab.config.emulator_faults`: the grammar of ``emulator.faults``;
- :mod:`lab.config.physics_config`: :class:`PhysicsConfig`, the physics stage's one schema (standard library only);
- :mod:`lab.config.physics_model`: the ``physics:`` section as pydantic, built from :class:`PhysicsConfig`;
- :mod:`lab.config.paths`: the repository root, a DVC experiment's main checkout, where each launch writes;
- :mod:`lab.config.tracking_uri`: the MLflow tracking URI resolved against the main checkout;
- :mod:`lab.config.base`: the strict base model of every section.

The names below are re-exported here: ``from lab.config import LabParams, load_params``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, for type checkers and the import graph (tests/unit/test_layout.py)
    from lab.config.dataset_rules import check_dataset_params, is_hf_id
    from lab.config.loading import SERVER_PLACEMENT_ENV, load_params
    from lab.config.paths import find_repo_root, launch_results_dir, launch_stage, main_repo_root, repo_root
    from lab.config.schema import (BenchParams, DatasetColumns, EmulatorParams, LabParams, LosslessParams, MlflowParams,
                                   ModelParams, ModeParams, ParamsError, PhysicsParams, ServerParams, SloParams)

# Where each re-exported name lives. Names resolve on first use (PEP 562), so importing one
# submodule (``lab.physics`` imports lab.config.physics_config on the device machine, where
# pydantic is absent) runs no other module of this package.
_WHERE = {
    "check_dataset_params": "dataset_rules", "is_hf_id": "dataset_rules",
    "SERVER_PLACEMENT_ENV": "loading", "load_params": "loading",
    "find_repo_root": "paths", "launch_results_dir": "paths", "launch_stage": "paths", "main_repo_root": "paths",
    "repo_root": "paths",
    **{name: "schema" for name in ("BenchParams", "DatasetColumns", "EmulatorParams", "LabParams", "LosslessParams",
                                   "MlflowParams", "ModelParams", "ModeParams", "ParamsError", "PhysicsParams",
                                   "ServerParams", "SloParams")},
}


def __getattr__(name: str):
    """``lab.config.<name>`` for the names of ``__all__``, imported from their submodule on first use.

    :raises AttributeError: ``name`` is not one of them.
    """
    if name not in _WHERE:
        raise AttributeError(f"module 'lab.config' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"lab.config.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["ParamsError", "LabParams", "ModeParams", "BenchParams", "ServerParams", "ModelParams", "EmulatorParams",
           "SloParams", "DatasetColumns", "LosslessParams", "MlflowParams", "PhysicsParams", "load_params", "repo_root",
           "find_repo_root", "main_repo_root", "launch_results_dir", "launch_stage", "is_hf_id", "check_dataset_params", "SERVER_PLACEMENT_ENV"]
