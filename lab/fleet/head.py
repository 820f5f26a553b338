"""The head node's side of a fleet sweep: submit what is missing, show state, collect, cancel.

- :func:`submit` checks everything it can in seconds (a clean commit, dependencies tracked by
  git, a tracking *server*, Slurm answering), then submits one job per stage that ``dvc
  repro`` would run and that is neither done nor queued: a stage without upstream stages is
  done when DVC's run cache holds it (:func:`lab.fleet.runcache.cached`), a stage with upstream
  stages (``compare``) when its last job in this sweep completed and none of its upstream
  stages runs again. A stage with upstream stages waits for their jobs (``afterok``). Before
  the first job it creates the sweep's MLflow parent run (or re-opens it after a failure).
- :func:`status` joins sweep.json, the jobs' records and ``squeue`` (:func:`lab.fleet.fleet_sweep.stage_rows`);
  once nothing runs and the sweep is incomplete, it ends a parent left RUNNING (a job killed
  too hard to end it) as FAILED.
- :func:`collect` (in the head checkout, at the sweep's commit) restores every stage from the
  run cache, upstream first, and runs none (:mod:`lab.fleet.runcache` ``restore``), so the
  checkout ends with one ``dvc.lock`` and the report; then removes the jobs' checkouts.
- :func:`cancel` ``scancel``-s the sweep's jobs that have not ended.
- :func:`log_sweep` (``lab fleet log``; ``collect`` names it when a job's record says the
  tracking server failed) logs every collected stage's
  MLflow run from the run record among its outputs (:mod:`lab.tracking.relog`: a run the
  tracking server missed during an outage is completed in place, a logged one is left as it is)
  and then ends the sweep's parent FINISHED when every stage is done, so no run stays RUNNING.

Errors are :class:`FleetError` with the problem and the fix; nothing is submitted after one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from lab.config import LabParams, load_params
from lab.fleet import slurm
from lab.fleet.script import Options, exported_names, render, resources_dict, stage_resources
from lab.fleet.fleet_sweep import DONE, StageRow, Sweep, now, stage_rows, sweep_dir_for

__all__ = ["FleetError", "submit", "status", "collect", "cancel", "find_sweep", "default_work_dir", "log_sweep"]


def _say(msg: str) -> None:
    print(msg, flush=True)


class FleetError(RuntimeError):
    """A fleet command cannot go on; the message names the problem and the fix."""


def default_work_dir(root: Path) -> Path:
    """``<head checkout>/.cache/fleet`` (git-ignored; on the shared filesystem with the checkout)."""
    return root / ".cache" / "fleet"


@contextmanager
def _locked(sweep_dir: Path) -> Iterator[None]:
    """One head-node command at a time per sweep (``flock`` on ``<sweep>/.lock``)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _clean_commit(root: Path) -> str:
    from lab.tracking.runs import git_commit

    commit = git_commit(root)
    if commit == "unknown":
        raise FleetError(f"{root} is not a git checkout. Fix: run lab fleet in the lab's git checkout")
    if commit.endswith("-dirty"):
        raise FleetError("tracked files differ from the commit (git status): every job checks out the commit, "
                         "not this workspace. Fix: commit the changes (git commit -am ...), then run this again")
    return commit


def _check_deps_tracked(root: Path, stages: list[str]) -> None:
    from lab.pipeline.stage import stage_deps

    deps = sorted({d for name in {s.split("@")[0] for s in stages} for d in stage_deps(root, name)})
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", *deps], cwd=root,
                         capture_output=True, text=True, timeout=60)
    untracked = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if untracked:
        raise FleetError(f"stage dependencies {untracked[:10]} are untracked by git, so no job's checkout "
                         "of the commit has them. Fix: git add them and git commit, then submit again")


def _tracking_server(params: LabParams, root: Path) -> str:
    uri = params.mlflow.resolved_tracking_uri(root)
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        raise FleetError(f"mlflow.tracking_uri is {uri}: jobs on other nodes need one tracking server they all "
                         "reach. Fix: set mlflow.tracking_uri: http://<tracking host>:5000 in params.yaml "
                         "(README, 'Many nodes': mlflow server on PostgreSQL), commit, submit again")
    if parts.username or parts.password:
        raise FleetError("mlflow.tracking_uri holds a user name or password; params.yaml is logged and "
                         "committed. Fix: remove it from the URI and export MLFLOW_TRACKING_USERNAME / "
                         "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the shell that submits")
    return uri


