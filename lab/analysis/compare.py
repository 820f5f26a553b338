"""The comparison across modes: load every mode's results, compute speedups, write the summary.

Inputs are ``results/<mode>/result.json`` and ``runs.json`` (one row per concurrency
level x repeat) written by :mod:`lab.pipeline.bench`. Output: ``reports/comparison.json`` (per mode and level, mean and 95 % t-interval of the headline metrics, speedup over the
baseline with a Welch log-ratio interval and a verdict, and the paired per-prompt speedup of
:mod:`lab.analysis.paired`), ``reports/summary.json`` (its flat
numbers, the DVC metrics file), ``reports/summary.csv`` (one row per
mode x level, for ``dvc plots``), the figures (:mod:`lab.report.figures`) and one MLflow run
holding them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from lab.analysis import stats
from lab.config import LabParams, repo_root
from lab.engine.effective import identical_modes, identical_notice

if TYPE_CHECKING:  # pandas is imported where used: `lab summary` must start fast
    import pandas as pd

__all__ = ["CompareError", "load_results", "runs_frame", "requests_frame", "summarize",
           "engine_caption", "run_compare", "summary_markdown", "read_summary_rows", "SPEEDUP_METRICS"]

# Throughputs compared against the baseline (higher is better).
SPEEDUP_METRICS = ("decode_tok_s", "output_tok_s")
SUMMARY_METRICS = ("decode_tok_s", "output_tok_s", "accept_length", "cycle_ms", "verify_ms",
                   "draft_ms", "decode_ms", "p50_ttft_ms", "p50_itl_ms", "p50_tpot_ms",
                   "verify_graph_fraction", "error_rate")


class CompareError(RuntimeError):
    """A mode's results are missing or marked failed; the message names the mode and the fix."""


def load_results(results_dir: Path, modes: list[str]) -> dict[str, dict[str, Any]]:
    """``mode -> result.json`` (the full record of :func:`lab.pipeline.bench.run_mode`) for every mode.

    :raises CompareError: a result file is missing or its status is not ``ok``.
    """
    out = {}
    for mode in modes:
        path = results_dir / mode / "result.json"
        if not path.is_file():
            raise CompareError(f"{path} missing. Fix: run `dvc repro bench@{mode}` first")
        data = json.loads(path.read_text())
        if data.get("status") != "ok":
            raise CompareError(f"mode {mode} failed ({data.get('error', 'no error recorded')}); its "
                               f"log is {results_dir / mode / 'server.log'}. Fix the cause and re-run "
                               f"`dvc repro bench@{mode}`")
        out[mode] = data
    return out


def runs_frame(results_dir: Path, modes: list[str]) -> pd.DataFrame:
    """One row per (mode, concurrency, repeat) with that run's summary metrics."""
    import pandas as pd

    rows = []
    for mode in modes:
        for run in json.loads((results_dir / mode / "runs.json").read_text()):
            rows.append({"mode": mode, **{k: v for k, v in run.items() if not isinstance(v, (dict, list))}})
    df = pd.DataFrame(rows)
    if len(df) and "point" not in df:  # results from before the context/output axes
        df["point"] = [f"c{int(c)}" for c in df["concurrency"]]
    return df


def requests_frame(results_dir: Path, modes: list[str]) -> pd.DataFrame:
    """One row per measured ok request at a primary point: mode, concurrency, point, rid,
    prompt_index, completion_tokens, spec_verify_ct, accept_length."""
    import pandas as pd

    rows = []
    for mode in modes:
        path = results_dir / mode / "requests.jsonl"
        if not path.is_file():
            continue
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if not r.get("ok") or r.get("point", f"c{r.get('concurrency')}") != f"c{r.get('concurrency')}":
                    continue  # failed, or off the primary context/output length
                meta = r.get("meta_info") or {}
                ct, vct = r.get("completion_tokens"), meta.get("spec_verify_ct")
                rows.append({"mode": mode, "concurrency": r.get("concurrency"), "point": f"c{r.get('concurrency')}",
                             "rid": r.get("rid"), "prompt_index": r.get("prompt_index"), "completion_tokens": ct,
                             "spec_verify_ct": vct,
                             "accept_length": (ct / vct) if ct and vct else None})
    return pd.DataFrame(rows)


