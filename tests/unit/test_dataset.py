"""Tests for lab.workload.dataset: the shipped prompts, error messages, templating, workload order."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lab.workload.dataset import DatasetError, Prompt, load_prompts, output_lengths, render_prompt, workload

DATA = Path(__file__).resolve().parents[2] / "data" / "prompts.jsonl"


def test_shipped_dataset_is_valid_and_varied():
    prompts = load_prompts(DATA)
    assert 35 <= len(prompts) <= 60
    cats = Counter(p.category for p in prompts)
    assert {"writing", "coding", "math", "reasoning", "extraction", "roleplay"} <= set(cats)
    assert min(cats.values()) >= 3
    lengths = [sum(len(m["content"]) for m in p.messages) for p in prompts]
    assert max(lengths) > 3 * min(lengths)  # varied lengths
    assert any(p.messages[0]["role"] == "system" for p in prompts)
    assert len({p.id for p in prompts}) == len(prompts)


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="not found.*Fix"):
        load_prompts(tmp_path / "nope.jsonl")


def test_empty_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n  \n")
    with pytest.raises(DatasetError, match="empty.*Fix"):
        load_prompts(f)


def _line(**kw):
    obj = {"id": "a", "category": "c", "messages": [{"role": "user", "content": "hi"}]}
    obj.update(kw)
    return json.dumps(obj)


def test_bad_json_names_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(_line() + "\n" + _line(id="b") + "\n" + '{"id": "c", "category": \n')
    with pytest.raises(DatasetError, match=r"malformed JSON at line 3"):
        load_prompts(f)


@pytest.mark.parametrize(
    "bad, pattern",
    [
        ({"category": "c", "messages": [{"role": "user", "content": "x"}]}, "missing key 'id'"),
        ({"id": "x", "messages": [{"role": "user", "content": "x"}]}, "missing key 'category'"),
        ({"id": "x", "category": "c"}, "missing key 'messages'"),
        ({"id": "x", "category": "c", "messages": []}, "non-empty list"),
        ({"id": "x", "category": "c", "messages": [{"role": "robot", "content": "x"}]}, "role='robot'"),
        ({"id": "x", "category": "c", "messages": [{"role": "user"}]}, r"messages\[0\]"),
        ({"id": "x", "category": "c", "messages": [{"role": "assistant", "content": "x"}]}, "last message"),
        ({"id": 3, "category": "c", "messages": [{"role": "user", "content": "x"}]}, "'id' must be"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_invalid_keys_name_line(tmp_path, bad, pattern):
    f = tmp_path / "p.jsonl"
    f.write_text(_line() + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DatasetError, match=pattern) as ei:
        load_prompts(f)
    assert "line 2" in str(ei.value)


def test_duplicate_id(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(_line() + "\n" + _line() + "\n")
    with pytest.raises(DatasetError, match="duplicate id 'a'"):
        load_prompts(f)


def test_render_builtin_kimi_template():
    p = Prompt("x", "c", ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}))
    assert render_prompt(p) == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>"
    )
    q = Prompt("y", "c", ({"role": "user", "content": "Hi?"},))
    assert render_prompt(q).startswith("<|im_system|>system<|im_middle|>You are Kimi")


def test_render_with_tokenizer():
    class Tok:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "|".join(m["content"] for m in messages) + "<gen>"

    p = Prompt("x", "c", ({"role": "user", "content": "Hi?"},))
    assert render_prompt(p, Tok()) == "Hi?<gen>"


def test_workload_deterministic_and_cycles():
    prompts = load_prompts(DATA)
    w1 = workload(prompts, 100, seed=7)
    assert w1 == workload(prompts, 100, seed=7)
    assert w1 != workload(prompts, 100, seed=8)
    idx = [i for i, _ in w1]
    n = len(prompts)
    assert sorted(idx[:n]) == list(range(n))  # first pass uses every prompt once
    assert sorted(idx[n : 2 * n]) == list(range(n))
    assert all(t == render_prompt(prompts[i]) for i, t in w1)
    assert workload(prompts, 0, seed=0) == []
    with pytest.raises(DatasetError):
        workload([], 3, seed=0)


def test_output_lengths_seeded_bounded_and_zero_spread():
    a = output_lengths(200, 64, 0.5, seed=7)
    assert a == output_lengths(200, 64, 0.5, seed=7)  # every mode draws the same lengths
    assert a != output_lengths(200, 64, 0.5, seed=8)
    assert min(a) == 32 and max(a) == 64  # uniform over [ceil(64 x 0.5), 64]: both ends drawn in 200
    assert abs(sum(a) / len(a) - 48) < 2.5
    assert output_lengths(5, 64, 0.0, seed=1) == [64] * 5
    assert output_lengths(3, 2, 0.1, seed=1) == [2, 2, 2]  # ceil(1.8) = 2: nothing to spread
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="outside"):
            output_lengths(3, 64, bad, seed=1)
