"""The comparison table (lab.report.tables.summary_markdown) and `lab summary`: numbers from a
known runs frame, the same table from the CSV round trip, and the missing-report error."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lab.cli import main as lab_main
from lab.analysis.comparison import summarize
from lab.report.tables import read_summary_rows, summary_markdown, write_csv
from shared import markdown_rows


def _summary():
    runs = pd.DataFrame([
        *({"mode": "base", "point": "c1", "concurrency": 1, "decode_tok_s": v, "output_tok_s": v - 1,
           "cycle_ms": 1000 / v} for v in (80.0, 82.0, 84.0)),
        *({"mode": "spec", "point": "c1", "concurrency": 1, "decode_tok_s": v, "output_tok_s": v - 1,
           "cycle_ms": 20.0, "accept_length": 1.9, "verify_ms": 18.0} for v in (96.0, 97.0, 98.0)),
    ])
    results = {"base": {"engine": "emulator"}, "spec": {"engine": "emulator"}}
    return summarize(results, runs, "base")


def test_summary_markdown_known_numbers():
    text = summary_markdown(_summary()["rows"], "base")
    table = text.splitlines()
    assert table[0].startswith("| mode | point |") and table[0].endswith("| intervals |")
    base, spec = markdown_rows(text)
    # mean 82 with a t-interval of 2 +/- 4.303 * 2 / sqrt(3)
    assert (base["mode"], base["point"]) == ("base", "c1")
    assert base["decode tok/s [95 % CI]"] == "82.0 [77.0, 87.0]" and base["output tok/s [95 % CI]"] == "81.0 [76.0, 86.0]"
    assert base["accept length"] == "-" and base["verify ms"] == "-" and base["cycle ms"] == "12.2"
    assert base["speedup, decode tok/s [95 % CI], verdict"] == "reference"
    assert base["intervals"] == "within one launch"  # one launch per mode: said
    assert (spec["mode"], spec["point"]) == ("spec", "c1")
    assert spec["decode tok/s [95 % CI]"] == "97.0 [94.5, 99.5]" and spec["output tok/s [95 % CI]"] == "96.0 [93.5, 98.5]"
    assert (spec["accept length"], spec["verify ms"], spec["cycle ms"]) == ("1.90", "18.0", "20.0")
    verdict = spec["speedup, decode tok/s [95 % CI], verdict"]
    # one launch per mode, no launch spread known: the estimate without a verdict word (issue 32)
    assert verdict.startswith("1.18x [") and verdict.endswith("]") and spec["intervals"] == "within one launch"


def test_summary_markdown_same_from_csv(tmp_path):
    summary = _summary()
    write_csv(summary["rows"], tmp_path / "summary.csv")
    assert summary_markdown(read_summary_rows(tmp_path / "summary.csv"), "base") == summary_markdown(
        summary["rows"], "base")


def test_lab_summary_prints_table_or_says_what_to_run(tmp_path, capsys):
    assert lab_main(["summary", "--reports", str(tmp_path)]) == 2
    assert "run `dvc repro`" in capsys.readouterr().err
    summary = _summary()
    write_csv(summary["rows"], tmp_path / "summary.csv")
    comp = {k: v for k, v in summary.items() if k != "rows"}
    comp.update(caption="engine: emulator", warnings={"base": ["c=8: one wave"], "spec": ["c=8: one wave"]})
    (tmp_path / "comparison.json").write_text(json.dumps(comp))
    assert lab_main(["summary", "--reports", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the answer first (lab.report.answer), then the full table
    assert out.startswith("Does EAGLE-3 beat plain decoding here? decode tok/s speedup over base")
    answer, table = out.split("\n\n", 1)
    assert "\n  spec: 1.18x at c1 [" in answer  # the one line per mode opens the answer
    assert "no verdict: one launch per mode" in answer  # and says why it has no verdict word
    assert "    c1: decode tok/s 1.18x [" in answer and "accept length 1.90, verify 18.0 ms" in " ".join(answer.split())
    assert answer.count("c=8: one wave") == 1 and "Warning (base, spec): c=8: one wave" in answer
    assert f"Report: {tmp_path / 'report.html'}" in answer
    assert "| spec | c1 | 97.0 [94.5, 99.5]" in table


@pytest.mark.parametrize("cell", ["", "nan", None])
def test_missing_cells_print_as_dash(cell):
    row = {"mode": "x", "point": "c1", "decode_tok_s_mean": cell}
    assert "| x | c1 | - |" in summary_markdown([row])


def test_caption_uses_the_profiles_own_description():
    from lab.analysis.comparison import engine_caption
    from lab.emulator.profile import load_profile

    text = engine_caption({"m": {"engine": "emulator"}}, "fast")
    assert load_profile("fast")[0].description.rstrip(".") in text
    assert "Kimi" not in text and "calibrated to the seeds" not in text  # the fast profile models nothing
    assert text.endswith("Not a GPU measurement.")
    assert "calibrated to the seeds" in engine_caption({"m": {"engine": "emulator"}}, "kimi_k25_tp8_pcie")
    assert engine_caption({"m": {"engine": "sglang", "engine_version": "0.5.23"}}) == "engine: sglang (SGLang 0.5.23)"


def test_comparison_is_a_dataclass_that_becomes_a_dict_only_when_written():
    """summarize returns a Comparison; each part is set by attribute, read as a read-only mapping,
    absent from to_dict until set, and to_dict keeps comparison.json's key order; merge puts a
    part's PointColumns into the entry and the row of its (mode, point)."""
    import pandas as pd

    from lab.analysis.comparison import UNSET, Comparison, summarize
    from lab.analysis.estimates import PointColumns

    runs = pd.DataFrame([{"mode": m, "point": "c1", "concurrency": 1, "repeat": k, "decode_tok_s": v + k}
                         for m, v in (("base", 80.0), ("spec", 95.0)) for k in range(3)])
    c = summarize({"base": {}, "spec": {}}, runs, "base")
    assert isinstance(c, Comparison) and c.caption is UNSET and "caption" not in c and c.get("caption") is None
    assert list(c.to_dict()) == ["baseline", "modes", "rows", "identical_effective_config", "notice"]
    c.load, c.caption = None, "engine: x"  # set out of order: written in field order, a None part kept
    assert list(c.to_dict())[-2:] == ["caption", "load"] and c["load"] is None
    with pytest.raises(TypeError):
        c["notice"] = "x"  # no writing by key
    with pytest.raises(KeyError):
        c["figures"]
    c.merge({("spec", "c1"): PointColumns({"extra": 1}, {"extra_col": 2}), ("spec", "c9"): PointColumns({"x": 1})})
    assert list(c.modes["spec"]["c1"])[-1] == "extra" and "c9" not in c.modes["spec"]
    assert [r.get("extra_col") for r in c.rows] == [None, 2]
