"""lab.measure.crosscheck on real-format SGLang 0.5.23 outputs with known answers.

Fixtures: ``/metrics`` with the device-timer categories (``metrics_eagle3_*.prom``),
``/server_info`` with resolved args, ``internal_states`` and ``step_time_dict``
(``server_info_eagle3_c1_*.json``), a server.log window with "Decode batch" lines
(``cuda graph: True/False``, ``server_window_eagle3.log``), and client records whose final
``meta_info`` carries the spec fields (``requests_eagle3_c1.jsonl``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.measure.records import measured_window_s, summarize_run
from lab.measure.crosscheck import LogWindow, add_cross_checks, cross_checks, log_window_timing, window_server_timing

FX = Path(__file__).resolve().parents[1] / "fixtures"


def _window(step_after: list[float] | None = None):
    info0 = json.loads((FX / "server_info_eagle3_c1_before.json").read_text())
    info1 = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    if step_after is not None:
        info1["internal_states"][0]["step_time_dict"]["1"] = step_after
    return window_server_timing((FX / "metrics_eagle3_before.prom").read_text(),
                                (FX / "metrics_eagle3_after.prom").read_text(), info0, info1,
                                (FX / "server_window_eagle3.log").read_text(), speculative=True)


def _records():
    return [json.loads(line) for line in (FX / "requests_eagle3_c1.jsonl").read_text().splitlines()]


def test_log_window_graph_fraction_and_accept_len():
    t = log_window_timing((FX / "server_window_eagle3.log").read_text())
    assert t["log_decode_lines"] == 4  # the Prefill batch and access-log lines are not counted
    assert t["log_verify_graph_fraction"] == pytest.approx(0.75)  # 3 of 4 "cuda graph: True"
    assert t["log_accept_len"] == pytest.approx((1.85 + 1.80 + 1.90 + 1.85) / 4)
    assert log_window_timing("no decode lines here")["log_verify_graph_fraction"] is None


def test_full_window_figures_agree():
    server = _window()
    assert server["verify_ms"] == pytest.approx(29.0)  # (39 - 10) s / 1000 iterations
    assert server["draft_ms"] == pytest.approx(1.0)    # (1.1-0.5 + 0.7-0.3) s / 1000
    assert server["decode_ms"] is None
    assert server["gpu_cycle_ms"] == pytest.approx(30.0)
    assert server["verify_graph_fraction"] == pytest.approx(0.75)  # 750 / (750 + 250)
    assert server["step_time_ms"] == {1: pytest.approx([30.5, 30.9])}
    recs = _records()
    s = add_cross_checks(summarize_run(recs, wall_s=measured_window_s(recs), server=server).to_dict())
    assert s["accept_length"] == pytest.approx(74 / 40)  # per-run, from spec_verify_ct: 37/20 twice
    assert s["cycle_ms"] == pytest.approx(31.0)          # 20 cycles x 31 ms / 20
    assert s["server_step_ms"] == pytest.approx(30.7)
    assert s["log_verify_graph_fraction"] == pytest.approx(0.75)
    cc = s["crosscheck"]["checks"]
    assert cc["cycle_vs_step"]["diff"] == pytest.approx(0.3 / 31.0)
    assert cc["step_vs_gpu"]["diff"] == pytest.approx(0.7 / 30.7)
    assert cc["graph_fraction"]["diff"] == pytest.approx(0.0)
    assert all(c["ok"] for c in cc.values())
    assert s["crosscheck_disagreements"] == 0 and s["crosscheck"]["flags"] == []


def test_disagreement_flagged():
    recs = _records()
    server = _window(step_after=[0.0301, 0.0299, 0.0450, 0.0450])  # 45 ms iterations vs 31 ms cycle
    s = add_cross_checks(summarize_run(recs, wall_s=measured_window_s(recs), server=server).to_dict())
    cc = s["crosscheck"]
    assert cc["checks"]["cycle_vs_step"]["ok"] is False
    assert cc["checks"]["step_vs_gpu"]["ok"] is False
    assert cc["checks"]["cycle_vs_gpu"]["ok"] is True
    assert s["crosscheck_disagreements"] == 2
    assert "server_step_ms=45.00" in " ".join(cc["flags"])


def test_missing_side_is_not_agreement():
    cc = cross_checks({"cycle_ms": 31.0, "server_step_ms": None, "gpu_cycle_ms": 30.0,
                       "verify_graph_fraction": 1.0, "log_verify_graph_fraction": 0.5})
    assert cc["checks"]["cycle_vs_step"] == {"a": 31.0, "b": None, "diff": None, "ok": None}
    assert cc["checks"]["graph_fraction"]["ok"] is False and cc["disagreements"] == 1


def test_log_window_reads_only_new_bytes(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("old line, cuda graph: False\n")
    w = LogWindow(log)
    with open(log, "a") as f:
        f.write("[2026-01-05 10:00:01 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.01, "
                "cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0\n")
    assert "old line" not in w.read() and log_window_timing(w.read())["log_verify_graph_fraction"] == 1.0
    assert LogWindow(tmp_path / "absent.log").read() == ""


def test_flag_wording_shows_the_difference_and_the_limit():
    """A 10.3 % difference reads "disagree by 10.3% (limit 10%)", never "10% (> 10%)"."""
    cc = cross_checks({"cycle_ms": 11.6, "server_step_ms": 10.4, "gpu_cycle_ms": None,
                       "verify_graph_fraction": 1.0, "log_verify_graph_fraction": 0.7})
    text = " | ".join(cc["flags"])
    assert "disagree by 10.3% (limit 10%)" in text, text  # |11.6 - 10.4| / 11.6
    assert "disagree by 0.30 (limit" in text