def _dvc_cache_dir(root: Path) -> str:
    from lab.fleet.runcache import open_repo

    with open_repo(root) as repo:
        return str(Path(repo.cache.local_cache_dir).resolve())


def find_sweep(root: Path, sweep: Path | None, work_dir: Path | None) -> Sweep:
    """The sweep named by ``--sweep``, else the sweep of the checkout's commit in ``work_dir``.

    :raises FileNotFoundError: no sweep there (naming the fix).
    """
    if sweep is None:
        from lab.tracking.runs import git_commit

        commit = git_commit(root).removesuffix("-dirty")
        sweep = sweep_dir_for(work_dir or default_work_dir(root), commit)
    return Sweep.load(sweep)


def _ensure_parent(params: LabParams, sweep: Sweep, log: Callable[[str], None]) -> str:
    """The sweep's MLflow parent run: RUNNING again after a failure, a new one when there is
    none yet or the last one FINISHED (a finished run is never changed)."""
    from lab.tracking.runs import TrackingError, run_tags
    from lab.tracking.tracker import Tracker

    uri = sweep.data["tracking_uri"]
    tracker = Tracker.for_store(uri, params.mlflow.experiment)
    pid = sweep.data.get("parent_run_id")
    if pid:
        try:
            info = tracker.client.get_run(pid).info
            if info.lifecycle_stage == "active" and info.status != "FINISHED":
                if info.status != "RUNNING":
                    tracker.client.update_run(pid, status="RUNNING")
                    log(f"[lab] fleet: MLflow parent run {pid} re-opened ({info.status} -> RUNNING)")
                return pid
        except Exception as exc:  # deleted, or another server: a new parent below
            log(f"[lab] fleet: MLflow parent run {pid} not usable ({exc}); making a new one")
    try:
        handle = tracker.open_run(f"pipeline | {params.engine} | fleet {sweep.id}",
                                  {**run_tags(params, mode=None), "lab_role": "pipeline", "fleet_sweep": sweep.id},
                                  nested=False)
    except TrackingError as exc:
        raise FleetError(f"{exc}. Fix: start the tracking server (README, 'Many nodes') and submit again") from exc
    sweep.data["parent_run_id"] = handle.run_id
    sweep.data.setdefault("parent_runs", []).append(handle.run_id)
    sweep.save()
    log(f"[lab] fleet: MLflow parent run {handle.run_id} ({uri}, experiment {params.mlflow.experiment})")
    return handle.run_id


