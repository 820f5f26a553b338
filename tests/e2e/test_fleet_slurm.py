"""Fleet mode for real (issue 23): a single-node Slurm cluster on this machine, ``mlflow server``
on a throwaway PostgreSQL, and a 3-mode emulator sweep submitted, watched and collected through
``lab fleet``, two jobs at a time.

The cluster is :class:`slurm_cluster.SlurmCluster` (Debian's slurm-wlm and munge, everything in
a temp dir, as root); the tracking server is ``tests/test_mlflow_postgres.py``'s fixtures.
Without the packages the tests fail with the install hint (``.ci/run`` installs them). The
checks read what the jobs did (their records, Slurm's answers, DVC's output, MLflow's runs,
the processes still alive), never how long anything took: the wait for the jobs has a
generous limit only so that a hung cluster fails the test instead of CI.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scratch import dvc_env, run_dvc, scratch_repo
from slurm_cluster import INSTALL_HINT, SlurmCluster, missing_binaries
from test_mlflow_postgres import mlflow_server, postgres_uri  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

MODES = ("baseline", "eagle3_prefill", "eagle3_decode")
STAGES = ("physics", *(f"bench@{m}" for m in MODES), "compare")
#: Credentials in the submitting shell: they must reach the jobs by name and nowhere else.
SECRETS = {"HF_TOKEN": f"hf_fleet{secrets.token_hex(12)}",
           "MLFLOW_TRACKING_USERNAME": "fleet-test",
           "MLFLOW_TRACKING_PASSWORD": f"pw{secrets.token_hex(12)}"}


@pytest.fixture(scope="module")
def slurm():
    """A running single-node cluster (module docstring); stopped after the module."""
    if os.geteuid() != 0:
        pytest.fail("the Slurm test cluster runs its daemons as root (as CI does). Fix: run the tests as root")
    missing = missing_binaries()
    if missing:
        pytest.fail(f"Slurm and munge are required and {', '.join(missing)} were not found. Fix: {INSTALL_HINT}")
    cluster = SlurmCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _sweep_repo(path: Path, server: str, experiment: str, bench: dict) -> Path:
    def edit(params):
        params["bench"].update({"concurrency": [1], "warmup_requests": 0, "request_rates": [], **bench})
        params["mlflow"] = {"tracking_uri": server, "experiment": experiment}

    repo = scratch_repo(path, edit, extra_files=(".gitignore",))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "sweep"], cwd=repo,
                   check=True)
    return repo


def _fleet(repo: Path, cluster: SlurmCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**dvc_env(), **cluster.env, **SECRETS}
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "fleet", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=timeout)
    print(f"$ lab fleet {' '.join(args)} -> {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def _wait(repo: Path, cluster: SlurmCluster) -> tuple[int, dict[str, dict]]:
    proc = _fleet(repo, cluster, "status", "--wait", "--json", "--interval", "2", "--timeout", "1200", timeout=1300)
    return proc.returncode, {r["stage"]: r for r in json.loads(proc.stdout)}


def _sweep(repo: Path) -> Path:
    (sweep,) = (repo / ".cache" / "fleet").glob("sweep-*")
    return sweep


def _job_processes(job_ids: set[str]) -> list[str]:
    """Processes still alive that a job of ``job_ids`` started (Slurm sets SLURM_JOB_ID in
    every process of a job; the engine's process group inherits it)."""
    alive = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get("SLURM_JOB_ID") in job_ids:
                alive.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:160]}")
        except (psutil.Error, OSError):
            continue
    return alive


def _until(predicate, what: str, timeout_s: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(interval)


def _runs(server: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=500) if exp else []


def _collect_ok(repo: Path, cluster: SlurmCluster) -> str:
    proc = _fleet(repo, cluster, "collect")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    for stage in STAGES:  # every stage from the shared run cache, none run here
        assert f"Stage '{stage}' is cached - skipping run, checking out outputs" in out, stage
    assert "Running stage" not in out
    assert not (_sweep(repo) / "checkouts").exists()  # collect removed what the jobs left
    return out


def _check_results(repo: Path) -> None:
    for mode in MODES:
        metrics = json.loads((repo / "results" / mode / "metrics.json").read_text())
        assert metrics["status"] == "ok", (mode, metrics.get("warnings"))
        result = json.loads((repo / "results" / mode / "result.json").read_text())
        assert result["mode"] == mode and result["levels"]["c1"]["decode_tok_s"]["mean"] > 0
        assert "--host 127.0.0.1 " in result["server_command"]  # loopback: a single-node server
    physics = json.loads((repo / "results" / "physics" / "metrics.json").read_text())
    assert physics["status"].startswith("not run")  # no CUDA here, as with dvc repro
    summary = (repo / "reports" / "summary.csv").read_text()
    assert all(f"\n{m}," in summary for m in MODES), summary[:500]
    assert (repo / "reports" / "report.html").stat().st_size > 0
    lock = (repo / "dvc.lock").read_text()
    assert all(f"  {s}:" in lock for s in STAGES), lock[:2000]
    committed = set(subprocess.run(["git", "ls-files", "*dvc.lock"], cwd=repo, capture_output=True, text=True,
                                   check=True).stdout.split())  # the project's own commits some under docs/
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("dvc.lock")
                  if str(p.relative_to(repo)) not in committed - {"dvc.lock"}) == ["dvc.lock"]
    status = run_dvc(repo, "status")
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout + status.stderr


