"""The emulator's context terms, fitted from the real SGLang 0.5.16 H200 context captures.

For each measured attention backend (triton, flashinfer): ``lab calibrate`` of the three modes'
captures (``tests/fixtures/sglang-0.5.16/kshard-context/<mode>_<backend>/``;
:func:`lab.calibrate.fit.calibrate`, which reads ``lab capture`` folders), exported as the
profile ``lab/emulator/profiles/kshard_h200_<backend>.json`` (constants the captures cannot
determine, the eager-mode costs and the KV pool size, filled from ``kimi_k25_tp8_h200_0523`` and
marked NOT FITTED). Then the default profile's context terms (``kimi_k25_tp8_pcie``: the decode
step's and each verify mode's cost per 1,000 KV tokens of the batch and of the mean sequence) are
set to the triton fit, the backend of the lab's H200 configs, each with its interval and a source
that says it was copied: the default's own build was never measured at long context.

``python scripts/context_profiles.py`` writes the three profiles and prints the markdown table
that ``docs/benchmarks/h200-sglang-0.5.16-context.md`` holds between its ``<!-- context-terms -->``
markers (``tests/component/test_context_profiles.py`` checks both are current);
``--check`` writes nothing and exits 1 when a profile differs from what it would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.calibrate.fit import calibrate, export_profile  # noqa: E402
from lab.emulator.profile import PROFILES_DIR, CostProfile, load_profile  # noqa: E402

CAP = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "kshard-context"
BACKENDS = ("triton", "flashinfer")
MODES = ("baseline", "eagle3_prefill", "eagle3_decode")
FILL = "kimi_k25_tp8_h200_0523"
DEFAULT = "kimi_k25_tp8_pcie"
COPIED_FROM = "triton"
#: (profile path, what it is) of the context terms, in table order
TERMS = [("decode.kv_ms_per_1k_tokens", "decode step, per 1k KV tokens of the batch"),
         ("decode.kv_seq_ms_per_1k_tokens", "decode step, per 1k KV tokens of the mean sequence"),
         ("verify.modes.decode.kv_ms_per_1k_tokens", "verify, per 1k KV tokens of the batch"),
         ("verify.modes.decode.kv_seq_ms_per_1k_tokens", "verify, per 1k KV tokens of the mean sequence")]


def _get(d: dict, path: str) -> dict:
    for p in path.split("."):
        d = d[p]
    return d


def fitted(backend: str) -> dict:
    """The profile ``kshard_h200_<backend>`` as ``lab calibrate`` exports it (a JSON-ready dict)."""
    cal = calibrate([CAP / f"{m}_{backend}" for m in MODES])
    name = f"kshard_h200_{backend}"
    prof = export_profile(cal, name, fill_from=load_profile(FILL)[0], fill_name=FILL)
    prof["attention_backend"] = backend
    prof["description"] = (f"Real SGLang 0.5.16 on one H200, the kshard synthetic model (one GPU's share of Kimi-K2.5 "
                           f"at TP 8), --attention-backend {backend}, CUDA graphs on, prompts padded to 0-6144 tokens "
                           f"(docs/benchmarks/h200-sglang-0.5.16-context.md). " + prof["description"])
    return prof


def with_context_terms(default: dict, source: dict, backend: str) -> dict:
    """``default`` with its context terms replaced by ``source``'s (each verify mode gets the
    measured one: in 0.5.16 both modes ran the same backend code)."""
    out = json.loads(json.dumps(default))
    out["attention_backend"] = backend  # the emulator then reports the backend these costs were measured on
    for path, _ in TERMS:
        for target in ([path] if path.startswith("decode") else
                       [path.replace(".decode.", f".{m}.") for m in ("prefill", "decode")]):
            src = _get(source, path)
            parent, key = target.rsplit(".", 1)
            _get(out, parent)[key] = {
                "value": src["value"],
                "source": (f"FITTED on real SGLang 0.5.16 (H200, kshard, {backend}: the backend of the lab's H200 "
                           f"configs; kshard_h200_flashinfer holds the other measured one) by lab calibrate, "
                           f"scripts/context_profiles.py, and copied here: this profile's own build was never "
                           f"measured at long context. Measured: {src['source']}"),
                "fit": src.get("fit")}
    return out


def table(profiles: dict[str, dict]) -> list[str]:
    """Markdown: each context term per backend, value and 95 % interval (ms)."""
    out = ["| term | " + " | ".join(profiles) + " |", "| --- |" + " ---: |" * len(profiles)]
    for path, what in TERMS:
        cells = []
        for p in profiles.values():
            v = _get(p, path)
            ci = (v.get("fit") or {}).get("ci95")
            cells.append(f"{v['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
        out.append(f"| `{path}` ({what}) | " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a profile is not current")
    a = ap.parse_args(argv)
    profiles = {b: fitted(b) for b in BACKENDS}
    default_path = PROFILES_DIR / f"{DEFAULT}.json"
    default = with_context_terms(json.loads(default_path.read_text()), profiles[COPIED_FROM], COPIED_FROM)
    files = {PROFILES_DIR / f"kshard_h200_{b}.json": p for b, p in profiles.items()}
    files[default_path] = default
    stale = []
    for path, prof in files.items():
        CostProfile.model_validate(prof)
        text = json.dumps(prof, indent=2) + "\n"
        if not path.is_file() or path.read_text() != text:
            stale.append(path.name)
            if not a.check:
                path.write_text(text)
    print("\n".join(table(profiles)))
    if a.check and stale:
        print(f"not current: {', '.join(stale)} (run python scripts/context_profiles.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
