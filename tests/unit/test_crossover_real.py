"""lab.analysis.crossover on the real SGLang 0.5.16 H200 captures (kshard stack, CUDA graphs on,
``tests/fixtures/sglang-0.5.16/kshard-context/``, read by ``scripts/h200_context.py``'s own
loader): on triton, verify grows with context far faster than decode, so EAGLE-3 flips from
faster (the prompts as they are, ~130 tokens) to slower (1024 tokens); on flashinfer it stays
faster through 6144 tokens. The crossover line must say both, with the backends the captures'
/server_info resolved.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lab.analysis.crossover import crossovers

ROOT = Path(__file__).resolve().parents[2]


def _rows() -> list[dict]:
    spec = importlib.util.spec_from_file_location("h200_context", ROOT / "scripts" / "h200_context.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load()


def _summary(rows: list[dict], backend: str) -> dict:
    """A :func:`lab.analysis.comparison.summarize`-shaped summary of one backend's windows, the
    context of each point the prompt length the server counted (``meta_info.prompt_tokens``)."""
    modes: dict[str, dict] = {}
    for r in rows:
        if r["backend"] != backend:
            continue
        e = {"concurrency": r["concurrency"], "context_tokens": round(r["prompt_tokens"]),
             "verify_backend": r["verify_backend"], "draft_backend": r["draft_backend"]}
        for k in ("decode_ms", "verify_ms", "draft_ms", "accept_length"):
            if r.get(k) is not None:
                e[k] = {"mean": r[k], "ci95_lo": None, "ci95_hi": None}
        if r.get("speedup") is not None:
            e["speedup_decode_tok_s"] = r["speedup"].to_dict()
        modes.setdefault(r["mode"], {})[r["key"]] = e
    return {"baseline": "baseline", "modes": modes}


def test_crossover_on_the_real_h200_captures():
    rows = _rows()
    tri = {x.mode: x for x in crossovers(_summary(rows, "triton"))}
    fi = {x.mode: x for x in crossovers(_summary(rows, "flashinfer"))}
    for mode in ("eagle3_prefill", "eagle3_decode"):
        t, f = tri[mode], fi[mode]
        assert (t.verify_backend, t.draft_backend) == ("triton", "triton")
        assert (f.verify_backend, f.draft_backend) == ("flashinfer", "flashinfer")
        assert t.concurrency == f.concurrency == 1 and len(t.points) >= 4
        [flip] = t.flips  # one change: faster -> slower, between the prompts as they are and 1024 tokens
        assert (flip["from"].verdict, flip["to"].verdict) == ("faster", "slower")
        assert flip["from"].context_tokens < 200 and flip["to"].context_tokens == 1024
        for est in (flip["measured_tokens"], flip["break_even_tokens"]):
            assert flip["from"].context_tokens < est < 1024
        assert t.to_dict()["line"].startswith(f"{mode} (verify on triton, draft on triton; concurrency 1) is faster up to about")
        assert not f.flips and "is faster at every measured context length" in f.to_dict()["line"]
        assert all(p.verdict == "faster" for p in f.points)