def submit(root: Path, opts: Options, work_dir: Path | None = None, log: Callable[[str], None] = _say) -> Sweep:
    """Submit the stages that are missing (module docstring); returns the sweep.

    :raises FleetError: a check failed (nothing was submitted after it).
    :raises lab.fleet.slurm.SlurmError: sbatch refused a job (the jobs before it stay queued
        and recorded; fix and submit again).
    """
    from lab.fleet import runcache

    root = root.resolve()
    params = load_params(root / "params.yaml")
    commit = _clean_commit(root)
    order = runcache.stage_order(root)
    _check_deps_tracked(root, [s for s, _ in order])
    uri = _tracking_server(params, root)
    if opts.container_mounts and not opts.container_image:
        raise FleetError("--container-mounts without --container-image. Fix: add --container-image IMG, or drop "
                         "--container-mounts")
    if opts.container_image and params.server.nnodes > 1:
        raise FleetError(f"--container-image with server.nnodes {params.server.nnodes}: the ranks on the other nodes "
                         "are started with srun from inside the job, which a container image seldom has. Fix: "
                         "drop --container-image for a multi-node server (use --setup lines, e.g. module load), "
                         "or set server.nnodes: 1")
    slurm.require()
    sweep_dir = sweep_dir_for((work_dir or default_work_dir(root)).resolve(), commit)
    with _locked(sweep_dir):
        try:
            sweep = Sweep.load(sweep_dir)
        except FileNotFoundError:
            sweep = Sweep(sweep_dir, {"commit": commit, "repo": str(root), "python": sys.executable,
                                      "cache_dir": _dvc_cache_dir(root), "tracking_uri": uri,
                                      "experiment": params.mlflow.experiment, "created": now(), "jobs": {}})
        sweep.data["stages"] = [{"stage": s, "upstream": up} for s, up in order]
        for sub in ("jobs", "logs", "records", "checkouts"):
            (sweep_dir / sub).mkdir(parents=True, exist_ok=True)
        rows = {r.stage: r for r in stage_rows(sweep, slurm.queue(sweep.all_job_ids()))}
        in_cache = runcache.cached(root, *[s for s, up in order if not up and not rows[s].live])
        plan: dict[str, str] = {}  # stage -> "live" | "done" | "submit"
        for stage, upstream in order:
            row = rows[stage]
            if row.live:
                plan[stage] = "live"
            elif not upstream:
                plan[stage] = "done" if in_cache[stage] else "submit"
            else:
                plan[stage] = ("done" if row.state == DONE and all(plan[u] == "done" for u in upstream)
                               else "submit")
        for stage, what in plan.items():
            if what == "live":
                log(f"[lab] fleet: {stage}: job {rows[stage].job_id} is {rows[stage].state.lower()} already")
            elif what == "done":
                log(f"[lab] fleet: {stage}: done (in the run cache), not submitted")
        todo = [s for s, _ in order if plan[s] == "submit"]
        if not todo:
            log(f"[lab] fleet: nothing to submit for {sweep.id}"
                + ("" if any(w == "live" for w in plan.values()) else "; every stage is done: lab fleet collect"))
            sweep.save()
            return sweep
        _ensure_parent(params, sweep, log)
        names = exported_names(opts)
        up_of = dict(order)
        submitted: dict[str, str] = {}
        for stage in todo:
            deps = [submitted.get(u) or rows[u].job_id for u in up_of[stage] if plan[u] in ("submit", "live")]
            res = stage_resources(stage, params, opts)
            script = sweep_dir / "jobs" / f"{stage}.sbatch"
            script.write_text(render(stage=stage, sweep_id=sweep.id, sweep_dir=sweep_dir, repo=root, commit=commit,
                                     python=sys.executable, resources=res, opts=opts, names=names,
                                     dependent=bool(deps), cache_dir=sweep.data["cache_dir"]))
            job_id = slurm.submit(script, deps)
            submitted[stage] = job_id
            sweep.add_job(stage, {"job_id": job_id, "submitted": now(), "script": str(script),
                                  "log": str(sweep_dir / "logs" / f"{stage}-%j.log"), "after": deps,
                                  "resources": resources_dict(res), "exported": names,
                                  "container_image": opts.container_image})
            log(f"[lab] fleet: {stage}: job {job_id} ({res.describe()})"
                + (f", after {', '.join(deps)}" if deps else ""))
        log(f"[lab] fleet: {len(todo)} job(s) submitted for {sweep.id}; lab fleet status [--wait] shows them, "
            "lab fleet collect restores the results here once they are done")
        return sweep


def status(sweep: Sweep, log: Callable[[str], None] = _say) -> list[StageRow]:
    """Every stage's state (module docstring); ends a stale RUNNING parent as FAILED."""
    rows = stage_rows(sweep, slurm.queue(sweep.all_job_ids()))
    pid = sweep.data.get("parent_run_id")
    submitted = [r for r in rows if r.job_id]
    if pid and submitted and not any(r.live for r in rows) and not all(r.state == DONE for r in submitted):
        try:
            from lab.tracking.tracker import Tracker

            client = Tracker.for_store(sweep.data["tracking_uri"], sweep.data["experiment"]).client
            if client.get_run(pid).info.status == "RUNNING":
                client.set_terminated(pid, "FAILED")
                log(f"[lab] fleet: no job of {sweep.id} runs and it is incomplete: MLflow parent {pid} ended FAILED")
        except Exception as exc:
            log(f"[lab] fleet: could not check the MLflow parent {pid}: {exc}")
    return rows


