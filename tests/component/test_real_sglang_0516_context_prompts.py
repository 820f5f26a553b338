"""The prompts ``lab capture`` built for the real SGLang 0.5.16 context captures
(``tests/fixtures/sglang-0.5.16/kshard-context/``), rebuilt on the CPU from the committed padding
document (``data/context-document.txt``) and the kshard synthetic model's own tokenizer
(rebuilt from the project's prompt text; its folder hash is the one the captures served): every
one counts to the server's ``meta_info.prompt_tokens`` exactly, the lab's run-time count agrees,
and padded prompts land within 4 tokens below the asked length. About 30 s of CPU (880 prompts,
a binary search of ~15 tokenizer calls each), hence the component tier.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.config import load_params
from lab.engine.synthetic import model_dir, write_model
from lab.engine.tokenizer import hf_token_counter
from lab.workload.context import pad_prompt
from lab.workload.dataset import workload
from lab.workload.sources import load_bench_prompts

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "kshard-context"
PARAMS = ROOT / "configs" / "h200" / "params-kshard-context.yaml"
FOLDERS = [f"{m}_{b}" for b in ("triton", "flashinfer") for m in ("baseline", "eagle3_prefill", "eagle3_decode")]
CONTEXTS = (0, 1024, 2048, 4096, 6144)
LEVELS = (1, 4)


def _json(folder: str, name: str):
    return json.loads((FX / folder / name).read_text())


def _records(folder: str) -> list[dict]:
    return [json.loads(x) for x in (FX / folder / "requests.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def kshard_tokenizer(tmp_path_factory):
    """The kshard synthetic model's tokenizer, rebuilt from the project's own prompt text: the
    folder name (content hash) must be the one the captures served (their ``launch.json``)."""
    root = tmp_path_factory.mktemp("synthetic")
    shutil.copytree(ROOT / "data", root / "data")
    d = write_model("kshard", root)
    served = _json("baseline_triton", "launch.json")["argv"]
    path = served[served.index("--model-path") + 1]
    assert Path(path).parent.name == model_dir("kshard", root).name == d.name, (path, d)
    return hf_token_counter(str(d / "target"))


@pytest.mark.parametrize("folder", FOLDERS)
def test_built_prompts_have_exactly_the_length_sglang_counted(folder, kshard_tokenizer):
    """Each record's prompt, rebuilt as ``lab capture`` built it (same prompts, seeds, padding),
    counts on the CPU to the server's ``prompt_tokens``, and the lab's own count recorded at run
    time agrees; padded prompts land within 4 tokens below the asked length."""
    params = load_params(PARAMS)
    prompts, _ = load_bench_prompts(params.bench, ROOT)
    recs = _records(folder)
    requests = {(r["concurrency"], r["context_tokens"], r["warmup"]) for r in recs}
    assert {(c, ctx) for c, ctx, _ in requests} == {(c, ctx) for c in LEVELS for ctx in CONTEXTS}
    n = max(1, len([r for r in recs if not r["warmup"]]) // (len(LEVELS) * len(CONTEXTS)))
    checked = 0
    for c in LEVELS:
        for ctx in CONTEXTS:
            for warm in (True, False):
                seed = params.bench.seed + (10_000 if warm else 0) + c
                texts = dict(workload(prompts, n, seed))
                for r in (r for r in recs if (r["concurrency"], r["context_tokens"], r["warmup"]) == (c, ctx, warm)):
                    text = pad_prompt(texts[r["prompt_index"]], ctx, kshard_tokenizer)
                    got = kshard_tokenizer(text)
                    assert got == r["prompt_tokens"] == r["counted_prompt_tokens"], (folder, c, ctx, r["rid"])
                    if ctx:
                        assert ctx - 4 <= got <= ctx, (folder, r["rid"], got)
                    checked += 1
    assert checked == len(recs) and checked >= 2 * len(LEVELS) * len(CONTEXTS) * 7
