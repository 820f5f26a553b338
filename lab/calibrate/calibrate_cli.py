"""``lab calibrate``, ``lab predict`` and ``lab sweep --order``: the command-line ends of :mod:`lab.calibrate`.

    lab calibrate [results/<mode> ...] [--out reports/calibration] [--name NAME] [--fill-from PROFILE]
                  [--points c1 c8]
    lab predict [--calibration reports/calibration/calibration.json] [--grid num_steps=1,2,3,4 ...]
                [--concurrency 1 8 16] [--request-rate 4 12] [--point c1] [--order win|uncertain]
                [--draws 200] [--measured results/<mode> ...] [--out reports/predictions]
    lab sweep --order win|uncertain --calibration FILE [--point c1] [--repro]

``lab calibrate`` with no directories takes every ``results/<mode>/`` holding a successful
``result.json``. It writes ``calibration.json`` (the fit and its observations),
``profile.json`` (the emulator's profile format: ``python -m lab.emulator --emulator-profile
<it>`` or ``emulator.profile`` in params.yaml once nothing is left undetermined) and
``calibration.md`` (every constant with its standard error, interval, the windows it came from,
or why the data cannot determine it).

``lab predict`` predicts params.yaml's modes and sweep grid at params.yaml's bench points
(:mod:`lab.calibrate.predict`), ranks them (:mod:`lab.calibrate.order`) and writes
:func:`lab.calibrate.prediction_report.write_outputs`' files; measured values are shown beside the
predictions for the calibration's own results, any ``--measured`` directories and every
``results/<mode>/`` of the same engine and build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["calibrate_main", "predict_main", "sweep_order", "default_result_dirs", "parse_grid",
           "add_calibrate_args", "add_predict_args"]


def default_result_dirs(root: Path) -> list[Path]:
    """``results/<mode>/`` directories under ``root`` that hold a ``result.json`` and ``runs.json``."""
    return sorted(p.parent for p in (root / "results").glob("*/result.json") if (p.parent / "runs.json").is_file())


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["num_steps=1,2,3", "attention_mode=prefill,decode"]`` -> ``{"num_steps": [1, 2, 3], ...}``
    (numbers parsed, ``null`` -> None).

    :raises ValueError: an item without ``=``.
    """
    import yaml

    out: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--grid {item!r}: expected KEY=V1,V2 (e.g. num_steps=1,2,3,4)")
        k, v = item.split("=", 1)
        out[k.strip()] = [yaml.safe_load(x) for x in v.split(",") if x.strip()]
    return out


def _constants_markdown(cal, profile_path: Path) -> str:
    from lab.calibrate.prediction_report import caption

    lines = [f"# Calibration ({caption(cal, 'Constants of')})", "",
             f"Profile: `{profile_path}`. One row per fitted constant: the estimate, its standard error and 95 % "
             "t interval, and the measured windows (`<result>/<point>/r<repeat>`) it came from; undetermined "
             "constants say why (lab/calibrate/linfit.py).", "",
             "| block | constant | value | stderr | 95 % CI | windows | determined / why not |",
             "| --- | --- | ---: | ---: | --- | ---: | --- |"]
    for name, c in cal.constants().items():
        v = "-" if c["value"] is None else f"{c['value']:.4g}"
        se = "-" if c["stderr"] is None else f"{c['stderr']:.2g}"
        ci = "-" if c["ci95"] is None else f"[{c['ci95'][0]:.4g}, {c['ci95'][1]:.4g}]"
        why = "yes" if c["determined"] else f"no: {c['reason']}"
        lines.append(f"| {c['block']} | `{name}` | {v} | {se} | {ci} | {len(c['results'])} | {why} |")
    acc = cal.acceptance
    lines += ["", "## Acceptance per draft position (life-table estimate, lab/calibrate/observe.py)", ""]
    if acc is None:
        lines.append("No chain-draft configuration with real acceptance was measured: acceptance undetermined.")
    else:
        lines += ["| position | accepted | trials | rate |", "| ---: | ---: | ---: | ---: |"]
        for j, (s, t) in enumerate(zip(acc.successes, acc.trials), 1):
            lines.append(f"| {j} | {s} | {t} | {s / t:.3f} |" if t else f"| {j} | {s} | {t} | undetermined |")
        hp = acc.homogeneity_p
        lines += ["", f"Pooled per-token accept probability {acc.p_pooled:.4f} (binomial SE {acc.p_pooled_stderr():.4f}); "
                  f"chi-square homogeneity across positions: p = {'-' if hp is None else f'{hp:.3g}'} "
                  "(small p: the positions differ and predictions use each position's own rate)."]
    if cal.excluded():
        lines += ["", "## Windows left out as outliers", ""] + [f"- {k}: {v}" for k, v in cal.excluded().items()]
    lines += ["", "## Verify graph capture", ""] + [f"- `{v}`: {g} ({cal.verify_graph_source[v]})" for v, g in
                                                    cal.verify_graph.items()]
    if cal.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in cal.notes]
    return "\n".join(lines) + "\n"


