"""The answer `dvc repro` ends with fits one screen: at most 30 lines of at most 120 columns, warnings
one line per kind naming the modes and points it covers (issue 34, item 6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from lab.measure.hygiene import hygiene_warnings
from lab.report.answer import MAX_LINES, WIDTH, answer_brief, answer_text
from lab.report.warning_kinds import KINDS, group_by_kind

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = json.loads((ROOT / "reports/comparison.json").read_text())


def _fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES == 30, f"{len(lines)} lines:\n{text}"
    assert max(len(ln) for ln in lines) <= WIDTH == 120, text
    return lines


def _per_run(mode_delay: dict) -> list[dict]:
    """Per-run rows as the bench stage gives hygiene_warnings: a slow client at each (concurrency, delay)."""
    return [{"concurrency": c, "repeat": rep, "requests": 64, "hygiene": {"p99_dispatch_delay_ms": d}}
            for (c, rep), d in mode_delay.items()]


def _busy_machine() -> dict:
    """The committed comparison as a loaded machine leaves it: hygiene's own dispatch-delay warnings at
    eleven (mode, point)s, with different numbers and fixes, plus a stall and a lossless mismatch."""
    comp = copy.deepcopy(COMMITTED)
    # the committed run's own dispatch-delay warnings (how busy its machine was) are left out: these are the eleven
    comp["warnings"] = {m: [w for w in ws if "dispatch delay" not in w] for m, ws in (comp.get("warnings") or {}).items()}
    delays = {"baseline": {(1, 1): 7.7, (8, 2): 12.5, (16, 1): 6.1, (32, 3): 22.0},
              "eagle3_prefill": {(1, 2): 5.9, (8, 1): 9.4, (16, 1): 8.8, (32, 1): 30.2},
              "eagle3_decode": {(1, 3): 6.6, (8, 1): 5.2, (32, 2): 18.0}}
    for mode, d in delays.items():
        comp["warnings"].setdefault(mode, []).extend(hygiene_warnings(_per_run(d), None))
    comp["warnings"]["eagle3_decode"].append("c8: a 250 ms stall in repeats 2, 3 only (none in the others): a one-time "
                                             "stall inside the measured window; that repeat's latency and throughput "
                                             "include it")
    comp["warnings"]["eagle3_prefill"].append("lossless check: 3 of 144 outputs (2.1 %) differ from baseline's")
    comp["warnings"]["eagle3_prefill"].append("something the lab has no kind for: 3 things (see the log)")
    return comp


def test_the_committed_answer_fits_a_screen_and_keeps_the_verdicts():
    lines = _fits(answer_brief(COMMITTED, "reports/report.html"))
    assert lines[0].startswith("Does EAGLE-3 beat plain decoding here?")
    text = " ".join(ln.strip() for ln in lines)
    for mode in ("eagle3_prefill", "eagle3_decode"):
        assert f"{mode}: " in text
    assert "Numbers from: emulator" in text
    assert "`lab summary`" in text and lines[-1] == "Report: reports/report.html"
    # the whole answer is still lab summary's, and longer than a screen
    assert len(answer_text(COMMITTED).splitlines()) > MAX_LINES


def test_many_warnings_one_line_per_kind_naming_modes_and_points():
    comp = _busy_machine()
    assert len({w for ws in comp["warnings"].values() for w in ws if "dispatch delay" in w}) == 11
    lines = _fits(answer_brief(comp, "reports/report.html"))
    delay = [ln for ln in lines if "dispatch delay" in ln]
    assert len(delay) == 1, lines
    assert "worst 30.2 ms" in delay[0]  # the largest of the eleven
    kinds = {g.key: g for g in group_by_kind(comp["warnings"])}
    assert kinds["dispatch_delay"].where == {"baseline": ["c=1", "c=8", "c=16", "c=32"],
                                             "eagle3_prefill": ["c=1", "c=8", "c=16", "c=32"],
                                             "eagle3_decode": ["c=1", "c=8", "c=32"]}
    assert len(kinds["dispatch_delay"].texts) == 11  # every full text kept for lab summary
    # a line names its modes and points, or, where they do not fit, counts the points and names the modes
    assert ("baseline, eagle3_prefill c=1, c=8, c=16, c=32; eagle3_decode c=1, c=8, c=32" in delay[0]
            or "(c=1/8/16/32 in baseline, eagle3_prefill, eagle3_decode)" in delay[0]
            or "11 points of baseline, eagle3_prefill, eagle3_decode" in delay[0]), delay[0]
    stall = [ln for ln in lines if "stall" in ln]
    assert stall and all("eagle3_decode" in ln for ln in stall)
    assert any("eagle3_prefill" in ln and "lossless" in ln for ln in lines)
    assert any("something the lab has no kind for" in ln for ln in lines)  # an unknown kind: its first clause
    assert sum(ln.lstrip().startswith("Warning") for ln in lines) == len(group_by_kind(comp["warnings"]))


def test_many_modes_and_kinds_still_fit():
    comp = _busy_machine()
    verdict = comp["modes"]["eagle3_decode"]
    for i in range(40):  # a sweep: forty speculative modes
        comp["modes"][f"sweep_s{i}_t{i}"] = verdict
        comp["warnings"][f"sweep_s{i}_t{i}"] = [f"oddity {'abcdefghijklmnopqrstuvwxyz'[i % 26] * (1 + i // 26)}: a kind of its own"]
    lines = _fits(answer_brief(comp, "reports/report.html"))
    assert any("more modes (`lab summary` lists each)" in ln for ln in lines)
    assert any("more kinds of warning" in ln for ln in lines)


def test_every_hygiene_warning_has_a_known_kind():
    """The kinds' patterns match the sentences lab.measure.hygiene writes (a rewording there shows up here)."""
    rows = [{"concurrency": 8, "repeat": 1, "requests": 8,
             "hygiene": {"p99_dispatch_delay_ms": 9.0, "accounting": {"ok": False, "mismatch_count": 1, "mismatches": [1]},
                         "degenerate": {"degenerate": True, "degenerate_fraction": 0.5, "threshold": 0.5, "ngram_n": 4},
                         "stalls": {"stalls": [{"ms": 120.0}], "median_icl_ms": 12.0, "max_ttft_ms": 900.0}},
             "server": {"draft_incomplete": True}},
            {"concurrency": 8, "repeat": 2, "requests": 8,
             "hygiene": {"stalls": {"stalls": [], "median_icl_ms": 12.0, "max_ttft_ms": 100.0}}},
            {"concurrency": 0, "request_rate": 4.0, "point": "r4", "repeat": 1, "p99_schedule_lag_ms": 80.0}]
    texts = hygiene_warnings(rows, {"stable": False, "requests": 10, "cv": 0.3})
    kinds = group_by_kind({"m": texts})
    names = {k.name for k in KINDS}
    assert len(texts) >= 8 and all(g.key in names for g in kinds), [(g.key, g.texts) for g in kinds]
