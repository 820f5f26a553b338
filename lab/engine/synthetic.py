"""Synthetic models: config-only targets and EAGLE-3 drafts that SGLang serves with
``--load-format dummy`` (random weights), so a GPU node without weights runs the real server.

Three presets (``model.synthetic`` in params.yaml):

- ``kshard``: a DeepSeek-V3-architecture target (``DeepseekV3ForCausalLM``, Kimi-K2.5's
  architecture: MLA attention) shaped like *one GPU's share of Kimi-K2.5 at TP 8*: 61 layers,
  hidden 7168, 8 MLA heads (64 / 8), a dense MLP of 2304 per layer (Kimi's 18432 / 8), Kimi's
  vocabulary (163840); the same per-GPU shapes as the physics stage (``lab/physics/shapes.py``).
  About 7 B parameters (14 GB in bf16). Its draft is a Llama EAGLE-3 head of the same hidden size.
- ``kimi-e64``: Kimi-K2.5's own architecture and per-token shape for TP 8 (64 MLA heads, MoE
  with 8 of its routed experts active per token and one shared), but 64 routed experts in all
  instead of 384, so random bf16 weights fit eight H200s with the KV cache (about 0.35 TB).
- ``tiny``: an 8-layer MLA + MoE target (hidden 256, 12 routed experts, 2 active) with a matching
  draft: loads in seconds, for quick runs of every code path.

Shapes follow ``shared/real-sglang/dsv3_models.py``, which served on SGLang 0.5.16 with
``--attention-backend triton``. Every file is written from this module's tables, so the model
is a pure function of the preset name (:func:`model_dir` names the folder by a hash of its
content). The tokenizer is a byte-level BPE trained with Hugging Face ``tokenizers`` on the
lab's prompts (``data/``), deterministic for the same text; the model's vocabulary may be larger
than the tokenizer's (ids past it decode to nothing). Random weights accept no draft token, so
speculative modes must pin acceptance (``simulate_accept_length``; config validation says so),
and every result carries ``weights: random`` and ``acceptance: simulated``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PRESETS", "SyntheticError", "model_dir", "write_model", "target_config", "draft_config",
           "GENERATOR_VERSION", "describe"]

#: Bump when a preset's files change, so a cached folder is rebuilt.
GENERATOR_VERSION = 1
TOKENIZER_VOCAB = 8192

_MLA = {
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "rope_theta": 50000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "attention_bias": False, "rope_scaling": None,
}

#: Preset -> target config overrides (on top of the MLA base above).
PRESETS: dict[str, dict[str, Any]] = {
    "kshard": dict(hidden_size=7168, num_hidden_layers=61, num_attention_heads=8, num_key_value_heads=8,
                   intermediate_size=2304, moe_intermediate_size=2048, n_routed_experts=8, n_group=1,
                   topk_group=1, num_experts_per_tok=2, n_shared_experts=1,
                   first_k_dense_replace=61, vocab_size=163840),
    # Kimi-K2.5's architecture and per-token shape at TP 8 (61 layers, hidden 7168, 64 MLA heads,
    # first layer dense with MLP 18432, then MoE with 8 routed experts of 2048 active per token and
    # one shared expert, vocabulary 163840), with 64 routed experts in all instead of 384, so the
    # bf16 dummy weights (~0.35 TB) fit 8 x 141 GB beside the KV cache. For the 8-GPU run (issue 26).
    "kimi-e64": dict(hidden_size=7168, num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64,
                     intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=64, n_group=1,
                     topk_group=1, num_experts_per_tok=8, n_shared_experts=1, first_k_dense_replace=1,
                     vocab_size=163840),
    "tiny": dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                 q_lora_rank=256, intermediate_size=512, moe_intermediate_size=128, n_routed_experts=12,
                 n_group=4, topk_group=2, num_experts_per_tok=2, n_shared_experts=1,
                 first_k_dense_replace=1, vocab_size=8192),
}


class SyntheticError(ValueError):
    """An unknown preset, or the tokenizer library is missing."""


def target_config(preset: str) -> dict[str, Any]:
    """The target's ``config.json`` for ``preset``.

    :raises SyntheticError: unknown preset (the message lists the known ones).
    """
    if preset not in PRESETS:
        raise SyntheticError(f"model.synthetic={preset!r} is not a preset. Fix: use one of {sorted(PRESETS)}")
    return {**_MLA, **PRESETS[preset]}


def draft_config(preset: str) -> dict[str, Any]:
    """The EAGLE-3 draft's ``config.json``: one Llama decoder layer of the target's hidden size
    (``LlamaForCausalLMEagle3``, SGLang ``models/llama_eagle3.py``), full draft vocabulary."""
    tgt = target_config(preset)
    h = tgt["hidden_size"]
    heads = max(4, h // 128)
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": h,
            "intermediate_size": 2 * h if h < 1024 else 12288, "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 8) if h >= 1024 else heads, "head_dim": h // heads,
            "num_hidden_layers": 1, "vocab_size": tgt["vocab_size"], "draft_vocab_size": tgt["vocab_size"],
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "hidden_act": "silu",
            "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}


def _corpus(root: Path) -> list[str]:
    """The lab's own prompt text (every string in ``data/*.jsonl``), sorted: the tokenizer's
    training text. A fixed sentence list keeps it non-empty."""
    texts = ["Speculative decoding drafts several tokens and verifies them in one forward pass.",
             "Explain CUDA graphs in one paragraph.", "def add(a, b):\n    return a + b\n"]
    for f in sorted((root / "data").glob("*.jsonl")) if (root / "data").is_dir() else []:
        for line in f.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            stack = [row]
            while stack:
                v = stack.pop()
                if isinstance(v, str) and len(v) > 3:
                    texts.append(v)
                elif isinstance(v, dict):
                    stack += list(v.values())
                elif isinstance(v, list):
                    stack += v
    return sorted(texts)


def _fingerprint(preset: str, corpus: list[str]) -> str:
    blob = json.dumps([GENERATOR_VERSION, TOKENIZER_VOCAB, target_config(preset), draft_config(preset), corpus],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def model_dir(preset: str, root: Path) -> Path:
    """Where ``preset``'s files live: ``<root>/.cache/synthetic/<preset>-<content hash>`` with
    ``target/`` and ``draft/`` inside (the path changes whenever a file would)."""
    return root / ".cache" / "synthetic" / f"{preset}-{_fingerprint(preset, _corpus(root))}"


def _tokenizer(corpus: list[str]):
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as exc:
        raise SyntheticError("the synthetic model's tokenizer needs Hugging Face `tokenizers`. Fix: uv sync "
                             "(it is in the lab's lock) or install the node bundle (lab.offline)") from exc
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return tok


def write_model(preset: str, root: str | os.PathLike[str]) -> Path:
    """Write (once) ``preset``'s target and draft folders; returns :func:`model_dir`.

    Each folder holds ``config.json``, ``tokenizer.json``, ``tokenizer_config.json`` (with a
    plain chat template), ``special_tokens_map.json``, ``generation_config.json`` and
    ``synthetic.json`` (what this is: preset, generator version, "weights: random").
    Written to a temporary folder and renamed, so a half-written model is never served.

    :raises SyntheticError: unknown preset, or no ``tokenizers``.
    """
    root = Path(root)
    out = model_dir(preset, root)
    if (out / "target" / "synthetic.json").exists() and (out / "draft" / "synthetic.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tok = _tokenizer(_corpus(root))
    meta = describe(preset)
    for role, cfg in (("target", target_config(preset)), ("draft", draft_config(preset))):
        d = tmp / role
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
        tok.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "model_max_length": 8192,
            "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"},
            indent=1) + "\n")
        (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                                "unk_token": "<unk>"}) + "\n")
        (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
        (d / "synthetic.json").write_text(json.dumps({**meta, "role": role}, indent=1) + "\n")
    if out.exists():  # another process finished first
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        return out
    os.replace(tmp, out)
    return out


def describe(preset: str) -> dict[str, Any]:
    """What a synthetic model is, for results and MLflow: preset, generator version, the shapes
    that matter, ``weights: random`` and ``load_format: dummy``."""
    t = target_config(preset)
    return {"preset": preset, "generator_version": GENERATOR_VERSION, "weights": "random", "load_format": "dummy",
            "architecture": t["architectures"][0], "num_hidden_layers": t["num_hidden_layers"],
            "hidden_size": t["hidden_size"], "num_attention_heads": t["num_attention_heads"],
            "intermediate_size": t["intermediate_size"], "vocab_size": t["vocab_size"],
            "draft_architecture": "LlamaForCausalLMEagle3"}
