"""README stays short and every relative link in README and docs/ resolves (file and anchor).

Anchors follow GitHub's rule for headings: lower-cased, punctuation other than ``-`` and ``_``
dropped, spaces to ``-`` (so ``## params.yaml`` is ``#paramsyaml``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_LINES = 150


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of ``page``'s headings (outside code fences)."""
    out, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def links(page: Path) -> list[str]:
    """Relative link targets of ``page`` outside code fences (no http(s), no mailto)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_readme_keeps_the_two_commands_ci_runs():
    """README opens with the two commands; the second is the one .ci/run runs (with --durations)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[2] == "```bash" and lines[5] == "```", lines[:6]
    ci = (ROOT / ".ci" / "run").read_text()
    assert lines[4] + " --durations=25" in ci, (lines[4], "not in .ci/run")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, broken


def test_there_is_one_quoted_answer_and_it_is_the_committed_one():
    """The answer README quotes is lab summary's output on the committed reports it names, line for line
    (README may leave lines out, marked ``...``, but not change one)."""
    from lab.report.answer import answer_text
    import json

    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("```\nDoes EAGLE-3") + 4:]
    block = block[: block.index("```")]
    reports = ROOT / "docs/benchmarks/h200-sglang-0.5.16/reports"
    text = answer_text(json.loads((reports / "comparison.json").read_text()), reports / "report.html")
    shown = text.splitlines()
    for line in block.splitlines():
        if line.strip() != "...":
            assert line in shown, f"README quotes a line lab summary does not print: {line!r}"
