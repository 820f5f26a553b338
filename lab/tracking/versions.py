"""The engine version of a run, for the MLflow tag ``sglang_version``: what the engine itself
says (:meth:`lab.engine.registry.Engine.version_tags`).

For SGLang, first found wins: ``/server_info``'s ``version`` field, then ``sglang.__version__``
imported by the server's own Python (:func:`lab.engine.sglang_engine.sglang_version`). Emulator
runs are tagged ``emulator``: the version the emulator reports in ``/server_info`` is the format
it serves, not a build that ran (``emulated_sglang_version`` keeps it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.engine.registry import engine_for
from lab.engine.sglang_engine import sglang_version

__all__ = ["sglang_version", "version_tags"]


def version_tags(engine: str, server_info: Mapping[str, Any] | None, python: str | None = None) -> dict[str, str]:
    """MLflow tags for a run's engine version (``{"sglang_version": ...}``; ``"emulator"`` for
    the emulator, with ``emulated_sglang_version`` beside it), as ``engine`` tags them."""
    return engine_for(engine).version_tags(server_info, python)
