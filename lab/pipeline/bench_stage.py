"""DVC entry point of the ``bench@<mode>`` stages: ``python -m lab.pipeline.bench_stage --mode <name>``,
and of ``bench_launch@<n>-<mode>`` (launch ``n`` of ``bench.launches``): the same with ``--launch <n>``.

Imports only what one mode's benchmark runs (its preflight, the engine command and process,
the runner in :mod:`lab.pipeline.stage`); the notebook ``notebooks/bench.ipynb`` imports the
rest (:mod:`lab.pipeline.bench`). ``dvc.yaml`` lists exactly that code as the stage's deps,
checked by ``tests/unit/test_dvc_deps.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.config import LabParams, ParamsError, launch_results_dir
from lab.config.paths import LAUNCH_STAGE
from lab.pipeline.stage import PreflightFailed, Stage, stage_main

__all__ = ["bench_stage", "main", "MODE_FILES", "mode_result_complete", "check_inputs_tracked"]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench_stage(params: LabParams, mode: str, launch: int = 1) -> Stage:
    """The ``bench@<mode>`` stage (launch 1, results in ``results/<mode>``) or
    ``bench_launch@<n>-<mode>`` (launch ``n`` of ``bench.launches``, results in
    ``results/launches/<n>/<mode>``: :func:`lab.config.launch_results_dir`): notebook ``bench``
    with the mode's params.

    :raises ParamsError: unknown mode, or a launch outside 1..``bench.launches``.
    """
    slice_ = params.mode(mode).model_dump(mode="json")
    if not 1 <= launch <= params.bench.launches:
        raise ParamsError(f"--launch {launch}: bench.launches is {params.bench.launches}. Fix: pass a launch in "
                          f"1..{params.bench.launches}, or raise bench.launches (`lab launches N`)")
    results_dir = launch_results_dir(mode, launch)

    def preflight(params: LabParams, root: Path, out_dir: Path) -> None:
        """Seconds-long checks before papermill starts a kernel (issue 11: a stage that cannot
        start fails fast, shows the short table, deletes nothing and leaves no MLflow run):
        :func:`lab.engine.preflight.run_preflight` without the SGLang argv parse (the
        notebook's own preflight does it): port, disk, dataset, emulator profile; with
        ``engine: sglang`` also GPUs, SGLang importable and the weights; then every file a
        param points at is a DVC dependency (:func:`check_inputs_tracked`).

        :raises PreflightFailed: with the table.
        """
        from lab.engine.command import build_server_command
        from lab.engine.preflight import format_table, run_preflight
        from lab.engine.process import stop_stale_servers

        stop_stale_servers(log=_log)  # ours would hold the port
        python = build_server_command(params, mode).argv[0]
        report = run_preflight(params, [mode], python=python, results_dir=out_dir, check_argv=False)
        if not report.ok:
            raise PreflightFailed(f"stage bench {mode}: preflight failed before any engine started; "
                                  f"nothing was deleted ({out_dir} keeps its previous results)\n"
                                  + format_table(report))
        check_inputs_tracked(params, root, mode)

    def cleanup() -> None:
        # A kernel killed hard ran no `finally`: stop the engine group it left (its owner,
        # the kernel, is dead), saying so.
        from lab.engine.process import stop_stale_servers

        stop_stale_servers(log=_log)

    return Stage(dvc_name="bench" if launch == 1 else LAUNCH_STAGE, notebook="bench", results_dir=results_dir,
                 parameters={"mode_name": mode, "mode": slice_, "launch": launch},
                 complete=mode_result_complete, owned=MODE_FILES,
                 preflight=preflight, cleanup=cleanup)


def check_inputs_tracked(params: LabParams, root: Path, mode: str) -> None:
    """Refuse a file a param points at (:func:`lab.inputs.param_files`: the emulator profile,
    the dataset, a file in ``server.extra_args`` / ``server.env``) that lies outside the bench
    stage's ``dvc.yaml`` dependencies: DVC would not see it change, so an edit would neither
    show in ``dvc status`` nor re-run the stage.

    :raises PreflightFailed: naming the param, the file, the dependencies and the fix.
    """
    from lab.inputs import outside_deps, param_files
    from lab.pipeline.stage import stage_deps

    deps = stage_deps(root, "bench")
    outside = outside_deps(param_files(params, root), root, deps)
    if outside:
        dirs = ", ".join(d + "/" for d in deps if (root / d).is_dir())
        listed = "; ".join(f"{k} = {p}" for k, p in outside.items())
        k, p = next(iter(outside.items()))
        raise PreflightFailed(
            f"stage bench {mode}: {listed}: outside the bench stage's DVC dependencies ({dirs} ...), so an edit of "
            f"the file would not show in `dvc status` nor re-run the stage. Fix: move it under data/ "
            f"(mv {p} data/{p.name}) and set {k} to data/{p.name}; nothing was started or deleted")


#: What a bench stage writes in ``results/<mode>/`` (``dataset.jsonl``: a Hugging Face set's
#: loaded prompts for the emulator; ``profile/``: the ``bench.profile`` trace).
MODE_FILES = ("metrics.json", "result.json", "runs.json", "requests.jsonl", "server.log", "ground_truth.jsonl",
              "bench.ipynb", "mlflow_run.json", "dataset.jsonl", "environment", "profile")


def mode_result_complete(work: Path) -> bool:
    """True when ``work/result.json`` says ``status: ok``: every point measured, aggregated and
    written (``lab.tracking.record.record`` writes it before logging to MLflow)."""
    import json

    try:
        return json.loads((work / "result.json").read_text()).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m lab.pipeline.bench_stage --mode NAME [--launch N] [--params FILE]``; exit code as
    :func:`lab.pipeline.stage.stage_main`."""
    ap = argparse.ArgumentParser(prog="python -m lab.pipeline.bench_stage", description="run the bench@<mode> (or bench_launch@<n>-<mode>) DVC stage (validate params, preflight, notebook)")
    ap.add_argument("--mode", required=True, help="mode name from params.yaml")
    ap.add_argument("--launch", type=int, default=1, help="which of bench.launches (default 1: results/<mode>)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    where = f"bench {args.mode}" + (f" launch {args.launch}" if args.launch != 1 else "")
    return stage_main(where, lambda params: bench_stage(params, args.mode, args.launch), args.params)


if __name__ == "__main__":
    sys.exit(main())