def engine_caption(results: dict[str, dict[str, Any]], params: LabParams | None = None) -> str:
    """Who produced the numbers, for every figure: the engine, and for the emulator that it is not a GPU."""
    engines = sorted({r.get("engine", "?") for r in results.values()})
    versions = sorted({str(r.get("engine_version", "?")) for r in results.values()})
    if "emulator" in engines:
        profile = params.emulator.profile if params else "see params.yaml"
        text = (f"engine: emulator (SGLang-compatible, profile {profile}: {_profile_description(profile)}). "
                "Modelled step costs. Not a GPU measurement.")
    else:
        text = f"engine: {', '.join(engines)} (SGLang {', '.join(versions)})"
    return text


def _profile_description(profile: str) -> str:
    """The cost profile's own ``description`` (what it models and what it is calibrated to),
    or a note that it could not be read."""
    from lab.emulator.profile import ProfileError, load_profile

    try:
        return load_profile(profile)[0].description.rstrip(".")
    except (ProfileError, OSError) as exc:
        return f"description unavailable: {exc}"


def summarize(results: dict[str, dict[str, Any]], runs: pd.DataFrame, baseline: str | None) -> dict[str, Any]:
    """Per mode and level: mean and 95 % CI of :data:`SUMMARY_METRICS`, and speedups vs baseline.

    :returns: ``{"baseline", "modes": {mode: {"c1": {...}}}, "identical_effective_config",
        "notice", "rows": [...]}``; ``rows`` is flat (one per mode x level) for the CSV.
    """
    summary: dict[str, Any] = {"baseline": baseline, "modes": {}, "rows": []}
    if "point" not in runs:  # results from before the context/output axes
        runs = runs.assign(point=[f"c{int(c)}" for c in runs["concurrency"]])
    for mode in results:
        summary["modes"][mode] = {}
        mine = runs[runs["mode"] == mode]
        for key in dict.fromkeys(mine["point"]):
            sub = mine[mine["point"] == key]
            level = int(sub["concurrency"].iloc[0])
            entry: dict[str, Any] = {"concurrency": level, "repeats": int(len(sub))}
            row: dict[str, Any] = {"mode": mode, "point": key, "concurrency": level,
                                   "engine": results[mode].get("engine")}
            for axis in ("context_tokens", "max_new_tokens"):
                if axis in sub and sub[axis].notna().any():
                    entry[axis] = row[axis] = int(sub[axis].iloc[0])
            if "errors" in sub:  # failed requests are counted, never dropped
                entry["requests"] = row["requests"] = int(sub["requests"].sum())
                entry["errors"] = row["errors"] = int(sub["errors"].sum())
            for m in SUMMARY_METRICS:
                if m in sub and sub[m].notna().any():
                    mean, lo, hi = stats.metric_ci(m, sub[m].dropna().tolist())
                    entry[m] = {"mean": mean, "ci95_lo": lo, "ci95_hi": hi}
                    row.update({f"{m}_mean": mean, f"{m}_ci95_lo": lo, f"{m}_ci95_hi": hi})
            if baseline and mode != baseline:
                base = runs[(runs["mode"] == baseline) & (runs["point"] == key)]
                for m in SPEEDUP_METRICS:
                    if m in sub and len(base):
                        ratio, lo, hi = stats.ratio_ci(base[m].tolist(), sub[m].tolist())
                        entry[f"speedup_{m}"] = {"ratio": ratio, "ci95_lo": lo, "ci95_hi": hi,
                                                 "verdict": stats.verdict(ratio, lo, hi)}
                        row.update({f"speedup_{m}": ratio, f"speedup_{m}_ci95_lo": lo,
                                    f"speedup_{m}_ci95_hi": hi, f"verdict_{m}": stats.verdict(ratio, lo, hi)})
            summary["modes"][mode][key] = entry
            summary["rows"].append(row)
    # Same resolved arguments *and* the same measured CUDA-graph share of verify: the
    # emulator (and older SGLang builds) run prefill-mode verify outside graphs.
    groups = identical_modes({
        m: ({**r["effective_config"], "measured_verify_graph_fraction":
             _round(r.get("headline", {}).get("verify_graph_fraction"))} if r.get("effective_config") else None)
        for m, r in results.items()})
    summary["identical_effective_config"] = groups
    summary["notice"] = identical_notice(groups)
    return summary


