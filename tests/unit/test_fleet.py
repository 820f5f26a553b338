"""Fleet mode's parts without a cluster or a repository (issue 23): job scripts, resources,
the placement overrides, multi-node ranks and the MLflow parent seam. A scratch repository:
``tests/e2e/test_fleet_repo.py``; the Slurm cluster: ``tests/e2e/test_fleet_slurm.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.config import ParamsError, load_params
from lab.fleet.rank import rank_command, srun_ranks_argv
from lab.fleet.script import Options, exported_names, render, stage_resources

ROOT = Path(__file__).resolve().parents[2]


def _params(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    edit(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _render(params, stage: str, opts: Options, names: list[str], dependent: bool = False) -> str:
    return render(stage=stage, sweep_id="sweep-0123456789ab", sweep_dir=Path("/shared/fleet/sweep-0123456789ab"),
                  repo=Path("/shared/lab"), commit="0123456789abcdef", python="/shared/lab/.venv/bin/python",
                  resources=stage_resources(stage, params, opts), opts=opts, names=names, dependent=dependent)


def test_job_script_passes_credentials_by_name_only(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_value_that_must_not_appear")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw_value_that_must_not_appear")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    opts = Options(export=["MY_SETTING"])
    monkeypatch.setenv("MY_SETTING", "x")
    names = exported_names(opts)
    assert {"HF_TOKEN", "MLFLOW_TRACKING_PASSWORD", "MY_SETTING"} <= set(names)
    assert "MLFLOW_TRACKING_TOKEN" not in names  # only names set at submission
    text = _render(load_params(ROOT / "params.yaml"), "compare", opts, names, dependent=True)
    assert "value_that_must_not_appear" not in text
    export = next(line for line in text.splitlines() if line.startswith("#SBATCH --export="))
    assert "HF_TOKEN" in export and "=hf_" not in export
    assert "#SBATCH --kill-on-invalid-dep=yes" in text
    assert "git clone --quiet --shared --no-checkout /shared/lab \"$checkout\"" in text
    assert "checkout --quiet --detach 0123456789abcdef" in text
    assert text.rstrip().endswith("-m lab.fleet.job /shared/fleet/sweep-0123456789ab compare")
    assert "--export=NONE" in _render(load_params(ROOT / "params.yaml"), "physics", Options(), [])


def test_resources_are_what_each_stage_needs(tmp_path):
    emu = load_params(ROOT / "params.yaml")
    r = stage_resources("bench@baseline", emu, Options(cpus_per_task=3, mem="2G"))
    assert (r.gpus_per_node, r.exclusive, r.cpus_per_task, r.mem, r.time) == (0, False, 3, "2G", "01:00:00")
    assert stage_resources("physics", emu, Options()).gpus_per_node == 0  # records "not run" without CUDA

    def gpu(raw):
        raw["engine"] = "sglang"
        raw["server"].update(nnodes=2, dist_init_addr="set-by-the-fleet:5000")
        raw["model"]["tp_size"] = 16
        raw["physics"]["tp"] = 8

    sg = load_params(_params(tmp_path, gpu))
    r = stage_resources("bench@eagle3_decode", sg, Options())
    assert (r.nodes, r.gpus_per_node, r.exclusive, r.time) == (2, 8, True, "04:00:00")
    lines = r.sbatch_lines()
    assert "--exclusive" in lines and "--gpus-per-node=8" in lines and not any(x.startswith("--mem") for x in lines)
    shared = stage_resources("bench@eagle3_decode", sg, Options(share=True, cpus_per_task=16, mem="200G"))
    assert not shared.exclusive and "--cpus-per-task=16" in shared.sbatch_lines()
    assert stage_resources("physics", sg, Options()).gpus_per_node == 8
    assert stage_resources("compare", sg, Options()).gpus_per_node == 0
    # a later launch of a mode (bench.launches >= 2) is a bench job like the first
    later = stage_resources("bench_launch@2-eagle3_decode", sg, Options())
    assert (later.nodes, later.gpus_per_node, later.exclusive) == (2, 8, True)
    text = _render(sg, "bench@eagle3_decode", Options(partition="gpu", account="team", time="02:00:00"), [])
    for line in ("--partition=gpu", "--account=team", "--time=02:00:00", "--nodes=2", "--exclusive"):
        assert f"#SBATCH {line}" in text


def test_placement_env_overrides_port_and_is_validated(tmp_path, monkeypatch):
    path = ROOT / "params.yaml"
    in_file = yaml.safe_load(path.read_text())["server"].get("port")  # whatever the workspace set
    monkeypatch.setenv("LAB_SERVER_PORT", "31999")
    assert load_params(path).server.port == 31999 != in_file
    assert yaml.safe_load(path.read_text())["server"].get("port") == in_file  # the file (DVC's params) unchanged
    monkeypatch.setenv("LAB_SERVER_PORT", "80")
    with pytest.raises(ParamsError, match="server.port"):
        load_params(path)


def test_multi_node_ranks_bind_loopback_and_meet_at_node_0(tmp_path, monkeypatch):
    def two_nodes(raw):
        raw["engine"] = "sglang"
        raw["server"].update(nnodes=2, dist_init_addr="set-by-the-fleet:5000")
        raw["model"]["tp_size"] = 16

    monkeypatch.chdir(_params(tmp_path, two_nodes).parent)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")  # repo_root() finds this directory
    monkeypatch.setenv("LAB_SERVER_DIST_INIT_ADDR", "10.1.2.3:41000")
    argv = rank_command("eagle3_decode", 1, python="python").argv
    joined = " ".join(argv)
    assert "--nnodes 2 --node-rank 1 --dist-init-addr 10.1.2.3:41000" in joined
    assert "--host 127.0.0.1" in joined  # HTTP on loopback: only the rendezvous is the node's address
    assert srun_ranks_argv("eagle3_decode", 3, "/venv/bin/python") == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--relative=1", "--kill-on-bad-exit=1",
        "/venv/bin/python", "-m", "lab.fleet.rank", "--mode", "eagle3_decode"]


def test_fleet_parent_from_env_needs_no_file_and_no_server(tmp_path, monkeypatch):
    from lab.tracking.grouping import PARENT_FILE, PARENT_RUN_ENV
    from lab.tracking.tracker import Tracker

    params = load_params(ROOT / "params.yaml")
    # a stage's tracker (its invocation key given: computing one reads git, a subprocess);
    # its store is never reached, since nothing here needs MLflow
    tracker = Tracker(params.mlflow.resolved_tracking_uri(tmp_path), params.mlflow.experiment, root=tmp_path,
                      key="an-invocation-key", base_tags={}, engine=params.engine)
    monkeypatch.setenv(PARENT_RUN_ENV, "0123abcd")
    assert tracker.parent_run_id() == tracker.known_parent() == "0123abcd"
    assert tracker.close_pipeline(ok=True) == []  # the sweep's parent outlives the stage
    assert tracker._client is None and not (tmp_path / PARENT_FILE).exists()


def test_jobs_get_the_lab_mlflow_and_hf_variables_by_prefix_and_telemetry_off(monkeypatch):
    from lab.config.loading import SERVER_PLACEMENT_ENV
    from lab.fleet.script import JOB_OWN, TELEMETRY_OFF
    from lab.tracking.grouping import INVOCATION_ENV, PARENT_RUN_ENV
    from lab.tracking.runs import STAGE_STARTED_ENV

    # the job sets these itself: the lab's own names, from the modules that define them
    from lab.pipeline.stage import RESULTS_SAFE_ENV

    assert {*SERVER_PLACEMENT_ENV, INVOCATION_ENV, PARENT_RUN_ENV, STAGE_STARTED_ENV, RESULTS_SAFE_ENV} <= JOB_OWN
    env = {"HOME": "/home/u", "MLFLOW_TRACKING_TOKEN": "tok_must_not_appear", "MLFLOW_S3_ENDPOINT_URL": "http://s3",
           "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_must_not_appear", "HUGGING_FACE_HUB_TOKEN": "hf2_must_not_appear",
           "LAB_SOMETHING": "x", "LAB_SERVER_PORT": "31000", "LAB_INVOCATION": "dvc-1", "MLFLOW_RUN_ID": "abc",
           "MLFLOW_DISABLE_TELEMETRY": "false", "CUDA_VISIBLE_DEVICES": "0", "VIRTUAL_ENV": "/x", "OTHER": "y"}
    names = exported_names(Options(), env)
    assert names == sorted(["HOME", "MLFLOW_TRACKING_TOKEN", "MLFLOW_S3_ENDPOINT_URL", "HF_HUB_OFFLINE", "HF_TOKEN",
                            "HUGGING_FACE_HUB_TOKEN", "LAB_SOMETHING"])
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    text = _render(load_params(ROOT / "params.yaml"), "bench@baseline", Options(), names)
    assert "must_not_appear" not in text
    export = next(line for line in text.splitlines() if line.startswith("#SBATCH --export="))
    assert export == "#SBATCH --export=" + ",".join(names)
    telemetry = next(line for line in text.splitlines() if line.startswith("export MLFLOW_DISABLE_TELEMETRY"))
    assert all(f"{k}={v}" in telemetry for k, v in TELEMETRY_OFF.items())
    # the telemetry line comes before the job's Python starts
    assert text.index(telemetry) < text.index("-m lab.fleet.job")


def test_job_script_requeues_cleanly_with_setup_lines_and_a_container():
    params = load_params(ROOT / "params.yaml")
    plain = _render(params, "bench@baseline", Options(), [])
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append"):
        assert line in plain  # a requeued attempt's log goes on below the first one's
    assert 'attempt=${SLURM_RESTART_COUNT:-0}' in plain
    assert ('checkout=/shared/fleet/sweep-0123456789ab/checkouts/bench@baseline-$SLURM_JOB_ID$attempt_suffix'
            in plain)
    assert plain.index('rm -rf "$checkout"') < plain.index("git clone")
    assert "exec srun" not in plain and "set +u" not in plain
    assert plain.rstrip().splitlines()[-1] == ("exec /shared/lab/.venv/bin/python -m lab.fleet.job "
                                               "/shared/fleet/sweep-0123456789ab bench@baseline")

    opts = Options(setup=["module load cuda/12.4", "source /opt/env.sh"], container_image="lmsysorg/sglang:v0.5.6",
                   container_mounts=["/models:/models:ro"])
    text = render(stage="bench@baseline", sweep_id="sweep-0123456789ab",
                  sweep_dir=Path("/shared/lab/.cache/fleet/sweep-0123456789ab"), repo=Path("/shared/lab"),
                  commit="0123456789abcdef", python="/shared/lab/.venv/bin/python",
                  resources=stage_resources("bench@baseline", params, opts), opts=opts, names=[], dependent=False,
                  cache_dir="/scratch/dvc-cache")
    lines = text.splitlines()
    i = lines.index("module load cuda/12.4")
    assert lines[i - 1] == "set +u" and lines[i + 1] == "source /opt/env.sh" and lines[i + 2] == "set -u"
    assert i < next(n for n, x in enumerate(lines) if x.startswith("git clone"))  # set-up first, on the node
    last = lines[-1]
    assert last.startswith("exec srun --nodes=1 --ntasks=1 ")
    assert "--container-image=lmsysorg/sglang:v0.5.6" in last
    # the head checkout (the sweep dir is under it) and the DVC cache at their own paths, then the user's
    assert "--container-mounts=/shared/lab:/shared/lab,/scratch/dvc-cache:/scratch/dvc-cache,/models:/models:ro" in last
    assert '--container-workdir="$checkout"' in last
    assert last.endswith("/shared/lab/.venv/bin/python -m lab.fleet.job /shared/lab/.cache/fleet/sweep-0123456789ab "
                         "bench@baseline")


def test_status_reports_what_slurm_reports(tmp_path):
    from lab.fleet.fleet_sweep import Sweep, stage_rows, write_record
    from lab.fleet.slurm import JobState

    sweep = Sweep(tmp_path, {"stages": [{"stage": s, "upstream": []} for s in ("a", "b", "c", "d", "e")],
                             "jobs": {s: [{"job_id": j, "log": ""}] for s, j in
                                      (("a", "11"), ("b", "12"), ("c", "13"), ("d", "14"), ("e", "15"))}})
    # a: requeued after its first attempt was killed (its record says cancelled): Slurm says PENDING
    write_record(tmp_path, "a", "11", {"status": "cancelled", "exit_code": 143, "attempt": 0})
    # b: the rerun failed at once, before it wrote a record: Slurm's FAILED, not the old record's CANCELLED
    write_record(tmp_path, "b", "12", {"status": "cancelled", "exit_code": 143, "attempt": 0})
    # c: Slurm says COMPLETED and the record ok: done; d: COMPLETED without an ok record: lost
    write_record(tmp_path, "c", "13", {"status": "ok", "exit_code": 0, "attempt": 1})
    q = {"11": JobState("11", "PENDING", "BeginTime", ""), "12": JobState("12", "FAILED", "NonZeroExitCode", "n1"),
         "13": JobState("13", "COMPLETED", "None", "n1"), "14": JobState("14", "COMPLETED", "None", "n1")}
    rows = {r.stage: r for r in stage_rows(sweep, q)}
    assert rows["a"].state == "PENDING" and rows["a"].live
    assert rows["b"].state == "FAILED" and not rows["b"].live
    assert rows["c"].state == "COMPLETED" and rows["d"].state == "LOST"
    # e: Slurm no longer lists it and it recorded nothing
    assert rows["e"].state == "LOST"


def test_accounting_answers_for_jobs_squeue_forgot(monkeypatch):
    from lab.fleet import slurm

    calls = []

    def fake_run(cmd, timeout=60):
        calls.append(cmd[0])
        if cmd[0] == "squeue":
            return "7|RUNNING|None|n1\n"
        return "8|CANCELLED by 0|0:15|n2\n9|COMPLETED|0:0|None assigned\n"

    monkeypatch.setattr(slurm, "_run", fake_run)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    states = slurm.queue(["7", "8", "9"])
    assert calls == ["squeue", "sacct"]
    assert (states["7"].state, states["8"].state, states["8"].reason, states["8"].nodes, states["9"].nodes) == (
        "RUNNING", "CANCELLED", "exit 0:15", "n2", "")

    def no_accounting(cmd, timeout=60):
        if cmd[0] == "squeue":
            return ""
        raise slurm.SlurmError("sacct failed (1): Slurm accounting storage is disabled")

    monkeypatch.setattr(slurm, "_run", no_accounting)
    assert slurm.queue(["8"]) == {}  # the record then decides (fleet_sweep.stage_rows)