def add_calibrate_args(p: argparse.ArgumentParser) -> None:
    """The ``lab calibrate`` arguments."""
    p.add_argument("results", nargs="*", type=Path, help="result directories (default: every results/<mode>/)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default <repo>/reports/calibration)")
    p.add_argument("--name", default="calibrated", help="the profile's name")
    p.add_argument("--points", nargs="*", default=None,
                   help="only these point keys (e.g. c1 c8: hold r4 out to test the predictions there)")
    p.add_argument("--fill-from", default=None,
                   help="profile (name or path) whose values fill the constants the data do not determine, marked "
                        "NOT FITTED, so the emulator can run the profile")


def calibrate_main(args: argparse.Namespace) -> int:
    """``lab calibrate``: 0, or 2 on bad input (the message names the fix)."""
    from lab.atomic import write_json_atomic, write_text_atomic
    from lab.calibrate.fit import calibrate, export_profile
    from lab.calibrate.observe import CalibrationInputError
    from lab.config import repo_root
    from lab.emulator.profile import ProfileError, load_profile

    root = repo_root()
    dirs = list(args.results) or default_result_dirs(root)
    try:
        cal = calibrate(dirs, set(args.points) if args.points else None)
        fill = load_profile(args.fill_from)[0] if args.fill_from else None
    except (CalibrationInputError, ProfileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or root / "reports" / "calibration"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "calibration.json", cal.to_json())
    prof = export_profile(cal, args.name, fill_from=fill, fill_name=args.fill_from)
    write_json_atomic(out / "profile.json", prof)
    write_text_atomic(out / "calibration.md", _constants_markdown(cal, out / "profile.json"))
    consts = cal.constants()
    undet = [k for k, c in consts.items() if not c["determined"]]
    print(f"[lab] calibrated from {len(cal.obs.configs)} result directories ({len(cal.obs.windows)} windows): "
          f"{len(consts) - len(undet)} constants determined, {len(undet)} not: {', '.join(undet) or 'none'}")
    for n in cal.notes:
        print(f"[lab] note: {n}")
    print(f"[lab] wrote {out / 'calibration.json'}, {out / 'profile.json'}, {out / 'calibration.md'}")
    return 0


def add_predict_args(p: argparse.ArgumentParser) -> None:
    """The ``lab predict`` arguments."""
    p.add_argument("--calibration", type=Path, default=None,
                   help="calibration.json (default <repo>/reports/calibration/calibration.json)")
    p.add_argument("--params", default=None, help="params file (default <repo>/params.yaml): modes, sweep grid, bench")
    p.add_argument("--grid", nargs="*", default=[], help="sweep grid keys to replace, e.g. num_steps=1,2,3,4")
    p.add_argument("--concurrency", type=int, nargs="*", default=None, help="concurrency levels (default bench's)")
    p.add_argument("--request-rate", type=float, nargs="*", default=None, help="request rates, req/s (default bench's)")
    p.add_argument("--point", default=None, help="rank at this point (default the first: lowest concurrency)")
    p.add_argument("--order", choices=["win", "uncertain"], default="win")
    p.add_argument("--draws", type=int, default=200, help="posterior draws (interval resolution; default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--measured", type=Path, nargs="*", default=[],
                   help="more result directories whose measurements to show beside the predictions")
    p.add_argument("--out", type=Path, default=None, help="output directory (default <repo>/reports/predictions)")


