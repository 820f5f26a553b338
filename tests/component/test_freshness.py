"""Stale results say so, in a clone of the project's own checkout (its committed outputs and
dvc.lock): current as committed, stale after an edit of params.yaml, current again after restoring it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.pipeline.freshness import stale_lines, stale_stages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    d = tmp_path_factory.mktemp("freshness") / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(d)], check=True)
    return d


def test_committed_results_match_the_committed_params_and_code(clone):
    """The committed dvc.lock was written by a `dvc repro` of the committed code and params: no stage's
    dependencies changed (outputs absent from a clone do not count)."""
    assert stale_stages(clone) == {}
    assert stale_lines(clone) == []


def test_an_edited_parameter_is_named_with_both_values(clone):
    p = clone / "params.yaml"
    text = p.read_text()
    params = yaml.safe_load(text)
    was = params["modes"]["eagle3_decode"]["num_steps"]
    before = stale_stages(clone)  # {} when the committed dvc.lock is current (the test above)
    params["modes"]["eagle3_decode"]["num_steps"] = was + 1
    p.write_text(yaml.safe_dump(params, sort_keys=False))  # DVC compares values, not formatting
    try:
        stale = stale_stages(clone)
        assert f"params.yaml modes.eagle3_decode.num_steps {was} -> {was + 1}" in stale["bench@eagle3_decode"]
        assert stale.get("bench@baseline") == before.get("bench@baseline")  # its parameters did not change
        out = subprocess.run([sys.executable, "-m", "lab.cli", "summary"], cwd=clone, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        first = out.stdout.splitlines()
        assert first[0].startswith("STALE:") and any("bench@eagle3_decode" in x for x in first[1:5])
        assert all(len(x) <= 120 for x in first[:6])
    finally:
        p.write_text(text)
    assert stale_stages(clone) == before
