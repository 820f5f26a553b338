"""SGLang ``/server_info`` JSON: decode step times recorded during a measured window.

Input: ``/server_info`` before and after a window (``internal_states[0].step_time_dict``,
SGLang 0.5.23 ``scheduler_components/internal_state.py``; recorded with
``SGLANG_RECORD_STEP_TIME=1``, set by :mod:`lab.engine.command`). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["step_time_ms"]


def _step_time_dict(server_info: Mapping[str, Any] | None) -> dict[int, list[float]] | None:
    if not server_info:
        return None
    states = server_info.get("internal_states") or []
    if not states or not isinstance(states[0], Mapping):
        return None
    d = states[0].get("step_time_dict")
    if d is None:
        return None
    return {int(k): list(v) for k, v in d.items()}


def step_time_ms(
    server_info_before: Mapping[str, Any] | None, server_info_after: Mapping[str, Any]
) -> dict[int, list[float]] | None:
    """Decode step times recorded during a window, from ``/server_info``.

    SGLang (``SGLANG_RECORD_STEP_TIME=1``) appends, at every decode log interval, the mean
    wall time per decode iteration (``gap_latency / decode_log_interval``, seconds) to
    ``internal_states[0].step_time_dict[batch_size]`` (``metrics_reporter.py``,
    ``internal_state.py``). Lists only grow, so entries beyond the "before" lengths are new.

    :param server_info_before: ``/server_info`` JSON at window start (None: take all).
    :param server_info_after: ``/server_info`` JSON at window end.
    :returns: ``{batch_size: [step_ms, ...]}`` of the new entries (batch sizes with no new
        entry omitted), or None when the server does not record step times.
    """
    after = _step_time_dict(server_info_after)
    if after is None:
        return None
    before = _step_time_dict(server_info_before) or {}
    out: dict[int, list[float]] = {}
    for bs, vals in after.items():
        new = vals[len(before.get(bs, [])):]
        if new:
            out[bs] = [v * 1e3 for v in new]
    return out
