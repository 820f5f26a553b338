"""Accuracy benchmark: the lab client's measurement error against the emulator's ground truth.

    python benchmarks/accuracy.py            # ~4 min; writes docs/benchmarks/accuracy.{md,json}

Runs :func:`lab.measure.accuracy.measure_mode` for the baseline and one speculative mode at
concurrency 1, 8 and 64 with repeats, then :func:`lab.measure.accuracy.measure_rates` at
open-loop request rates 4, 16 and 64 req/s (``--rates``; none: skip), definitions of every
metric and of "error" in ``lab/measure/accuracy.py``, prints the tables and writes them. Engine: the emulator (no GPU): these
are figures about the *measurement*, never about a GPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.measure.accuracy import write_report  # noqa: E402
from lab.measure.accuracy import RATE_METRICS, accuracy_metrics, error_table, measure_mode, measure_rates  # noqa: E402
from lab.config import load_params  # noqa: E402
from lab.workload.dataset import load_prompts  # noqa: E402

DEFINITIONS = """\
| metric | client (lab.measure.records, as in every bench run) | ground truth (emulator side file, same aggregation) | what the error contains |
| --- | --- | --- | --- |
| decode_tok_s | median over requests of (N-1)/(t_last_chunk - t_first_chunk) | median of (N-1)/(last_token - first_token) | jitter of chunk delivery at both ends of the decode span |
| output_tok_s | sum N / (max t_end - min t_dispatch) | sum N / (max last_token - min arrival) | the client's send -> server arrival and last chunk -> end of stream (real client-side time) |
| cycle_ms | median of decode span / spec_verify_ct (or / (N-1)) | same with truth span and count | as decode_tok_s |
| mean_icl_ms | mean gap between consecutive content chunks | mean gap between ends of the iterations that gave the request tokens | delivery jitter; coalesced chunks |
| p50_ttft_ms | median of t_first_chunk - t_send | median of first_token - arrival (server view) | HTTP send, request parsing, first-chunk delivery: a fixed ~ms cost |
| p50_tpot_ms | median of (e2e - ttft) / (N-1) | median of (last_token - first_token) / (N-1) | as decode_tok_s, plus the last chunk -> end of stream |
| accept_length | sum N / sum spec_verify_ct (meta_info) | same from the truth request lines | none expected (counts) |
| verify_ms / draft_ms / decode_ms | /metrics delta of forward seconds / decode iterations | mean actual verify (draft, decode) phase of the iterations between the scrapes | none expected (same counters) |

