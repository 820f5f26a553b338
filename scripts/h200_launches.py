"""Launch-to-launch spread of real SGLang 0.5.16 on one H200 (the synthetic kshard model), from
the committed run in ``docs/benchmarks/h200-sglang-0.5.16-launches/``: two engine launches of
the baseline (``bench@baseline``, then ``bench_launch@2-baseline``), each 3 repeats of 8 prompts
x 64 tokens at concurrency 1.

Prints, per launch, the engine's startup time and decode tok/s / p50 ITL with the within-launch
95 % t-interval over repeats (:func:`lab.analysis.stats.mean_ci`), then the difference of the two
launch means and their coefficient of variation. Usage:

    python scripts/h200_launches.py            # Markdown tables (docs/benchmarks/h200-sglang-0.5.16-launches.md)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16-launches"
LAUNCHES = {1: RUN / "results" / "baseline", 2: RUN / "results" / "launches" / "2" / "baseline"}
METRICS = (("decode_tok_s", "decode tok/s", 1), ("p50_itl_ms", "p50 ITL ms", 3))


def main() -> int:
    """Print the tables; 1 when the committed run is missing or not ``ok``."""
    from lab.analysis.stats import mean_ci

    rows, means = [], {m: [] for m, _, _ in METRICS}
    for n, d in LAUNCHES.items():
        try:
            result = json.loads((d / "result.json").read_text())
            runs = [r for r in json.loads((d / "runs.json").read_text()) if r.get("point") == "c1"]
        except OSError as exc:
            print(f"error: {exc}. Fix: run from a checkout that has {RUN.relative_to(ROOT)}", file=sys.stderr)
            return 1
        if result.get("status") != "ok" or result.get("launch") != n:
            print(f"error: {d}: status {result.get('status')}, launch {result.get('launch')}", file=sys.stderr)
            return 1
        cells = [f"{n}", f"{result['startup_s']:.1f}", str(len(runs))]
        for m, _, digits in METRICS:
            mean, lo, hi = mean_ci([r[m] for r in runs])
            means[m].append(mean)
            cells.append(f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] (+-{(hi - lo) / 2 / mean * 100:.2f} %)")
        rows.append(cells)
    print("| launch | startup s | repeats | " + " | ".join(f"{label} [95 % CI within the launch]" for _, label, _ in METRICS) + " |")
    print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in METRICS) + " |")
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    print()
    print("| metric | launch 2 vs launch 1 | launch-to-launch CV (2 launches) |")
    print("| --- | ---: | ---: |")
    for m, label, _ in METRICS:
        a, b = means[m]
        cv = statistics.stdev(means[m]) / statistics.fmean(means[m]) * 100
        print(f"| {label} | {(b - a) / a * 100:+.3f} % | {cv:.3f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
