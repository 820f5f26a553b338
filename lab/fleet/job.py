"""Inside one Slurm job: run one stage in the job's own checkout, hand its outputs over
through the shared DVC run cache, record the outcome, clean up.

``python -m lab.fleet.job SWEEP_DIR STAGE`` is what a job script (:mod:`lab.fleet.script`)
execs, from the checkout it cloned, so this code is the sweep commit's. In order:

1. writes the job's record (``running``: node, start, checkout, log, attempt) into the sweep
   dir; after Slurm requeued the job (``$SLURM_RESTART_COUNT`` > 0: a node failed, or
   ``scontrol requeue``) it keeps the killed attempt's record beside it
   (``records/<stage>-<job id>.attempt<N>.json``), ends that attempt's MLflow runs still
   RUNNING as FAILED and re-opens the sweep's parent; the log goes on below the first
   attempt's (the script's ``--open-mode=append``);
2. points the checkout's DVC at the shared cache (``.dvc/config.local``: ``cache.dir``, and
   ``core.site_cache_dir`` inside the checkout, so DVC leaves nothing under ``/var/tmp``);
3. restores every upstream stage from the run cache (``compare`` needs each mode's results)
   and refuses, measuring nothing, if one is missing (``python -m lab.fleet.runcache restore``);
4. runs the stage (``python -m lab.fleet.runcache run STAGE``: ``dvc repro --single-item``,
   then its run-cache entry) with the job's placement in the environment: the sweep's MLflow
   parent (``LAB_MLFLOW_PARENT_RUN_ID``), a free loopback port for the engine
   (``LAB_SERVER_PORT``: jobs sharing a node never collide), temp and Jupyter runtime files
   inside the checkout; for a multi-node server (``server.nnodes > 1``) node 0's address as
   ``--dist-init-addr`` and the other ranks started on the other nodes (:mod:`lab.fleet.rank`);
5. records ``ok``, ``failed`` or ``cancelled`` with the exit code (``ok`` with
   ``mlflow: not logged`` when the tracking server failed after the stage's complete result,
   which is then in the run cache all the same: :data:`lab.fleet.runcache.RESULTS_SAFE`;
   the job exits 0 and ``lab fleet log`` logs the run later); after a failure ends this
   job's MLflow runs still RUNNING (``FAILED``, ``KILLED`` when cancelled) and the sweep's parent
   with them, and keeps the checkout (partial results, executed notebook) for inspection;
   after success removes the checkout (its outputs are in the run cache).

Slurm's ``scancel`` sends SIGTERM to every process of the job at once (then SIGKILL after the
cluster's KillWait): the stage stops its engine itself (:mod:`lab.pipeline.interrupt`), and
this runner forwards the signal to its child, waits for it, and records ``cancelled``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab.fleet.fleet_sweep import Sweep, now, write_record

__all__ = ["main", "job_env", "configure_dvc"]


def configure_dvc(checkout: Path, cache_dir: str) -> None:
    """Write the checkout's ``.dvc/config.local`` (git-ignored): the shared cache, and DVC's
    site cache inside the checkout."""
    (checkout / ".dvc" / "config.local").write_text(
        f"[cache]\n    dir = {cache_dir}\n[core]\n    site_cache_dir = {checkout / '.dvc' / 'tmp' / 'site'}\n")


def job_env(checkout: Path, parent_run_id: str, port: int) -> dict[str, str]:
    """The stage's environment: this job's own plus the placement (module docstring, step 4)."""
    from lab.config import SERVER_PLACEMENT_ENV
    from lab.tracking.grouping import PARENT_RUN_ENV

    tmp = checkout / ".cache" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    port_env = next(k for k, v in SERVER_PLACEMENT_ENV.items() if v == "port")
    return {**os.environ, PARENT_RUN_ENV: parent_run_id, port_env: str(port), "TMPDIR": str(tmp),
            "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter"), "DVC_NO_ANALYTICS": "1"}


def _secret_names() -> list[str]:
    """The credentials this job got from the submitting shell, by name (sorted)."""
    from lab.fleet.script import PASS_BY_NAME, PASS_BY_PREFIX
    from lab.redact import is_secret_name

    return sorted(n for n in os.environ if (n in PASS_BY_NAME or n.startswith(PASS_BY_PREFIX))
                  and is_secret_name(n) and os.environ.get(n))


class _Child:
    """The running step; SIGTERM/SIGINT to this runner are passed on to it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.signalled: int | None = None

    def handle(self, signum, frame) -> None:
        self.signalled = signum
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path) -> int:
        if self.signalled:
            return 128 + self.signalled
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd)
        while True:
            try:
                return self.proc.wait()
            except InterruptedError:  # pragma: no cover (PEP 475 retries)
                continue


