"""``lab calibrate`` then ``lab tune`` from a committed tarball of ``lab capture`` folders: the
commands behind docs/benchmarks/*-tune/ (docs/speculation.md, "lab tune").

    python scripts/tune_from_captures.py TARBALL OUT --params PARAMS --modes baseline eagle3_steps1 ...
        [--points c1 c8 ...] [--context-tokens 0 ...] [--draws 100]

Unpacks ``TARBALL`` (one top folder of ``<mode>/``) into a temporary folder, calibrates from
``--modes`` (``lab calibrate ... --points ... --out OUT/calibration``) and tunes
(``lab tune --calibration OUT/calibration/calibration.json --params PARAMS --capture-requests N --out OUT``:
predicted for what ``lab capture`` measures, as the captures were made). The
calibration's ``result_dir`` entries name the temporary folder: what they came from is the tarball.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.cli import main as lab  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from h200_adaptive import extract  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tarball", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--params", required=True)
    ap.add_argument("--modes", nargs="+", required=True, help="the capture folders to calibrate from")
    ap.add_argument("--points", nargs="*", default=None, help="calibrate from these windows only (window.json keys)")
    ap.add_argument("--context-tokens", nargs="*", default=None, help="tune at these context lengths")
    ap.add_argument("--draws", default="100")
    ap.add_argument("--requests", default="8", help="predict what `lab capture --requests N` measures (default 8, "
                                                     "as the captures were made)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cap = extract(Path(tmp), a.tarball)
        cal = a.out / "calibration"
        argv_cal = ["calibrate", *(str(cap / m) for m in a.modes), "--out", str(cal)]
        if a.points:
            argv_cal += ["--points", *a.points]
        rc = lab(argv_cal)
        if rc:
            return rc
        argv_tune = ["tune", "--calibration", str(cal / "calibration.json"), "--params", a.params, "--out", str(a.out),
                     "--draws", a.draws, "--capture-requests", a.requests]
        if a.context_tokens:
            argv_tune += ["--context-tokens", *a.context_tokens]
        return lab(argv_tune)


if __name__ == "__main__":
    sys.exit(main())