def _lean(summary: dict[str, Any]) -> dict[str, float]:
    """Flat numbers for DVC and MLflow: ``<mode>.c<N>.<metric>`` means and speedups."""
    flat: dict[str, float] = {}
    for mode, levels in summary["modes"].items():
        for lvl, e in levels.items():
            for m in ("decode_tok_s", "output_tok_s", "accept_length", "verify_ms", "error_rate"):
                if m in e:
                    flat[f"{mode}.{lvl}.{m}"] = e[m]["mean"]
            if "speedup_decode_tok_s" in e:
                flat[f"{mode}.{lvl}.speedup_decode_tok_s"] = e["speedup_decode_tok_s"]["ratio"]
            if "paired_speedup_decode_tok_s" in e:  # lab.analysis.paired: per-prompt ratio and its interval
                p = e["paired_speedup_decode_tok_s"]
                flat.update({f"{mode}.{lvl}.paired_speedup_decode_tok_s{sfx}": p[k] for sfx, k in
                             (("", "ratio"), ("_ci95_lo", "ci95_lo"), ("_ci95_hi", "ci95_hi")) if p.get(k) is not None})
    return flat


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 1)


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    from lab.atomic import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def run_compare(params: LabParams, modes: list[str], results_dir: str | Path = "results",
                reports_dir: str | Path = "reports", *, track: bool = True) -> dict[str, Any]:
    """Summary + figures + MLflow comparison run. Returns the summary with ``figures`` paths.

    :raises CompareError: a mode's results are missing or failed.
    """
    from lab.report import figures
    from lab.atomic import write_json_atomic
    from lab.tracking.runs import TrackingError, open_run, run_tags

    root = repo_root()
    res_dir = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    rep_dir = Path(reports_dir) if Path(reports_dir).is_absolute() else root / reports_dir
    (rep_dir / "figures").mkdir(parents=True, exist_ok=True)
    results = load_results(res_dir, modes)
    runs = runs_frame(res_dir, modes)
    baseline = params.baseline_mode if params.baseline_mode in modes else None
    summary = summarize(results, runs, baseline)
    from lab.analysis.paired import add_paired

    add_paired(summary, res_dir, baseline)  # per-prompt speedup beside the per-repeat one
    summary["caption"] = engine_caption(results, params)
    summary["effective_config"] = {m: r.get("effective_config") for m, r in results.items()}
    summary["warnings"] = {m: r["warnings"] for m, r in results.items() if r.get("warnings")}  # hygiene, per mode
    from lab.report.sweep_figures import primary_runs, primary_summary

    summary["figures"] = figures.draw_all(primary_runs(runs), requests_frame(res_dir, modes), primary_summary(summary),
                                          rep_dir / "figures")
    from lab.report import html as report

    summary["figures"].update(report.explain_figures(params, runs, summary, rep_dir / "figures"))
    from lab.analysis.taskmix import add_taskmix, write_categories_csv  # per prompt category
    from lab.report.taskmix import draw_taskmix

    write_categories_csv(add_taskmix(summary, results, res_dir, requests_frame(res_dir, modes)),
                         rep_dir / "categories.csv")  # dvc plots
    summary["figures"].update(draw_taskmix(summary, rep_dir / "figures"))
    from lab.profiling.report import profile_section  # bench.profile traces, when captured

    summary["profile"] = profile_section(results, rep_dir / "figures", baseline=baseline, caption=summary["caption"])
    if summary["profile"] and summary["profile"]["figure"]:
        summary["figures"]["verify_time_breakdown"] = summary["profile"]["figure"]
    _write_csv(summary["rows"], rep_dir / "summary.csv")
    from lab.atomic import write_text_atomic

    from lab.report.answer import answer_markdown

    # Opens with the answer (each warning once, naming its modes), then the full table.
    write_text_atomic(rep_dir / "summary.md", "\n\n".join(
        [answer_markdown(summary, "report.html"), summary_markdown(summary["rows"], baseline)]) + "\n")
    report.write_report(params, summary, rep_dir / "report.html")
    if track:
        try:
            tags = run_tags(params, mode=None)
            tags["modes"] = ",".join(modes)
            from lab.tracking.grouping import finish_parent, pipeline_parent

            parent = pipeline_parent(params)
            tags.update({f"mode_run.{m}": str(r.get("mlflow_run_id")) for m, r in results.items()})
            with open_run(params, run_name=f"compare | {params.engine} | {len(modes)} modes", tags=tags,
                          parent_run_id=parent) as run:
                run.log_metrics(_lean(summary))
                from lab.analysis.taskmix import taskmix_metrics

                run.log_metrics(taskmix_metrics(summary.get("taskmix")))  # <mode>.<point>.category.<cat>.*
                run.log_artifact(rep_dir / "report.html")
                for fig in summary["figures"].values():
                    run.log_artifact(fig, "figures")
                run.log_artifact(rep_dir / "summary.csv")
                run.log_artifact(rep_dir / "categories.csv")
                summary["mlflow_run_id"] = run.run_id
            finish_parent(params, parent, _lean(summary), {"modes": ",".join(modes)})
        except TrackingError as exc:
            print(f"[lab] MLflow logging of the comparison failed ({exc}); the summary and figures "
                  f"are in {rep_dir}")
    write_json_atomic(rep_dir / "comparison.json", {k: v for k, v in summary.items() if k != "rows"})
    write_json_atomic(rep_dir / "summary.json", _lean(summary))
    return summary


