"""The ``lab`` command: small verbs around the pipeline.

- ``lab log results/<mode>``: log a mode's results to MLflow again (after the tracking
  server was down during the run; the results on disk are the source of truth).
- ``lab stage ...``: same as ``python -m lab.stage`` (what dvc.yaml runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main", "relog"]


def relog(results_dir: Path, params_file: str | None = None) -> str:
    """Create an MLflow run from ``results_dir/result.json`` and its artifacts; returns the run id.

    :raises FileNotFoundError: no result.json there (run the stage first).
    :raises lab.tracking.TrackingError: MLflow still unreachable.
    """
    from lab.bench import _finish_tracking
    from lab.config import load_params
    from lab.tracking import flatten_params, open_run, run_tags

    result_path = results_dir / "result.json"
    if not result_path.is_file():
        raise FileNotFoundError(f"{result_path} not found. Fix: run `dvc repro bench@{results_dir.name}` first")
    result = json.loads(result_path.read_text())
    params = load_params(params_file)
    mode = result["mode"]
    run = open_run(params, run_name=f"{mode} | {result['engine']} | relogged",
                   tags={**run_tags(params, mode=mode, engine_version=result.get("engine_version")),
                         "relogged_from": str(results_dir)})
    run.log_params(flatten_params({"effective": result.get("effective_config") or {}}))
    _finish_tracking(run, results_dir, result, "FINISHED" if result["status"] == "ok" else "FAILED", print)
    run.log_artifact(results_dir / "bench.ipynb")
    return run.run_id


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lab`` console script."""
    ap = argparse.ArgumentParser(prog="lab", description="eagle-verify-lab command line")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_log = sub.add_parser("log", help="log results/<mode> to MLflow again")
    p_log.add_argument("results_dir", type=Path)
    p_log.add_argument("--params", default=None)
    p_stage = sub.add_parser("stage", help="run a pipeline stage (as dvc.yaml does)")
    p_stage.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.cmd == "stage":
        from lab.stage import main as stage_main

        return stage_main(args.rest)
    from lab.tracking import TrackingError

    try:
        run_id = relog(args.results_dir, args.params)
    except (FileNotFoundError, TrackingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[lab] logged {args.results_dir} as MLflow run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
