"""Validate ``lab calibrate`` / ``lab predict`` on the emulator with a profile the calibration never saw.

    python benchmarks/calibration_validation.py            # measure (~6 min on 2 cores) + analyse
    python benchmarks/calibration_validation.py --analyse  # re-analyse the measured results only

1. Measure, with the lab's own bench (:func:`lab.pipeline.bench.run_mode`, params.yaml's bench:
   concurrency 1 and 8, rates 4 and 12 req/s, 8 prompts x 64 tokens, 3 repeats), the baseline and
   the 8 EAGLE-3 configurations of the grid num_steps 1..4 x attention mode prefill/decode on the
   emulator running ``benchmarks/profiles/validation_h200_0516.json``: invented constants, unlike
   every bundled profile, modelling SGLang 0.5.16's rules (verify graph-captured in both modes;
   draft-extend outside graphs via ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1``). lab/calibrate
   never reads that file: it sees only the results, as it would a real server's.
2. Calibration A: the baseline + 2 EAGLE-3 configurations (s1 decode, s4 prefill). Predict the
   6 others at every point; report the error of each prediction against its measurement (target:
   decode tok/s within 5 % at c1 and c8) and whether the 95 % prediction interval covered it.
3. Calibration B: the baseline + 1 EAGLE-3 configuration (s2 decode), as the GPU plan has it:
   what it can predict (the other attention mode, by SGLang 0.5.16's rule; other points) with its
   errors, and what it refuses (other num_steps: the verify cost per token and deeper acceptance).
4. The fitted constants of A beside the hidden profile's.

Writes ``docs/benchmarks/calibration-emulator.{json,md,png}``; the measured results stay in
``--workdir`` (default ``.cache/calibration-validation``). Engine: emulator; nothing here is a
GPU measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.calibrate.fit import calibrate  # noqa: E402
from lab.calibrate.order import rank  # noqa: E402
from lab.calibrate.predict import candidates_from_params, points_from_bench, predict, workload_from_params  # noqa: E402
from lab.calibrate.prediction_report import error_table, figure, fmt, held_out_errors, measured_by_config  # noqa: E402
from lab.config import load_params  # noqa: E402
from lab.emulator.profile import load_profile  # noqa: E402
from lab.engine.ports import free_port  # noqa: E402
from lab.pipeline.sweep import expand  # noqa: E402

HIDDEN = ROOT / "benchmarks" / "profiles" / "validation_h200_0516.json"
GRID = {"num_steps": [1, 2, 3, 4], "eagle_topk": [1], "num_draft_tokens": ["auto"],
        "attention_mode": ["prefill", "decode"]}
CAL_A = ["baseline", "sw_s1_k1_d2_decode", "sw_s4_k1_d5_prefill"]
CAL_B = ["baseline", "sw_s2_k1_d3_decode"]
TARGET_PCT = 5.0
#: A run in which the emulator's mean iteration time exceeded its plan by more than this is measured again.
SCHEDULE_LIMIT_PCT = 3.0
MAX_ATTEMPTS = 3
OUT = ROOT / "docs" / "benchmarks"


def write_params(work: Path) -> Path:
    """params.yaml of the validation: the repository's, with the hidden profile, the 8-config grid
    as the only speculative modes, a private MLflow store and SGLang 0.5.16's eager draft-extend."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["server"]["port"] = free_port()
    raw["server"]["env"] = {"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"}
    raw["emulator"]["profile"] = str(HIDDEN)
    raw["mlflow"]["tracking_uri"] = f"sqlite:///{work / 'mlflow.db'}"
    raw["sweep"]["grid"] = dict(GRID)
    modes, _ = expand(raw["sweep"])
    raw["modes"] = {"baseline": {"algorithm": None}, **modes}
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def schedule_error_pct(result_dir: Path) -> float | None:
    """How far the emulator missed its own planned iteration times in a run: the largest
    ``mean actual / mean planned - 1`` (%) over its iteration kinds (its ground-truth file's
    fidelity, :meth:`lab.emulator.truth.Truth.fidelity`). This harness reads it to judge the
    *emulator* (a busy machine stretches its sleeps); lab/calibrate never does."""
    res = result_dir / "result.json"
    if not res.is_file():
        return None
    r = json.loads(res.read_text())
    fid = ((r.get("ground_truth") or {}).get("fidelity") or {}) if r.get("status") == "ok" else {}
    errs = [100.0 * (f["mean_actual_ms"] / f["mean_planned_ms"] - 1) for f in fid.values() if f.get("mean_planned_ms")]
    return max(errs) if errs else None


