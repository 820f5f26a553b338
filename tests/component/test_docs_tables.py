"""README's and docs/default-run.md's default-run tables are `lab summary`'s on the committed reports.

The committed reports are read from git (``git show HEAD:reports/...``), not from the working tree:
README's first command re-runs the pipeline and rewrites ``reports/`` with that machine's numbers
(a fresh clone's run gave 58.9 [52.8, 65.1] where the committed run has 58.9 [52.7, 65.0]).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _md_tables(text: str) -> list[list[dict[str, str]]]:
    """The Markdown tables of ``text`` whose header starts ``| mode | point |``, as rows of
    ``{header: cell}``."""
    tables, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| mode | point |") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(head, (c.strip() for c in row.strip().strip("|").split("|")))))
            tables.append(rows)
    return tables


@pytest.mark.parametrize("page", ["README.md", "docs/default-run.md"])
def test_the_default_run_tables_are_lab_summarys_on_the_committed_reports(page, tmp_path):
    """The first ``| mode | point |`` table of README and of docs/default-run.md (the default run's;
    later tables there come from other, named runs) shows cells of `lab summary`'s table on the
    committed `reports/` (the same columns by header, any subset of rows and columns), so the numbers
    quoted are the committed run's and change with it."""
    from lab.report.tables import read_summary_rows, summary_markdown

    committed = tmp_path / "reports"
    committed.mkdir()
    for name in ("summary.csv", "comparison.json"):
        (committed / name).write_bytes(subprocess.run(["git", "show", f"HEAD:reports/{name}"], cwd=ROOT,
                                                      capture_output=True, check=True).stdout)
    comp = json.loads((committed / "comparison.json").read_text())
    [summary] = _md_tables(summary_markdown(read_summary_rows(committed / "summary.csv"), comp.get("baseline")))
    by_point = {(r["mode"], r["point"]): r for r in summary}
    tables = _md_tables((ROOT / page).read_text())
    assert tables, f"{page}: no default-run table"
    for table in tables[:1]:
        for row in table:
            got = by_point.get((row["mode"], row["point"]))
            assert got is not None, f"{page}: {row['mode']} {row['point']} is not a point of the committed run"
            for col, cell in row.items():
                assert col in got, f"{page}: column {col!r} is not one of lab summary's"
                assert cell == got[col], f"{page}: {row['mode']} {row['point']} {col}: {cell!r}, lab summary prints {got[col]!r}"
