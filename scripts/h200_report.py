"""Tables of the real SGLang 0.5.16 runs on one H200, from the committed files only:

- ``docs/benchmarks/h200-sglang-0.5.16/``: the ``dvc repro`` of ``configs/h200/params-kshard.yaml``
  (baseline, eagle3_prefill, eagle3_decode; CUDA graphs on; 3 repeats; intervals);
- ``tests/fixtures/sglang-0.5.16/kshard/*_eager`` and ``tiny/*``: ``lab capture`` runs (one pass
  per level: no interval).

``python scripts/h200_report.py`` prints the markdown that ``docs/benchmarks/h200-sglang-0.5.16.md``
holds between its ``<!-- tables -->`` markers (``tests/unit/test_h200_report.py`` checks they agree).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.measure.crosscheck import add_cross_checks  # noqa: E402

RUN = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16"
FIX = ROOT / "tests" / "fixtures" / "sglang-0.5.16"


def _f(v, nd=1) -> str:
    return "-" if v in (None, "") else f"{float(v):.{nd}f}"


def _ci(row: dict, key: str, nd: int = 1) -> str:
    m, lo, hi = row.get(f"{key}_mean"), row.get(f"{key}_ci95_lo"), row.get(f"{key}_ci95_hi")
    if m in (None, ""):
        return "-"
    if lo in (None, "") or hi in (None, ""):
        return _f(m, nd)
    return f"{_f(m, nd)} [{_f(lo, nd)}, {_f(hi, nd)}]"


def _speedup(row: dict, key: str) -> str:
    s = row.get(f"speedup_{key}")
    if s in (None, ""):
        return "reference"
    return f"{float(s):.2f}x [{_f(row[f'speedup_{key}_ci95_lo'], 2)}, {_f(row[f'speedup_{key}_ci95_hi'], 2)}] {row[f'verdict_{key}']}"


def graph_table() -> list[str]:
    """kshard, CUDA graphs on, from the dvc repro (3 repeats per point)."""
    rows = list(csv.DictReader(open(RUN / "reports" / "summary.csv")))
    energy: dict[tuple[str, str], list[float]] = {}
    flags: dict[tuple[str, str], int] = {}
    for mode in ("baseline", "eagle3_prefill", "eagle3_decode"):
        for r in json.loads((RUN / "results" / mode / "runs.json").read_text()):
            if r.get("energy_mj_per_output_token") is not None:
                energy.setdefault((mode, r["point"]), []).append(r["energy_mj_per_output_token"])
            flags[(mode, r["point"])] = flags.get((mode, r["point"]), 0) + len((r.get("crosscheck") or {}).get("flags") or [])
    out = ["| mode | point | decode tok/s [95 % CI] | speedup, decode tok/s [95 % CI] | accept length | verify ms | draft ms | "
           "decode ms | CUDA-graph coverage | cross-check flags | GPU energy, mJ per output token |",
           "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if not r["point"].startswith("c"):
            continue
        e = energy.get((r["mode"], r["point"]))
        out.append(f"| {r['mode']} | {r['point']} | {_ci(r, 'decode_tok_s')} | {_speedup(r, 'decode_tok_s')} | "
                   f"{_f(r.get('accept_length_mean'), 2)} | {_f(r.get('verify_ms_mean'), 2)} | {_f(r.get('draft_ms_mean'), 2)} | "
                   f"{_f(r.get('decode_ms_mean'), 2)} | {_f(r.get('verify_graph_fraction_mean'), 2)} | "
                   f"{flags.get((r['mode'], r['point']), 0)} | {_f(statistics.mean(e), 0) if e else '-'} |")
    return out


def capture_table(model: str, modes: list[str]) -> list[str]:
    """One ``lab capture`` pass per level: the lab's readout (window.json) and its cross-checks."""
    out = ["| mode | level | decode tok/s | accept length | verify ms | draft ms | decode ms | cycle ms (client) | "
           "CUDA-graph coverage | cross-check flags | GPU energy, mJ per output token |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in modes:
        w = json.loads((FIX / model / mode / "window.json").read_text())
        for lvl, s in w.items():
            cc = add_cross_checks(dict(s))["crosscheck"]
            out.append(f"| {mode} | {lvl} | {_f(s.get('decode_tok_s'))} | {_f(s.get('accept_length'), 2)} | "
                       f"{_f(s.get('verify_ms'), 2)} | {_f(s.get('draft_ms'), 2)} | {_f(s.get('decode_ms'), 2)} | "
                       f"{_f(s.get('cycle_ms'), 2)} | {_f(s.get('verify_graph_fraction'), 2)} | {len(cc['flags'])} | "
                       f"{_f(s.get('energy_mj_per_output_token'), 0)} |")
    return out


def startup_table() -> list[str]:
    """Launch to ready, by phase (lab/engine/startup.py), for the captured modes."""
    out = ["| model | mode | ready, s | init s | CUDA-graph capture s |", "| --- | --- | ---: | ---: | ---: |"]
    for model, modes in (("tiny", ["baseline", "eagle3_prefill", "eagle3_decode"]),
                         ("kshard", ["baseline_eager", "eagle3_decode_eager"])):
        for mode in modes:
            st = json.loads((FIX / model / mode / "launch.json").read_text())["startup"]
            ph = st.get("phases") or {}
            out.append(f"| {model} | {mode} | {_f(st.get('startup_s'))} | {_f(ph.get('init_s'))} | "
                       f"{_f(ph.get('cuda_graph_capture_s'))} |")
    return out


def render() -> str:
    parts = ["### kshard (one GPU's share of Kimi-K2.5 at TP 8), CUDA graphs on: `dvc repro`, 3 repeats", "",
             *graph_table(), "",
             "### kshard, CUDA graphs off (`--disable-cuda-graph`): `lab capture`, one pass per level", "",
             *capture_table("kshard", ["baseline_eager", "eagle3_decode_eager"]), "",
             "### tiny (8-layer MLA + MoE), CUDA graphs on: `lab capture`, one pass per level", "",
             *capture_table("tiny", ["baseline", "eagle3_prefill", "eagle3_decode"]), "",
             "### Startup (launch to ready)", "", *startup_table()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
