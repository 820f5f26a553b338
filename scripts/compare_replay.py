"""Regenerate the compare stage's files from committed results into a folder, MLflow off.

``python scripts/compare_replay.py OUT_DIR [--bench docs/benchmarks/h200-sglang-0.5.16] [--modes a,b]``
calls :func:`lab.pipeline.compare.run_compare` with the params of ``<bench>/params.yaml``
(:func:`lab.config.load_params`) and that file's modes (or ``--modes``, e.g. ``baseline`` for
``docs/benchmarks/h200-sglang-0.5.16-launches``, which holds that mode's launches only), on ``<bench>/results``, writing every
file of the compare stage (``comparison.json``, ``summary.json``, ``summary.csv``, ``summary.md``,
``report.html``, ``headline/``, the CSVs and figures) under ``OUT_DIR`` and logging no MLflow run
(``track=False``). Nothing under ``<bench>`` is written.

Use it to check that a refactor of the compare stage leaves its outputs identical: run it before
and after, then ``diff -r`` the two folders (the figures' PNG bytes aside).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.config import load_params  # noqa: E402
from lab.pipeline.compare import run_compare  # noqa: E402

DEFAULT_BENCH = "docs/benchmarks/h200-sglang-0.5.16"


def main(argv: list[str] | None = None) -> int:
    """Parse ``OUT_DIR [--bench DIR] [--modes a,b]``, run the compare stage into ``OUT_DIR``; 0 on success.

    :raises lab.analysis.comparison.CompareError: a mode's committed results are missing or failed.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="folder for the compare stage's files (created)")
    ap.add_argument("--bench", type=Path, default=Path(DEFAULT_BENCH),
                    help=f"folder holding params.yaml and results/ (default {DEFAULT_BENCH})")
    ap.add_argument("--modes", help="comma-separated modes to compare (default: every mode of params.yaml)")
    args = ap.parse_args(argv)
    bench = args.bench if args.bench.is_absolute() else ROOT / args.bench
    out = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    params = load_params(bench / "params.yaml")
    modes = args.modes.split(",") if args.modes else list(params.modes)
    run_compare(params, modes, results_dir=bench / "results", reports_dir=out, track=False)
    print(f"compare stage files of {bench.relative_to(ROOT) if bench.is_relative_to(ROOT) else bench} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
