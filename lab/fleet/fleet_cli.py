"""``lab fleet``: the pipeline's stages as Slurm jobs (README, "Many nodes").

- ``lab fleet submit [--partition P] [--account A] [--qos Q] [--time HH:MM:SS]
  [--cpus-per-task N] [--mem M] [--share] [--physics-gpus N] [--export NAME]...
  [--sbatch-arg ARG]... [--setup LINE]... [--container-image IMG [--container-mounts SRC:DST]...]
  [--work-dir DIR]``: submit every stage ``dvc repro`` would run that
  is not done or queued yet (:func:`lab.fleet.head.submit`);
- ``lab fleet status [--json] [--wait [--timeout S]]``: each stage's job, state, node and log;
  with ``--wait`` until no job of the sweep runs (exit 0 when every stage is done, else 1);
- ``lab fleet collect``: restore every stage here from the shared run cache (one ``dvc.lock``,
  the report), then print the answer as ``lab summary`` does;
- ``lab fleet cancel``: ``scancel`` the sweep's jobs that have not ended;
- ``lab fleet log``: after ``collect``, log every stage's MLflow run the tracking server
  missed (an outage during the sweep), and end the sweep's parent.

``status``, ``collect`` and ``cancel`` act on the sweep of the checkout's commit in the work
dir (default ``.cache/fleet``), or on ``--sweep DIR``. Exit codes: 0 ok, 1 a stage failed or is
missing (``status --wait``) or the restore failed, 2 a check failed (message with the fix).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

__all__ = ["main"]


def _table(rows) -> str:
    head = ("stage", "job", "state", "node", "log")
    lines = [(r.stage, r.job_id or "-", r.state + (f" ({r.reason})" if r.reason and r.reason != "None" else ""),
              r.node or "-", r.log or "-") for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *lines])


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="lab fleet", description="the pipeline's stages as Slurm jobs")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_sub = sub.add_parser("submit", help="submit the stages that are missing")
    p_sub.add_argument("--partition")
    p_sub.add_argument("--account")
    p_sub.add_argument("--qos")
    p_sub.add_argument("--time", help="wall-clock limit of each job, HH:MM:SS (default 04:00:00 for a GPU "
                                      "bench job, else 01:00:00)")
    p_sub.add_argument("--cpus-per-task", type=int, default=2, help="CPUs of a job that takes no whole node")
    p_sub.add_argument("--mem", default="4G", help="memory of a job that takes no whole node")
    p_sub.add_argument("--share", action="store_true", help="GPU bench jobs take their GPUs, not whole nodes")
    p_sub.add_argument("--physics-gpus", type=int, default=None,
                       help="GPUs of the physics job (default physics.tp with engine sglang, else 0)")
    p_sub.add_argument("--export", action="append", default=[], metavar="NAME",
                       help="one more environment variable a job takes from this shell, by name")
    p_sub.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="extra sbatch argument for every job, e.g. --sbatch-arg=--constraint=h200")
    p_sub.add_argument("--setup", action="append", default=[], metavar="LINE",
                       help="a shell line every job runs first on its node, e.g. --setup 'module load cuda/12.4' "
                            "(written into the job script: never a secret)")
    p_sub.add_argument("--container-image", default=None, metavar="IMG",
                       help="run each job inside this image (srun --container-image, pyxis/enroot)")
    p_sub.add_argument("--container-mounts", action="append", default=[], metavar="SRC:DST",
                       help="more container mounts (the checkout, sweep dir and DVC cache are mounted already)")
    for p in (p_sub,):
        p.add_argument("--work-dir", type=Path, default=None, help="sweeps live here (default .cache/fleet)")
    for name, help_ in (("status", "each stage's job and state"), ("collect", "restore every stage here"),
                        ("cancel", "scancel the sweep's jobs"),
                        ("log", "after collect: log the runs a tracking-server outage missed")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--sweep", type=Path, default=None, help="a sweep directory (default: this commit's)")
        p.add_argument("--work-dir", type=Path, default=None, help="sweeps live here (default .cache/fleet)")
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the rows as JSON")
            p.add_argument("--wait", action="store_true", help="until no job of the sweep runs")
            p.add_argument("--timeout", type=float, default=None, help="with --wait: give up after S seconds")
            p.add_argument("--interval", type=float, default=10.0, help="with --wait: seconds between looks")
    return ap


def _status(sweep, args) -> int:
    from lab.fleet.head import status
    from lab.fleet.fleet_sweep import DONE

    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:
        rows = status(sweep, log=lambda m: print(m, file=sys.stderr))
        if not args.wait or not any(r.live for r in rows) or (deadline and time.monotonic() > deadline):
            break
        time.sleep(args.interval)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"{sweep.id}  commit {sweep.data['commit'][:12]}  MLflow parent {sweep.data.get('parent_run_id')} "
              f"at {sweep.data['tracking_uri']}")
        print(_table(rows))
    if args.wait:
        return 0 if all(r.state == DONE for r in rows) else 1
    return 0


def main(argv: list[str] | None = None, summary=None) -> int:
    """``lab fleet ...`` (module docstring).

    :param summary: called with the reports directory after a collect (``lab summary``'s
        printer, handed in by the ``lab`` command so that this package imports no pipeline CLI).
    """
    from lab.config import ParamsError, repo_root
    from lab.fleet.head import FleetError, cancel, collect, find_sweep, log_sweep, submit
    from lab.fleet.script import Options
    from lab.fleet.slurm import SlurmError
    from lab.tracking.runs import TrackingError

    args = _parser().parse_args(argv)
    root = repo_root()
    try:
        if args.cmd == "submit":
            opts = Options(partition=args.partition, account=args.account, qos=args.qos, time=args.time,
                           cpus_per_task=args.cpus_per_task, mem=args.mem, share=args.share,
                           physics_gpus=args.physics_gpus, export=args.export, sbatch_args=args.sbatch_arg,
                           setup=args.setup, container_image=args.container_image,
                           container_mounts=[m for arg in args.container_mounts for m in arg.split(",") if m])
            submit(root, opts, args.work_dir)
            return 0
        sweep = find_sweep(root, args.sweep, args.work_dir)
        if args.cmd == "status":
            return _status(sweep, args)
        if args.cmd == "cancel":
            cancel(sweep)
            return 0
        if args.cmd == "log":
            log_sweep(root, sweep)
            return 0
        rc = collect(root, sweep)
        if rc == 0 and summary is not None:
            summary(root / "reports")
        return 1 if rc else 0
    except (FleetError, SlurmError, ParamsError, TrackingError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
