"""Every figure and result file is written through lab/atomic.py: a crash mid-write leaves the
previous file, never a truncated one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.atomic import atomic_path, write_text_atomic

LAB = Path(__file__).resolve().parents[2] / "lab"


def test_interrupted_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "summary.json"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half a fi")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


def test_no_figure_or_report_is_written_around_lab_atomic():
    """Static check over lab/: figures are saved only by lab.atomic.savefig_atomic, and the
    report, summary, params.yaml (sweep) and pipeline map writers call lab.atomic."""
    bare = []
    for path in LAB.rglob("*.py"):
        if path.name == "atomic.py":
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.savefig\(", line):
                bare.append(f"{path.relative_to(LAB)}:{no}: {line.strip()}")
    assert not bare, bare
    for module, call in (("report/html.py", "write_text_atomic(path, text)"), ("pipeline/sweep.py", "write_text_atomic(params_path"),
                         ("tracking/grouping.py", "write_json_atomic(path, known"), ("report/tables.py", "write_json_atomic(rep_dir")):
        assert call in (LAB / module).read_text(), (module, call)
