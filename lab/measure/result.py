"""One mode's result as one object: what ``result.json`` holds, plus what recording needs.

:class:`ModeResult` is filled in as :func:`lab.pipeline.bench.run_mode` goes (preflight,
startup, effective configuration, warm-up, each repeat's summary and request records, GPU
telemetry, aggregates, sentinel) and handed, succeeded or failed, to
:func:`lab.tracking.record.record`, the one place that writes it to files and MLflow. Its
:meth:`ModeResult.to_dict` is exactly the ``result.json`` content (the keys that were set,
in the order below); ``runs``, ``records``, ``telemetry`` and ``version_tags`` travel beside
it (``runs.json``, ``requests.jsonl``, MLflow step metrics and tags), not inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from lab.measure.request_record import RequestRecord

__all__ = ["ModeResult"]

_BESIDE = {"runs", "records", "telemetry", "version_tags"}  # not part of result.json


@dataclass(kw_only=True)
class ModeResult:
    """Everything one mode's benchmark produced; ``None`` fields were not reached.

    ``result.json`` keys, in order: ``status`` (``"failed"`` until all succeeded, then
    ``"ok"``), ``mode``, ``engine``, ``provenance`` (what the numbers stand on:
    :func:`lab.engine.registry.provenance`), ``launch`` (this engine start's number, 1-based) of
    ``launches`` (``bench.launches``), ``mlflow_run_id``, ``server_command``, ``dataset`` (where
    the prompts came from, their SHA-256 and per-index categories:
    :func:`lab.workload.sources.load_bench_prompts`), ``preflight``,
    ``environment_tags``, ``startup`` (phases, ``startup_s``), ``startup_s`` (s),
    ``engine_version``, ``effective_config``, ``warmup``, ``trace`` (``bench.trace``'s profiler trace), ``levels`` (point key ->
    :func:`lab.analysis.aggregate.aggregate_point`), ``ground_truth`` (emulator only),
    ``headline`` (flat ``{name: mean}``), ``acceptance_by_position`` (chain-draft speculative modes:
    :func:`lab.analysis.position_acceptance.acceptance_by_position`), ``warnings``, ``sentinel``, ``load`` (open-loop and SLO
    settings, :func:`lab.analysis.load.load_settings`); on failure ``error``,
    ``partial`` (``requests_recorded``, ``runs_completed``) and ``levels_partial``.

    Beside it: ``runs`` (per point x repeat summaries, ``runs.json``), ``records`` (the
    :class:`~lab.measure.request_record.RequestRecord` of each request, also in ``requests.jsonl``), ``telemetry`` (``[(step, {"gpu<i>.<field>": v})]``
    MLflow step metrics, steps continuing across windows), ``version_tags`` (MLflow tags).
    """

    status: str = "failed"
    mode: str
    engine: str
    provenance: dict[str, str] | None = None
    launch: int = 1
    launches: int = 1
    mlflow_run_id: str | None = None
    server_command: str | None = None
    dataset: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    environment_tags: dict[str, str] | None = None
    startup: dict[str, Any] | None = None
    startup_s: float | None = None
    engine_version: str | None = None
    effective_config: dict[str, Any] | None = None
    warmup: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    levels: dict[str, dict[str, Any]] | None = None
    ground_truth: dict[str, Any] | None = None
    headline: dict[str, Any] | None = None
    acceptance_by_position: dict[str, Any] | None = None
    warnings: list[str] | None = None
    sentinel: dict[str, Any] | None = None
    load: dict[str, Any] | None = None
    error: str | None = None
    partial: dict[str, Any] | None = None
    levels_partial: dict[str, dict[str, Any]] | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    telemetry: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    version_tags: dict[str, str] = field(default_factory=dict)
    _telemetry_steps: int = field(default=0, init=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The ``result.json`` content: every set (non-None) field but those kept beside it."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _BESIDE and not f.name.startswith("_") and getattr(self, f.name) is not None}

    def add_telemetry(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        """Append one window's :meth:`lab.engine.telemetry.GpuSampler.step_metrics`; its steps
        are shifted past the earlier windows' (by their count of steps)."""
        self.telemetry.extend((self._telemetry_steps + step, values) for step, values in steps)
        self._telemetry_steps += len(steps)

    def fail(self, exc: BaseException, levels_partial: dict[str, dict[str, Any]]) -> None:
        """Mark the result failed by ``exc``, keeping what was measured: ``partial`` when any
        request was recorded, and ``levels_partial`` (the completed repeats' aggregates)."""
        self.error = f"{type(exc).__name__}: {exc}"
        if self.records:  # requests.jsonl keeps what was measured; the run is incomplete
            self.partial = {"requests_recorded": len(self.records),
                            "runs_completed": [f"{r['point']} repeat {r['repeat']}" for r in self.runs]}
        self.levels_partial = levels_partial
