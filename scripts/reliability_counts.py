"""Run the fault, interruption and bad-input tests and print the counts quoted in
docs/reliability.md: faults injected, survived, processes leaked, results lost.

    .venv/bin/python scripts/reliability_counts.py [--json OUT]

Each fault test appends its outcome to a tally file (tests/reliability_util.py:tally):
survived = the run ended as documented, leaked = engine processes alive afterwards,
lost = requests the emulator finished that have no record in requests.jsonl. The exit
status is pytest's, or 1 if anything leaked or was lost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/component/test_faults.py", "tests/e2e/test_interrupt.py", "tests/component/test_interrupt_live.py",
         "tests/unit/test_bad_input.py", "tests/component/test_bad_input_live.py"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the counts here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tally = Path(d) / "tally.jsonl"
        env = {**os.environ, "LAB_RELIABILITY_TALLY": str(tally)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        rows = [json.loads(line) for line in tally.read_text().splitlines()] if tally.exists() else []
    summary_line = next((ln for ln in reversed(proc.stdout.splitlines()) if " passed" in ln or " failed" in ln), "")
    counts = {
        "faults_injected": len(rows),
        "survived": sum(r["survived"] for r in rows),
        "processes_leaked": sum(r["leaked"] for r in rows),
        "results_lost": sum(r["lost"] for r in rows),
        "pytest": summary_line.strip(),
        "cases": rows,
    }
    print(f"pytest: {counts['pytest']}")
    for r in rows:
        print(f"  {'ok  ' if r['survived'] else 'FAIL'} {r['case']}: leaked {r['leaked']}, lost {r['lost']}")
    print(f"faults injected: {counts['faults_injected']}, survived: {counts['survived']}, "
          f"processes leaked: {counts['processes_leaked']}, results lost: {counts['results_lost']}")
    if args.json:
        Path(args.json).write_text(json.dumps(counts, indent=2) + "\n")
    if proc.returncode != 0:
        print(proc.stdout[-4000:], file=sys.stderr)
        return proc.returncode
    return 1 if counts["processes_leaked"] or counts["results_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
