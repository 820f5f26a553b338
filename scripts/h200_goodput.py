"""Recompute the committed H200 run's load metrics from its raw request records under the current goodput definition.

    python scripts/h200_goodput.py                  # report only: writes goodput-recomputed.{json,md}
    python scripts/h200_goodput.py --apply          # also rewrites the folder's load metrics in place

The run under ``docs/benchmarks/h200-sglang-0.5.16/`` was measured before goodput was redefined:
its rate point r4 carries exactly the offered 4.00 req/s in every repeat, above the measured
request throughput of a repeat (2.73 req/s in baseline repeat 1), and a zero-width "1.00x [1.00,
1.00]" goodput speedup. The current definition (:mod:`lab.measure.goodput`, version
:data:`lab.measure.goodput.DEFINITION_VERSION`) is good requests / the run's measured window.
The raw request records (``results/<mode>/requests.jsonl``: send, schedule, chunk and end times
as the client saw them) hold everything it needs, so this script recomputes, per mode, point and
repeat, ``goodput_req_s``, ``goodput_tok_s``, ``slo_attainment`` and ``request_throughput_req_s``
with :func:`lab.measure.goodput.run_load_metrics` and :func:`lab.measure.records.measured_window_s`
under the run's own SLO (``result.json`` ``load.slo``). Nothing is re-measured.

``--apply`` writes the recomputed values where the folder has them: ``runs.json`` (per repeat),
``result.json`` ``levels`` (mean and interval, :func:`lab.analysis.stats.metric_ci`) and
``load.goodput_definition``, ``metrics.json``, and ``reports/summary.csv`` / ``summary.json`` /
``comparison.json`` (means, and the goodput speedup by the lab's current rule,
:func:`lab.analysis.load.goodput_speedup_launches`: one launch, so no verdict word), the
concurrency table and the open-loop sentences of ``comparison.json`` and ``summary.md``. The
``report.html`` and the figures are not redrawn (``goodput-recomputed.md`` says so).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.analysis.estimates import Estimate, Ratio  # noqa: E402
from lab.analysis.load import beats_sentence, beats_up_to, goodput_speedup_launches  # noqa: E402
from lab.measure.goodput import DEFINITION_VERSION, run_load_metrics  # noqa: E402
from lab.measure.records import measured_window_s  # noqa: E402
from lab.measure.request_record import RequestRecord  # noqa: E402

FOLDER = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16"
METRICS = ("goodput_req_s", "goodput_tok_s", "slo_attainment", "request_throughput_req_s")
SPEEDUP = "speedup_goodput_req_s"


def _records(path: Path) -> dict[tuple[str, int], list[RequestRecord]]:
    out: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            r = RequestRecord.from_json(json.loads(line))
            point = r.point or f"c{r.concurrency}"
            out[(point, int(r.repeat))].append(r)
    return out


def recompute(folder: Path = FOLDER) -> list[dict[str, Any]]:
    """One row per (mode, point, repeat): the committed and the recomputed load metrics.

    :raises FileNotFoundError: a mode folder without ``result.json``, ``runs.json`` or ``requests.jsonl``.
    """
    rows = []
    for mode_dir in sorted(p for p in (folder / "results").iterdir() if (p / "requests.jsonl").is_file()):
        result = json.loads((mode_dir / "result.json").read_text())
        slo = (result.get("load") or {}).get("slo")
        runs = {(r.get("point") or f"c{r['concurrency']}", int(r["repeat"])): r
                for r in json.loads((mode_dir / "runs.json").read_text())}
        for (point, repeat), recs in sorted(_records(mode_dir / "requests.jsonl").items()):
            old = runs.get((point, repeat)) or {}
            rate = next((r.request_rate for r in recs if r.request_rate), None)
            new = run_load_metrics(recs, measured_window_s(recs), slo, rate)
            rows.append({"mode": mode_dir.name, "point": point, "repeat": repeat, "engine": result.get("engine"),
                         "requests": len(recs), "request_rate": rate,
                         **{f"old_{m}": old.get(m) for m in METRICS}, **{m: new[m] for m in METRICS}})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    out = ["| mode | point | repeat | goodput req/s committed | goodput req/s recomputed | request throughput req/s | SLO attainment |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        old = r["old_goodput_req_s"]
        out.append(f"| {r['mode']} | {r['point']} | {r['repeat']} | {'' if old is None else f'{old:.3f}'} | "
                   f"{r['goodput_req_s']:.3f} | {r['request_throughput_req_s']:.3f} | {r['slo_attainment']:.3f} |")
    return "\n".join(out)


def _speedups(rows: list[dict[str, Any]], baseline: str = "baseline") -> dict[tuple[str, str], Ratio]:
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["mode"], r["point"])].append(r)
    out = {}
    for (mode, point), rs in by.items():
        base = sorted(by.get((baseline, point), []), key=lambda r: r["repeat"])
        if mode == baseline or not base:
            continue
        rs = sorted(rs, key=lambda r: r["repeat"])
        same = [r["repeat"] for r in rs] == [r["repeat"] for r in base]
        n_req = max(r["requests"] for r in (*rs, *base))
        s = goodput_speedup_launches([[r["goodput_req_s"] for r in base]], [[r["goodput_req_s"] for r in rs]],
                                     paired=same, rel_resolution=1.0 / n_req)
        out[(mode, point)] = Ratio.from_dict(s)
    return out


def _estimates(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], Estimate]:
    vals: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["repeat"]):
        for m in METRICS:
            vals[(r["mode"], r["point"], m)].append(r[m])
    return {k: Estimate.of(k[2], v, keep_values=True) for k, v in vals.items()}


def apply(folder: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Write the recomputed values into the folder's files (module docstring); returns those written."""
    est, sp = _estimates(rows), _speedups(rows)
    written = []
    for mode_dir in sorted(p for p in (folder / "results").iterdir() if (p / "runs.json").is_file()):
        mode = mode_dir.name
        mine = {(r["point"], r["repeat"]): r for r in rows if r["mode"] == mode}
        runs = json.loads((mode_dir / "runs.json").read_text())
        for run in runs:
            new = mine.get((run.get("point") or f"c{run['concurrency']}", int(run["repeat"])))
            if new:
                run.update({m: new[m] for m in METRICS}, goodput_definition=DEFINITION_VERSION)
        (mode_dir / "runs.json").write_text(json.dumps(runs, indent=2) + "\n")
        result = json.loads((mode_dir / "result.json").read_text())
        for point, level in (result.get("levels") or {}).items():
            for m in METRICS:
                if (mode, point, m) in est and m in level:
                    level[m] = est[(mode, point, m)].to_dict()
        result.setdefault("load", {})["goodput_definition"] = DEFINITION_VERSION
        (mode_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        metrics = json.loads((mode_dir / "metrics.json").read_text())
        first = min((p for p in (result.get("levels") or {}) if p.startswith("c")), default=None,
                    key=lambda p: int(p[1:]) if p[1:].isdigit() else 1 << 30)
        for m in METRICS:
            for (md, point, mm), e in est.items():
                if md == mode and mm == m and f"{point}.{m}" in metrics:
                    metrics[f"{point}.{m}"] = e.mean
            if m in metrics and first and (mode, first, m) in est:  # the headline: the lowest closed-loop point
                metrics[m] = est[(mode, first, m)].mean
        metrics["goodput_definition"] = DEFINITION_VERSION
        (mode_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        written += [mode_dir / "runs.json", mode_dir / "result.json", mode_dir / "metrics.json"]
    rep = folder / "reports"
    for name in ("summary.csv", "concurrency.csv"):
        if not (rep / name).is_file():
            continue
        with open(rep / name, newline="") as f:
            rd = csv.DictReader(f)
            fields, table = list(rd.fieldnames or []), list(rd)
        extras = ["goodput_definition"] + (["speedup_goodput_req_s_scope"] if SPEEDUP in fields else [])
        fields += [x for x in extras if x not in fields]
        for row in table:
            for m in METRICS:
                e = est.get((row["mode"], row["point"], m))
                if e is not None and f"{m}_mean" in row:
                    row.update({k: v for k, v in e.columns(m).items() if k in row})
            r = sp.get((row["mode"], row["point"]))
            if r is not None and SPEEDUP in fields:
                row.update({k: "" if v is None else v for k, v in r.columns(SPEEDUP).items() if k in fields})
            row["goodput_definition"] = DEFINITION_VERSION
        with open(rep / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(table)
        written.append(rep / name)
    if (rep / "summary.json").is_file():
        flat = json.loads((rep / "summary.json").read_text())
        for (mode, point, m), e in est.items():
            if f"{mode}.{point}.{m}" in flat:
                flat[f"{mode}.{point}.{m}"] = e.mean
        for (mode, point), r in sp.items():
            for k, v in r.flat(f"{mode}.{point}.{SPEEDUP}").items():
                flat[k] = v
            for k in (f"{mode}.{point}.{SPEEDUP}_ci95_lo", f"{mode}.{point}.{SPEEDUP}_ci95_hi"):
                if k in flat and k not in r.flat(f"{mode}.{point}.{SPEEDUP}"):
                    del flat[k]
        flat["goodput_definition"] = DEFINITION_VERSION
        (rep / "summary.json").write_text(json.dumps(flat, indent=2) + "\n")
        written.append(rep / "summary.json")
    if (rep / "comparison.json").is_file():
        comp = json.loads((rep / "comparison.json").read_text())
        for mode, points in (comp.get("modes") or {}).items():
            for point, entry in points.items():
                for m in METRICS:
                    if (mode, point, m) in est and m in entry:
                        entry[m] = {k: v for k, v in est[(mode, point, m)].to_dict().items() if k != "values"}
                if (mode, point) in sp and SPEEDUP in entry:
                    entry[SPEEDUP] = sp[(mode, point)].to_dict()
        load = comp.get("load")
        if load:
            load["goodput_definition"] = DEFINITION_VERSION
            by_mode: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
            rate_of = {(r["mode"], r["point"]): r["request_rate"] for r in rows if r["request_rate"]}
            for (mode, point), r in sp.items():
                if (mode, point) in rate_of:
                    by_mode[mode][float(rate_of[(mode, point)])] = r.to_dict()
            load["sentences"] = {m: beats_sentence(m, "baseline", v, load["slo"]) for m, v in by_mode.items()}
            load["beats"] = {m: beats_up_to({k: d["verdict"] for k, d in v.items()}) for m, v in by_mode.items()}
            md_path = rep / "summary.md"
            if md_path.is_file():  # the answer's open-loop sentences follow
                lines = md_path.read_text().splitlines()
                for i, ln in enumerate(lines):
                    for m, sentence in load["sentences"].items():
                        if ln.startswith(f"- {m} ") and "req/s" in ln:
                            lines[i] = f"- {sentence}"
                md_path.write_text("\n".join(lines) + "\n")
                written.append(md_path)
        (rep / "comparison.json").write_text(json.dumps(comp, indent=2) + "\n")
        written.append(rep / "comparison.json")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=FOLDER, help="a committed run folder with results/ and reports/")
    ap.add_argument("--apply", action="store_true", help="rewrite the folder's load metrics in place")
    a = ap.parse_args(argv)
    if not (a.folder / "results").is_dir():
        ap.error(f"{a.folder}/results: not found. Fix: pass a committed run folder (default {FOLDER})")
    rows = recompute(a.folder)
    sp = _speedups(rows)
    doc = {"source": f"python scripts/h200_goodput.py (from {a.folder.relative_to(ROOT)}/results/*/requests.jsonl)",
           "engine": sorted({r["engine"] for r in rows}), "goodput_definition": DEFINITION_VERSION, "rows": rows,
           "goodput_speedups": {f"{m}.{p}": r.to_dict() for (m, p), r in sorted(sp.items())}}
    (a.folder / "goodput-recomputed.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"# Goodput of the H200 run, recomputed (definition version {DEFINITION_VERSION})", "",
          f"`python scripts/h200_goodput.py{' --apply' if a.apply else ''}` from the raw request records "
          f"(`results/*/requests.jsonl`); engine {', '.join(doc['engine'])}. Goodput = good requests / the "
          "repeat's measured window (lab/measure/goodput.py). Committed = what runs.json held when this ran (run on the "
          "run's own files, before --apply: the values from before the redefinition; run again after it, the two agree). "
          "With --apply the folder's runs/result/metrics files, summary.csv/json, concurrency.csv, comparison.json and "
          "summary.md's open-loop sentences carry the recomputed values; report.html and the figures are from before.", "",
          _table(rows), "", "Goodput speedups over baseline (lab's current rule: one launch, so no verdict word):", ""]
    md += [f"- {m} {p}: {r.text()}" for (m, p), r in sorted(sp.items())]
    (a.folder / "goodput-recomputed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if a.apply:
        for p in apply(a.folder, rows):
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