def _no_secret_anywhere(repo: Path, server: str, experiment: str) -> None:
    values = [v for k, v in SECRETS.items() if "PASSWORD" in k or "TOKEN" in k]
    for path in [*(_sweep(repo)).rglob("*"), *(repo / "results").rglob("*"), *(repo / "reports").rglob("*")]:
        if path.is_file():
            data = path.read_bytes()
            assert not any(v.encode() in data for v in values), f"a credential reached {path}"
    for run in _runs(server, experiment):
        for value in (*run.data.params.values(), *run.data.tags.values()):
            assert not any(v in value for v in values), f"a credential reached MLflow run {run.info.run_name}"


def test_sweep_of_three_modes_two_jobs_at_a_time(slurm, mlflow_server, postgres_uri, tmp_path):
    experiment = "fleet-sweep"
    repo = _sweep_repo(tmp_path / "lab", mlflow_server, experiment,
                       {"num_prompts": 2, "max_new_tokens": 16, "repeats": 2})
    proc = _fleet(repo, slurm, "submit", "--cpus-per-task", "1", "--mem", "1G")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"compare: job \d+ .*after \d+, \d+, \d+, \d+", proc.stdout), proc.stdout
    rc, rows = _wait(repo, slurm)
    assert rc == 0 and {s: r["state"] for s, r in rows.items()} == dict.fromkeys(STAGES, "COMPLETED"), rows

    sweep = _sweep(repo)
    state = json.loads((sweep / "sweep.json").read_text())
    job_of = {s: state["jobs"][s][-1]["job_id"] for s in STAGES}
    records = {s: json.loads((sweep / "records" / f"{s}-{j}.json").read_text()) for s, j in job_of.items()}
    # two jobs at a time on the node's 2 CPUs, never more; compare only after all four
    edges = sorted([(r["started"], 1) for r in records.values()] + [(r["ended"], -1) for r in records.values()],
                   key=lambda e: (e[0], e[1]))
    running, most = 0, 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most == slurm.cpus == 2, records
    assert records["compare"]["started"] >= max(records[s]["ended"] for s in STAGES[:-1])
    assert not list((sweep / "checkouts").iterdir())  # every job removed its own checkout

    # each job its own engine port on loopback; credentials reached the jobs by name only
    ports = set()
    for mode in MODES:
        log = Path(rows[f"bench@{mode}"]["log"]).read_text()
        ports.add(re.search(r"engine port (\d+) on 127\.0\.0\.1", log).group(1))
        assert "by name (values never written): HF_TOKEN, MLFLOW_TRACKING_PASSWORD" in log
    assert len(ports) == 3
    assert "--kill-on-invalid-dep=yes" in (sweep / "jobs" / "compare.sbatch").read_text()

    _collect_ok(repo, slurm)
    _check_results(repo)

    # the MLflow tree: one parent for the sweep, each stage's run under it, from its own job
    runs = _runs(mlflow_server, experiment)
    parents = [r for r in runs if r.data.tags.get("lab_role") == "pipeline"]
    assert len(parents) == 1 and parents[0].info.run_id == state["parent_run_id"]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name == f"pipeline | emulator | 3 modes | fleet {sweep.name}"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == len(runs) - 1 == 5
    by_job = {r.data.tags.get("slurm_job_id"): r for r in children}
    assert set(by_job) == set(job_of.values())
    for stage, job in job_of.items():
        run = by_job[job]
        assert run.info.status == "FINISHED", (stage, run.info.run_name)
        assert run.info.run_name.startswith(stage.split("@")[-1] if stage.startswith("bench@") else stage), (
            stage, run.info.run_name)
        if stage.startswith("bench@"):
            assert run.data.metrics["decode_tok_s"] > 0
    import psycopg2

    with psycopg2.connect(postgres_uri.replace("+psycopg2", "")) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from runs r join experiments e on r.experiment_id = e.experiment_id "
                    "where e.name = %s", (experiment,))
        assert cur.fetchone()[0] == len(runs)

    _no_secret_anywhere(repo, mlflow_server, experiment)
    assert _job_processes(set(job_of.values())) == []
    assert slurm.run("squeue", "-h").stdout.strip() == ""