def _displace_strays(root: Path, sweep: Sweep, log: Callable[[str], None]) -> list[str]:
    """Move aside files under the directories that downstream stages depend on (``results/``)
    which are neither a stage's output nor tracked by git: leftovers of an earlier local run
    (``ground_truth.jsonl``, ``environment/``...). The stage that depends on the directory was
    run-cached over the jobs' outputs alone, and the restored results replace those runs'.
    What ``.dvcignore`` hides is no part of any dependency's hash and stays: a local stage's
    attempt directories (``results/<mode>/partial/``, :mod:`lab.pipeline.staging`)."""
    from lab.fleet.runcache import open_repo

    with open_repo(root) as repo:
        outs = {o.def_path for s in repo.index.stages for o in s.outs}
        dirs = {d.def_path for s in repo.index.stages for d in s.deps
                if any(o == d.def_path or o.startswith(d.def_path.rstrip("/") + "/") for o in outs)
                and (root / d.def_path).is_dir()}
        seen = []
        for d in sorted(dirs):
            for base, subdirs, names in os.walk(root / d):
                subdirs[:] = sorted(x for x in subdirs if not repo.dvcignore.is_ignored_dir(os.path.join(base, x)))
                seen += [Path(base) / n for n in sorted(names) if not repo.dvcignore.is_ignored_file(os.path.join(base, n))]
    tracked = set(subprocess.run(["git", "ls-files", "--", *sorted(dirs)], cwd=root, capture_output=True, text=True,
                                 check=True).stdout.split())
    moved = []
    dest = sweep.dir / "displaced" / str(int(now()))
    for path in seen:
        rel = path.relative_to(root).as_posix()
        if (rel in tracked or path.name == ".gitignore"
                or any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in outs)):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), target)
        moved.append(rel)
    if moved:
        log(f"[lab] fleet: moved {len(moved)} file(s) of an earlier local run out of {', '.join(sorted(dirs))} "
            f"to {dest} (not outputs of any stage): {', '.join(moved[:8])}{' ...' if len(moved) > 8 else ''}")
    return moved


def collect(root: Path, sweep: Sweep, log: Callable[[str], None] = _say) -> int:
    """Restore every stage of the sweep here from the run cache (module docstring); returns
    the exit code of the restore (0 ok).

    :raises FleetError: wrong commit, another DVC cache, a job still running, a stage missing.
    """
    from lab.fleet import runcache

    root = root.resolve()
    commit = _clean_commit(root)
    if commit != sweep.data["commit"]:
        raise FleetError(f"this checkout is at {commit[:12]}, the sweep {sweep.id} at {sweep.data['commit'][:12]}. "
                         f"Fix: git checkout {sweep.data['commit'][:12]} (or collect from a checkout at it)")
    cache = _dvc_cache_dir(root)
    if cache != sweep.data["cache_dir"]:
        raise FleetError(f"this checkout's DVC cache is {cache}, the sweep's jobs saved to {sweep.data['cache_dir']}. "
                         f"Fix: dvc cache dir --local {sweep.data['cache_dir']}")
    with _locked(sweep.dir):
        rows = stage_rows(sweep, slurm.queue(sweep.all_job_ids()))
        live = [f"{r.stage} (job {r.job_id}, {r.state.lower()})" for r in rows if r.live]
        if live:
            raise FleetError(f"jobs still run: {', '.join(live)}. Fix: lab fleet status --wait, then collect")
        by_stage = {r.stage: r for r in rows}
        in_cache = runcache.cached(root, *[s for s, up in sweep.stages() if not up])
        missing = [f"{s} ({by_stage[s].state.lower()})" for s, up in sweep.stages()
                   if not (in_cache[s] if not up else by_stage[s].state == DONE)]
        if missing:
            raise FleetError(f"not done: {', '.join(missing)}; nothing was restored. Fix: lab fleet submit "
                             "(it submits only these), then lab fleet status --wait and collect again")
        _displace_strays(root, sweep, log)
        stages = [s for s, _ in sweep.stages()]
        log(f"[lab] fleet: restoring {len(stages)} stage(s) from the run cache in {root}: {', '.join(stages)}")
        rc = subprocess.run([sys.executable, "-m", "lab.fleet.runcache", "restore", *stages], cwd=root).returncode
        if rc != 0:
            return rc
        shutil.rmtree(sweep.dir / "checkouts", ignore_errors=True)
        sweep.data["collected"] = now()
        sweep.save()
        log(f"[lab] fleet: {sweep.id} collected: dvc.lock and reports/ in {root}; the jobs' logs stay in "
            f"{sweep.dir / 'logs'}")
    unlogged = [j["stage"] for j in (sweep.record(s, r.job_id) or {} for s, r in by_stage.items() if r.job_id)
                if j.get("mlflow")]
    if unlogged:
        log(f"[lab] fleet: the tracking server failed during {', '.join(unlogged)}: their results are here, their "
            "MLflow runs are not complete. Once the server answers: lab fleet log")
    return 0