def run_predictions(args: argparse.Namespace):
    """Load the calibration and params, predict; returns ``(calibration, predictions, point)``.

    :raises FileNotFoundError, ValueError, lab.config.ParamsError: with the fix in the message.
    """
    from lab.calibrate.fit import Calibration
    from lab.calibrate.predict import candidates_from_params, points_from_bench, predict, workload_from_params
    from lab.calibrate.prediction_report import measured_by_config
    from lab.config import load_params, repo_root

    root = repo_root()
    cal = Calibration.load(args.calibration or root / "reports" / "calibration" / "calibration.json")
    params = load_params(args.params)
    cands = candidates_from_params(params, parse_grid(args.grid))
    points = points_from_bench(params.bench, args.concurrency, args.request_rate)
    point = args.point or points[0].key
    if point not in {p.key for p in points}:
        raise ValueError(f"--point {point}: not a point of this bench ({', '.join(p.key for p in points)})")
    dirs = [Path(c.result_dir) for c in cal.obs.configs.values()] + list(args.measured) + default_result_dirs(root)
    from lab.analysis.sentinel import NOT_WORKLOAD

    import json

    bench = json.loads(json.dumps(params.bench.model_dump(), default=str))  # as result.json holds it
    workload = {k: v for k, v in bench.items() if k not in NOT_WORKLOAD}  # what the sentinel records per launch
    preds = predict(cal, cands, points, workload_from_params(params), draws=args.draws, seed=args.seed,
                    measured=measured_by_config(dirs, engine=cal.engine, versions=cal.engine_versions),
                    workload=workload)
    return cal, preds, point


def predict_main(args: argparse.Namespace) -> int:
    """``lab predict``: 0, or 2 on bad input."""
    from lab.calibrate.order import rank
    from lab.calibrate.prediction_report import write_outputs
    from lab.config import ParamsError, repo_root

    try:
        cal, preds, point = run_predictions(args)
    except (FileNotFoundError, ValueError, ParamsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or repo_root() / "reports" / "predictions"
    paths = write_outputs(out, preds, cal, point, args.order)
    print(f"[lab] ranking at {point} ({args.order}):")
    for i, p in enumerate(rank(preds, point, args.order), 1):
        sp = p.metrics.get("speedup_decode_tok_s") or {}
        sp_txt = (f"speedup {sp['pred']:.3f} [{sp['lo']:.3f}, {sp['hi']:.3f}], P(win) {p.p_win:.2f}"
                  if sp.get("pred") is not None else "; ".join(p.needs) or "no speedup")
        print(f"  {i:2d}. {p.candidate.name} ({p.candidate.key}): {p.status}: {sp_txt}")
    print(f"[lab] wrote {', '.join(str(v) for v in paths.values())}")
    return 0


def sweep_order(args: argparse.Namespace) -> list[str]:
    """Generated sweep mode names in predicted order (``lab sweep --order``); modes the calibration
    cannot rank keep their place after the ranked ones.

    :raises FileNotFoundError, ValueError, lab.config.ParamsError:
    """
    from lab.calibrate.order import rank
    from lab.calibrate.predict import _candidate
    from lab.config import load_params

    ns = argparse.Namespace(calibration=args.calibration, params=args.params, grid=[], concurrency=None,
                            request_rate=None, point=args.point, draws=args.draws, seed=0, measured=[])
    _, preds, point = run_predictions(ns)
    modes = load_params(args.params).modes
    names_by_key: dict[str, list[str]] = {}
    for name, mode in modes.items():  # a hand-written mode and a generated one may be the same configuration
        names_by_key.setdefault(_candidate(name, mode).key, []).append(name)
    order: list[str] = []
    for p in rank(preds, point, args.order):
        order += [n for n in names_by_key.get(p.candidate.key, [p.candidate.name]) if n not in order]
    return order
