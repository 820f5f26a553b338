"""lab.measure.accuracy: ground-truth metrics use the client's definitions (synthetic truth, known answers)."""

from __future__ import annotations

import json
import pytest

from lab.measure.accuracy import accuracy_metrics, client_run_metrics, delivery_delay_ms, relative_error, target_for
from lab.emulator.truth import Truth


def _truth() -> Truth:
    # one request: prefill ends at 1.010 (first token), then 3 spec cycles of 30 ms giving 2, 2, 1 tokens
    its = [{"kind": "prefill", "start": 1.000, "end": 1.010, "tokens": {"a": 1}, "verify_s": 0, "draft_s": 0, "decode_s": 0},
           *({"kind": "spec", "start": 1.010 + 0.03 * k, "end": 1.040 + 0.03 * k, "tokens": {"a": n},
              "verify_s": 0.029, "draft_s": 0.001, "decode_s": 0} for k, n in enumerate((2, 2, 1)))]
    req = {"rid": "a", "arrival": 0.995, "first_token": 1.010, "last_token": 1.100, "completion_tokens": 6,
           "spec_verify_ct": 3}
    return Truth(header={}, iterations=its, requests={"a": req},
                 sent={"a": {"rid": "a", "first_sent": 1.0105, "last_sent": 1.1005}})


def _record(delay: float = 0.0005) -> dict:
    ends = [1.010, 1.040, 1.070, 1.100]
    return {"rid": "a", "ok": True, "t_dispatch": 0.994, "t_send": 0.994, "t_end": 1.101,
            "chunks": [[t + delay, n] for t, n in zip(ends, (1, 2, 2, 1))], "completion_tokens": 6,
            "meta_info": {"completion_tokens": 6, "spec_verify_ct": 3}}


def test_truth_metrics_known_answers():
    t = _truth().run_metrics(["a"])
    assert t["decode_tok_s"] == pytest.approx(5 / 0.090)
    assert t["cycle_ms"] == pytest.approx(30.0)
    assert t["mean_icl_ms"] == pytest.approx(30.0)
    assert t["p50_ttft_ms"] == pytest.approx(15.0)
    assert t["accept_length"] == pytest.approx(2.0)
    assert t["verify_ms"] == pytest.approx(29.0)
    assert t["output_tok_s"] == pytest.approx(6 / 0.105)
    assert t["p50_tpot_ms"] == pytest.approx(18.0) and t["draft_ms"] == pytest.approx(1.0)
    assert list(t) == accuracy_metrics()  # every ground-truth counterpart the catalog declares, in its order
    w = _truth().run_metrics(["a"], clock="wire")
    assert w["p50_ttft_ms"] == pytest.approx(15.5) and w["decode_tok_s"] == pytest.approx(5 / 0.090)
    with pytest.raises(ValueError):
        _truth().run_metrics(["a"], clock="bogus")


def test_client_with_constant_delivery_delay_has_zero_decode_error():
    c = client_run_metrics([_record(0.0005)], {})
    t = _truth().run_metrics(["a"])
    for m in ("decode_tok_s", "cycle_ms", "mean_icl_ms", "accept_length"):
        assert relative_error(c[m], t[m]) == pytest.approx(0.0, abs=1e-9), m
    assert c["p50_ttft_ms"] - t["p50_ttft_ms"] == pytest.approx(1.0 + 0.5)  # 1 ms request delivery + 0.5 ms chunk delay
    assert delivery_delay_ms(_truth(), [_record(0.0005)]) == pytest.approx([0.5] * 4)


def test_coalesced_chunk_matches_the_last_iteration_and_targets():
    rec = _record(0.0)
    rec["chunks"] = [[1.010, 1], [1.0705, 4], [1.100, 1]]  # the client got two cycles in one chunk
    assert delivery_delay_ms(_truth(), [rec]) == pytest.approx([0.0, 0.5, 0.0])
    assert relative_error(None, 1.0) is None and relative_error(1.0, 0.0) is None
    assert target_for(1) == 0.01 and target_for(8) == 0.02 and target_for(64) == 0.02


def test_write_report_carries_notes_and_writes_both_files(tmp_path):
    from lab.measure.accuracy import write_report

    (tmp_path / "acc.notes.md").write_text("measured on a quiet machine")
    md = write_report({"rows": [1, 2]}, tmp_path / "acc", lambda r: f"# rows {len(r['rows'])}\n{r['notes']}\n")
    assert md.startswith("# rows 2") and "quiet machine" in md
    assert json.loads((tmp_path / "acc.json").read_text())["notes"] == "measured on a quiet machine"
    assert (tmp_path / "acc.md").read_text() == md


def test_truth_rate_metrics_known_answers():
    """Open-loop ground truth (lab.measure.accuracy._truth_rate_metrics): TTFT from the server's
    arrival 15 ms, TPOT 90 ms / 5 = 18 ms; goodput judges TTFT from the scheduled send time and
    divides by the truth window (last token - first scheduled time), the client's definitions."""
    from lab.measure.accuracy import _truth_rate_metrics

    rec = {**_record(), "t_scheduled": 0.992}  # scheduled 2 ms before the client sent it
    t = _truth_rate_metrics(_truth(), [rec], {"ttft_ms": 20.0, "tpot_ms": 20.0}, rate=4.0)
    assert t["p50_ttft_ms"] == pytest.approx(15.0) and t["p50_tpot_ms"] == pytest.approx(18.0)
    assert t["goodput_req_s"] == pytest.approx(1 / (1.100 - 0.992)) and t["_good"] == [True]
    assert t["offered_rate_req_s"] is None  # one arrival: no rate
    strict = _truth_rate_metrics(_truth(), [rec], {"ttft_ms": 20.0, "tpot_ms": 17.0}, rate=4.0)
    assert strict["goodput_req_s"] == 0.0 and strict["_good"] == [False]
    # 18 ms from the schedule to the first token (1.010 - 0.992): a 17 ms TTFT limit fails it, although
    # the server's own TTFT (15 ms from its arrival stamp) meets it: the lag is charged
    late = _truth_rate_metrics(_truth(), [rec], {"ttft_ms": 17.0, "tpot_ms": None}, rate=4.0)
    assert late["_good"] == [False] and late["p50_ttft_ms"] == pytest.approx(15.0)
