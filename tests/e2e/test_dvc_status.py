"""DVC re-runs only what changed (issue 14), shown with ``dvc status`` on scratch copies.

A scratch copy of the lab gets placeholder outputs for every stage and ``dvc commit -f``
(DVC records the current deps, params and outputs in ``dvc.lock`` without running anything:
no engine, no kernel), so ``dvc status`` starts clean. Then one edit per test, and
``dvc status`` must list exactly the stages whose declared deps or params changed:

- a report/figure module: ``compare`` only;
- measurement code: every ``bench@<mode>`` (and ``compare``, which imports it too), not
  ``physics``;
- a param no bench stage reads (``sweep.prefix``, ``physics.*``): no ``bench@`` stage;
- one mode's params: that mode's ``bench@`` stage and ``compare`` only.

What ``dvc status`` says is DVC's own verdict; the edits are real file changes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from scratch import run_dvc, scratch_repo


def _outputs(repo: Path) -> list[str]:
    """Every output path of every stage in the copy's dvc.yaml (``foreach`` expanded)."""
    dvc = yaml.safe_load((repo / "dvc.yaml").read_text())
    params = yaml.safe_load((repo / "params.yaml").read_text())

    def outs(body: dict) -> list[str]:
        return [o if isinstance(o, str) else next(iter(o)) for k in ("outs", "metrics", "plots")
                for o in body.get(k) or []]

    paths: list[str] = []
    for spec in dvc["stages"].values():
        if "foreach" in spec:
            paths += [o.replace("${key}", key) for key in params["modes"] for o in outs(spec["do"])]
        else:
            paths += outs(spec)
    return paths


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A scratch copy whose dvc.lock matches its code, params and (placeholder) outputs."""
    repo = scratch_repo(tmp_path_factory.mktemp("dvcstatus") / "lab")
    for out in _outputs(repo):
        path = repo / out
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("placeholder\n")
        else:  # a folder output (reports/figures)
            path.mkdir(parents=True, exist_ok=True)
            (path / "placeholder.png").write_text("placeholder\n")
    for args in (("commit", "-f"), ("commit", "-f", "compare")):  # again: the first wrote .gitignore files under results/
        proc = run_dvc(repo, *args, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _changed(repo) == set(), "the scratch copy must start clean"
    return repo


def _changed(repo: Path) -> set[str]:
    proc = run_dvc(repo, "status", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return set(json.loads(proc.stdout or "{}"))


@pytest.fixture
def repo(committed, tmp_path) -> Path:
    copy = tmp_path / "lab"
    shutil.copytree(committed, copy, symlinks=True)
    return copy


def _touch_code(repo: Path, rel: str) -> None:
    path = repo / rel
    assert path.is_file(), f"{rel} moved: point this test at its new place"
    path.write_text(path.read_text() + "\n# edited by tests/e2e/test_dvc_status.py\n")


def _edit_params(repo: Path, edit) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    edit(params)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _bench(repo: Path) -> set[str]:
    return {f"bench@{m}" for m in yaml.safe_load((repo / "params.yaml").read_text())["modes"]}


def test_editing_a_figure_module_reruns_only_compare(repo):
    _touch_code(repo, "lab/report/figures.py")
    assert _changed(repo) == {"compare"}


def test_editing_measurement_code_reruns_every_bench_stage(repo):
    _touch_code(repo, "lab/measure/records.py")
    changed = _changed(repo)
    assert _bench(repo) <= changed
    assert "physics" not in changed


def test_editing_a_bench_only_engine_module_reruns_bench_only(repo):
    # the compare stage reads the engine classes (lab/engine/registry.py and the modules they
    # import, process.py among them) since the engine became one object; startup.py is bench's alone
    _touch_code(repo, "lab/engine/startup.py")
    assert _changed(repo) == _bench(repo)


def test_a_sweep_param_reruns_no_bench_stage(repo):
    _edit_params(repo, lambda p: p["sweep"].update(prefix="grid"))
    changed = _changed(repo)
    assert not changed & _bench(repo), changed
    assert changed == {"compare"}  # the generated-modes check reads the sweep section


def test_a_physics_param_reruns_only_physics(repo):
    _edit_params(repo, lambda p: p["physics"].update(timed_iters=p["physics"]["timed_iters"] + 1))
    assert _changed(repo) == {"physics"}


def test_one_mode_param_reruns_that_mode_and_compare(repo):
    _edit_params(repo, lambda p: p["modes"]["eagle3_decode"].update(attention_mode="prefill"))
    assert _changed(repo) == {"bench@eagle3_decode", "compare"}
