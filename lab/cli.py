"""The ``lab`` command: small verbs around the pipeline.

- ``lab log results/<mode>`` (or ``reports``, ``results/physics``): log a run to MLflow again
  from the run record beside its results, after the tracking store failed during the stage
  (:mod:`lab.tracking.relog`; the results on disk are the source of truth).
- ``lab stage {bench --mode NAME,compare,physics} [--params FILE]``: same as ``python -m
  lab.pipeline.<stage>_stage ...`` (what dvc.yaml runs).
- ``lab command --mode M [--node-rank N]``: print a mode's launch line (e.g. to start
  the other nodes of a multi-node server by hand).
- ``lab doctor [--engine sglang] [--mode M]``: preflight table and verdict
  (:mod:`lab.engine.preflight`); exit code 0 when ready, 1 when a check failed.
- ``lab summary [--reports DIR]``: the last comparison as a Markdown table (means, 95 %
  intervals, speedups and verdicts), read from ``reports/summary.csv``.
- ``lab ui [--port 5000]``: ``mlflow ui`` for the lab's store on 127.0.0.1, printing the URL
  that opens the experiment on its runs table (:mod:`lab.tracking.mlflow_view`); a signal
  stops its whole process group.
- ``lab launches N``: set ``bench.launches`` (and the list of the ``bench_launch@<n>-<mode>``
  stages) in params.yaml (:mod:`lab.pipeline.launch_plan`).
- ``lab sweep [--clear] [--repro | --exp [-S k=v ...] [--queue]] [--order win|uncertain
  --calibration FILE]``: expand params.yaml's ``sweep`` section into generated modes
  (:mod:`lab.pipeline.sweep`, docs/sweeps.md), optionally ordered by prediction
  (:mod:`lab.calibrate.order`: with ``--repro`` the bench stages then run one by one in that
  order), then optionally run ``dvc repro`` or ``dvc exp run`` in one command.
- ``lab calibrate [results/<mode> ...]`` / ``lab predict``: fit an emulator cost profile to
  measured results and predict unmeasured configurations (:mod:`lab.calibrate.calibrate_cli`).
- ``lab tune``: from a calibration, the ``num_steps`` per concurrency and context length, as an
  SGLang ``--speculative-adaptive-config`` and params.yaml modes; ``--measured`` checks them
  (:mod:`lab.calibrate.tune_cli`).
- ``lab fleet {submit,status,collect,cancel}``: the stages as Slurm jobs (:mod:`lab.fleet.fleet_cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main", "relog", "doctor", "print_command", "print_summary", "ui"]


def relog(results_dir: Path, params_file: str | None = None) -> str:
    """Log the MLflow run recorded in ``results_dir`` again (:func:`lab.tracking.relog.relog`:
    ``results/<mode>``, ``reports``, ``results/physics``); returns the run id. Prints what it did.

    :raises FileNotFoundError: no run record there (the message names the fix).
    :raises lab.tracking.runs.TrackingError: MLflow still unreachable, or ``MLFLOW_TRACKING_URI``
        names another store than params.yaml.
    :raises lab.config.ParamsError: the params file is invalid.
    :raises ValueError: the record there is not a run record.
    """
    from lab.config import load_params
    from lab.redact import redact_url
    from lab.tracking.relog import relog as replay
    from lab.tracking.tracker import Tracker

    tracker = Tracker.from_params(load_params(params_file))
    if not results_dir.is_dir():
        raise FileNotFoundError(f"{results_dir} is not a directory. Fix: pass the directory of a run's results, "
                                "e.g. lab log results/baseline (or reports, results/physics)")
    run_id, what = replay(tracker, results_dir)
    print(f"[lab] {results_dir}: MLflow run {run_id} {what}" + (" (nothing changed)" if what == "already logged" else
                                                                 f" at {redact_url(tracker.uri)}"))
    return run_id


def print_command(params_file: str | None, mode: str, node_rank: int | None, engine: str | None = None) -> int:
    """Print the launch line of ``mode`` (with ``node_rank`` and ``engine`` overridden when
    given, e.g. ``--engine sglang`` on a laptop whose params.yaml says emulator); 0, or 2 on
    bad params."""
    from lab.config import ParamsError, load_params
    from lab.engine.command import build_server_command

    try:
        overrides = {"engine": engine} if engine else {}
        params = load_params(params_file, overrides=overrides or None)
        if node_rank is not None:
            params = load_params(params_file, overrides={
                **overrides, "server": {**params.server.model_dump(), "node_rank": node_rank}})
        print(build_server_command(params, mode, python="python").display())
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def doctor(params_file: str | None, engine: str | None, modes: list[str] | None, python: str | None) -> int:
    """Print the preflight table for ``engine`` (default: params.yaml's); 0 if ready else 1."""
    from lab.config import ParamsError, load_params
    from lab.engine.preflight import format_table, run_preflight

    try:
        params = load_params(params_file, overrides={"engine": engine} if engine else None)
        for m in modes or []:
            params.mode(m)
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = run_preflight(params, modes, python=python or sys.executable)
    print(format_table(report))
    return 0 if report.ok else 1


def print_summary(reports_dir: Path) -> int:
    """Print ``reports_dir``'s comparison: first, when the results no longer match params.yaml or
    the code (:func:`lab.pipeline.freshness.stale_lines`, DVC's status of the project holding
    ``reports_dir``), which stages are stale and the command that refreshes them; then the answer
    (:mod:`lab.report.answer`: speedups with intervals and verdicts, accept length, verify ms, each
    warning once naming its modes, where report.html is), then the full table; 0, or 2 when the
    compare stage has not written it yet (the message says to run ``dvc repro``)."""
    from lab.pipeline.freshness import stale_lines
    from lab.report.answer import answer_text
    from lab.report.tables import read_summary_rows, summary_markdown

    try:
        rows = read_summary_rows(reports_dir / "summary.csv")
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    comp_path = reports_dir / "comparison.json"
    comp = json.loads(comp_path.read_text()) if comp_path.is_file() else {}
    project = Path(reports_dir).resolve().parent
    if (project / "dvc.yaml").is_file():
        stale = stale_lines(project)
        if stale:
            print("\n".join(stale) + "\n")
    print(answer_text(comp, reports_dir / "report.html") + "\n")
    print(summary_markdown(rows, comp.get("baseline")))
    return 0


def ui(params_file: str | None, port: int | None = None) -> int:
    """``lab ui``: MLflow's UI for the lab's tracking store on 127.0.0.1, opening on the runs table.

    Prints the experiment's runs-table URL (:func:`lab.tracking.mlflow_view.runs_table_url`: MLflow
    3.17 otherwise opens on its GenAI overview), with the lab's view of it (the headline metric,
    key params and provenance tags as columns: :func:`lab.tracking.runs_view.install_runs_view`),
    then runs ``mlflow ui`` in its own process group; SIGINT (Ctrl-C), SIGTERM or SIGHUP stop
    that whole group (``mlflow ui`` starts a server with worker processes: SIGTERM, then SIGKILL
    after 10 s). ``port`` None: a free one (:func:`lab.engine.ports.free_port`: on a shared machine
    another checkout's UI may hold 5000, and its URL would show that checkout's runs). Returns 0
    when stopped by a signal; 2 on bad params / a remote tracking server / a conflicting
    ``MLFLOW_TRACKING_URI`` / a port already taken; MLflow's own exit code (1 if it was 0) when it
    exits by itself (it cannot bind, or fails to start), with the reason on stderr.
    """
    import os
    import signal
    import subprocess

    from lab.config import ParamsError, load_params
    from lab.engine.process import _kill_group  # the lab's process-group stop (SIGTERM, grace, SIGKILL)
    from lab.tracking.mlflow_view import runs_table_url
    from lab.tracking.runs import TrackingError
    from lab.tracking.runs_view import install_runs_view
    from lab.tracking.tracker import Tracker

    try:
        params = load_params(params_file)
        tracker = Tracker.from_params(params)
    except (ParamsError, TrackingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    uri = tracker.uri
    if uri.startswith(("http://", "https://")):
        print(f"The tracking store is a server already: open {uri}/#/experiments?workflowType=machine_learning")
        return 2
    try:
        exp_id = tracker.experiment_id(create=False)
    except TrackingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import socket

    from lab.engine.ports import free_port

    if port is None:
        port = free_port()
    with socket.socket() as sock:  # MLflow's own bind error comes after the URL is printed
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            print(f"error: cannot serve the MLflow UI on 127.0.0.1:{port}: {exc.strerror or exc} (another "
                  f"checkout's `lab ui` or another server holds it; its URL would show that server's runs). "
                  f"Fix: `lab ui` without --port takes a free port, or choose another --port", file=sys.stderr)
            return 2
    base = f"http://127.0.0.1:{port}"
    view = None
    if exp_id:
        try:  # the runs table opens with the headline metric, key params and provenance tags as columns
            view = install_runs_view(tracker.client, exp_id, params)
        except TrackingError as exc:
            print(f"[lab] warning: {exc}; the runs table opens with MLflow's default columns", file=sys.stderr)
    url = runs_table_url(base, exp_id, view) if exp_id else f"{base}/#/experiments?workflowType=machine_learning"
    print(f"[lab] MLflow UI for {uri}\n[lab] open: {url}", flush=True)
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    cmd = [mlflow if os.path.exists(mlflow) else "mlflow", "ui", "--backend-store-uri", uri,
           "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, start_new_session=True)  # its own group: the signal handler stops all of it
    stopped: list[int] = []

    def stop(signum, frame) -> None:
        stopped.append(signum)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        return 0
    else:  # MLflow ends by itself only when it failed (a bind lost to a race, a bad store): say so
        print(f"error: the MLflow UI exited by itself (exit code {rc}) and no longer serves {base}; its "
              f"reason is in the lines above. Fix: if the port was taken, run `lab ui` without --port",
              file=sys.stderr)
        return rc or 1
    finally:
        for s in old:  # a second signal must not cut the group's stop short
            signal.signal(s, signal.SIG_IGN)
        _kill_group(proc.pid, grace_s=10.0)
        proc.wait()
        for s, h in old.items():
            signal.signal(s, h)
        if stopped:
            print(f"[lab] {signal.Signals(stopped[0]).name}: stopped the MLflow UI (process group {proc.pid})",
                  file=sys.stderr)


def sweep_cmd(args: argparse.Namespace) -> int:
    """``lab sweep``: write the generated modes, print them and the drop notes, optionally run DVC
    (``--repro`` as one pipeline invocation, :data:`lab.tracking.grouping.INVOCATION_ENV`: with
    ``--order`` the ordered benches and the rest land under one MLflow parent)."""
    import os
    import shutil
    import subprocess

    from lab.config import ParamsError, repo_root
    from lab.pipeline.sweep import write_modes

    path = Path(args.params) if args.params else repo_root() / "params.yaml"
    order = None
    try:
        if args.order and not args.clear:
            from lab.calibrate.calibrate_cli import sweep_order

            write_modes(path)  # the grid's modes first, so the prediction sees them
            order = sweep_order(args)
            print(f"[lab] sweep: ordered by prediction ({args.order}): {', '.join(order)}")
        modes, notes = write_modes(path, clear=args.clear, order=order)
    except (ParamsError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for n in notes:
        print(f"[lab] sweep: {n}")
    print(f"[lab] sweep: {'removed the generated modes' if args.clear else f'{len(modes)} modes written'} "
          f"in {path}: {', '.join(modes)}")
    if not (args.repro or args.exp):
        return 0
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    from lab.tracking.grouping import INVOCATION_ENV, invocation

    # --repro: one invocation for both DVC runs below (the ordered benches, then the rest), so one
    # MLflow parent; an experiment names its own (its DVC_EXP_NAME is in the parent's key)
    env = {**os.environ, INVOCATION_ENV: invocation()} if args.repro else None
    if args.repro and order:
        # DVC's order of independent stages is unspecified; --single-item runs targets in the order
        # given (treeverse/dvc PR #9675), so the likely winners (or the most uncertain) are measured first
        first = [dvc, "repro", "--single-item", "bench@baseline", *[f"bench@{m}" for m in order]]
        print(f"[lab] running: {' '.join(first)}", flush=True)
        rc = subprocess.run(first, cwd=path.parent, env=env).returncode
        if rc:
            return rc
    cmd = [dvc, "repro"] if args.repro else [dvc, "exp", "run", *(["--queue"] if args.queue else []),
                                             *[x for kv in args.set_param for x in ("-S", kv)]]
    print(f"[lab] running: {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, cwd=path.parent, env=env).returncode


def launches_cmd(args) -> int:
    """``lab launches N``: :func:`lab.pipeline.launch_plan.set_launches`, then the stage order DVC
    will run; 2 with the fix on bad input."""
    from lab.config import ParamsError, load_params, repo_root
    from lab.pipeline.launch_plan import interleaved_stages, set_launches

    path = Path(args.params) if args.params else repo_root() / "params.yaml"
    try:
        set_launches(path, args.n)
        modes = list(load_params(path).modes)
    except (ParamsError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    order = interleaved_stages(modes, args.n)
    print(f"[lab] launches: bench.launches = {args.n} in {path}; `dvc repro` runs {len(order)} bench stages, "
          f"modes interleaved: {', '.join(order)}")
    return 0


def stage_cmd(rest: list[str]) -> int:
    """``lab stage <stage> [args]``: run a stage's entry module as ``dvc.yaml`` does
    (:mod:`lab.pipeline.bench_stage`, :mod:`lab.pipeline.compare_stage`,
    :mod:`lab.pipeline.physics_stage`); 2 for an unknown stage."""
    import importlib

    stages = ("bench", "compare", "physics")
    if not rest or rest[0] not in stages:
        print(f"error: lab stage needs one of {', '.join(stages)}, e.g. lab stage bench --mode baseline",
              file=sys.stderr)
        return 2
    return importlib.import_module(f"lab.pipeline.{rest[0]}_stage").main(rest[1:])


def bundle_cmd(args) -> int:
    """``lab bundle``: :func:`lab.offline.bundle.build_bundle`; exit 2 with the fix on failure."""
    from lab.config import repo_root
    from lab.offline.bundle import DEFAULT_OMIT, DEFAULT_PART_MIB, BundleError, build_bundle

    try:
        build_bundle(args.out, lock_path=repo_root() / "uv.lock", sglang_version=args.sglang,
                     omit=tuple(args.omit) if args.omit is not None else DEFAULT_OMIT,
                     node_packages=args.node_packages, part_mib=args.part_mib or DEFAULT_PART_MIB,
                     wheel_cache=repo_root() / ".cache" / "offline" / "wheels")
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lab`` console script."""
    ap = argparse.ArgumentParser(prog="lab", description="eagle-verify-lab command line")
    sub = ap.add_subparsers(dest="cmd", required=True)
    log_help = "log a run to MLflow again from its record (results/<mode>, reports, results/physics)"
    p_log = sub.add_parser("log", help=log_help, description=(
        log_help + ": the run's mlflow_run.json (every param, metric, tag, artifact and its parent) is replayed "
        "into the same run when the store still has it, completing a half-logged run in place, else into a new "
        "one; a FINISHED run keeps what it has and gets only its missing recorded artifacts (lab/tracking/relog.py)"))
    p_log.add_argument("results_dir", type=Path, help="a stage's results folder holding mlflow_run.json")
    p_log.add_argument("--params", default=None, help="params file (default: <repo>/params.yaml)")
    p_stage = sub.add_parser("stage", help="run a pipeline stage (as dvc.yaml does)")
    p_stage.add_argument("rest", nargs=argparse.REMAINDER)
    p_doc = sub.add_parser("doctor", help="preflight checks: GPUs, SGLang, launch flags, weights, port, disk")
    from lab.engine.registry import engine_names

    p_doc.add_argument("--engine", choices=engine_names(), default=None,
                       help="check this engine instead of params.yaml's")
    p_doc.add_argument("--mode", action="append", default=None, help="check only this mode (repeatable)")
    p_doc.add_argument("--python", default=None, help="the Python that will run the server (default: this one)")
    p_doc.add_argument("--params", default=None)
    p_cmd = sub.add_parser("command", help="print a mode's engine launch line (secrets redacted)")
    p_cmd.add_argument("--mode", required=True)
    p_cmd.add_argument("--node-rank", type=int, default=None, help="override server.node_rank")
    p_cmd.add_argument("--engine", choices=engine_names(), default=None,
                       help="override params.yaml's engine (sglang: the real SGLang launch line)")
    p_cmd.add_argument("--params", default=None)
    p_la = sub.add_parser("launches", help="set bench.launches (fresh engine starts per mode, interleaved) "
                                           "and the bench_launch stages' list in params.yaml")
    p_la.add_argument("n", type=int, help="launches per mode (1: one launch, intervals within it)")
    p_la.add_argument("--params", default=None, help="params file (default <repo>/params.yaml)")
    p_sum = sub.add_parser("summary", help="print the last comparison as a table (reports/summary.csv)")
    p_sum.add_argument("--reports", type=Path, default=None, help="reports directory (default <repo>/reports)")
    p_ui = sub.add_parser("ui", help="MLflow UI on 127.0.0.1, opening the experiment's runs table")
    p_ui.add_argument("--port", type=int, default=None, help="default: a free port (a shared machine)")
    p_ui.add_argument("--params", default=None)
    p_sw = sub.add_parser("sweep", help="expand the sweep section into modes (docs/sweeps.md)")
    p_sw.add_argument("--params", default=None, help="params file (default <repo>/params.yaml)")
    p_sw.add_argument("--clear", action="store_true", help="remove the generated modes")
    p_sw.add_argument("--repro", action="store_true", help="then run `dvc repro`")
    p_sw.add_argument("--exp", action="store_true", help="then run `dvc exp run` (with -S / --queue)")
    p_sw.add_argument("-S", "--set-param", action="append", default=[], help="passed to dvc exp run -S")
    p_sw.add_argument("--queue", action="store_true", help="with --exp: queue instead of running")
    p_sw.add_argument("--order", choices=["win", "uncertain"], default=None,
                      help="write (and with --repro run) the generated modes in predicted order (needs --calibration)")
    p_sw.add_argument("--calibration", type=Path, default=None,
                      help="calibration.json for --order (default <repo>/reports/calibration/calibration.json)")
    p_sw.add_argument("--point", default=None, help="with --order: rank at this point (default the lowest concurrency)")
    p_sw.add_argument("--draws", type=int, default=100, help="with --order: posterior draws")
    from lab.calibrate.calibrate_cli import add_calibrate_args, add_predict_args

    add_calibrate_args(sub.add_parser("calibrate", help="fit an emulator cost profile to measured results"))
    add_predict_args(sub.add_parser("predict", help="predict and rank unmeasured configurations from a calibration"))
    from lab.calibrate.tune_cli import add_tune_args

    add_tune_args(sub.add_parser("tune", help="recommend num_steps per concurrency and context from a calibration, "
                                              "as an SGLang adaptive tier table and params.yaml modes"))
    p_bun = sub.add_parser("bundle", help="build the offline bundle for an air-gapped GPU node (docs/gpu-node.md)")
    p_bun.add_argument("--out", default="dist/node-bundle", help="folder for bundle.json and its parts")
    p_bun.add_argument("--sglang", default="0.5.16", help="SGLang serving set (lab/offline/sglang-<v>.toml)")
    p_bun.add_argument("--node-packages", default=None,
                       help="the node's `pip list --format=freeze`: what it has is left out")
    p_bun.add_argument("--omit", action="append", default=None,
                       help="leave out this package and what only it needs (default: jupyterlab)")
    p_bun.add_argument("--part-mib", type=float, default=None, help="largest part in MiB (default 56)")
    sub.add_parser("capture", help="record an engine's raw surfaces per mode (lab/pipeline/capture.py)", add_help=False)
    sub.add_parser("fleet", help="the stages as Slurm jobs: submit, status, collect, cancel (lab fleet -h)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fleet"]:  # its own parser (lab.fleet.fleet_cli), `lab fleet -h` included
        from lab.fleet.fleet_cli import main as fleet_main

        return fleet_main(argv[1:], summary=print_summary)
    if argv[:1] == ["capture"]:
        from lab.pipeline.capture import main as capture_main

        return capture_main(argv[1:])
    args = ap.parse_args(argv)
    if args.cmd in ("calibrate", "predict"):
        from lab.calibrate.calibrate_cli import calibrate_main, predict_main

        return calibrate_main(args) if args.cmd == "calibrate" else predict_main(args)
    if args.cmd == "tune":
        from lab.calibrate.tune_cli import tune_main

        return tune_main(args)
    if args.cmd == "bundle":
        return bundle_cmd(args)
    if args.cmd == "command":
        return print_command(args.params, args.mode, args.node_rank, args.engine)
    if args.cmd == "doctor":
        return doctor(args.params, args.engine, args.mode, args.python)
    if args.cmd == "sweep":
        return sweep_cmd(args)
    if args.cmd == "launches":
        return launches_cmd(args)
    if args.cmd == "ui":
        return ui(args.params, args.port)
    if args.cmd == "summary":
        from lab.config import repo_root

        try:
            return print_summary(args.reports or repo_root() / "reports")
        except BrokenPipeError:  # `lab summary | head`: the reader left; nothing is lost
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    if args.cmd == "stage":
        return stage_cmd(args.rest)
    from lab.config import ParamsError
    from lab.tracking.runs import TrackingError

    try:
        relog(args.results_dir, args.params)
    except (FileNotFoundError, ValueError, TrackingError, ParamsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