def _multi_node_ranks(stage: str, env: dict[str, str]) -> subprocess.Popen | None:
    """For ``bench@<mode>`` (or ``bench_launch@<n>-<mode>``) with ``server.nnodes > 1``: set node
    0's address and start ranks 1..N-1 on the job's other nodes (one ``srun`` step); None for a
    single-node stage."""
    from lab.config.paths import bench_stage_launch

    bench = bench_stage_launch(stage)
    if bench is None:
        return None
    from lab.config import SERVER_PLACEMENT_ENV, load_params
    from lab.engine.ports import free_port
    from lab.fleet.rank import srun_ranks_argv
    from lab.fleet.slurm import hostnames

    params = load_params()
    n = params.server.nnodes
    if n <= 1:
        return None
    nodes = hostnames(os.environ["SLURM_JOB_NODELIST"])
    addr = f"{socket.gethostbyname(nodes[0])}:{free_port()}"
    env[next(k for k, v in SERVER_PLACEMENT_ENV.items() if v == "dist_init_addr")] = addr
    print(f"[lab] fleet: multi-node server over {n} nodes {nodes}: --dist-init-addr {addr} (node 0); "
          f"ranks 1..{n - 1} on the other nodes", flush=True)
    return subprocess.Popen(srun_ranks_argv(bench[0], n, sys.executable), env=env)


def _end_runs(sweep: Sweep, job_id: str, status: str, parent: bool = True) -> None:
    """After a failure: this job's RUNNING MLflow runs and (``parent``) the sweep's parent end
    ``status``; before a requeued attempt (``parent=False``): the killed attempt's runs, and the
    sweep's parent is RUNNING again."""
    try:
        from lab.tracking.tracker import Tracker

        tracker = Tracker.for_store(sweep.data["tracking_uri"], sweep.data["experiment"])
        client = tracker.client
        for run in tracker.search_runs(f"tags.slurm_job_id = '{job_id}' and attributes.status = 'RUNNING'"):
            client.set_terminated(run.info.run_id, status)
            print(f"[lab] fleet: MLflow run {run.info.run_id} ({run.info.run_name}) ended {status}", flush=True)
        pid = sweep.data.get("parent_run_id")
        if not pid:
            return
        info = client.get_run(pid).info
        if parent and info.status == "RUNNING":
            client.set_terminated(pid, status)
            print(f"[lab] fleet: the sweep's MLflow parent {pid} ended {status} "
                  "(lab fleet submit re-opens it for the stages still missing)", flush=True)
        elif not parent and info.status in ("FAILED", "KILLED"):
            client.update_run(pid, status="RUNNING")
            print(f"[lab] fleet: the sweep's MLflow parent {pid} re-opened for this attempt", flush=True)
    except Exception as exc:  # the tracking server down: the stage's files and log still say what happened
        print(f"[lab] fleet: could not end the MLflow runs of job {job_id}: {exc}", file=sys.stderr, flush=True)


def _earlier_attempt(sweep: Sweep, stage: str, job_id: str, attempt: int) -> None:
    """A requeued job (``attempt`` > 0): keep the killed attempt's record beside this one's and
    end its MLflow runs left RUNNING (module docstring, step 1)."""
    import json

    path = sweep.dir / "records" / f"{stage}-{job_id}.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = None
    if old is not None and old.get("attempt", 0) != attempt:
        old_attempt = old.get("attempt", 0)
        if old.get("status") == "running":
            old.update(status="lost", ended=None)
        write_record(sweep.dir, stage, f"{job_id}.attempt{old_attempt}", old)
        print(f"[lab] fleet: attempt {old_attempt} of job {job_id} ended {old.get('status')}; its record is "
              f"records/{stage}-{job_id}.attempt{old_attempt}.json, its checkout {old.get('checkout')}", flush=True)
    _end_runs(sweep, job_id, "FAILED", parent=False)