def test_cancelled_job_leaves_nothing_running_and_resubmission_finishes(slurm, mlflow_server, tmp_path):
    experiment = "fleet-cancel"
    repo = _sweep_repo(tmp_path / "lab", mlflow_server, experiment,
                       {"num_prompts": 8, "max_new_tokens": 64, "repeats": 3})
    proc = _fleet(repo, slurm, "submit", "--cpus-per-task", "1", "--mem", "1G")
    assert proc.returncode == 0, proc.stderr[-3000:]
    victim = re.search(r"bench@baseline: job (\d+)", proc.stdout).group(1)

    def engine_up():
        return any("lab.emulator" in p for p in _job_processes({victim}))

    _until(engine_up, f"job {victim}'s engine to start", 900)
    slurm.run("scancel", victim)
    _until(lambda: not _job_processes({victim}), f"every process of job {victim} to end", 120)

    rc, rows = _wait(repo, slurm)
    assert rc == 1
    assert rows["bench@baseline"]["state"] == "CANCELLED", rows
    assert rows["compare"]["state"] not in ("COMPLETED", "RUNNING", "PENDING"), rows  # its dependency failed
    assert all(rows[f"bench@{m}"]["state"] == "COMPLETED" for m in MODES[1:]) and rows["physics"]["state"] == "COMPLETED"
    sweep = _sweep(repo)
    kept = sweep / "checkouts" / f"bench@baseline-{victim}"
    # the partial result stays for inspection, in the stage's attempt directory (lab/pipeline/staging.py)
    assert list((kept / "results" / "baseline" / "partial").glob("*/server.log"))
    runs = _runs(mlflow_server, experiment)
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    killed = [r for r in runs if r.data.tags.get("slurm_job_id") == victim]
    assert killed and all(r.info.status in ("FAILED", "KILLED") for r in killed)

    proc = _fleet(repo, slurm, "submit", "--cpus-per-task", "1", "--mem", "1G")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stage in ("physics", "bench@eagle3_prefill", "bench@eagle3_decode"):
        assert f"{stage}: done (in the run cache), not submitted" in proc.stdout
    assert re.findall(r"\] fleet: (\S+): job \d+", proc.stdout) == ["bench@baseline", "compare"]
    rc, rows = _wait(repo, slurm)
    assert rc == 0 and all(r["state"] == "COMPLETED" for r in rows.values()), rows
    # an earlier local run's leftover, no stage's output: collect moves it aside (compare
    # depends on results/ as a whole) and still restores compare from the run cache; a local
    # run's attempt directory is DVC-ignored (no part of that dependency) and stays
    stray = repo / "results" / "baseline" / "ground_truth.jsonl"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("an earlier local run\n")
    attempt = repo / "results" / "baseline" / "partial" / "20260101T000000Z" / "server.log"
    attempt.parent.mkdir(parents=True)
    attempt.write_text("an interrupted local run\n")
    out = _collect_ok(repo, slurm)
    assert "results/baseline/ground_truth.jsonl" in out and not stray.exists()
    assert list((sweep / "displaced").rglob("ground_truth.jsonl"))[0].read_text() == "an earlier local run\n"
    assert attempt.read_text() == "an interrupted local run\n" and "partial" not in out
    _check_results(repo)

    runs = _runs(mlflow_server, experiment)
    parents = [r for r in runs if r.data.tags.get("lab_role") == "pipeline"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"  # the same parent, re-opened
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    baseline = sorted(r.info.status for r in children if r.data.tags.get("mode") == "baseline")
    assert baseline in (["FAILED", "FINISHED"], ["FINISHED", "KILLED"]), baseline
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    state = json.loads((sweep / "sweep.json").read_text())
    assert _job_processes({j["job_id"] for js in state["jobs"].values() for j in js}) == []
    assert slurm.run("squeue", "-h").stdout.strip() == ""


def _project_copy(path: Path, server: str, experiment: str, bench: dict) -> Path:
    """A clone of the project's own checkout, its working tree's changes on top, committed
    outputs included (``results/<mode>/metrics.json``, ``reports/*.csv``, the headlines), with a
    small emulator sweep and the test's tracking server in params.yaml, committed."""
    import shutil

    import yaml

    from scratch import ROOT, free_port

    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(path)], check=True)
    changed = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split()
    for rel in {*changed, *untracked}:
        src, dst = ROOT / rel, path / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
        elif dst.exists():
            dst.unlink()
    params = yaml.safe_load((path / "params.yaml").read_text())
    params["engine"] = "emulator"
    params["server"]["port"] = free_port()
    params["bench"].update({"concurrency": [1], "warmup_requests": 0, "request_rates": [], "context_tokens": [0],
                            "launches": 1, "later_launches": [], **bench})
    params["mlflow"] = {"tracking_uri": server, "experiment": experiment}
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "sweep"], cwd=path, check=True)
    return path


