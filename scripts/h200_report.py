"""Tables of the real SGLang 0.5.16 runs on one H200, from the committed files only:

- ``docs/benchmarks/h200-sglang-0.5.16/``: the ``dvc repro`` of ``configs/h200/params-kshard.yaml``
  (baseline, eagle3_prefill, eagle3_decode; CUDA graphs on; 3 repeats; intervals);
- ``tests/fixtures/sglang-0.5.16/kshard/*_eager`` and ``tiny/*``: ``lab capture`` runs (one pass
  per level: no interval), the three modes with CUDA graphs off on both models and on tiny with
  them on;
- the graph-vs-eager comparison: per model, each component's device-timer ms at c1 with CUDA
  graphs on (kshard: the ``dvc repro``'s mean; tiny: its capture) and off (the ``*_eager`` capture).

``python scripts/h200_report.py`` prints the markdown that ``docs/benchmarks/h200-sglang-0.5.16.md``
holds between its ``<!-- tables -->`` markers (``tests/unit/test_h200_report.py`` checks they agree).
"""

from __future__ import annotations

import csv
import json
import re
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


#: The ``lab capture`` folders, by model, in table order.
CAPTURED = {"tiny": ["baseline", "eagle3_prefill", "eagle3_decode", "baseline_eager", "eagle3_prefill_eager",
                     "eagle3_decode_eager"],
            "kshard": ["baseline_eager", "eagle3_prefill_eager", "eagle3_decode_eager"]}
_LOG_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d):\d\d\]", re.M)


def startup_table() -> list[str]:
    """Launch to ready, by phase (lab/engine/startup.py), for the captured modes; "log start" is
    the first time stamp of the capture's ``server.log`` (which session ran it)."""
    out = ["| model | mode | log start | ready, s | init s | CUDA-graph capture s |",
           "| --- | --- | --- | ---: | ---: | ---: |"]
    for model, modes in CAPTURED.items():
        for mode in modes:
            st = json.loads((FIX / model / mode / "launch.json").read_text())["startup"]
            ph = st.get("phases") or {}
            ts = _LOG_TS.search((FIX / model / mode / "server.log").read_text())
            out.append(f"| {model} | {mode} | {ts.group(1) if ts else '-'} | {_f(st.get('startup_s'))} | "
                       f"{_f(ph.get('init_s'))} | {_f(ph.get('cuda_graph_capture_s'))} |")
    return out


def _graph_c1(model: str) -> dict[str, dict]:
    """c1 readout per graph mode: kshard from the dvc repro's summary.csv (``*_mean``), tiny from
    its captures' window.json."""
    if model == "kshard":
        rows = {r["mode"]: r for r in csv.DictReader(open(RUN / "reports" / "summary.csv")) if r["point"] == "c1"}
        return {m: {k: (float(r[f"{k}_mean"]) if r.get(f"{k}_mean") not in (None, "") else None)
                    for k in ("decode_ms", "verify_ms", "draft_ms")} for m, r in rows.items()}
    return {m: json.loads((FIX / model / m / "window.json").read_text())["c1"]
            for m in ("baseline", "eagle3_prefill", "eagle3_decode")}


def graph_vs_eager_table() -> list[str]:
    """Device-timer ms per decode iteration at c1, CUDA graphs on vs off, per model and component.
    Eager draft ms holds the draft decode steps only: with graphs off SGLang books the draft's
    extend inside ``extend`` (the readout's ``draft_incomplete``)."""
    out = ["| model | component | mode | graphs on, ms | graphs off, ms | off / on | off - on, ms |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    parts = (("decode step", "baseline", "decode_ms"), ("verify (3 tokens)", "eagle3_prefill", "verify_ms"),
             ("verify (3 tokens)", "eagle3_decode", "verify_ms"), ("draft", "eagle3_prefill", "draft_ms"),
             ("draft", "eagle3_decode", "draft_ms"))
    for model in ("kshard", "tiny"):
        graph = _graph_c1(model)
        for what, mode, key in parts:
            on = graph[mode][key]
            off = json.loads((FIX / model / f"{mode}_eager" / "window.json").read_text())["c1"][key]
            label = what + (" (eager: draft steps only)" if key == "draft_ms" else "")
            out.append(f"| {model} | {label} | {mode} | {_f(on, 2)} | {_f(off, 2)} | {_f(off / on, 1)}x | "
                       f"{_f(off - on, 2)} |")
    return out


def render() -> str:
    parts = ["### kshard (one GPU's share of Kimi-K2.5 at TP 8), CUDA graphs on: `dvc repro`, 3 repeats", "",
             *graph_table(), "",
             "### kshard, CUDA graphs off (`--disable-cuda-graph`): `lab capture`, one pass per level", "",
             *capture_table("kshard", CAPTURED["kshard"]), "",
             "### tiny (8-layer MLA + MoE), CUDA graphs on: `lab capture`, one pass per level", "",
             *capture_table("tiny", CAPTURED["tiny"][:3]), "",
             "### tiny, CUDA graphs off (`--disable-cuda-graph`): `lab capture`, one pass per level", "",
             *capture_table("tiny", CAPTURED["tiny"][3:]), "",
             "### CUDA graphs on vs off, device-timer ms per decode iteration at c1", "",
             *graph_vs_eager_table(), "",
             "### Startup (launch to ready)", "", *startup_table()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
