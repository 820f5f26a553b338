"""Adaptive speculation against fixed num_steps on real SGLang 0.5.16 (one H200, the kshard stack), from
the committed captures only (``tests/fixtures/sglang-0.5.16/kshard-adaptive.tar.xz``:
``kshard-adaptive/<mode>/`` as ``lab capture`` wrote them, ``failed/`` the two launches 0.5.16 refused).

Per (concurrency, context length) window and mode: the draft steps the server ran (fixed modes: the
launch's; ``eagle3_adaptive``: the tier its decode log lines show at that batch size, ``accept len``
and ``accept rate`` = (accept length - 1) / steps, the most frequent value), the device-timer ms per
decode iteration of verify and draft (:func:`lab.measure.crosscheck.window_server_timing`), the
measured accept length, the median per-request decode tok/s, the window's output tok/s (all
requests' tokens over its wall time), and the speedup of the per-request decode tok/s over the
baseline at the same point (:meth:`lab.analysis.estimates.Ratio.welch`, requests as units, within
one launch) with the output tok/s ratio beside it.

``python scripts/h200_adaptive.py`` prints the markdown that ``docs/benchmarks/h200-sglang-0.5.16-adaptive.md``
holds between its ``<!-- tables -->`` markers (``tests/unit/test_real_sglang_0516_adaptive.py`` checks
they agree); ``--captures DIR`` reads a ``lab capture --out`` folder instead, ``--tarball FILE`` another
tarball (``docs/benchmarks/emulator-adaptive.tar.xz``: the emulator's run of
``configs/emulator/params-adaptive.yaml``, printed into ``docs/speculation.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.analysis.estimates import Ratio  # noqa: E402
from lab.engine.command import flag_value  # noqa: E402
from lab.measure.decode_log import steps_by_batch  # noqa: E402
from lab.measure.records import request_metrics  # noqa: E402
from lab.measure.request_record import RequestRecord  # noqa: E402

TARBALL = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "kshard-adaptive.tar.xz"
MODES = ("baseline", "eagle3_decode", "eagle3_steps1", "eagle3_steps3", "eagle3_adaptive")
SCOPE = "within one launch"


def extract(dest: Path, tarball: Path = TARBALL) -> Path:
    """Unpack ``tarball`` (one top folder holding ``<mode>/``) into ``dest``; returns that folder
    (:func:`lab.pipeline.capture.unpack`)."""
    from lab.pipeline.capture import unpack

    return unpack(tarball, dest)


def launch_steps(launch: dict) -> int | None:
    """``--speculative-num-steps`` of a ``launch.json`` argv (None: no speculation)."""
    steps = flag_value(launch["argv"], "--speculative-num-steps")
    return None if steps is None else int(steps)


@functools.cache
def load(cap: Path) -> list[dict]:
    """One row per (mode, concurrency, context) window of the captures (read once per process and
    folder: the captures are read-only, 11 MB of JSON lines a folder; callers only read the rows)."""
    rows, tok_s = [], {}
    for mode in MODES:
        d = cap / mode
        win = json.loads((d / "window.json").read_text())
        recs = [RequestRecord.from_json(json.loads(x)) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
        steps = launch_steps(json.loads((d / "launch.json").read_text()))
        tiers = steps_by_batch((d / "server.log").read_text(errors="replace")) if mode == "eagle3_adaptive" else {}
        for key, w in win.items():
            c, ctx = int(w["concurrency"]), int(w.get("context_tokens") or 0)
            mine = [r for r in recs if not r.warmup and r.concurrency == c and (r.context_tokens or 0) == ctx]
            tok_s[(mode, key)] = [m for m in (request_metrics(r).decode_tok_s for r in mine) if m]
            ran = tiers.get(c, steps) if tiers else steps
            rows.append({"mode": mode, "concurrency": c, "context_tokens": ctx, "key": key, "steps": ran,
                         "prompt_tokens": statistics.mean(r.prompt_tokens for r in mine), "requests": len(mine),
                         "verify_ms": w.get("verify_ms"), "draft_ms": w.get("draft_ms"), "decode_ms": w.get("decode_ms"),
                         "accept_length": w.get("accept_length"), "decode_tok_s": statistics.median(tok_s[(mode, key)]),
                         "output_tok_s": w["output_tok_s"]})
    for r in rows:
        if r["mode"] == "baseline":
            continue
        base = next(b for b in rows if b["mode"] == "baseline" and b["key"] == r["key"])
        r["speedup"] = Ratio.welch(tok_s[("baseline", r["key"])], tok_s[(r["mode"], r["key"])], scope=SCOPE,
                                   unit="request")
        r["output_ratio"] = r["output_tok_s"] / base["output_tok_s"]
    return rows


def _f(v, nd=1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def tables(rows: list[dict]) -> list[str]:
    """One markdown table per context length, rows by concurrency and mode."""
    out = []
    for ctx in sorted({r["context_tokens"] for r in rows}):
        rs = [r for r in rows if r["context_tokens"] == ctx]
        length = f"{ctx} tokens of context" if ctx else "the prompts as they are"
        out += [f"**{length}** (mean prompt {statistics.mean(r['prompt_tokens'] for r in rs):.0f} tokens; device-timer "
                f"ms per decode iteration; speedup of the per-request decode tok/s over the baseline, 95 % interval "
                f"{SCOPE}, requests as units)", "",
                "| concurrency | mode | steps ran | verify ms | draft ms | decode step ms | accept length | "
                "decode tok/s (median per request) | output tok/s (window) | speedup | output tok/s ratio |",
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        for r in sorted(rs, key=lambda r: (r["concurrency"], MODES.index(r["mode"]))):
            spec = r["mode"] != "baseline"
            out.append(f"| {r['concurrency']} | {r['mode']} | {'-' if r['steps'] is None else r['steps']} | "
                       f"{_f(r['verify_ms'], 2)} | {_f(r['draft_ms'], 2)} | {_f(r['decode_ms'], 2)} | "
                       f"{_f(r['accept_length'], 2)} | {_f(r['decode_tok_s'])} | {_f(r['output_tok_s'])} | "
                       f"{r['speedup'].text(scope=False) if spec else 'reference'} | "
                       f"{_f(r.get('output_ratio'), 2) if spec else '-'} |")
        out.append("")
    return out


def best_lines(rows: list[dict]) -> list[str]:
    """Per point: the fastest mode by median per-request decode tok/s, and where adaptive stands."""
    out = []
    for key in sorted({r["key"] for r in rows}, key=lambda k: (next(r["context_tokens"] for r in rows if r["key"] == k),
                                                               next(r["concurrency"] for r in rows if r["key"] == k))):
        rs = [r for r in rows if r["key"] == key]
        best = max(rs, key=lambda r: r["decode_tok_s"])
        ad = next(r for r in rs if r["mode"] == "eagle3_adaptive")
        out.append(f"- c{rs[0]['concurrency']}, context {rs[0]['context_tokens'] or 'as is'}: fastest {best['mode']} "
                   f"({best['decode_tok_s']:.1f} tok/s per request); eagle3_adaptive at {ad['steps']} steps "
                   f"{ad['decode_tok_s']:.1f} ({ad['decode_tok_s'] / best['decode_tok_s']:.2f}x the fastest)")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captures", type=Path, default=None,
                    help="a `lab capture --out` folder holding the five modes (default: the committed H200 tarball)")
    ap.add_argument("--tarball", type=Path, default=TARBALL, help="a tarball of such a folder")
    a = ap.parse_args(argv)
    if a.captures is not None:
        rows = load(a.captures)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = load(extract(Path(tmp), a.tarball))
    print("\n".join(tables(rows) + ["**Fastest mode per point** (`best_lines` in this script)", ""] + best_lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
