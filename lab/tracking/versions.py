"""The SGLang version of a run, for the MLflow tag ``sglang_version``.

Source, first found wins: ``/server_info``'s ``version`` field (SGLang 0.5.23
``sglang/srt/entrypoints/http_server.py`` ``server_info()`` returns ``"version": __version__``),
then ``sglang.__version__`` imported by the server's own Python (the interpreter that ran
``python -m sglang.launch_server``). Emulator runs are tagged ``emulator``: the version the
emulator reports in ``/server_info`` is the format it serves, not a build that ran
(``emulated_sglang_version`` keeps it).
"""

from __future__ import annotations

from lab.engine.registry import engine_for

import subprocess
from collections.abc import Mapping
from typing import Any

__all__ = ["sglang_version", "version_tags"]


def sglang_version(server_info: Mapping[str, Any] | None, python: str | None = None, *,
                   timeout_s: float = 30.0) -> str:
    """The SGLang version string, or ``"unknown"`` when neither source answers.

    :param server_info: the parsed ``/server_info`` JSON (may be None).
    :param python: the server's interpreter, asked ``import sglang; print(sglang.__version__)``
        when ``server_info`` has no ``version``.
    """
    v = (server_info or {}).get("version")
    if v:
        return str(v)
    if python:
        try:
            out = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"], capture_output=True,
                                 text=True, timeout=timeout_s)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError):
            pass
    return "unknown"


def version_tags(engine: str, server_info: Mapping[str, Any] | None, python: str | None = None) -> dict[str, str]:
    """MLflow tags for a run's engine version: ``{"sglang_version": ...}`` (``"emulator"`` for
    the emulator, with ``emulated_sglang_version`` beside it)."""
    if engine_for(engine).modelled:
        return {"sglang_version": "emulator",
                "emulated_sglang_version": str((server_info or {}).get("version", "unknown"))}
    return {"sglang_version": sglang_version(server_info, python)}
