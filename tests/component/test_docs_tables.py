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

from shared import markdown_rows

ROOT = Path(__file__).resolve().parents[2]


def _first_table(text: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table of ``text`` whose header starts ``| mode | point |``
    (:func:`shared.markdown_rows`), or [] when there is none."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("| mode | point |")), None)
    if start is None:
        return []
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return markdown_rows("\n".join(lines[start:end]))


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
    summary = _first_table(summary_markdown(read_summary_rows(committed / "summary.csv"), comp.get("baseline")))
    by_point = {(r["mode"], r["point"]): r for r in summary}
    table = _first_table((ROOT / page).read_text())
    assert table, f"{page}: no default-run table"
    for row in table:
        got = by_point.get((row["mode"], row["point"]))
        assert got is not None, f"{page}: {row['mode']} {row['point']} is not a point of the committed run"
        for col, cell in row.items():
            assert col in got, f"{page}: column {col!r} is not one of lab summary's"
            assert cell == got[col], f"{page}: {row['mode']} {row['point']} {col}: {cell!r}, lab summary prints {got[col]!r}"