def main(argv: list[str] | None = None) -> int:
    """Run ``STAGE`` of the sweep in ``SWEEP_DIR`` from the current checkout (module docstring).
    Exit code: the stage's (0 ok), 128 + signal when cancelled."""
    from lab.engine.ports import free_port

    sweep_dir, stage = (sys.argv[1:] if argv is None else argv)[:2]
    sweep = Sweep.load(Path(sweep_dir))
    checkout = Path.cwd()
    job_id = os.environ.get("SLURM_JOB_ID", "local")
    attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    print(f"[lab] fleet: ===== job {job_id}, attempt {attempt}"
          + (f" (Slurm requeued it {attempt} time(s))" if attempt else "") + " =====", flush=True)
    if attempt:
        _earlier_attempt(sweep, stage, job_id, attempt)
    record = {"stage": stage, "job_id": job_id, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
              "started": now(), "ended": None, "status": "running", "exit_code": None,
              "checkout": str(checkout), "commit": sweep.data["commit"], "attempt": attempt}
    write_record(sweep.dir, stage, job_id, record)
    child = _Child()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, child.handle)
    configure_dvc(checkout, sweep.data["cache_dir"])
    port = free_port()
    env = job_env(checkout, sweep.data["parent_run_id"], port)
    secrets = _secret_names()
    print(f"[lab] fleet: job {job_id} on {record['node']}: stage {stage} of {sweep.id} at commit "
          f"{sweep.data['commit'][:12]} in {checkout}; engine port {port} on 127.0.0.1; DVC cache "
          f"{sweep.data['cache_dir']}; MLflow parent {sweep.data['parent_run_id']}", flush=True)
    print(f"[lab] fleet: credentials from the submitting shell, by name (values never written): "
          f"{', '.join(secrets) or 'none'}", flush=True)
    ranks = None
    rc = 0
    try:
        upstream = sweep.ancestors(stage)
        if upstream:
            rc = child.run([sys.executable, "-m", "lab.fleet.runcache", "restore", *upstream], env, checkout)
        if rc == 0:
            ranks = _multi_node_ranks(stage, env)
            rc = child.run([sys.executable, "-m", "lab.fleet.runcache", "run", stage], env, checkout)
    except Exception:  # recorded as a failure below, never left "running"
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        if ranks is not None and ranks.poll() is None:
            ranks.terminate()  # srun passes it to every rank
            try:
                ranks.wait(60)
            except subprocess.TimeoutExpired:
                ranks.kill()
    if rc < 0:  # the child died of a signal: the shell's convention, 128 + signal
        rc = 128 - rc
    if rc > 128 and not child.signalled:
        # scancel signals every process of the job at once: the child may end before this
        # runner's own SIGTERM arrives. Give it a moment, so a cancel is recorded as one.
        deadline = time.monotonic() + 2.0
        while not child.signalled and time.monotonic() < deadline:
            time.sleep(0.05)
    if child.signalled:
        rc = rc or 128 + child.signalled
    from lab.fleet.runcache import RESULTS_SAFE

    if rc == RESULTS_SAFE and not child.signalled:  # saved, only MLflow failed (module docstring, step 5)
        record["mlflow"] = "not logged: the tracking server failed; lab fleet log logs it once it is back"
        rc = 0
    status = "ok" if rc == 0 else ("cancelled" if child.signalled else "failed")
    record.update(ended=now(), status=status, exit_code=rc)
    write_record(sweep.dir, stage, job_id, record)  # first: a SIGKILL after KillWait loses nothing else
    if status != "ok":
        _end_runs(sweep, job_id, "KILLED" if status == "cancelled" else "FAILED")
    if status == "ok":
        shutil.rmtree(checkout, ignore_errors=True)
        print(f"[lab] fleet: stage {stage} done; its outputs are in the run cache; checkout removed", flush=True)
    else:
        print(f"[lab] fleet: stage {stage} {status} (exit {rc}); its checkout stays for inspection: {checkout}",
              flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
