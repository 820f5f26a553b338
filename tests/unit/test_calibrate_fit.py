"""``lab calibrate`` on synthetic results of a known profile (tests/unit/calib_synth.py): constants
recovered with their provenance, the undetermined ones marked, acceptance per draft position with
censored last cycles, the profile export and its refusal by the emulator's loader."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from calib_synth import write_result
from lab.calibrate.fit import Calibration, calibrate, export_profile
from lab.calibrate.observe import CalibrationInputError, _accept_counts, read_results
from lab.calibrate.simulate import SimRequest, chain_sampler, simulate_run
from lab.emulator.profile import ProfileError, load_profile

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ROOT / "benchmarks" / "profiles" / "validation_h200_0516.json"


@pytest.fixture(scope="module")
def prof():
    return load_profile(HIDDEN)[0]


@pytest.fixture(scope="module")
def three(tmp_path_factory, prof):
    d = tmp_path_factory.mktemp("calib")
    return [write_result(d / "baseline", prof), write_result(d / "s1", prof, spec={"num_steps": 1, "attention_mode": "decode"}),
            write_result(d / "s4", prof, spec={"num_steps": 4, "attention_mode": "prefill"}, seed=1)]


def test_constants_recovered_with_their_windows(three, prof):
    cal = calibrate(three)
    c = cal.constants()
    assert c["decode.graph_ms_bs1"]["value"] == pytest.approx(prof.decode.graph_ms_bs1.value, rel=0.01)
    assert c["decode.per_extra_seq_ms"]["value"] == pytest.approx(prof.decode.per_extra_seq_ms.value, rel=0.05)
    assert c["verify.per_extra_token_ms"]["value"] == pytest.approx(prof.verify.per_extra_token_ms.value, rel=0.02)
    assert c["verify.per_extra_seq_ms"]["value"] == pytest.approx(prof.verify.per_extra_seq_ms.value, rel=0.05)
    assert c["draft.eagle_draft_ms_per_step"]["value"] == pytest.approx(prof.draft.eagle_draft_ms_per_step.value, rel=0.01)
    assert c["prefill.base_ms"]["value"] == pytest.approx(prof.prefill.base_ms.value, rel=0.01)
    assert c["prefill.per_token_ms"]["value"] == pytest.approx(prof.prefill.per_token_ms.value, rel=0.02)
    assert c["scheduler_overhead_ms"]["value"] == pytest.approx(prof.scheduler_overhead_ms.value, abs=0.02)
    # provenance: the verify slope came from the speculative windows only
    assert c["verify.per_extra_token_ms"]["results"] and all(not r.startswith("baseline/")
                                                             for r in c["verify.per_extra_token_ms"]["results"])
    # the modes pooled by SGLang 0.5.16's rule: one verify variant, graph-captured by measurement
    assert list(cal.verify_graph) == ["backend:fa3"] and cal.verify_graph["backend:fa3"] is True


def test_what_the_data_cannot_determine_is_marked(three):
    cal = calibrate(three[:2])  # baseline + s1 decode: one token count, no eager run, no KV variation
    c = cal.constants()
    for name in ("verify.per_extra_token_ms", "verify.eager_ms_ref", "decode.eager_ms_bs1"):
        assert not c[name]["determined"] and c[name]["value"] is None and c[name]["reason"]
    assert not c["decode.kv_ms_per_1k_tokens"]["determined"] and "VIF" in c["decode.kv_ms_per_1k_tokens"]["reason"]
    assert cal.acceptance.depth == 1


def test_acceptance_per_position_treats_the_last_cycle_as_censored():
    """Chunks of a chain draft with known per-position rates: the life-table estimate recovers them;
    counting the truncated last cycle as a rejection would bias position rates low."""
    alphas = [0.8, 0.6, 0.4]
    rng = random.Random(3)
    recs = []
    sampler = chain_sampler(alphas)
    for i in range(400):
        n = rng.randint(6, 20)
        trace: list[dict] = []
        simulate_run([SimRequest(50, 50, n)], _Flat(), sampler=sampler, rng=random.Random(i), concurrency=1, trace=trace)
        t = trace[0]
        recs.append({"chunks": [[x / 1e3, g] for x, g in t["chunks"]], "meta_info": {"spec_verify_ct": t["cycles"]},
                     "completion_tokens": t["tokens"]})
    acc = _accept_counts(recs, 3)
    assert acc.method == "chunks"
    for j, a in enumerate(alphas):
        assert acc.successes[j] / acc.trials[j] == pytest.approx(a, abs=0.04)
    assert acc.cycles == sum(len(r["chunks"]) - 1 for r in recs)
    # the same cycles as SGLang's histogram (no censoring: the cut last cycle reads as a rejection)
    for r in recs:
        hist = [0] * 4
        for c in r["chunks"][1:]:
            hist[min(c[1] - 1, 3)] += 1
        r["meta_info"]["spec_correct_drafts_histogram"] = hist
        r["chunks"] = []
    naive = _accept_counts(recs, 3)
    assert naive.method == "histogram"
    assert all(naive.successes[j] / naive.trials[j] < a - 0.04 for j, a in enumerate(alphas))


class _Flat:
    def prefill(self, n): return 1.0
    def decode(self, b, kv): return 1.0
    def spec(self, b, kv): return 1.0, 0.1
    def overhead(self, b): return 0.0


def test_profile_export_marks_undetermined_and_the_emulator_refuses_it(three, tmp_path):
    cal = calibrate(three[:2])
    prof = export_profile(cal, "fitted")
    path = tmp_path / "fitted.json"
    path.write_text(json.dumps(prof))
    loaded, _ = load_profile(path, allow_undetermined=True)
    assert loaded.verify.per_extra_token_ms.value is None
    assert loaded.verify.per_extra_token_ms.fit.determined is False
    assert loaded.decode.graph_ms_bs1.fit.stderr is not None and loaded.decode.graph_ms_bs1.fit.results
    with pytest.raises(ProfileError, match="verify.per_extra_token_ms") as err:
        load_profile(path)
    assert "--fill-from" in str(err.value)
    filled = export_profile(cal, "fitted", fill_from=load_profile("kimi_k25_tp8_pcie")[0], fill_name="kimi_k25_tp8_pcie")
    path.write_text(json.dumps(filled))
    ok, _ = load_profile(path)  # the emulator can run it now
    assert "NOT FITTED" in ok.verify.per_extra_token_ms.source and ok.verify.per_extra_token_ms.value == 0.1


def test_calibration_file_round_trips(three, tmp_path):
    cal = calibrate(three)
    p = tmp_path / "calibration.json"
    p.write_text(json.dumps(cal.to_json(), default=float))
    again = Calibration.load(p)
    assert again.constants()["verify.per_extra_token_ms"]["value"] == pytest.approx(
        cal.constants()["verify.per_extra_token_ms"]["value"])
    with pytest.raises(ValueError, match="not a calibration file"):
        Calibration.from_json({"kind": "something else"})


def test_bad_result_directories_are_named(tmp_path, three):
    with pytest.raises(CalibrationInputError, match="no result directories"):
        read_results([])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationInputError, match="empty: no result.json"):
        read_results([tmp_path / "empty"])
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "result.json").write_text(json.dumps({"status": "failed"}))
    (failed / "runs.json").write_text("[]")
    obs = read_results([failed, three[0]])
    assert "failed" not in obs.configs and any("skipped" in n for n in obs.notes)
