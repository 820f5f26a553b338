"""CPU time of the unit tier (user + sys of the pytest process), this checkout against another commit.

    .venv/bin/python benchmarks/unit_tier_cpu.py                  # this checkout, 3 runs
    .venv/bin/python benchmarks/unit_tier_cpu.py --against c4bac35 --runs 3

Issue 31 budgets the unit tier at 30 s of CPU time. CPU time still moves with the host (a shared
VM's neighbours, frequency scaling: the same commit measured 22 s and 32 s an hour apart on the
2-core dev machine), so a figure is only comparable with one taken beside it: with ``--against``
the two trees run alternately (A, B, A, B ...) with the same interpreter and packages
(this checkout's ``.venv``), and the table gives each run and the ratio of the medians.

The other commit is checked out with ``git worktree add --detach`` into a temporary folder (removed
after); ``python -m pytest`` run from a tree's root imports that tree's ``lab/`` (the current
directory comes first on ``sys.path``, before the editable install's finder). Both trees keep
their ``.pyc`` files between runs (``PYTHONDONTWRITEBYTECODE`` is unset for the runs), and each
tree runs once untimed first, so no run pays compilation. CPU time is
``resource.getrusage(RUSAGE_CHILDREN)`` around each pytest subprocess (it and whatever it starts;
the unit tier starts nothing, ``tests/unit/conftest.py``).

Prints one row per run (tree, user s, sys s, total s, wall s, passed/failed line) and a summary:
median total per tree and the ratio. Exit status 1 when a run's tests failed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["-m", "pytest", "-q", "tests/unit", "-p", "no:cacheprovider"]


def run_once(tree: Path, python: str) -> tuple[float, float, float, str, int]:
    """One unit-tier run in ``tree``: ``(user_s, sys_s, wall_s, last output line, exit status)``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([python, *COMMAND], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    return (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, wall,
            lines[-1] if lines else proc.stderr.strip()[-200:], proc.returncode)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="a git commit to run beside this checkout")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per tree (default 3)")
    a = ap.parse_args(argv)
    python = str(ROOT / ".venv" / "bin" / "python")
    if not Path(python).is_file():
        raise SystemExit(f"{python} missing. Fix: run README's test command once (it creates .venv)")
    trees = {"this checkout": ROOT}
    with tempfile.TemporaryDirectory(prefix="unit-tier-cpu-") as tmp:
        if a.against:
            other = Path(tmp) / "other"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other), a.against],
                           check=True)
            cache = ROOT / ".cache"
            if cache.is_dir():  # SGLang's source for the contract tests, installed once per checkout
                (other / ".cache").symlink_to(cache)
            trees[a.against] = other
        try:
            return _measure(trees, python, a.runs)
        finally:
            if a.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[a.against])],
                               check=False)


def _measure(trees: dict[str, Path], python: str, runs: int) -> int:
    for tree in trees.values():  # untimed: writes the .pyc files both trees then reuse
        run_once(tree, python)
    totals: dict[str, list[float]] = {name: [] for name in trees}
    failed = False
    print(f"{'tree':<16} {'run':>3} {'user s':>7} {'sys s':>6} {'CPU s':>6} {'wall s':>7}  result")
    for i in range(1, runs + 1):
        for name, tree in trees.items():
            user, sys_s, wall, last, rc = run_once(tree, python)
            failed |= rc != 0
            totals[name].append(user + sys_s)
            print(f"{name:<16} {i:>3} {user:7.1f} {sys_s:6.1f} {user + sys_s:6.1f} {wall:7.1f}  {last}")
    med = {name: statistics.median(v) for name, v in totals.items()}
    print("median CPU s: " + ", ".join(f"{n} {m:.1f}" for n, m in med.items()))
    if len(med) == 2:
        (na, ma), (nb, mb) = med.items()
        print(f"ratio {na} / {nb}: {ma / mb:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