def measure(params_path: Path, results: Path, force: bool, attempts_dir: Path) -> dict[str, dict]:
    """Run every mode without a successful result that followed its schedule (within
    :data:`SCHEDULE_LIMIT_PCT`); a run that missed it is measured again, up to
    :data:`MAX_ATTEMPTS` times (the missed runs are kept under ``attempts_dir``). Returns per
    mode run: seconds and schedule error of each attempt."""
    import shutil

    from lab.pipeline.bench import run_mode

    params = load_params(params_path)
    log: dict[str, dict] = {}
    for mode in params.modes:
        err = schedule_error_pct(results / mode)
        if not force and err is not None and err <= SCHEDULE_LIMIT_PCT:
            continue
        tries = []
        overwrite = force  # --force: the first attempt replaces the old run instead of keeping it
        for _ in range(MAX_ATTEMPTS):
            if (results / mode).exists():
                old = schedule_error_pct(results / mode)
                if old is not None and not overwrite:
                    dest = attempts_dir / f"{mode}-{len(list(attempts_dir.glob(mode + '-*'))) + 1}"
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(results / mode), dest)
            t0 = time.monotonic()
            run_mode(params, mode, results / mode, log=lambda *a: None)
            err = schedule_error_pct(results / mode)
            tries.append({"seconds": time.monotonic() - t0, "schedule_error_pct": err,
                          "load_avg_1m": os.getloadavg()[0]})
            print(f"[validation] measured {mode} in {tries[-1]['seconds']:.0f} s (emulator schedule error "
                  f"{err:+.1f} %)", flush=True)
            overwrite = False
            if err is not None and err <= SCHEDULE_LIMIT_PCT:
                break
        else:  # no attempt kept to its schedule: use the closest one, and say so in the report
            kept = [(schedule_error_pct(d), d) for d in attempts_dir.glob(mode + "-*")]
            best = min([(e, d) for e, d in kept if e is not None], default=None)
            if best is not None and best[0] < (schedule_error_pct(results / mode) or float("inf")):
                dest = attempts_dir / f"{mode}-{len(kept) + 1}"
                shutil.move(str(results / mode), dest)
                shutil.move(str(best[1]), results / mode)
        log[mode] = {"attempts": tries}
    return log


def _keys(names: list[str], params) -> set[str]:
    from lab.calibrate.predict import _candidate

    return {_candidate(n, params.modes[n]).key for n in names}


def _truth_table(cal, hidden) -> list[dict]:
    c = cal.constants()
    pairs = [("decode.graph_ms_bs1", hidden.decode.graph_ms_bs1.value),
             ("decode.per_extra_seq_ms", hidden.decode.per_extra_seq_ms.value),
             ("decode.kv_ms_per_1k_tokens", hidden.decode.kv_ms_per_1k_tokens.value),
             ("verify.graph_ms_ref", hidden.verify_s(1, cal.t_ref, 0, "decode", True) * 1e3),
             ("verify.per_extra_token_ms", hidden.verify.per_extra_token_ms.value),
             ("verify.per_extra_seq_ms", hidden.verify.per_extra_seq_ms.value),
             ("verify.eager_ms_ref", hidden.verify_s(1, cal.t_ref, 0, "decode", False) * 1e3),
             ("draft.eagle_draft_ms_per_step", hidden.draft.eagle_draft_ms_per_step.value),
             ("draft.eagle_draft_per_extra_seq_ms", hidden.draft.eagle_draft_per_extra_seq_ms.value),
             ("draft.eager_extend_ms", hidden.draft.eagle_draft_extend_ms.value),
             ("draft.eager_extend_per_extra_seq_ms", hidden.draft.eagle_draft_extend_per_extra_seq_ms.value),
             ("prefill.base_ms", hidden.prefill.base_ms.value), ("prefill.per_token_ms", hidden.prefill.per_token_ms.value),
             ("scheduler_overhead_ms", hidden.scheduler_overhead_ms.value)]
    out = []
    for name, true in pairs:
        k = c.get(name) or {}
        out.append({"constant": name, "hidden": true, "fitted": k.get("value"), "stderr": k.get("stderr"),
                    "ci95": k.get("ci95"), "determined": k.get("determined"), "reason": k.get("reason")})
    acc = cal.acceptance
    out.append({"constant": "acceptance per position", "hidden": hidden.p_accept,
                "fitted": [acc.rate(j + 1) for j in range(acc.depth)] if acc else None,
                "stderr": None, "ci95": None, "determined": acc is not None, "reason": None})
    return out


