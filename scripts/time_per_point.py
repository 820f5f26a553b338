"""Seconds of measurement per kind of point, per mode, from ``results/<mode>/requests.jsonl``.

For each (point, repeat) the window is first send to last end of its requests (what the
client measured over); the script sums those windows by kind: closed-loop concurrency points
(``c<N>``, incl. context/output axes) and open-loop rate points (``r<R>``). Startup and
warm-up are not included. Usage: ``python scripts/time_per_point.py [results_dir]``.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.measure.request_record import RequestRecord  # noqa: E402


def windows_s(path: Path) -> dict[str, float]:
    """``{"concurrency": s, "rate": s}``: summed (point, repeat) windows of one mode's requests."""
    groups: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    for line in path.read_text().splitlines():
        r = RequestRecord.from_json(json.loads(line))
        if r.t_send is not None and r.t_end is not None:
            groups[(str(r.point or f"c{r.concurrency}"), r.repeat)].append(r)
    out = {"concurrency": 0.0, "rate": 0.0}
    for (point, _), recs in groups.items():
        kind = "rate" if point.startswith("r") else "concurrency"
        out[kind] += max(r.t_end for r in recs) - min(r.t_send for r in recs)
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    total = defaultdict(float)
    for path in sorted(root.glob("*/requests.jsonl")):
        w = windows_s(path)
        print(f"{path.parent.name:20s} concurrency points {w['concurrency']:7.1f} s   rate points {w['rate']:7.1f} s")
        for k, v in w.items():
            total[k] += v
    print(f"{'all modes':20s} concurrency points {total['concurrency']:7.1f} s   rate points {total['rate']:7.1f} s")


if __name__ == "__main__":
    main()