def _num(x: Any) -> float | None:
    """A CSV cell or a float as a float; empty / missing / NaN -> None."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def _ci(row: dict[str, Any], m: str, fmt: str) -> str:
    mean = _num(row.get(f"{m}_mean"))
    if mean is None:
        return "-"
    lo, hi = _num(row.get(f"{m}_ci95_lo")), _num(row.get(f"{m}_ci95_hi"))
    return format(mean, fmt) + (f" [{format(lo, fmt)}, {format(hi, fmt)}]" if lo is not None and hi is not None else "")


def _mean(row: dict[str, Any], m: str, digits: int = 1) -> str:
    mean = _num(row.get(f"{m}_mean"))
    return "-" if mean is None else f"{mean:.{digits}f}"


def _speedup(row: dict[str, Any], m: str, baseline: str | None, prefix: str = "") -> str:
    text = stats.format_speedup(_num(row.get(f"{prefix}speedup_{m}")), _num(row.get(f"{prefix}speedup_{m}_ci95_lo")),
                                _num(row.get(f"{prefix}speedup_{m}_ci95_hi")), row.get(f"{prefix}verdict_{m}"))
    return text or ("reference" if baseline and row.get("mode") == baseline else "-")


def summary_markdown(rows: list[dict[str, Any]], baseline: str | None = None) -> str:
    """The comparison as a Markdown table, one line per mode x measured point: decode and
    output tok/s (mean [95 % CI]), accept length, verify/cycle ms and both speedups over the
    baseline with their intervals and verdicts (decode tok/s also paired prompt by prompt,
    :mod:`lab.analysis.paired`) (README's table; ``lab summary`` prints it).

    :param rows: ``summarize(...)["rows"]`` or the rows of ``reports/summary.csv`` (strings
        are parsed; empty cells print as ``-``).
    :param baseline: the baseline mode's name (its rows say "reference").
    """
    head = ["mode", "point", "decode tok/s [95 % CI]", "output tok/s [95 % CI]", "accept length", "verify ms",
            "cycle ms", "speedup, decode tok/s [95 % CI]", "paired per prompt, decode tok/s [95 % CI]",
            "speedup, output tok/s [95 % CI]"]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | " + " | ".join(["---:"] * 5) + " | --- | --- | --- |"]
    for r in rows:
        cells = [str(r.get("mode")), str(r.get("point") or f"c{r.get('concurrency')}"),
                 _ci(r, "decode_tok_s", ".1f"), _ci(r, "output_tok_s", ".1f"), _mean(r, "accept_length", 2),
                 _mean(r, "verify_ms"), _mean(r, "cycle_ms"), _speedup(r, "decode_tok_s", baseline),
                 _speedup(r, "decode_tok_s", baseline, prefix="paired_"), _speedup(r, "output_tok_s", baseline)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_summary_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of ``reports/summary.csv`` (as written by :func:`run_compare`).

    :raises FileNotFoundError: with the fix (run the compare stage first).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. Fix: run `dvc repro` (the compare stage writes it)")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summary_table(summary: dict[str, Any]) -> pd.DataFrame:
    """The comparison as a table: one row per mode x level with means, CIs and verdicts."""
    import pandas as pd

    cols = ["mode", "concurrency", "decode_tok_s_mean", "decode_tok_s_ci95_lo", "decode_tok_s_ci95_hi",
            "output_tok_s_mean", "accept_length_mean", "verify_ms_mean", "draft_ms_mean", "cycle_ms_mean",
            "speedup_decode_tok_s", "speedup_decode_tok_s_ci95_lo", "speedup_decode_tok_s_ci95_hi",
            "verdict_decode_tok_s"]
    df = pd.DataFrame(summary["rows"])
    return df[[c for c in cols if c in df]].round(3)
