"""Fleet mode on a scratch git repository, without a cluster (issue 23): DVC's stage graph, the
run-cache guard that fleet processes lift, and what ``lab fleet submit`` refuses before it
writes or submits anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from lab.fleet.head import FleetError, submit
from lab.fleet.script import Options
from scratch import scratch_repo


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


def test_submit_refuses_container_mounts_without_an_image(repo):
    with pytest.raises(FleetError, match="--container-mounts without --container-image"):
        submit(repo, Options(container_mounts=["/models:/models"]))
    assert not (repo / ".cache" / "fleet").exists()


def test_restore_clears_only_committed_outputs_git_holds(repo):
    from lab.fleet.runcache import clear_committed_outputs

    out = repo / "results" / "baseline"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text('{"written_at": "committed"}\n')
    (repo / "reports" / "headline").mkdir(parents=True, exist_ok=True)
    (repo / "reports" / "summary.csv").write_text("mode,point\n")
    (repo / "reports" / "headline" / "baseline.json").write_text("{}\n")
    subprocess.run(["git", "add", "-f", "results/baseline/metrics.json", "reports"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "outputs"], cwd=repo, check=True)
    (out / "result.json").write_text("{}\n")  # an output git does not track: DVC's business, untouched
    assert clear_committed_outputs(repo, "bench@baseline") == ["results/baseline/metrics.json"]
    assert not (out / "metrics.json").exists() and (out / "result.json").exists()
    # an edited committed output stays (DVC's refusal then stands: nothing of yours is lost)
    (repo / "reports" / "summary.csv").write_text("mode,point\nmine,c1\n")
    assert clear_committed_outputs(repo, "compare") == ["reports/headline/baseline.json"]
    assert (repo / "reports" / "summary.csv").read_text().endswith("mine,c1\n")
