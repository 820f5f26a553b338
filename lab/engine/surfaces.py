"""What each SGLang build serves, where the lab reads it: one :class:`SglangSurface` per
supported contract, picked by the version the engine reports (``/server_info`` ``version``).

The lab supports SGLang 0.5.23 (the lock's extra) and 0.5.16 (the build that runs on the lent
H200's PyTorch 2.11). Their surfaces differ in ways the lab must read correctly (each read off
the version's own wheel and, for 0.5.16, off a real server: ``tests/fixtures/sglang-0.5.16/``):

=============================  ===================================  ======================================
surface                        0.5.23                               0.5.16
=============================  ===================================  ======================================
cheap readiness probe          ``GET /ready``                       none (``/health`` only; 404 on /ready)
captured graph batch sizes     ``Capture ... CUDA graph end. bs=``  on the *begin* line: ``Capture target
                                                                    verify CUDA graph begin. backend=full,
                                                                    num_tokens_per_req=3, bs=[1, ...]``
"Decode batch" timer suffix    ``fwd occupancy``, device-timer ms   ``fwd occupancy: X%`` only
argument resolution            ``resolve_once()`` then              fields resolved in
                               ``resolved_dict()``                  ``ServerArgs.__post_init__``
flag definitions               ``srt/arg_groups/fields/*.py``       ``ServerArgs.add_cli_args``
                                                                    (``srt/server_args.py``)
=============================  ===================================  ======================================

In both, target-verify is CUDA-graph captured in either ``--speculative-attention-mode``: the
mode only picks which attention backend serves verify (:attr:`SglangSurface.mode_picks_backend_only`).
A version the table does not name gets the nearest older contract, and the result says so
(:func:`surface_for`). Each build's engine class (:mod:`lab.engine.sglang_engine`) holds its
surface; the emulator serves 0.5.23's (:mod:`lab.engine.emulator_engine`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lab.engine.registry import engine_named, version_tuple

__all__ = ["SglangSurface", "SURFACES", "surface_for", "captured_graph_bs", "version_tuple"]


@dataclass(frozen=True)
class SglangSurface:
    """One SGLang build's surfaces.

    :ivar contract: the version whose surfaces these are (``"0.5.23"``).
    :ivar ready_path: cheap readiness endpoint, or None (probe ``/health`` alone).
    :ivar capture_bs_line: which capture log line carries ``bs=[...]`` (``"end"`` or ``"begin"``).
    :ivar resolution: how launch arguments are resolved (``"resolve_once"`` or ``"__post_init__"``).
    :ivar mode_picks_backend_only: target-verify is graph-captured in both attention modes, so two
        modes with the same resolved verify backend run the same code.
    :ivar source: where these facts come from.
    """

    contract: str
    ready_path: str | None
    capture_bs_line: str
    resolution: str
    mode_picks_backend_only: bool
    source: str


SURFACES: dict[str, SglangSurface] = {
    "0.5.23": SglangSurface(
        "0.5.23", "/ready", "end", "resolve_once", True,
        "sglang 0.5.23 wheel: srt/entrypoints/http_server.py (/ready), "
        "srt/model_executor/model_runner_components/cuda_graph_setup.py ~794-799 (capture end line), "
        "srt/server_args.py ~244-330 (resolve_once), runner/decode_cuda_graph_runner.py ~356-367"),
    "0.5.16": SglangSurface(
        "0.5.16", None, "begin", "__post_init__", True,
        "sglang 0.5.16 served on an H200 (tests/fixtures/sglang-0.5.16/: server.log capture lines, "
        "/server_info, 404 on /ready)"),
}


def surface_for(version: str | None) -> tuple[SglangSurface, str | None]:
    """The contract for an engine reporting ``version``: the surface of the SGLang build
    :meth:`lab.engine.registry.Engine.at_version` picks (:mod:`lab.engine.sglang_engine`).

    :returns: ``(surface, note)``: the newest contract not newer than ``version``; the note says
        when ``version`` is not one the lab was checked against (None when it is). An unknown or
        missing version gets the newest contract, with a note.
    """
    build, note = engine_named("sglang").at_version(version)
    return build.surface, note


_CAPTURE_BS = re.compile(r"Capture target (?:verify|decode) CUDA graph (begin|end)\.[^\n]*?\bbs=\[([0-9, ]*)\]")


def captured_graph_bs(log_text: str) -> list[int] | None:
    """Batch sizes actually captured for the target (verify, or decode without speculation),
    from whichever capture line carries ``bs=[...]`` (0.5.23: the end line; 0.5.16: the begin
    line); the last such line wins. None when the log has none (graphs off, or not SGLang's).

    Sources: 0.5.23 ``model_runner_components/cuda_graph_setup.py`` ~794-799; 0.5.16 the
    begin line of a real server's log (``tests/fixtures/sglang-0.5.16/*/server.log``).
    """
    found = None
    for m in _CAPTURE_BS.finditer(log_text or ""):
        found = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
    return found
