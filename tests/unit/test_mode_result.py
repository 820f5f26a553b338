"""The mode's result object, its measurement grid and its one recording place, without an engine.

(The full path, engine and MLflow included, is covered by test_faults.py, test_bad_input.py and
test_pipeline.py.)
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from lab.measure.point import BenchError, measurement_points
from lab.measure.request_record import RequestRecord
from lab.measure.result import ModeResult
from lab.tracking.record import BY_CONCURRENCY, record


def test_measurement_points_order_and_keys():
    bench = SimpleNamespace(concurrency=[4, 1], context_tokens=[100, 200], output_levels=[32, 8])
    keys = [p.key for p in measurement_points(bench)]
    assert keys == ["c1", "c1_ctx100_out8", "c1_ctx200_out32", "c1_ctx200_out8",
                    "c4", "c4_ctx100_out8", "c4_ctx200_out32", "c4_ctx200_out8"]
    p = measurement_points(bench)[2]
    assert (p.concurrency, p.context_tokens, p.output_tokens) == (1, 200, 32)


def test_to_dict_is_result_json_only_set_keys_in_order():
    r = ModeResult(mode="m", engine="emulator", mlflow_run_id="x", server_command="cmd")
    r.runs.append({"point": "c1", "repeat": 0})
    r.records.append(RequestRecord(rid="a"))
    r.version_tags = {"sglang_version": "emulator"}
    r.warnings = []  # set, even empty, is kept
    assert list(r.to_dict()) == ["status", "mode", "engine", "launch", "launches", "mlflow_run_id", "server_command",
                                 "warnings"]
    assert r.to_dict()["status"] == "failed"


def test_telemetry_steps_continue_across_windows():
    r = ModeResult(mode="m", engine="emulator")
    r.add_telemetry([(0, {"gpu0.power_w": 1.0}), (2, {"gpu0.power_w": 2.0})])
    r.add_telemetry([(0, {"gpu0.power_w": 3.0})])
    assert [s for s, _ in r.telemetry] == [0, 2, 2]  # shifted by the earlier window's count of steps


class _Run:
    """Records what a :class:`lab.tracking.runs.RunHandle` was asked to log."""

    def __init__(self):
        self.metrics, self.tags, self.artifacts, self.status = [], {}, [], None

    def set_tags(self, t):
        self.tags.update(t)

    def log_metrics(self, m, step=None):
        self.metrics.append((step, dict(m)))

    def log_artifact(self, path, artifact_path=None):
        if path.exists():
            self.artifacts.append(path.name)

    def finish(self, status, save_to=None):
        self.status, self.saved_to = status, save_to


def test_record_failure_writes_partial_files_and_fails_the_run(tmp_path):
    r = ModeResult(mode="m", engine="emulator", mlflow_run_id="x", server_command="cmd")
    r.runs.append({"point": "c1", "repeat": 0, "concurrency": 1})
    r.records += [RequestRecord(rid="a"), RequestRecord(rid="b")]
    r.add_telemetry([(0, {"gpu0.power_w": 5.0})])
    r.fail(BenchError("engine died"), levels_partial={"c1": {"concurrency": 1, "decode_tok_s": {"mean": 9.0}}})
    run = _Run()
    record(r, tmp_path, run, "FAILED", log=lambda *a: None)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics == {"status": "failed", "engine": "emulator", "error": "BenchError: engine died",
                       "partial": True, "requests_recorded": 2}
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["partial"]["runs_completed"] == ["c1 repeat 0"] and "c1" in result["levels_partial"]
    assert json.loads((tmp_path / "runs.json").read_text()) == r.runs
    assert run.status == "FAILED" and run.tags["status"] == "failed"
    assert (0, {"gpu0.power_w": 5.0}) in run.metrics
    assert not any(k.startswith(BY_CONCURRENCY) for _, m in run.metrics for k in m)  # no levels: no per-level steps
    assert {"metrics.json", "result.json", "runs.json"} <= set(run.artifacts)
    assert run.saved_to == tmp_path / "mlflow_run.json"  # the run record, for `lab log`
