"""SGLang as an engine (:mod:`lab.engine.registry`): ``python -m sglang.launch_server`` with
the lab's flags (:func:`lab.engine.command.server_flags`), on GPUs, measured.

Two builds are registered, one class each, because what they serve differs where the lab reads
it (:mod:`lab.engine.surfaces`): SGLang 0.5.23 (the lock's extra) and 0.5.16 (the build on the
lent H200's PyTorch 2.11). ``engine: sglang`` names the engine; which build ran is the version it
reports (``/server_info``), and :meth:`~lab.engine.registry.Engine.at_version` picks its class.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from lab.engine.registry import Engine, register
from lab.engine.surfaces import SURFACES

__all__ = ["Sglang0523", "Sglang0516", "sglang_version"]


def sglang_version(server_info: Mapping[str, Any] | None, python: str | None = None, *,
                   timeout_s: float = 30.0) -> str:
    """The SGLang version string, or ``"unknown"`` when neither source answers.

    Source, first found wins: ``/server_info``'s ``version`` field (SGLang 0.5.23
    ``sglang/srt/entrypoints/http_server.py`` ``server_info()`` returns ``"version": __version__``),
    then ``sglang.__version__`` imported by the server's own Python.

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


@register("sglang", version="0.5.23")
class Sglang0523(Engine):
    """SGLang 0.5.23: measured, holds its GPUs, no params section of its own, every preflight row."""

    label = "SGLang"
    holds_gpus = True
    module = "sglang.launch_server"
    surface = SURFACES["0.5.23"]

    def flags(self, mode_name: str, *, mode: Any, model: Any, server: Any) -> list[str]:
        """:func:`lab.engine.command.server_flags`."""
        from lab.engine.command import server_flags

        return server_flags(mode, model=model, server=server)

    def env(self, mode_name: str, *, mode: Any, server: Any) -> dict[str, str]:
        """:func:`lab.engine.command.sglang_env`."""
        from lab.engine.command import sglang_env

        return sglang_env(mode, server=server)

    def preflight(self, modes: Mapping[str, Any], *, model: Any, server: Any, bench: Any, own: Any = None,
                  python: str = sys.executable, timeout_s: float = 180.0, check_argv: bool = True) -> list[Any]:
        """:func:`lab.engine.preflight.sglang_checks`."""
        from lab.engine.preflight import sglang_checks

        return sglang_checks(self, modes, model=model, server=server, bench=bench, own=own, python=python,
                             timeout_s=timeout_s, check_argv=check_argv)

    def launch_refusal(self, flags: list[str]) -> str | None:
        """:func:`lab.engine.adaptive_rules.adaptive_launch_refusal` of the installed SGLang (None
        when none is installed: the launch itself says so)."""
        from importlib import metadata

        from lab.engine.adaptive_rules import adaptive_launch_refusal

        try:
            version = metadata.version("sglang")
        except metadata.PackageNotFoundError:
            return None
        return adaptive_launch_refusal(flags, version)

    def version_tags(self, server_info: Any, python: str | None = None) -> dict[str, str]:
        """``sglang_version``: :func:`sglang_version`."""
        return {"sglang_version": sglang_version(server_info, python)}

    def capture_environment(self, python: str, write: Any) -> tuple[dict[str, str], Any]:
        """SGLang's version and git commit (a source checkout) as the server's Python imports it,
        and ``python -m sglang.check_env`` (``sglang-check-env.txt``)."""
        import json

        from lab.engine.envcapture import SGLANG_INFO, run_optional

        tags: dict[str, str] = {}
        ok, info_txt = run_optional([python, "-c", SGLANG_INFO])
        info = json.loads(info_txt) if ok else {"error": info_txt}
        if info.get("version"):
            tags["env.sglang_version"] = info["version"]
        if info.get("git_commit"):
            tags["env.sglang_git_commit"] = info["git_commit"]
        ok, text = run_optional([python, "-m", "sglang.check_env"], timeout_s=120)
        write("sglang-check-env.txt", text)
        return tags, info


@register("sglang", version="0.5.16")
class Sglang0516(Sglang0523):
    """SGLang 0.5.16: launched and checked as 0.5.23, read through its own surfaces (no
    ``/ready``, the capture begin line, ``__post_init__`` resolution)."""

    surface = SURFACES["0.5.16"]
