"""The lossless check (issue 15, part 1): lab/analysis/lossless.py, its place in the answer, the
comparison's flat metrics, and the emulator's deterministic greedy tokens and ``diverge-at``
fault in-process. The live emulators are tests/component/test_lossless_live.py.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from lab.analysis.lossless import check_lossless, first_divergence, flat_metrics
from lab.emulator.faults import FaultError, parse_faults
from lab.emulator.http import is_greedy, prompt_digest, token_key
from lab.emulator.request import VOCAB, Request, token_id
from lab.report.answer import answer_html, answer_markdown, answer_text

BASE_IDS = [11, 12, 13, 14, 15, 16]


def rec(mode, point="c1", repeat=0, slot=0, prompt=0, ids=BASE_IDS, ok=True, **kw):
    r = {"rid": f"{mode}-{point}-r{repeat}-{slot}", "mode": mode, "point": point, "repeat": repeat,
         "prompt_index": prompt, "ok": ok, "output_ids": None if ids is None else list(ids)}
    r.update(kw)
    return r


def workload(mode, ids_for=lambda point, repeat, slot, prompt: BASE_IDS, points=("c1", "c8"), repeats=2, n=3):
    """Every mode streams the same requests: prompt = (slot + repeat) % n at each point."""
    return [rec(mode, p, r, s, (s + r) % n, ids_for(p, r, s, (s + r) % n))
            for p in points for r in range(repeats) for s in range(n)]


# --------------------------------------------------------------------------- unit: lossless.py
def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2  # a prefix diverges where it stops
    assert first_divergence([], [5]) == 0


def test_identical_outputs_pass():
    res = check_lossless({"baseline": workload("baseline"), "eagle3": workload("eagle3")}, "baseline", temperature=0.0)
    e = res["modes"]["eagle3"]
    assert (e["status"], e["pairs"], e["identical"], e["identical_share"], e["passed"]) == ("checked", 12, 12, 1.0, True)
    assert e["first_divergence_token_min"] is None and e["divergent"] == [] and res["warnings"] == {}
    assert e["points"] == {"c1": {"pairs": 6, "identical": 6, "identical_share": 1.0, "total_pairs": 6},
                           "c8": {"pairs": 6, "identical": 6, "identical_share": 1.0, "total_pairs": 6}}
    assert "baseline" not in res["modes"]
    assert e["line"] == "lossless: 12/12 identical to baseline's token for token (100.0 %) of 12 request pairs"


def test_divergent_at_k_names_the_prompts():
    k = 4

    def bad(point, repeat, slot, prompt):  # prompt 1 diverges from token k on, at c8 only
        return BASE_IDS[:k] + [99] * (len(BASE_IDS) - k) if prompt == 1 and point == "c8" else BASE_IDS

    texts = {0: "Write a haiku about GPUs", 1: "Explain   speculative decoding to a new engineer in detail", 2: "x"}
    res = check_lossless({"baseline": workload("baseline"), "eagle3": workload("eagle3", bad)}, "baseline",
                         temperature=0.0, prompt_texts=texts)
    e = res["modes"]["eagle3"]
    assert (e["pairs"], e["identical"]) == (12, 10) and e["passed"] is False
    assert e["first_divergence_token_min"] == k
    assert {(d["point"], d["prompt_index"], d["first_divergence_token"]) for d in e["divergent"]} == {("c8", 1, k)}
    assert len(e["divergent"]) == 2  # prompt 1 appears once per repeat at c8
    p1 = next(p for p in e["prompts"] if p["prompt_index"] == 1)
    assert (p1["pairs"], p1["identical"], p1["first_divergence_token_min"]) == (4, 2, k)
    assert p1["head"] == "Explain speculative decoding to a new e…"  # whitespace folded; 40 characters with the ellipsis
    assert e["points"]["c1"]["identical_share"] == 1.0 and e["points"]["c8"]["identical_share"] == pytest.approx(4 / 6)
    [w] = res["warnings"]["eagle3"]
    assert '#1 "Explain speculative decoding to a new e…"' in w and f"first divergence at token {k}" in w
    assert "#0" not in w and "#2" not in w  # only the prompts that diverged are named
    assert "lossless.min_identical_share" in w
    # a tolerance: 10/12 identical passes at 0.8
    loose = check_lossless({"baseline": workload("baseline"), "eagle3": workload("eagle3", bad)}, "baseline",
                           temperature=0.0, min_identical_share=0.8)
    assert loose["modes"]["eagle3"]["passed"] is True and loose["warnings"] == {}


def test_missing_ids_are_not_checked_never_a_pass():
    old = [{k: v for k, v in r.items() if k != "output_ids"} for r in workload("eagle3")]  # before the check
    res = check_lossless({"baseline": workload("baseline"), "eagle3": old}, "baseline", temperature=0.0)
    e = res["modes"]["eagle3"]
    assert e["status"] == "not checked" and e["identical_share"] is None and e["passed"] is None
    assert e["missing_ids"] == 12 and "bench@eagle3" in e["reason"] and "bench@baseline" not in e["reason"]
    assert e["line"].startswith("lossless: not checked: no output_ids in eagle3 requests.jsonl")
    assert flat_metrics(res) == {"eagle3.lossless.checked": 0.0}  # no identical_share to read as 1.0
    # the baseline's ids missing: not checked either, naming the baseline's stage
    res = check_lossless({"baseline": [{**r, "output_ids": None} for r in workload("baseline")],
                          "eagle3": workload("eagle3")}, "baseline", temperature=0.0)
    assert res["modes"]["eagle3"]["status"] == "not checked" and "bench@baseline" in res["modes"]["eagle3"]["reason"]
    # partly missing: the rest is checked, the gap is stated
    part = workload("eagle3")
    part[0]["output_ids"] = None
    e = check_lossless({"baseline": workload("baseline"), "eagle3": part}, "baseline", temperature=0.0)["modes"]["eagle3"]
    assert (e["status"], e["pairs"], e["missing_ids"]) == ("checked", 11, 1)
    assert e["line"].endswith("(100.0 %) of 12 request pairs; 1 without output_ids")


def test_like_with_like_failed_unmatched_sampled_skipped():
    other = workload("eagle3")
    other[0]["ok"] = False  # a failed request has no partner
    other[1]["prompt_index"] = 2  # a different prompt in the same slot is not compared
    e = check_lossless({"baseline": workload("baseline"), "eagle3": other}, "baseline", temperature=0.0)["modes"]["eagle3"]
    assert (e["pairs"], e["failed"], e["unmatched"], e["total_pairs"], e["identical_share"]) == (10, 1, 1, 12, 1.0)
    assert e["line"] == ("lossless: 10/10 identical to baseline's token for token (100.0 %) of 12 request pairs; "
                         "1 failed; 1 unmatched")
    # issue 22: 11 of 12 failed must not read "1/1 identical (100 %)" alone
    mostly_failed = [{**r, "ok": False} if i else r for i, r in enumerate(workload("eagle3"))]
    e = check_lossless({"baseline": workload("baseline"), "eagle3": mostly_failed}, "baseline",
                       temperature=0.0)["modes"]["eagle3"]
    assert e["line"] == "lossless: 1/1 identical to baseline's token for token (100.0 %) of 12 request pairs; 11 failed"
    warm = [rec("eagle3", point=None, ids=[1])] + [{**rec("eagle3", ids=[1]), "rid": "eagle3-warmup0-0"}]
    e = check_lossless({"baseline": workload("baseline"), "eagle3": warm}, "baseline", temperature=0.0)["modes"]["eagle3"]
    assert e["status"] == "not checked" and "no request matched" in e["reason"]  # warm-up is never compared
    res = check_lossless({"baseline": workload("baseline"), "eagle3": workload("eagle3")}, "baseline", temperature=0.7)
    assert res["modes"]["eagle3"]["status"] == "not checked" and "temperature 0.7" in res["modes"]["eagle3"]["reason"]
    res = check_lossless({"baseline": workload("baseline"), "sim": workload("sim")}, "baseline", temperature=0.0,
                         skip={"sim": "simulated acceptance"})
    assert res["modes"]["sim"]["reason"] == "simulated acceptance"
    assert check_lossless({"eagle3": workload("eagle3")}, None, temperature=0.0)["modes"] == {}
    with pytest.raises(ValueError, match="Fix"):
        check_lossless({}, "baseline", temperature=0.0, min_identical_share=1.5)


def test_threshold_param_validated():
    from lab.config import LosslessParams, ParamsError, load_params

    assert load_params().lossless.min_identical_share == 1.0  # params.yaml's default
    for bad in (-0.1, 1.01):
        with pytest.raises(ValidationError, match="min_identical_share"):
            LosslessParams(min_identical_share=bad)
    with pytest.raises(ParamsError, match=r"lossless.min_identical_share: .*Fix"):
        load_params(overrides={"lossless": {"min_identical_share": 2}})
    with pytest.raises(ParamsError, match=r"lossless.min_share: unknown key"):
        load_params(overrides={"lossless": {"min_share": 0.9}})


# --------------------------------------------------------------------------- answer, summary, metrics
def test_answer_summary_and_metrics_carry_the_check():
    from lab.analysis.comparison import lean_numbers

    def bad(point, repeat, slot, prompt):
        return BASE_IDS[:2] + [7, 7, 7, 7] if prompt == 2 else BASE_IDS

    ll = check_lossless({"baseline": workload("baseline"), "eagle3_decode": workload("eagle3_decode"),
                         "eagle3_prefill": workload("eagle3_prefill", bad)}, "baseline", temperature=0.0,
                        prompt_texts={2: "Summarise the seeds"})
    comp = {"baseline": "baseline", "modes": {"baseline": {"c1": {"concurrency": 1}},
                                              "eagle3_decode": {"c1": {"concurrency": 1}},
                                              "eagle3_prefill": {"c1": {"concurrency": 1}}},
            "lossless": ll, "warnings": ll["warnings"]}
    text = answer_text(comp)
    lines = text.splitlines()
    i = lines.index("  eagle3_decode:")
    assert "    lossless: 12/12 identical to baseline's token for token (100.0 %) of 12 request pairs" in lines[i:]
    assert ("lossless: 8/12 identical to baseline's token for token (66.7 %) of 12 request pairs; 1 of 3 prompts "
            "differ, first at token 2") in " ".join(text.split())  # wrapped at 120 columns
    assert 'Warning (eagle3_prefill): lossless check: 4 of 12 outputs' in text and '#2 "Summarise the seeds"' in \
        " ".join(text.split())
    for render in (answer_markdown, answer_html):
        out = render(comp)
        assert "identical to baseline" in out and "Summarise the seeds" in out, render
    flat = lean_numbers({"modes": {}, "lossless": ll})
    assert flat["eagle3_decode.lossless.identical_share"] == 1.0
    assert flat["eagle3_prefill.lossless.identical_share"] == pytest.approx(8 / 12)
    assert flat["eagle3_prefill.lossless.first_divergence_token_min"] == 2.0
    assert flat["eagle3_prefill.lossless.divergent_prompts"] == 1.0
    assert "eagle3_decode.lossless.first_divergence_token_min" not in flat
    older = answer_text({k: v for k, v in comp.items() if k != "lossless"})  # a comparison from before the check
    assert not any(line.startswith("    lossless:") for line in older.splitlines())


def test_lab_summary_prints_the_lossless_line(tmp_path, capsys):
    from lab.cli import print_summary

    ll = check_lossless({"baseline": workload("baseline"), "eagle3": workload("eagle3")}, "baseline", temperature=0.0)
    (tmp_path / "comparison.json").write_text(json.dumps(
        {"baseline": "baseline", "modes": {"eagle3": {"c1": {"concurrency": 1}}}, "lossless": ll, "warnings": {}}))
    (tmp_path / "summary.csv").write_text("mode,point,concurrency\neagle3,c1,1\n")
    assert print_summary(tmp_path) == 0
    assert "lossless: 12/12 identical to baseline's token for token (100.0 %) of 12 request pairs" in capsys.readouterr().out


# --------------------------------------------------------------------------- emulator
def test_emulator_tokens_are_a_function_of_the_prompt_when_greedy():
    assert is_greedy({"temperature": 0}) and is_greedy({"temperature": 0.9, "top_k": 1})
    assert not is_greedy({}) and not is_greedy({"temperature": 0.5})  # SGLang's default is 1.0

    def gen(prompt, rid, sp, n=40, diverge_at=None, chunks=(3, 1, 7)):
        r = Request(rid=rid, prompt_tokens=5, max_new_tokens=n, token_key=token_key(prompt, sp, rid),
                    diverge_at=diverge_at)
        while r.completion_tokens < n:
            for c in chunks:
                r.add_tokens(min(c, n - r.completion_tokens), seed=0)
        return r

    a = gen("p", "baseline-c1-r0-0", {"temperature": 0, "max_new_tokens": 40})
    b = gen("p", "eagle3-c8-r2-5", {"temperature": 0, "max_new_tokens": 20}, n=20, chunks=(2, 2, 5))
    assert b.ids == a.ids[:20]  # same prompt, other mode/point/repeat/chunking/length: a prefix
    assert a.ids == [token_id(w) for w in a.words] and len(set(a.ids)) > 10  # ids and text agree; not a loop
    assert gen("q", "baseline-c1-r0-0", {"temperature": 0}).ids != a.ids  # another prompt
    s1, s2 = (gen("p", rid, {"temperature": 0.8}) for rid in ("x-r0-0", "x-r1-0"))
    assert s1.ids != s2.ids  # sampling: a fresh draw per request
    d = gen("p", "e-c1-r0-0", {"temperature": 0}, diverge_at=7)
    assert d.ids[:7] == a.ids[:7] and all(x != y for x, y in zip(d.ids[7:], a.ids[7:]))
    assert set(d.words) <= set(VOCAB)
    loop = Request(rid="l", prompt_tokens=1, max_new_tokens=8, loop=True)
    loop.add_tokens(8, 0)
    assert loop.ids == [token_id(w) for w in loop.words]
    fixed = Request(rid="f", prompt_tokens=1, max_new_tokens=3, fixed_token=True)
    fixed.add_tokens(3, 0)
    assert fixed.ids == [100, 100, 100]  # SGLang's simulated-acceptance token id


def test_diverge_fault_flags():
    f = parse_faults(["diverge-at=0", "diverge-share=0.5"])
    assert (f.diverge_at, f.diverge_share) == (0, 0.5)
    assert "diverge-at=0" in f.describe()
    for bad in ("diverge-share=1.5", "diverge-share=0", "diverge-at=-1", "diverge-at=x"):
        with pytest.raises(FaultError, match="Fix"):
            parse_faults([bad])
    assert f.diverges_at("0" * 16, speculative=False) is None  # plain decoding is the reference
    assert f.diverges_at("0" * 16, speculative=True) == 0  # hash fraction 0 < 0.5
    assert f.diverges_at("f" * 16, speculative=True) is None  # hash fraction ~1 >= 0.5
    assert parse_faults(["diverge-at=3"]).diverges_at("f" * 16, speculative=True) == 3  # share 1 by default
    assert parse_faults([]).diverges_at(prompt_digest("p"), speculative=True) is None
