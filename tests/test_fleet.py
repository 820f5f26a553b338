"""Fleet mode's parts without a cluster (issue 23): job scripts, resources, the placement
overrides, the MLflow parent seam, the run-cache guard, the stage graph and the refusals of
``lab fleet submit``. The Slurm cluster itself runs in ``tests/e2e/test_fleet_slurm.py``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from lab.config import ParamsError, load_params
from lab.fleet.head import FleetError, submit
from lab.fleet.rank import rank_command, srun_ranks_argv
from lab.fleet.script import Options, exported_names, render, stage_resources
from scratch import scratch_repo

ROOT = Path(__file__).resolve().parents[1]


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
    text = _render(sg, "bench@eagle3_decode", Options(partition="gpu", account="team", time="02:00:00"), [])
    for line in ("--partition=gpu", "--account=team", "--time=02:00:00", "--nodes=2", "--exclusive"):
        assert f"#SBATCH {line}" in text


def test_placement_env_overrides_port_and_is_validated(tmp_path, monkeypatch):
    path = ROOT / "params.yaml"
    monkeypatch.setenv("LAB_SERVER_PORT", "31999")
    assert load_params(path).server.port == 31999
    assert yaml.safe_load(path.read_text())["server"]["port"] == 30000  # the file (DVC's params) unchanged
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
    from lab.tracking.grouping import PARENT_FILE, PARENT_RUN_ENV, close_pipeline_runs, known_parent, pipeline_parent

    params = load_params(ROOT / "params.yaml")
    monkeypatch.setenv(PARENT_RUN_ENV, "0123abcd")
    assert pipeline_parent(params, tmp_path) == known_parent(params, tmp_path) == "0123abcd"
    assert close_pipeline_runs(params, ok=True, root=tmp_path) == []  # the sweep's parent outlives the stage
    assert not (tmp_path / PARENT_FILE).exists()


@pytest.fixture()
def repo(tmp_path) -> Path:
    repo = scratch_repo(tmp_path / "lab", lambda p: p["mlflow"].update(tracking_uri="http://127.0.0.1:9"),
                        extra_files=(".gitignore",))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], cwd=repo, check=True)
    return repo


def test_stage_graph_and_the_run_cache_guard(repo, monkeypatch):
    from dvc.repo import Repo
    from dvc.stage import cache as stage_cache

    from lab.fleet.runcache import cached, persistent_outputs_cacheable, stage_order

    order = stage_order(repo)
    names = [s for s, _ in order]
    assert names[-1] == "compare" and set(names[:-1]) == {"physics", "bench@baseline", "bench@eagle3_prefill",
                                                           "bench@eagle3_decode"}
    assert sorted(dict(order)["compare"]) == sorted(names[:-1])
    monkeypatch.chdir(repo)  # DVC names stages relative to the current directory
    with Repo(str(repo)) as r:
        bench = next(s for s in r.index.stages if s.addressing == "bench@baseline")
        assert not stage_cache._can_hash(bench)  # DVC's guard: persistent outputs
        with persistent_outputs_cacheable():
            assert stage_cache._can_hash(bench)
        assert not stage_cache._can_hash(bench) and all(o.persist for o in bench.outs)
    assert cached(repo, "bench@baseline", "physics") == {"bench@baseline": False, "physics": False}  # nothing ran


def test_submit_refuses_before_anything_runs(repo):
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace("num_prompts: 8", "num_prompts: 4"))
    with pytest.raises(FleetError, match="git commit"):
        submit(repo, Options())
    subprocess.run(["git", "checkout", "params.yaml"], cwd=repo, check=True)
    (repo / "lab" / "extra.py").write_text('"""untracked"""\n')
    (repo / "dvc.yaml").write_text((repo / "dvc.yaml").read_text().replace(
        "        - lab/atomic.py\n", "        - lab/atomic.py\n        - lab/extra.py\n", 1))
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "dep"], cwd=repo, check=True)
    with pytest.raises(FleetError, match="untracked by git"):
        submit(repo, Options())
    subprocess.run(["git", "add", "lab/extra.py"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "add"], cwd=repo, check=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["mlflow"]["tracking_uri"] = "sqlite:///mlflow.db"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "sqlite"], cwd=repo, check=True)
    with pytest.raises(FleetError, match="one tracking server"):
        submit(repo, Options())
    params["mlflow"]["tracking_uri"] = "http://me:secret@tracking:5000"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "pw"], cwd=repo, check=True)
    with pytest.raises(FleetError, match="MLFLOW_TRACKING_PASSWORD"):
        submit(repo, Options())
    assert not (repo / ".cache" / "fleet").exists()  # nothing written, nothing submitted
