"""The task mix (issue 15, part 2): per-category accept length and speedup, the Hugging Face
loader seam, the report lines.

No network: the Hugging Face tests inject a fake ``load_dataset`` (the seam of
lab/workload/sources.py). The emulator's per-category acceptance and the path from bench to
report are tests/component/test_taskmix_live.py.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as st

from lab.analysis.taskmix import MIN_PROMPTS, CategoryError, category_rows, dataset_categories, taskmix_metrics
from lab.config import ParamsError, load_params
from lab.workload.dataset import DatasetError, load_prompts
from lab.workload.sources import (emulator_prompt_file, is_hf_id, load_bench_prompts,
                                  load_hf_prompts, prompts_sha256)

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- statistics
def _frame(rows):
    return pd.DataFrame(rows, columns=["mode", "point", "prompt_index", "completion_tokens", "spec_verify_ct"])


def _speed(point, repeat, slot, pi, v):
    return {"point": point, "repeat": repeat, "slot": slot, "prompt_index": pi, "ok": True, "decode_tok_s": v}


def test_category_accept_length_is_a_t_interval_across_prompts_not_requests():
    # category "code": prompts 0, 1, 2 (two repeats each); "prose": prompts 3, 4 (too few)
    cats = ["code", "code", "code", "prose", "prose"]
    reqs = _frame([
        ("spec", "c1", 0, 20, 10), ("spec", "c1", 0, 30, 10),   # prompt 0: 50 / 20 = 2.5 (ratio of sums)
        ("spec", "c1", 1, 20, 10), ("spec", "c1", 1, 20, 10),   # prompt 1: 2.0
        ("spec", "c1", 2, 18, 10), ("spec", "c1", 2, 18, 10),   # prompt 2: 1.8
        ("spec", "c1", 3, 12, 10), ("spec", "c1", 4, 14, 10),   # prompts 3, 4: 1.2, 1.4
    ])
    rows = category_rows(reqs, {}, cats, ["spec"], baseline=None)
    code = next(r for r in rows if r["category"] == "code")
    per_prompt = [2.5, 2.0, 1.8]
    m = sum(per_prompt) / 3
    half = st.t.ppf(0.975, 2) * pd.Series(per_prompt).std(ddof=1) / math.sqrt(3)
    assert code["accept_length"] == pytest.approx(m)
    assert code["accept_length_ci95_lo"] == pytest.approx(max(1.0, m - half))  # never below 1 token per verify
    assert code["accept_length_ci95_hi"] == pytest.approx(m + half)
    assert code["accept_n_prompts"] == 3 and not code["too_few_prompts"]
    prose = next(r for r in rows if r["category"] == "prose")
    assert prose["accept_length"] == pytest.approx(1.3) and prose["accept_n_prompts"] == 2 < MIN_PROMPTS
    assert prose["accept_length_ci95_lo"] is None and prose["accept_length_ci95_hi"] is None
    assert prose["too_few_prompts"]


def test_category_speedup_reuses_the_paired_per_prompt_ratio():
    cats = ["a", "a", "a", "b"]
    base, other = [], []
    ratios = {0: 1.2, 1: 1.25, 2: 1.3, 3: 0.8}
    for rep in range(2):
        for slot, pi in enumerate(range(4)):
            base.append(_speed("c1", rep, slot, pi, 100.0))
            other.append(_speed("c1", rep, slot, pi, 100.0 * ratios[pi]))
    rows = category_rows(_frame([]), {"base": base, "spec": other}, cats, ["base", "spec"], baseline="base")
    assert all(r["mode"] == "spec" for r in rows)  # the baseline has no speedup and no accept length
    a = next(r for r in rows if r["category"] == "a")
    logs = [math.log(ratios[i]) for i in range(3)]
    g = math.exp(sum(logs) / 3)
    from lab.analysis.stats import resolution_var

    half = st.t.ppf(0.975, 2) * math.sqrt(pd.Series(logs).var(ddof=1) + 2 * resolution_var()) / math.sqrt(3)
    assert a["speedup_decode_tok_s"] == pytest.approx(g)
    assert a["speedup_decode_tok_s_ci95_lo"] == pytest.approx(g * math.exp(-half))
    assert a["speedup_decode_tok_s_ci95_hi"] == pytest.approx(g * math.exp(half))
    assert a["verdict_decode_tok_s"] == "faster" and a["speedup_n_prompts"] == 3 and a["speedup_n_pairs"] == 6
    b = next(r for r in rows if r["category"] == "b")
    assert b["speedup_decode_tok_s"] == pytest.approx(0.8) and b["speedup_decode_tok_s_ci95_lo"] is None
    assert b["verdict_decode_tok_s"] is None and b["too_few_prompts"]
    flat = taskmix_metrics({"rows": rows})
    assert flat["spec.c1.category.a.speedup_decode_tok_s_ci95_lo"] == pytest.approx(g * math.exp(-half))
    assert "spec.c1.category.b.speedup_decode_tok_s" in flat and "spec.c1.category.b.speedup_decode_tok_s_ci95_lo" not in flat


def test_categories_come_from_the_results_and_must_agree():
    rec = {"dataset": {"categories": ["x", "y"], "prompts_sha256": "1"}}
    assert dataset_categories({"a": rec, "b": rec}) == ["x", "y"]
    assert dataset_categories({"a": {}}) is None
    with pytest.raises(CategoryError, match="different prompt sets"):
        dataset_categories({"a": rec, "b": {"dataset": {"categories": ["x"], "prompts_sha256": "2"}}})


def test_report_lines_say_too_few_prompts_instead_of_an_interval(tmp_path):
    from lab.report.answer import answer_markdown, answer_text
    from lab.report.task_categories import taskmix_html, taskmix_lines, write_categories_csv

    rows = [{"mode": "spec", "point": "c1", "concurrency": 1, "category": "coding", "accept_length": 2.1,
             "accept_length_ci95_lo": 1.9, "accept_length_ci95_hi": 2.3, "accept_n_prompts": 4,
             "speedup_decode_tok_s": 1.3, "speedup_decode_tok_s_ci95_lo": 1.1, "speedup_decode_tok_s_ci95_hi": 1.5,
             "speedup_n_prompts": 4, "too_few_prompts": False},
            {"mode": "spec", "point": "c1", "concurrency": 1, "category": "roleplay", "accept_length": 1.5,
             "accept_length_ci95_lo": None, "accept_length_ci95_hi": None, "accept_n_prompts": 2,
             "speedup_decode_tok_s": 0.9, "speedup_decode_tok_s_ci95_lo": None, "speedup_decode_tok_s_ci95_hi": None,
             "speedup_n_prompts": 2, "too_few_prompts": True}]
    comp = {"baseline": "base", "modes": {}, "taskmix": {"min_prompts": MIN_PROMPTS, "categories": ["coding", "roleplay"],
                                                         "rows": rows}}
    lines = taskmix_lines(comp)
    assert lines[1] == ("spec c1: coding 2.10 [1.90, 2.30]; 1.30x [1.10, 1.50] | "
                        "roleplay 1.50 (too few prompts: n=2); 0.90x (too few prompts: n=2)")
    assert lines[1] in " ".join(answer_text(comp).split()) and lines[1] in answer_markdown(comp)  # text: wrapped
    assert "too few prompts" in taskmix_html(comp) and taskmix_lines({"modes": {}}) == []
    prov = {"spec": {"engine": "sglang", "timing": "measured", "weights": "random", "acceptance": "simulated"}}
    path = write_categories_csv(comp["taskmix"], tmp_path / "categories.csv", provenance=prov)
    got = pd.read_csv(path)
    assert list(got["category"]) == ["coding", "roleplay"]
    assert list(got["weights"]) == ["random"] * 2 and list(got["acceptance"]) == ["simulated"] * 2
    assert write_categories_csv(None, tmp_path / "empty.csv").read_text().startswith(
        "mode,engine,timing,weights,acceptance,point,concurrency,category")


def test_taskmix_figure_is_drawn(tmp_path):
    """What the figure draws: per category a marker at the value, whiskers at its interval across
    prompts, a hollow marker without whiskers where the category has too few prompts."""
    from lab.report.task_categories import draw_taskmix, taskmix_figure

    rows = [{"mode": "spec", "point": "c1", "category": c, "accept_length": v, "accept_length_ci95_lo": lo,
             "accept_length_ci95_hi": hi, "speedup_decode_tok_s": 1.1} for c, v, lo, hi in
            (("coding", 2.1, 1.9, 2.3), ("writing", 1.6, None, None))]
    summary = {"baseline": "base", "caption": "engine: emulator. Not a GPU measurement.",
               "taskmix": {"min_prompts": 3, "categories": ["coding", "writing"], "rows": rows}}
    fig = taskmix_figure(summary)
    acc = fig.axes[0]
    assert [t.get_text() for t in acc.get_xticklabels()] == ["coding", "writing"]
    (bars,) = [c for c in acc.containers if hasattr(c, "lines")]  # the one category with an interval
    data_line, _, (whisker,) = bars.lines
    assert list(data_line.get_ydata()) == [2.1]
    (seg,) = whisker.get_segments()
    assert (seg[0][1], seg[1][1]) == pytest.approx((1.9, 2.3))
    hollow = [ln for ln in acc.lines if ln.get_markerfacecolor() == "none"]
    assert [list(ln.get_ydata()) for ln in hollow] == [[1.6]]  # writing: too few prompts, no whiskers
    assert "Not a GPU measurement" in " ".join(t.get_text() for t in fig.texts)
    out = draw_taskmix(summary, tmp_path)
    assert Path(out["taskmix"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert draw_taskmix({}, tmp_path) == {}


# --------------------------------------------------------------------------- Hugging Face loader seam
class FakeDataset(list):
    """What the lab uses of a ``datasets.Dataset``: iteration over row dicts, ``column_names``, ``_fingerprint``."""

    def __init__(self, rows):
        super().__init__(rows)
        self.column_names = list(rows[0]) if rows else []
        self._fingerprint = "fake0123"


MT_BENCH_ROWS = [  # philschmid/mt-bench's shape: question_id, category, turns (list of user turns)
    {"question_id": 81, "category": "writing", "turns": ["Compose a travel blog post about Hawaii.", "Rewrite it."]},
    {"question_id": 101, "category": "reasoning", "turns": ["You overtake the second person in a race. Where are you?"]},
    {"question_id": 121, "category": "coding", "turns": ["Write a Python function for the n-th Fibonacci number."]},
]


def _bench(**kw):
    from lab.config import BenchParams

    return BenchParams(**kw)


def _fake_loader(rows, calls=None):
    def load(path, name=None, split=None, revision=None):
        if calls is not None:
            calls.append((path, name, split, revision))
        return FakeDataset(rows)
    return load


def test_hf_loader_maps_columns_and_records_the_source():
    calls = []
    b = _bench(dataset="philschmid/mt-bench", dataset_split="train", dataset_revision="abc123",
               dataset_columns={"prompt": "turns", "category": "category", "id": "question_id"})
    prompts, info = load_bench_prompts(b, loader=_fake_loader(MT_BENCH_ROWS, calls))
    assert calls == [("philschmid/mt-bench", None, "train", "abc123")]
    assert [(p.id, p.category) for p in prompts] == [("81", "writing"), ("101", "reasoning"), ("121", "coding")]
    assert prompts[0].messages == ({"role": "user", "content": "Compose a travel blog post about Hawaii."},)  # first turn
    assert info["source"] == "huggingface" and info["fingerprint"] == "fake0123" and info["revision"] == "abc123"
    assert info["categories"] == ["writing", "reasoning", "coding"] and info["prompts_sha256"] == prompts_sha256(prompts)


def test_hf_loader_fixed_category_and_chat_messages(tmp_path):
    rows = [{"question": "Natalia sold 48 clips in April and half as many in May. How many in total?"},
            {"question": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]}]
    b = _bench(dataset="openai/gsm8k", dataset_split="test", dataset_subset="main",
               dataset_columns={"prompt": "question"}, dataset_category="math")
    prompts, _ = load_hf_prompts(b, loader=_fake_loader(rows))
    assert [p.category for p in prompts] == ["math", "math"] and prompts[0].id == "math-00000"
    assert prompts[1].messages[0]["role"] == "system"
    # the emulator gets the loaded set as a JSONL prompt file, which reads back unchanged
    path = emulator_prompt_file(b, prompts, ROOT, tmp_path)
    assert path == tmp_path / "dataset.jsonl" and load_prompts(path) == prompts


def test_hf_loader_bad_column_names_the_column_and_the_choices():
    b = _bench(dataset="philschmid/mt-bench", dataset_split="train",
               dataset_columns={"prompt": "question", "category": "category"})
    with pytest.raises(DatasetError, match=r"bench\.dataset_columns\.prompt='question' is not a column .*"
                                           r"'question_id', 'category', 'turns'.*Fix: set bench\.dataset_columns\.prompt"):
        load_hf_prompts(b, loader=_fake_loader(MT_BENCH_ROWS))
    b = _bench(dataset="philschmid/mt-bench", dataset_split="train",
               dataset_columns={"prompt": "question_id", "category": "category"})
    with pytest.raises(DatasetError, match="not a prompt"):
        load_hf_prompts(b, loader=_fake_loader(MT_BENCH_ROWS))


def test_hf_loader_without_datasets_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    b = _bench(dataset="philschmid/mt-bench", dataset_split="train",
               dataset_columns={"prompt": "turns", "category": "category"})
    with pytest.raises(DatasetError, match=r"needs the optional `datasets` package\. Fix: uv sync --extra hf"):
        load_hf_prompts(b)


@pytest.mark.parametrize("bench,match", [
    ({"dataset": "data/prompts.jsonl", "dataset_split": "train"}, r"bench\.dataset_split apply to a Hugging Face"),
    ({"dataset": "philschmid/mt-bench", "dataset_columns": {"prompt": "turns", "category": "category"}},
     r"bench\.dataset_split missing .*Fix: e\.g\. bench\.dataset_split: train"),
    ({"dataset": "philschmid/mt-bench", "dataset_split": "train"}, r"bench\.dataset_columns missing"),
    ({"dataset": "openai/gsm8k", "dataset_split": "test", "dataset_columns": {"prompt": "question"}},
     r"neither of bench\.dataset_columns\.category and bench\.dataset_category"),
    ({"dataset": "philschmid/mt-bench", "dataset_split": "train", "dataset_category": "x",
      "dataset_columns": {"prompt": "turns", "category": "category"}}, r"both bench\.dataset_columns\.category"),
    ({"dataset": "prompts.txt"}, r"neither a local prompt file \(\.jsonl\) nor a Hugging Face id"),
])
def test_params_validation_names_the_key_and_the_fix(tmp_path, bench, match):
    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["bench"].update(bench)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match=match):
        load_params(path)
    assert is_hf_id("philschmid/mt-bench") and not is_hf_id("data/prompts.jsonl")
