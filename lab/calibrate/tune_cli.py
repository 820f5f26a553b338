"""``lab tune``: the command-line end of :mod:`lab.calibrate.tune` (docs/speculation.md, "lab tune").

    lab tune [--calibration reports/calibration/calibration.json] [--params params.yaml]
             [--concurrency 1 8 32 64] [--context-tokens 0 2048] [--max-steps 7]
             [--objective decode_tok_s|output_tok_s] [--tier-context 0] [--draws 100] [--out reports/tune]
    lab tune --measured DIR [DIR ...] [--out reports/tune]

The first form predicts and writes ``tune.json`` (every point's recommendation and the
predictions behind it), ``tune.md``, ``adaptive-config.json`` (SGLang's
``--speculative-adaptive-config``) and ``params-tune.yaml`` (params.yaml with the modes that measure
the recommendation: ``baseline``, ``tune_s<k>``, ``tune_adaptive``, ``sglang_adaptive``). The second
reads the measured modes (``lab capture --out DIR`` folders, or the mode folders in them, or
``results/<mode>``) and writes predicted against measured into ``tune.md`` / ``tune.json``
(``measured``), without predicting again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_tune_args", "tune_main"]


def add_tune_args(p: argparse.ArgumentParser) -> None:
    """The ``lab tune`` arguments."""
    from lab.calibrate.tune import OBJECTIVES

    p.add_argument("--calibration", type=Path, default=None,
                   help="calibration.json (default <repo>/reports/calibration/calibration.json)")
    p.add_argument("--params", default=None, help="params file (default <repo>/params.yaml): bench, server, a speculative mode")
    p.add_argument("--mode", default=None,
                   help="the speculative mode the candidates copy (attention mode, backends, acceptance); default: "
                        "each distinct one is tuned and the best predicted is kept")
    p.add_argument("--concurrency", type=int, nargs="*", default=None, help="concurrency levels (default bench's)")
    p.add_argument("--context-tokens", type=int, nargs="*", default=None, help="context lengths (default bench's)")
    p.add_argument("--max-steps", type=int, default=7, help="deepest num_steps candidate (default 7)")
    p.add_argument("--objective", choices=OBJECTIVES, default="decode_tok_s")
    p.add_argument("--tier-context", type=int, default=None,
                   help="context length of the adaptive tier table (default the shortest tuned)")
    p.add_argument("--draws", type=int, default=100, help="posterior draws (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--capture-requests", type=int, default=None, metavar="N",
                   help="predict what `lab capture --requests N` measures (one window of max(N, 2 x concurrency) "
                        "requests per point) instead of the bench stage's workload")
    p.add_argument("--measured", type=Path, nargs="*", default=None,
                   help="measured mode folders of params-tune.yaml's modes: report predicted vs measured")
    p.add_argument("--profile", default=None,
                   help="with --measured on the emulator: its cost profile (for its documented launch spread); "
                        "default params-tune.yaml's emulator.profile")
    p.add_argument("--out", type=Path, default=None, help="output directory (default <repo>/reports/tune)")


def _mode_dirs(paths: list[Path]) -> list[Path]:
    """Mode folders: each path holding ``requests.jsonl``, or the sub-folders of one that do."""
    out: list[Path] = []
    for p in paths:
        if (p / "requests.jsonl").is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(d for d in p.iterdir() if (d / "requests.jsonl").is_file())
        else:
            raise FileNotFoundError(f"{p}: not a folder. Fix: pass `lab capture --out DIR` folders or their mode folders")
    if not out:
        raise FileNotFoundError(f"no measured mode folder (requests.jsonl) in {', '.join(map(str, paths))}")
    return out


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path.resolve())


def tune_main(args: argparse.Namespace) -> int:
    """``lab tune``: 0, or 2 on bad input (the message names the fix)."""
    import yaml

    from lab.calibrate.fit import Calibration
    from lab.calibrate.tune import Tuning, adaptive_config, markdown, measured_report, tune, tuned_modes
    from lab.config import ParamsError, load_params, repo_root

    root = repo_root()
    out = args.out or root / "reports" / "tune"
    try:
        if args.measured is not None:
            saved = out / "tune.json"
            if not saved.is_file():
                raise FileNotFoundError(f"{saved}: no tuning to compare with. Fix: run `lab tune` (without --measured) first")
            doc = json.loads(saved.read_text())
            tuning = Tuning.from_dict(doc)
            profile = args.profile or doc.get("emulator_profile")
            measured = measured_report(tuning, _mode_dirs(list(args.measured)), engine_profile=profile)
            doc["measured"] = measured
            saved.write_text(json.dumps(doc, indent=1, default=str))
            cfg = json.loads((out / "adaptive-config.json").read_text())
            (out / "tune.md").write_text(markdown(tuning, cfg, doc.get("tier_notes", []), measured))
            print((out / "tune.md").read_text())
            return 0
        cal_path = args.calibration or root / "reports" / "calibration" / "calibration.json"
        cal = Calibration.load(cal_path)
        params = load_params(args.params)
        tuning = tune(cal, params, calibration_path=_relative(Path(cal_path), root), concurrency=args.concurrency,
                      context_tokens=args.context_tokens, max_steps=args.max_steps, objective=args.objective,
                      draws=args.draws, seed=args.seed, capture_requests=args.capture_requests, mode=args.mode,
                      log=lambda m: print(m, file=sys.stderr) if "c1 " in m else None)
        cfg, notes = adaptive_config(tuning, args.tier_context)
    except (FileNotFoundError, ValueError, ParamsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    cfg_file = out / "adaptive-config.json"
    cfg_file.write_text(json.dumps(cfg, indent=1) + "\n")
    params_src = Path(args.params) if args.params else root / "params.yaml"
    raw = yaml.safe_load(params_src.read_text())
    raw.pop("sweep", None)
    raw["modes"] = tuned_modes(tuning, _relative(cfg_file, root))
    doc = tuning.to_dict()
    doc.update(tier_notes=notes, adaptive_config=cfg, params_source=_relative(params_src, root),
               emulator_profile=(raw.get("emulator") or {}).get("profile"))
    (out / "tune.json").write_text(json.dumps(doc, indent=1, default=str))
    points = tuning.points
    conc = sorted({p.point.concurrency for p in points})
    ctxs = sorted({p.point.context_tokens for p in points})
    if tuning.capture_requests:
        measure = (f"lab capture --params {_relative(out / 'params-tune.yaml', root)} --out DIR "
                   f"--requests {tuning.capture_requests} " + " ".join(f"--concurrency {c}" for c in conc) + " "
                   + " ".join(f"--context-tokens {c}" for c in ctxs))
        compare = f"lab tune --measured DIR --out {_relative(out, root)}"
    else:  # the bench stage's workload, which the predictions replayed
        measure = f"cp {_relative(out / 'params-tune.yaml', root)} params.yaml && dvc repro"
        compare = f"lab tune --measured results --out {_relative(out, root)}"
    header = (f"# Written by `lab tune` from {tuning.calibration} and {_relative(params_src, root)}: the modes that\n"
              f"# measure its recommendation (docs/speculation.md, \"lab tune\"). Measure, then compare:\n"
              f"#   {measure}\n#   {compare}\n")
    class _NoAliases(yaml.SafeDumper):  # each mode spelled out in full (no &id001 / *id001)
        def ignore_aliases(self, data):
            return True

    (out / "params-tune.yaml").write_text(header + yaml.dump(raw, Dumper=_NoAliases, sort_keys=False))
    (out / "tune.md").write_text(markdown(tuning, cfg, notes))
    print((out / "tune.md").read_text())
    print(f"[lab] wrote {', '.join(str(out / n) for n in ('tune.json', 'tune.md', 'adaptive-config.json', 'params-tune.yaml'))}")
    print(f"[lab] measure it: {measure}")
    return 0
