"""First-use costs inside a measured window (issue 24, item 7): lab.measure.hygiene.stall_check
and the first-use rows of hygiene_warnings, on a real SGLang 0.5.16 run and on built records."""

from __future__ import annotations

import json
from pathlib import Path

from lab.measure import hygiene

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16" / "kshard" / "eagle3_decode"


def _per_run(folder: Path) -> list[dict]:
    recs = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    rows = []
    for r in json.loads((folder / "runs.json").read_text()):
        mine = [x for x in recs if x.get("point") == r["point"] and x.get("repeat") == r["repeat"]]
        rows.append({**r, "hygiene": {**(r.get("hygiene") or {}), "stalls": hygiene.stall_check(mine)}})
    return rows


def test_real_first_batch_of_eight_is_flagged_as_a_first_use_cost():
    """kshard on SGLang 0.5.16 (dvc repro, docs/benchmarks/h200-sglang-0.5.16): the warm-up of that
    run never sent a batch of 8, and c8's repeat 0 waited 428 ms for a first token against 281 and
    218 ms in repeats 1 and 2."""
    rows = hygiene._first_use_rows(_per_run(REAL))
    c8 = [w for w in rows if w.startswith("c8:")]
    assert len(c8) == 1 and "repeat 0 waited 428 ms" in c8[0] and "first-use" in c8[0], rows
    assert not [w for w in rows if w.startswith("c1:")], rows  # c1 was warmed up: no first-use row
    # the open-loop point's long gaps are joining requests' eager prefills (~80 ms each), not stalls
    assert not [w for w in rows if w.startswith("r4:")], rows


def _rec(rid: str, t_send: float, chunk_times: list[float]) -> dict:
    return {"rid": rid, "ok": True, "t_send": t_send, "t_dispatch": t_send, "t_end": chunk_times[-1],
            "chunks": [[t, 1] for t in chunk_times], "completion_tokens": len(chunk_times)}


def test_a_gap_no_prefill_explains_is_a_stall_and_one_a_joiner_explains_is_not():
    steady = [0.1 + 0.01 * i for i in range(30)]
    stalled = steady[:10] + [t + 0.3 for t in steady[10:]]  # a 300 ms pause after the 10th chunk
    alone = hygiene.stall_check([_rec("a", 0.0, stalled)])
    assert [round(e["ms"]) for e in alone["stalls"]] == [310] and round(alone["median_icl_ms"], 6) == 10.0
    # another request waiting for its first token during the pause: its prefill explains it
    joiner = _rec("b", steady[9] + 0.05, [steady[10] + 0.3 + 0.01 * i for i in range(5)])
    assert hygiene.stall_check([_rec("a", 0.0, stalled), joiner])["stalls"] == []
    # two requests seeing the same engine pause make one event
    both = hygiene.stall_check([_rec("a", 0.0, stalled), _rec("c", 0.0, stalled)])
    assert [(round(e["ms"]), e["requests"]) for e in both["stalls"]] == [(310, 2)]


def test_first_use_against_recurring_across_repeats():
    steady = [0.1 + 0.01 * i for i in range(30)]
    stalled = steady[:10] + [t + 0.3 for t in steady[10:]]

    def run(rep: int, times) -> dict:
        return {"point": "c1", "concurrency": 1, "repeat": rep,
                "hygiene": {"stalls": hygiene.stall_check([_rec(f"r{rep}", 0.0, times)])}}

    first = hygiene._first_use_rows([run(0, stalled), run(1, steady), run(2, steady)])
    assert len(first) == 1 and "repeat 0 only" in first[0] and "first-use" in first[0]
    later = hygiene._first_use_rows([run(0, steady), run(1, stalled), run(2, steady)])
    assert len(later) == 1 and "repeat 1 only" in later[0] and "one-time" in later[0]
    every = hygiene._first_use_rows([run(0, stalled), run(1, stalled)])
    assert len(every) == 1 and "recur in every repeat" in every[0]
    assert hygiene._first_use_rows([run(0, steady), run(1, steady)]) == []
    one = hygiene._first_use_rows([run(0, stalled)])
    assert len(one) == 1 and "raise bench.repeats" in one[0]


CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16"


def test_no_unexplained_stall_in_any_real_captures_measured_window():
    """Every ``lab capture`` of SGLang 0.5.16 (graph and eager modes, both models, including tiny
    baseline_eager's first launch of its session, 145 s to ready with JIT builds): its measured
    requests at each level show no iteration gap that a joining prefill does not explain, so no
    first-use compile landed in a measured window. Teeth: a pause of five median ICLs pasted into
    one measured request of each capture is found. The context captures (``kshard-context/``: two
    backends, flashinfer compiling its kernels on first use) are checked per (concurrency, context
    length) shape, each of which had its own warm-up pass."""
    folders = sorted(p.parent for p in CAPTURES.glob("*/*/window.json"))
    # tiny: 3 graph + 3 eager modes; kshard: 3 eager modes; kshard-context: 3 modes x 2 backends
    assert len(folders) == 15, folders
    for folder in folders:
        recs = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
        for c, ctx in sorted({(r["concurrency"], r.get("context_tokens", 0)) for r in recs}):
            measured = [r for r in recs if r["concurrency"] == c and r.get("context_tokens", 0) == ctx
                        and not r["warmup"]]
            assert len(measured) in (7, 8), (folder, c, ctx)
            found = hygiene.stall_check(measured)
            assert found["stalls"] == [], (folder.name, c, ctx, found["stalls"])
        one = [r for r in recs if r["concurrency"] == 1 and not r.get("context_tokens") and not r["warmup"]]
        med = hygiene.stall_check(one)["median_icl_ms"]
        pause = 5 * med / 1e3 + 0.1
        hit = {**one[3], "chunks": [[t + (pause if i >= 20 else 0.0), n] for i, (t, n) in enumerate(one[3]["chunks"])]}
        stalls = hygiene.stall_check([*one[:3], hit])["stalls"]  # (later requests would overlap the shifted end)
        assert len(stalls) == 1 and stalls[0]["ms"] >= pause * 1e3, (folder.name, stalls)
