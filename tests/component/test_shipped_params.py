"""Every params file the project ships runs: it passes the lab's schema, and ``dvc repro --dry``
plans one bench stage per mode (and launch) with it as ``params.yaml`` (issue 34, item 1: the H200
single-launch configs once lacked ``bench.later_launches``, which dvc.yaml's matrix needs, and
stopped at once on the GPU node). One scratch copy of the lab, params.yaml swapped per file.
Each GPU config's header says how long its ``dvc repro`` takes and the stage-by-stage commands
that fit a 10-minute call (docs/gpu-node.md)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from lab.config.loading import load_params
from scratch import ROOT, run_dvc, scratch_repo

#: Files meant to be copied to params.yaml and run: the default and every shipped config.
RUNNABLE = sorted([ROOT / "params.yaml",
                   *(p for p in (ROOT / "configs").rglob("*.yaml")
                     if isinstance(yaml.safe_load(p.read_text()), dict)
                     and "modes" in yaml.safe_load(p.read_text()))])
#: Params files recorded beside a committed benchmark (docs/benchmarks/*/params.yaml): what ran at
#: the commit their dvc.lock names, so they must still load, but they describe that commit's
#: dvc.yaml, not today's (their notes say which command made them).
RECORDS = sorted((ROOT / "docs").rglob("params*.yaml"))


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_the_lists_are_not_empty():
    assert ROOT / "params.yaml" in RUNNABLE
    assert len([p for p in RUNNABLE if "configs" in p.parts]) >= 5, RUNNABLE
    assert RECORDS, "docs/benchmarks/*/params.yaml: expected the committed runs' params"


@pytest.mark.parametrize("path", RUNNABLE + RECORDS, ids=_id)
def test_schema_accepts(path):
    load_params(path)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    repo = scratch_repo(tmp_path_factory.mktemp("shipped") / "repo")
    (repo / "results").mkdir()  # compare's dependency, for --dry to walk past it
    return repo


@pytest.mark.parametrize("path", RUNNABLE, ids=_id)
def test_dvc_repro_dry_plans_every_mode(scratch, path):
    shutil.copy(path, scratch / "params.yaml")
    proc = run_dvc(scratch, "repro", "--dry", timeout=120)
    assert proc.returncode == 0, f"{_id(path)}: {proc.stderr[-2000:]}"
    planned = set(re.findall(r"Running stage '([^']+)'", proc.stdout))
    raw = yaml.safe_load(path.read_text())
    want = {f"bench@{m}" for m in raw["modes"]}
    want |= {f"bench_launch@{n}-{m}" for n in raw["bench"].get("later_launches", []) for m in raw["modes"]}
    want |= {"compare", "physics"}
    assert planned == want, f"{_id(path)}: planned {sorted(planned)}"


@pytest.mark.parametrize("path", [p for p in RUNNABLE if "h200" in p.parts], ids=_id)
def test_gpu_config_header_says_how_long_and_how_to_split(path):
    header = "".join(line for line in path.read_text().splitlines(keepends=True)[:60] if line.startswith("#"))
    assert "How long" in header, f"{_id(path)}: header lacks its `dvc repro` duration on the H200"
    assert "10 minutes" in header or "one stage per call" in header, _id(path)
    assert re.search(r"dvc repro bench@\w+", header), f"{_id(path)}: no stage-by-stage command"
    for mode in yaml.safe_load(path.read_text())["modes"]:
        assert re.search(rf"(bench@|each other mode)", header) and (
            f"bench@{mode}" in header or "each other mode" in header), f"{_id(path)}: {mode} has no command"


def test_gpu_node_doc_has_the_timing_section():
    text = (ROOT / "docs" / "gpu-node.md").read_text()
    assert "what fits a 10-minute call" in text
    for p in RUNNABLE:
        if "h200" in p.parts:
            assert p.name in text, p.name
