"""The emulator's context terms come from the real H200 context captures (``lab calibrate``).

Checks that the per-sequence KV columns enter a fit only when the windows span context, that the
fit of the captures separates the two backends (triton's verify grows ~12 ms per 1k tokens of a
sequence's context, flashinfer's under 0.2), that the shipped profiles and the default's context
terms are what ``scripts/context_profiles.py`` writes, and that the benchmark page holds its table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.calibrate import model
from lab.calibrate.fit import calibrate
from lab.emulator.profile import load_profile

from shared import load_script

ROOT = Path(__file__).resolve().parents[2]
CTX = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "kshard-context"
SHORT = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "tiny"
MODES = ("baseline", "eagle3_prefill", "eagle3_decode")


def _script():
    return load_script(ROOT / "scripts" / "context_profiles.py")


def test_spans_context_rule():
    assert not model.spans_context([0.13, 0.2, 0.5])  # short prompts only: the batch term alone
    assert not model.spans_context([0.9, 0.95])
    assert model.spans_context([0.13, 1.0, 6.2])
    assert model.decode_columns(False) == model.BLOCKS["decode"]
    assert model.decode_x(4, 8.0, 1.0, model.decode_columns(True))[-1] == pytest.approx(2.0)  # kv / b


@pytest.fixture(scope="module")
def fits():
    return {b: calibrate([CTX / f"{m}_{b}" for m in MODES]).constants() for b in ("triton", "flashinfer")}


def test_the_fit_separates_the_backends(fits):
    tri = fits["triton"]["verify.kv_seq_ms_per_1k_tokens@backend:triton"]
    fi = fits["flashinfer"]["verify.kv_seq_ms_per_1k_tokens@backend:flashinfer"]
    assert tri["determined"] and fi["determined"]
    assert 10 < tri["ci95"][0] < tri["ci95"][1] < 14  # ~11.7 ms per 1k tokens of one sequence's context
    assert 0 < fi["ci95"][0] < fi["ci95"][1] < 0.2
    # the fitted model reproduces the measured verify at 6144 tokens, c1 and c4 (per-sequence, not batch, KV)
    for c, measured in ((1, 79.4), (4, 78.3)):
        kv_k = c * 6.2
        x = {"verify.graph_ms_ref": 1.0, "verify.per_extra_seq_ms": c - 1,
             "verify.kv_ms_per_1k_tokens@backend:triton": kv_k,
             "verify.kv_seq_ms_per_1k_tokens@backend:triton": kv_k / c}
        ms = sum(fits["triton"][k]["value"] * v for k, v in x.items())
        assert ms == pytest.approx(measured, rel=0.05), (c, ms)


def test_short_prompts_keep_the_batch_term_only():
    consts = calibrate([SHORT / m for m in MODES]).constants()
    assert "decode.kv_ms_per_1k_tokens" in consts
    assert not any("kv_seq" in k for k in consts)


def test_profiles_are_current_and_loadable(capsys):
    mod = _script()
    assert mod.main(["--check"]) == 0, capsys.readouterr().err
    table = capsys.readouterr().out.strip()
    page = (ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16-context.md").read_text()
    a, b = page.index("<!-- context-terms -->"), page.index("<!-- /context-terms -->")
    assert page[a + len("<!-- context-terms -->"):b].strip() == table
    for name in ("kshard_h200_triton", "kshard_h200_flashinfer", "kimi_k25_tp8_pcie"):
        prof, _ = load_profile(name)  # the emulator can run each (nothing left undetermined)
        v = prof.verify.modes["decode"].kv_seq_ms_per_1k_tokens
        assert v is not None and "FITTED" in v.source
    # the default cites where its context terms come from, and the copy is the triton fit
    default = json.loads((ROOT / "lab/emulator/profiles/kimi_k25_tp8_pcie.json").read_text())
    tri = json.loads((ROOT / "lab/emulator/profiles/kshard_h200_triton.json").read_text())
    for m in ("prefill", "decode"):
        d = default["verify"]["modes"][m]["kv_seq_ms_per_1k_tokens"]
        assert d["value"] == tri["verify"]["modes"]["decode"]["kv_seq_ms_per_1k_tokens"]["value"]
        assert "copied here" in d["source"] and d["fit"]["ci95"]


def test_per_sequence_term_in_the_emulator_cost():
    prof, _ = load_profile("kshard_h200_triton")
    one = prof.verify_s(1, 3, 6144, "decode", True)
    four = prof.verify_s(4, 3, 4 * 6144, "decode", True)
    assert 0.07 < one < 0.09 and four == pytest.approx(one, rel=0.05)  # per-sequence context, as measured
    fi, _ = load_profile("kshard_h200_flashinfer")
    assert fi.verify_s(1, 3, 6144, "decode", True) < 0.008
