"""The regression sentinel's false-alarm rate on real emulator launches.

    python benchmarks/sentinel_false_alarms.py            # ~3-4 min: 12 launches, fast profile
    python benchmarks/sentinel_false_alarms.py --launches 20 --profile kimi_k25_tp8_pcie

Launches the emulator ``--launches`` times with one unchanged configuration (``bench`` as in
``params.yaml`` unless overridden, mode ``baseline``), each launch a full
:func:`lab.pipeline.bench.run_mode` into a temporary directory with its own temporary MLflow store.
Every launch runs the sentinel exactly as a pipeline run does (:func:`lab.analysis.sentinel.check`:
same hash, the newest ``sentinel_history_runs`` earlier launches). Nothing changed between
launches, so every flag is a false alarm. Prints:

- launches judged (those with >= ``MIN_HISTORY`` earlier launches) and how many were flagged
  (status ``regression`` or ``improvement``), and the individual (point, metric) tests flagged;
- for contrast, the old design on the same launches: Welch's t-test on the per-repeat values
  pooled over the same earlier launches, at the same alpha and minimum effect;
- the same decision on the emulator's ground truth (its side file: what it actually did) for
  ``decode_tok_s``: a flag that the truth shares is a real change in the emulator's pace (on a
  shared machine, other load), not an error of the lab's measurement;
- the spread of the launch means (coefficient of variation across launches) per metric.

Engine: the emulator; these are figures about the sentinel's statistics on a real process
on this machine (the machine's own load is part of the launch-to-launch noise), never about
a GPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from scipy import stats as st  # noqa: E402

from lab.analysis import sentinel  # noqa: E402
from lab.catalog import sentinel_metrics  # noqa: E402
from lab.pipeline.bench import run_mode  # noqa: E402
from lab.config import load_params  # noqa: E402
from lab.engine.ports import free_port  # noqa: E402


_free_port = free_port  # lab.engine.ports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=12)
    ap.add_argument("--profile", default="fast", help="emulator profile (default: fast, 1 ms steps)")
    ap.add_argument("--num-prompts", type=int, default=None, help="bench.num_prompts (default: params.yaml)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="bench.max_new_tokens (default: params.yaml)")
    ap.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    args = ap.parse_args(argv)
    if args.launches < sentinel.MIN_HISTORY + 1:
        ap.error(f"--launches {args.launches}: at least {sentinel.MIN_HISTORY + 1} (the first "
                 f"{sentinel.MIN_HISTORY} only build the history)")
    command = "python benchmarks/sentinel_false_alarms.py " + " ".join(argv if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sentinel-fa-") as tmp:
        bench = {}
        if args.num_prompts:
            bench["num_prompts"] = args.num_prompts
        if args.max_new_tokens:
            bench["max_new_tokens"] = args.max_new_tokens
        params = load_params(ROOT / "params.yaml", overrides={
            "mlflow": {"tracking_uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "sentinel-false-alarms"},
            "emulator": {"profile": args.profile}, "bench": bench,
            "server": {"port": args.port or _free_port()}})
        b = params.bench
        results = []
        for i in range(args.launches):
            res = run_mode(params, "baseline", Path(tmp) / f"launch{i}", log=lambda *_: None)
            s = res["sentinel"]
            results.append(res)
            print(f"launch {i + 1:2d}/{args.launches}: config {s['config_hash']} vs "
                  f"{len(s['history_run_ids'])} earlier: {s['status']}"
                  + (f" ({', '.join(s['flagged'])})" if s["flagged"] else ""), flush=True)
    wall = time.perf_counter() - t0

    judged = [r["sentinel"] for r in results if r["sentinel"]["status"] not in ("no history", "too little history")]
    flagged = [s for s in judged if s["flagged"]]
    tests = [d for s in judged for ms in s["comparison"].values() for d in ms.values() if d["outside_noise"] is not None]
    test_flags = sum(bool(d["outside_noise"]) for d in tests)
    # the old design on the same launches: per-repeat values pooled over the same earlier launches
    pooled_launches = pooled_tests = pooled_flags = pooled_flagged_launches = 0
    k = b.sentinel_history_runs
    for i, res in enumerate(results):
        earlier = results[max(0, i - k):i]
        if len(earlier) < sentinel.MIN_HISTORY:
            continue
        any_flag = False
        for point, agg in res["levels"].items():
            for m in sentinel_metrics():
                now = (agg.get(m) or {}).get("values")
                hist = [v for e in earlier for v in ((e["levels"].get(point) or {}).get(m) or {}).get("values", [])]
                if not now or len(now) < 2 or len(hist) < 2:
                    continue
                p = st.ttest_ind(now, hist, equal_var=False).pvalue
                rel = np.mean(now) / np.mean(hist) - 1
                flag = bool(p < b.sentinel_alpha and abs(rel) > b.sentinel_min_effect)
                pooled_tests += 1
                pooled_flags += flag
                any_flag |= flag
        pooled_launches += 1
        pooled_flagged_launches += any_flag
    # the same decision on the emulator's ground truth (what it actually did, from its side
    # file): a flag the truth shares is a real change of the emulator's pace (machine load),
    # not an error of the lab's measurement
    truth_lines = []
    for point in results[0]["levels"]:
        lab_flags = truth_flags = both = judged_n = 0
        for i, res in enumerate(results):
            earlier = results[max(0, i - k):i]
            if len(earlier) < sentinel.MIN_HISTORY:
                continue
            judged_n += 1
            d_lab = sentinel.launch_delta(res["levels"][point]["decode_tok_s"]["mean"],
                                          [e["levels"][point]["decode_tok_s"]["mean"] for e in earlier],
                                          alpha=b.sentinel_alpha, min_effect=b.sentinel_min_effect)
            d_true = sentinel.launch_delta(res["ground_truth"][point]["decode_tok_s"],
                                           [e["ground_truth"][point]["decode_tok_s"] for e in earlier],
                                           alpha=b.sentinel_alpha, min_effect=b.sentinel_min_effect)
            lab_flags += bool(d_lab["outside_noise"])
            truth_flags += bool(d_true["outside_noise"])
            both += bool(d_lab["outside_noise"]) and bool(d_true["outside_noise"])
        truth_lines.append(f"  {point}.decode_tok_s: lab flagged {lab_flags}, ground truth flagged {truth_flags}, "
                           f"both {both} (of {judged_n} judged launches)")
    cv_lines = []
    for point in results[0]["levels"]:
        for m in sentinel_metrics():
            vals = [r["levels"][point][m]["mean"] for r in results if m in r["levels"].get(point, {})]
            if len(vals) > 1 and np.mean(vals):
                cv_lines.append(f"  {point}.{m}: mean {np.mean(vals):.4g}, CV across launches "
                                f"{np.std(vals, ddof=1) / abs(np.mean(vals)) * 100:.2f} %")
    print()
    print(f"command: {command.strip()}")
    print(f"machine: {platform.node()} ({os.cpu_count()} CPUs), {wall:.0f} s, engine: emulator "
          f"(profile {args.profile}; not a GPU measurement)")
    print(f"workload: mode baseline, concurrency {b.concurrency}, {b.num_prompts} prompts x "
          f"{b.max_new_tokens} tokens, {b.repeats} repeats; alpha {b.sentinel_alpha}, "
          f"min effect {b.sentinel_min_effect:.0%}, history {k} launches")
    print(f"sentinel (launch-level): {len(flagged)} of {len(judged)} judged launches flagged; "
          f"{test_flags} of {len(tests)} (point, metric) tests outside noise")
    print(f"old design (per-repeat values pooled, Welch): {pooled_flagged_launches} of "
          f"{pooled_launches} launches flagged; {pooled_flags} of {pooled_tests} tests")
    print("the same decision on the emulator's ground truth (a shared flag = the emulator really ran "
          "slower or faster than in its earlier launches):")
    print("\n".join(truth_lines))
    print("launch-to-launch spread:")
    print("\n".join(cv_lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