def _record_dirs(root: Path) -> list[str]:
    """The directories where a stage writes its MLflow run record (outputs named
    :data:`lab.tracking.runs.RECORD_FILE`), relative to ``root``, in dvc.yaml's order."""
    from lab.fleet.runcache import open_repo
    from lab.tracking.runs import RECORD_FILE

    with open_repo(root) as repo:
        outs = [o.def_path for s in repo.index.stages for o in s.outs]
    return [str(Path(o).parent) for o in outs if Path(o).name == RECORD_FILE]


def log_sweep(root: Path, sweep: Sweep, log: Callable[[str], None] = _say) -> list[tuple[str, str]]:
    """``lab fleet log`` (module docstring), in the head checkout after ``collect``.

    :returns: ``(directory, what)`` per run record (``what`` from :func:`lab.tracking.relog.relog`).
    :raises FleetError: the checkout holds no collected sweep, or the tracking server still
        fails (the message names the fix; what was logged before stays logged).
    """
    from lab.tracking.relog import relog
    from lab.tracking.runs import RECORD_FILE, TrackingError
    from lab.tracking.tracker import Tracker

    root = root.resolve()
    if not sweep.data.get("collected"):
        raise FleetError(f"{sweep.id} is not collected here yet: the runs' records come back with the results. "
                         "Fix: lab fleet collect, then lab fleet log")
    dirs = [d for d in _record_dirs(root) if (root / d / RECORD_FILE).is_file()]
    done = []
    try:
        tracker = Tracker.for_store(sweep.data["tracking_uri"], sweep.data["experiment"])
        for d in dirs:
            run_id, what = relog(tracker, root / d, log=log)
            log(f"[lab] fleet: {d}: MLflow run {run_id} {what}")
            done.append((d, what))
        pid = sweep.data.get("parent_run_id")
        rows = stage_rows(sweep, slurm.queue(sweep.all_job_ids()))
        if pid and all(r.state == DONE for r in rows):
            info = tracker.client.get_run(pid).info
            if info.status != "FINISHED":
                tracker.client.set_tag(pid, "lab_relogged", "by lab fleet log after the tracking server failed")
                tracker.client.set_terminated(pid, "FINISHED")
                log(f"[lab] fleet: the sweep's MLflow parent {pid} ended FINISHED (was {info.status}); the "
                    "comparison's numbers are on its compare run")
    except (TrackingError, slurm.SlurmError) as exc:
        raise FleetError(f"{exc}. Fix: start the tracking server, then lab fleet log (it logs only what is missing)") from exc
    except Exception as exc:  # MLflow's client errors
        raise FleetError(f"MLflow at {sweep.data['tracking_uri']} failed ({exc}). Fix: start the tracking server, "
                         "then lab fleet log") from exc
    return done


def cancel(sweep: Sweep, log: Callable[[str], None] = _say) -> list[str]:
    """``scancel`` every job of the sweep that has not ended; returns their ids."""
    live = [r.job_id for r in stage_rows(sweep, slurm.queue(sweep.all_job_ids())) if r.live and r.job_id]
    slurm.cancel(live)
    log(f"[lab] fleet: cancelled {', '.join(live)}" if live else "[lab] fleet: no job of the sweep runs")
    return live