def test_sweep_on_a_copy_of_the_project_checkout_with_a_requeued_job(slurm, mlflow_server, tmp_path):
    """Issue 34 item 2: the project's own checkout (committed outputs that DVC also produces),
    one job requeued by Slurm while its engine runs (as after a node failure), the jobs'
    environment by prefix with telemetry off."""
    experiment = "fleet-project"
    repo = _project_copy(tmp_path / "lab", mlflow_server, experiment,
                         {"num_prompts": 6, "max_new_tokens": 48, "repeats": 2})
    committed = subprocess.run(["git", "ls-files", "results", "reports"], cwd=repo, capture_output=True, text=True,
                               check=True).stdout.split()
    assert {"results/baseline/metrics.json", "reports/summary.csv", "reports/comparison.json"} <= set(committed)
    # the committed answer reads on the clone, before any sweep
    summary = subprocess.run([sys.executable, "-m", "lab.cli", "summary"], cwd=repo, env=dvc_env(),
                             capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0 and "eagle3_decode" in summary.stdout, summary.stdout + summary.stderr

    marker = f"m{secrets.token_hex(6)}"
    os.environ["LAB_FLEET_TEST_MARK"] = marker  # a lab variable nobody names: it reaches the job by prefix
    try:
        proc = _fleet(repo, slurm, "submit", "--cpus-per-task", "1", "--mem", "1G",
                      "--setup", "echo node set-up ran on $(hostname)")
    finally:
        del os.environ["LAB_FLEET_TEST_MARK"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    victim = re.search(r"bench@eagle3_decode: job (\d+)", proc.stdout).group(1)

    def engine_env():
        for p in psutil.process_iter(["cmdline"]):
            try:
                env = p.environ()
                if env.get("SLURM_JOB_ID") == victim and "lab.emulator" in " ".join(p.info["cmdline"] or []):
                    return env
            except (psutil.Error, OSError):
                continue
        return None

    env = _until(engine_env, f"job {victim}'s engine to start", 900)
    assert env.get("LAB_FLEET_TEST_MARK") == marker and env.get("MLFLOW_DISABLE_TELEMETRY") == "true"
    assert env.get("HF_TOKEN") == SECRETS["HF_TOKEN"]  # by name, from the submitting shell
    slurm.run("scontrol", "requeue", victim)  # what Slurm does to a job whose node went DOWN

    rc, rows = _wait(repo, slurm)
    assert rc == 0 and {s: r["state"] for s, r in rows.items()} == dict.fromkeys(STAGES, "COMPLETED"), rows
    sweep = _sweep(repo)
    log = Path(rows["bench@eagle3_decode"]["log"]).read_text()
    # the first attempt's log kept, the second below it, each from a checkout of its own
    first, second = log.index(f"===== job {victim}, attempt 0 ====="), log.index(
        f"===== job {victim}, attempt 1 (Slurm requeued it 1 time(s)) =====")
    assert first < second and "already exists" not in log
    assert len(re.findall(r"engine port \d+ on 127\.0\.0\.1", log)) == 2
    assert "node set-up ran on" in log
    old = json.loads((sweep / "records" / f"bench@eagle3_decode-{victim}.attempt0.json").read_text())
    assert old["attempt"] == 0 and old["status"] in ("cancelled", "failed", "lost")
    assert json.loads((sweep / "records" / f"bench@eagle3_decode-{victim}.json").read_text())["attempt"] == 1
    assert (sweep / "checkouts" / f"bench@eagle3_decode-{victim}").is_dir()  # the killed attempt's, for inspection
    assert not (sweep / "checkouts" / f"bench@eagle3_decode-{victim}.r1").exists()  # the attempt that finished
    # compare's checkout holds the committed copies of its upstream outputs: they made way, no confirmation
    compare_log = Path(rows["compare"]["log"]).read_text()
    assert "committed output(s) git holds make way" in compare_log and "confirmation" not in compare_log

    out = _collect_ok(repo, slurm)
    assert "committed output(s) git holds make way" in out and "confirmation" not in out
    _check_results(repo)
    runs = _runs(mlflow_server, experiment)
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    parents = [r for r in runs if r.data.tags.get("lab_role") == "pipeline"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    attempts = sorted(r.info.status for r in runs if r.data.tags.get("slurm_job_id") == victim)
    assert attempts in (["FAILED", "FINISHED"], ["FINISHED", "KILLED"]), attempts
    _no_secret_anywhere(repo, mlflow_server, experiment)
    state = json.loads((sweep / "sweep.json").read_text())
    assert _job_processes({j["job_id"] for js in state["jobs"].values() for j in js}) == []
    assert slurm.run("squeue", "-h").stdout.strip() == ""


def test_tracking_server_outage_mid_stage_result_reaches_the_run_cache_and_lab_fleet_log_logs_it(slurm, tmp_path):
    """Issue 34 item 2: the tracking server dies while a bench job measures. The complete result
    still reaches the run cache (the job and the sweep finish), no measurement is lost, and once
    the server is back ``lab fleet log`` completes the runs it missed: none is left RUNNING."""
    from scratch import free_port
    from test_tracking_failure import _kill, _server

    experiment = "fleet-outage"
    port = free_port()
    db, arts, server_log = tmp_path / "store.db", tmp_path / "arts", tmp_path / "mlflow.log"
    uri = f"http://127.0.0.1:{port}"
    server = _server(db, arts, port, server_log)
    try:
        repo = _sweep_repo(tmp_path / "lab", uri, experiment, {"num_prompts": 8, "max_new_tokens": 64, "repeats": 3})
        proc = _fleet(repo, slurm, "submit", "--cpus-per-task", "1", "--mem", "1G")
        assert proc.returncode == 0, proc.stderr[-3000:]
        order = re.findall(r"\] fleet: (\S+): job (\d+)", proc.stdout)
        jobs = dict(order)
        slurm.run("scontrol", "hold", jobs["compare"])  # compare runs once the server is back (below)
        # the last bench job submitted: when it measures, every other stage has opened its run
        stage = [s for s, _ in order if s.startswith("bench@")][-1]
        mode, victim = stage.split("@")[1], jobs[stage]
        sweep = _sweep(repo)

        def measuring():
            rec = sweep / "records" / f"{stage}-{victim}.json"
            if not rec.is_file():
                return False
            checkout = Path(json.loads(rec.read_text())["checkout"])
            return list((checkout / "results" / mode / "partial").glob("*/requests.jsonl"))

        _until(measuring, f"job {victim} to measure", 900)
        _kill(server)  # mid-stage: the run was opened, its end cannot be logged

        def benches_ended():
            p = _fleet(repo, slurm, "status", "--json")
            rows = {r["stage"]: r for r in json.loads(p.stdout)}
            return rows if all(r["state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
                               for s, r in rows.items() if s != "compare") else None

        rows = _until(benches_ended, "the bench and physics jobs to end", 900, interval=3)
        assert all(rows[s]["state"] == "COMPLETED" for s in STAGES[:-1]), rows
        rec = json.loads((sweep / "records" / f"{stage}-{victim}.json").read_text())
        assert rec["status"] == "ok" and "lab fleet log" in rec["mlflow"], rec
        log = Path(rows[stage]["log"]).read_text()
        assert "is saved in the run cache all the same" in log, log[-3000:]

        server = _server(db, arts, port, server_log)  # the server is back
        slurm.run("scontrol", "release", jobs["compare"])
        rc, rows = _wait(repo, slurm)
        assert rc == 0 and all(r["state"] == "COMPLETED" for r in rows.values()), rows
        out = _collect_ok(repo, slurm)
        assert "Once the server answers: lab fleet log" in out
        _check_results(repo)
        running = [r for r in _runs(uri, experiment) if r.info.status == "RUNNING"]
        assert running  # the victim's run at least: the server missed its end

        proc = _fleet(repo, slurm, "log")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert re.search(rf"results/{mode}: MLflow run \w+ completed", proc.stdout), proc.stdout
        runs = _runs(uri, experiment)
        assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
        decode = [r for r in runs if r.data.tags.get("slurm_job_id") == victim]
        assert len(decode) == 1 and decode[0].info.status == "FINISHED"
        assert decode[0].data.metrics["decode_tok_s"] > 0
        parents = [r for r in runs if r.data.tags.get("lab_role") == "pipeline"]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        again = _fleet(repo, slurm, "log")  # once more: nothing is logged twice
        assert again.returncode == 0 and "completed" not in again.stdout and "already logged" in again.stdout
    finally:
        _kill(server)
    assert slurm.run("squeue", "-h").stdout.strip() == ""