def analyse(work: Path, draws: int, measure_log: dict[str, dict]) -> int:
    params = load_params(work / "params.yaml")
    results = work / "results"
    dirs = sorted(p for p in results.iterdir() if (p / "result.json").is_file())
    measured = measured_by_config(dirs)
    cands = candidates_from_params(params)
    points = points_from_bench(params.bench)
    wl = workload_from_params(params)
    hidden = load_profile(HIDDEN)[0]
    report: dict = {"command": "python benchmarks/calibration_validation.py", "engine": "emulator",
                    "hidden_profile": str(HIDDEN.relative_to(ROOT)), "grid": GRID, "draws": draws,
                    "bench": {k: getattr(params.bench, k) for k in ("num_prompts", "max_new_tokens", "concurrency",
                                                                    "request_rates", "repeats", "seed")},
                    "machine": {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                                "python": platform.python_version()},
                    "measure_log": measure_log,
                    "schedule_error_pct": {p.name: schedule_error_pct(p) for p in dirs}}
    figs = {}
    for label, names in (("A", CAL_A), ("B", CAL_B)):
        t0 = time.monotonic()
        cal = calibrate([results / n for n in names])
        fit_s = time.monotonic() - t0
        t0 = time.monotonic()
        preds = predict(cal, cands, points, wl, draws=draws, seed=0, measured=measured)
        pred_s = time.monotonic() - t0
        held = {c.key for c in cands if c.speculative} - _keys(names, params)
        rows = held_out_errors(preds, held)
        closed = [r for r in rows if r["point"] in ("c1", "c8") and r.get("decode_tok_s")]
        errs = [abs(r["decode_tok_s"]["error_pct"]) for r in closed]
        allm = [r[m] for r in rows for m in ("decode_tok_s", "output_tok_s", "verify_ms", "accept_length") if m in r]
        report[f"calibration_{label}"] = {
            "calibrated_from": names, "fit_s": fit_s, "predict_s": pred_s,
            "undetermined_constants": {k: c["reason"] for k, c in cal.constants().items() if not c["determined"]},
            "excluded_windows": cal.excluded(),
            "held_out": sorted(held), "errors": rows,
            "decode_tok_s_c1_c8": {"predicted": len(closed),
                                   "refused": sum(1 for r in rows if r["point"] in ("c1", "c8") and r["status"] != "ok"),
                                   "max_abs_error_pct": max(errs) if errs else None,
                                   "mean_abs_error_pct": sum(errs) / len(errs) if errs else None,
                                   "within_target": sum(e <= TARGET_PCT for e in errs)},
            "interval_coverage": {"covered": sum(v["covered"] for v in allm), "of": len(allm)},
            "ranking_c1": [p.candidate.key for p in rank(preds, "c1", "win")],
            "constants_vs_hidden": _truth_table(cal, hidden) if label == "A" else None,
        }
        figs[label] = (preds, cal)
    fig = figure(figs["A"][0], figs["A"][1])
    fig.savefig(OUT / "calibration-emulator.png", dpi=110)
    (OUT / "calibration-emulator.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    (OUT / "calibration-emulator.md").write_text(_markdown(report))
    a = report["calibration_A"]["decode_tok_s_c1_c8"]
    print(f"[validation] A: decode tok/s at c1/c8, {a['within_target']} of {a['predicted']} predictions within "
          f"{TARGET_PCT:g} % (max |error| {fmt(a['max_abs_error_pct'])} %); wrote {OUT / 'calibration-emulator.md'}")
    return 0


def _markdown(r: dict) -> str:
    A, B = r["calibration_A"], r["calibration_B"]
    a = A["decode_tok_s_c1_c8"]
    verdict = ("met" if a["predicted"] and a["within_target"] == a["predicted"] and not a["refused"] else "NOT met")
    lines = [
        "# Calibrate from few configurations, predict the rest: validation on the emulator", "",
        f"Engine: **emulator** (hidden profile `{r['hidden_profile']}`: invented constants, SGLang 0.5.16 rules; "
        "not a GPU measurement). Reproduce: `python benchmarks/calibration_validation.py` "
        f"(measuring {sum(t['seconds'] for m in r['measure_log'].values() for t in m['attempts']):.0f} s in "
        f"{sum(len(m['attempts']) for m in r['measure_log'].values())} launches, analysing "
        f"{A['fit_s'] + A['predict_s'] + B['fit_s'] + B['predict_s']:.0f} s; load average "
        f"{r['machine']['load_avg_1m']:.1f} on {r['machine']['cpus']} CPUs at the end). Bench: {r['bench']}; "
        f"{r['draws']} posterior draws per prediction.", "",
        f"A launch in which the emulator missed its own planned iteration times by more than {SCHEDULE_LIMIT_PCT:g} % "
        f"(a busy machine stretches its sleeps; read from its ground-truth file by this harness only) was measured "
        f"again, up to {MAX_ATTEMPTS} times. Schedule error of the runs used: "
        + ", ".join(f"{k} {fmt(v, 1)} %" for k, v in r["schedule_error_pct"].items()) + ".", "",
        "`lab/calibrate` never reads the hidden profile: it fits the results (`result.json`, `runs.json`, "
        "`requests.jsonl`; never the emulator's ground-truth file) exactly as it would a real SGLang server's.", "",
        f"## A. Baseline + 2 EAGLE-3 configurations ({', '.join(A['calibrated_from'][1:])}) -> the 6 others", "",
        f"**Verdict (computed): target {verdict}.** Decode tok/s at c1 and c8: {a['within_target']} of {a['predicted']} "
        f"held-out predictions within {TARGET_PCT:g} % (mean |error| {fmt(a['mean_abs_error_pct'])} %, max "
        f"{fmt(a['max_abs_error_pct'])} %; {a['refused']} refused as undetermined). 95 % prediction intervals covered "
        f"{A['interval_coverage']['covered']} of {A['interval_coverage']['of']} held-out measurements (all metrics, all points).", "",
        *error_table(A["errors"], ("c1", "c8")), "",
        "Open-loop points (rates; no target):", "", *error_table(A["errors"], ("r4", "r12")), "",
        f"Ranking at c1 (most likely to win first): {', '.join(f'`{k}`' for k in A['ranking_c1'])}.", "",
        "Windows left out as outliers: " + ("; ".join(f"{k} ({v})" for k, v in A["excluded_windows"].items())
                                             or "none") + ".", "",
        "Fitted constants beside the hidden profile's:", "",
        "| constant | hidden | fitted | stderr | determined / why not |", "| --- | ---: | ---: | ---: | --- |"]
    for c in A["constants_vs_hidden"]:
        fitted = c["fitted"]
        ftxt = ", ".join(f"{x:.3f}" for x in fitted) if isinstance(fitted, list) else fmt(fitted, 4)
        lines.append(f"| `{c['constant']}` | {fmt(c['hidden'], 4)} | {ftxt} | {fmt(c['stderr'], 4)} | "
                     f"{'yes' if c['determined'] else 'no: ' + str(c['reason'])} |")
    b = B["decode_tok_s_c1_c8"]
    lines += [
        "", "Hidden `verify.graph_ms_ref` is the verify cost at the fit's reference token count; the hidden "
        "`eagle_draft_extend` constants are compared with the fitted *eager* draft-extend ones (the benchmark "
        "runs the draft-extend outside CUDA graphs, booked with prefill in `extend`).", "",
        f"## B. Baseline + 1 EAGLE-3 configuration ({B['calibrated_from'][1]}), as the GPU plan has it", "",
        f"Predicted {b['predicted']} held-out (configuration, c1/c8) cells, refused {b['refused']}: "
        f"mean |error| {fmt(b['mean_abs_error_pct'])} %, max {fmt(b['max_abs_error_pct'])} %. Constants it cannot "
        "determine: " + "; ".join(f"`{k}`" for k in B["undetermined_constants"]) + ".", "",
        *error_table(B["errors"], ("c1", "c8")), "",
        "## Reading", "",
        "- A prediction is refused, not extrapolated, when it needs a constant the calibration data did not determine "
        "(B: other num_steps need the verify cost per token and the acceptance at deeper draft positions).",
        "- The attention mode a calibration did not measure is predicted only by SGLang 0.5.16/0.5.23's rule (verify "
        "graph-captured in both modes, the mode only picks the backend: same backend, same cost); the hidden profile "
        "obeys that rule. A build without it (the seeds' profile) gets the other mode refused.",
        "- Intervals: 95 % posterior-predictive intervals of the measured repeat mean (lab/calibrate/predict.py).",
        "- Errors of different configurations are correlated: all stream the same 24 requests, whose acceptance the "
        "emulator keys by prompt and position (lab/emulator/acceptance.py), so configurations of similar draft depth "
        "measure above or below their expectation together.",
        "", "Engine: emulator. These are modelled step costs, not GPU measurements."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "calibration-validation")
    ap.add_argument("--analyse", action="store_true", help="only re-analyse the measured results")
    ap.add_argument("--force", action="store_true", help="measure every mode again")
    ap.add_argument("--draws", type=int, default=200)
    args = ap.parse_args(argv)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    times = work / "measure_log.json"
    if not args.analyse:
        if args.force:
            import shutil

            shutil.rmtree(work / "attempts", ignore_errors=True)
        params_path = write_params(work)
        took = measure(params_path, work / "results", args.force, work / "attempts")
        log = json.loads(times.read_text()) if times.is_file() and not args.force else {}
        for mode, entry in took.items():  # every launch of a mode is kept, across invocations
            log.setdefault(mode, {"attempts": []})["attempts"] += entry["attempts"]
        times.write_text(json.dumps(log, indent=1))
    saved = json.loads(times.read_text()) if times.is_file() else {}
    return analyse(work, args.draws, saved)


if __name__ == "__main__":
    sys.exit(main())