Error = client / truth - 1 per repeat; "median" is over repeats, "worst" is the repeat with the largest |error|.
Targets (issue 4): |median error| <= 1 % at concurrency 1, <= 2 % at 8 and 64."""


def _fmt(v, pct=False):
    if v is None:
        return "n/a"
    return f"{v * 100:+.2f} %" if pct else f"{v:.3f}"


def render(report: dict) -> str:
    """Markdown of the accuracy report."""
    lines = [
        "# Client accuracy against the emulator's ground truth",
        "",
        f"Engine: **emulator** (profile `{report['profile']}`, SGLang-compatible; not a GPU measurement). "
        f"Reproduce: `{report['command']}` ({report['wall_s']:.0f} s on {report['machine']}).",
        "",
        "## Definitions", "", DEFINITIONS, "",
        "## Client error per level (median over repeats)", "",
        "| mode | c | metric | truth | client | median error | worst repeat | target | meets |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["rows"]:
        lines.append(f"| {r['mode']} | {r['concurrency']} | {r['metric']} | {_fmt(r['truth'])} | {_fmt(r['client'])} | "
                     f"{_fmt(r['median_error'], True)} | {_fmt(r['worst_error'], True)} | {r['target'] * 100:.0f} % | "
                     f"{'yes' if r['meets'] else '**no**'} |")
    lines += ["", "## Where the client's time goes, ms (chunk delay: client timestamp - end of the emulator iteration)", "",
              "| mode | c | chunk delay p50 (median over repeats) | chunk delay p99 (max over repeats) | "
              "request delivery p50 (send -> server arrival) | client p99 dispatch delay |",
              "| --- | --- | --- | --- | --- | --- |"]
    for md in report["modes"]:
        for lv in md["levels"].values():
            p50 = [r["delivery_delay_ms"]["p50"] for r in lv["repeats"] if r["delivery_delay_ms"]["p50"] is not None]
            p99 = [r["delivery_delay_ms"]["p99"] for r in lv["repeats"] if r["delivery_delay_ms"]["p99"] is not None]
            dd = [r["client"]["p99_dispatch_delay_ms"] or 0.0 for r in lv["repeats"]]
            rq = sorted(r["request_delivery_ms"]["p50"] for r in lv["repeats"])
            lines.append(f"| {md['mode']} | {lv['concurrency']} | {sorted(p50)[len(p50) // 2]:.3f} | {max(p99):.3f} | "
                         f"{rq[len(rq) // 2]:.3f} | {max(dd):.3f} |")
    lines += ["", "## Emulator fidelity (what it did vs what its profile planned), separate from client error", "",
              "| mode | iteration kind | n | planned ms | actual ms | mean abs error ms | max abs error ms |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for md in report["modes"]:
        for k, f in md["fidelity"].items():
            lines.append(f"| {md['mode']} | {k} | {f['n']} | {f['mean_planned_ms']:.3f} | {f['mean_actual_ms']:.3f} | "
                         f"{f['mean_abs_error_ms']:.3f} | {f['max_abs_error_ms']:.3f} |")
    lines += _open_loop_section(report)
    missed = [r for r in report["rows"] if not r["meets"]]
    lines += ["", "## Verdict", ""]
    if not missed:
        lines.append("Every metric meets its target at every level.")
    else:
        lines.append("Targets missed (honest list; see 'what the error contains' above):")
        lines.append("")
        for r in missed:
            lines.append(f"- {r['mode']} c={r['concurrency']} {r['metric']}: median error "
                         f"{r['median_error'] * 100:+.2f} % ({r['abs_diff']:+.3f} absolute) vs target "
                         f"{r['target'] * 100:.0f} %")
    lines += ["", report.get("notes", "")]
    return "\n".join(lines).rstrip() + "\n"


def _open_loop_section(report: dict) -> list[str]:
    """Markdown of the open-loop part (``report["open_loop"]``), or nothing."""
    ol = report.get("open_loop")
    if not ol:
        return []
    slo = ol["slo"]
    lines = ["", "## Open loop: the client at request rates (lab.measure.accuracy.measure_rates)", "",
             f"{ol['n_requests']} requests per repeat on the seeded schedule (gamma inter-arrivals, burstiness "
             f"{ol['burstiness']:g}; seed = repeat), no concurrency cap, {ol['repeats']} repeats, "
             f"{ol['max_new_tokens']} output tokens, emulator `--max-running-requests {ol['max_running']}`; "
             f"goodput under TTFT <= {slo['ttft_ms']} ms, TPOT <= {slo['tpot_ms']} ms. Client: its records "
             "(offered rate from its send times, p50 TTFT/TPOT over requests, goodput from its TTFT counted from the scheduled "
             "send time and its TPOT, over its measured window); "
             "truth: the emulator's arrival, first- and last-token stamps, same definitions.", "",
             "| mode | rate req/s | metric | truth | client | median error | worst repeat |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for md in ol["modes"]:
        for lv in md["rates"].values():
            for m in RATE_METRICS:
                med = lv["median_error"].get(m)
                tr = sorted(r["truth"][m] for r in lv["repeats"] if r["truth"][m] is not None)
                cl = sorted(r["client"][m] for r in lv["repeats"] if r["client"][m] is not None)
                if not tr or not cl:
                    continue  # not defined here (accept length without speculation)
                # a goodput of 0 on both sides has no relative error: n/a, the values show the agreement
                lines.append(f"| {md['mode']} | {lv['rate']:g} | {m} | {_fmt(tr[len(tr) // 2])} | "
                             f"{_fmt(cl[len(cl) // 2])} | {_fmt(med, True)} | {_fmt(lv['worst_error'][m], True)} |")
    lines += ["", "Schedule adherence, ms (send lag: t_send - t_scheduled, the client's lateness; arrival lag: "
              "the emulator's arrival stamp - t_scheduled, what the server saw), worst repeat; SLO disagreements: "
              "requests the client and the truth classify differently, all repeats:", "",
              "| mode | rate req/s | send lag p50 | send lag p99 | send lag max | arrival lag p50 | arrival lag p99 | "
              "client p99 dispatch delay | SLO disagreements / requests |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for md in ol["modes"]:
        for lv in md["rates"].values():
            rs = lv["repeats"]
            worst = lambda k, q: max(r[k][q] for r in rs)  # noqa: E731
            lines.append(f"| {md['mode']} | {lv['rate']:g} | {worst('send_lag_ms', 'p50'):.3f} | "
                         f"{worst('send_lag_ms', 'p99'):.3f} | {worst('send_lag_ms', 'max'):.3f} | "
                         f"{worst('arrival_lag_ms', 'p50'):.3f} | {worst('arrival_lag_ms', 'p99'):.3f} | "
                         f"{max(r['p99_dispatch_delay_ms'] or 0.0 for r in rs):.3f} | "
                         f"{sum(r['slo_disagreements'] for r in rs)} / {sum(r['requests'] for r in rs)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--modes", nargs="+", default=["baseline", "eagle3_prefill"])
    ap.add_argument("--rates", type=float, nargs="*", default=[4.0, 16.0, 64.0],
                    help="open-loop request rates, req/s (none: skip the open-loop part)")
    ap.add_argument("--rate-requests", type=int, default=32, help="requests per rate and repeat")
    ap.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of inter-arrivals (1 = Poisson)")
    ap.add_argument("--profile", default=None, help="emulator profile (default: params.yaml emulator.profile)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "accuracy"),
                    help="output path without suffix (.md and .json are written)")
    ap.add_argument("--work-dir", default=str(ROOT / ".cache" / "accuracy"))
    a = ap.parse_args(argv)
    params = load_params(ROOT / "params.yaml")
    prompts = load_prompts(ROOT / params.bench.dataset)
    t = time.perf_counter()
    modes = [measure_mode(params, m, Path(a.work_dir), levels=a.levels, repeats=a.repeats,
                          max_new_tokens=a.max_new_tokens, prompts=prompts, profile=a.profile) for m in a.modes]
    rows = error_table(modes)
    open_loop = None
    if a.rates:
        max_running = 64
        open_loop = {"rates": a.rates, "n_requests": a.rate_requests, "burstiness": a.burstiness,
                     "repeats": a.repeats, "max_new_tokens": a.max_new_tokens, "max_running": max_running,
                     "slo": params.bench.slo.model_dump(),
                     "modes": [measure_rates(params, m, Path(a.work_dir), rates=a.rates, repeats=a.repeats,
                                             n_requests=a.rate_requests, max_new_tokens=a.max_new_tokens,
                                             prompts=prompts, burstiness=a.burstiness, max_running=max_running,
                                             profile=a.profile) for m in a.modes]}
    report = {"profile": a.profile or params.emulator.profile, "levels": a.levels, "repeats": a.repeats,
              "max_new_tokens": a.max_new_tokens, "metrics": accuracy_metrics(),
              "command": "python benchmarks/accuracy.py" + (" " + " ".join(argv or sys.argv[1:])).rstrip(),
              "machine": f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, Python "
                         f"{platform.python_version()}",
              "wall_s": time.perf_counter() - t, "rows": rows, "modes": modes, "open_loop": open_loop}
    print(write_report(report, a.out, render))
    return 0


if __name__ == "__main__":
    sys.exit(main())
