"""The compare stage end to end (what ``notebooks/compare.ipynb`` calls): the comparison of
:mod:`lab.analysis.comparison`, then figures and report (:mod:`lab.report`), the summary files
(:mod:`lab.report.tables`) and the MLflow comparison run (:mod:`lab.tracking.compare_log`).

Inputs are ``results/<mode>/result.json``, ``runs.json`` and ``requests.jsonl`` written by
:mod:`lab.pipeline.bench`. Outputs under ``reports/``: ``comparison.json`` (per mode and
level, mean and 95 % t-interval of the headline metrics, speedup over the baseline with a
Welch log-ratio interval and a verdict, the paired per-prompt speedup of
:mod:`lab.analysis.paired`, and the lossless check of :mod:`lab.analysis.lossless`), ``summary.json`` (its flat numbers and each mode's provenance), ``headline/<mode>.json`` (what DVC shows as metrics: :func:`lab.report.tables.headline_record`),
``summary.csv`` (one row per mode x point), ``concurrency.csv`` (its closed-loop
rows, for the ``dvc plots`` against concurrency), ``categories.csv`` (accept
length and speedup per prompt category, :mod:`lab.analysis.taskmix`), ``lossless.csv``
(share of outputs identical to the baseline's per mode x point, :mod:`lab.analysis.lossless`), ``pareto.csv`` (every
point's tokens/s per user and total output tok/s, :mod:`lab.analysis.load`, also a DVC plot), ``summary.md``,
``report.html``, the figures, and one MLflow run holding them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.analysis.comparison import (Comparison, engine_caption, interval_note, lean_numbers, load_launches,
                                     load_results, lossless_part, requests_frame, runs_frame, summarize)
from lab.analysis.crosschecks import crosscheck_summary
from lab.analysis.launches import prior_spread
from lab.analysis.load import load_part
from lab.analysis.paired import paired_part
from lab.analysis.provenance import mode_provenance, provenance_sentence, tag_rows
from lab.config import LabParams, repo_root

__all__ = ["run_compare"]


def run_compare(params: LabParams, modes: list[str], results_dir: str | Path = "results",
                reports_dir: str | Path = "reports", *, track: bool = True) -> Comparison:
    """Summary + figures + files + MLflow comparison run, in that order.

    :param modes: the modes to compare (each needs ``results/<mode>/result.json`` with status ok).
    :param results_dir, reports_dir: relative paths resolve against the repository root.
    :param track: log the MLflow comparison run (and finish the pipeline's parent run).
    :returns: the :class:`lab.analysis.comparison.Comparison` of :func:`lab.analysis.comparison.summarize`
        assembled with each part (the paired speedups, ``provenance``, ``caption``, ``effective_config``,
        ``warnings``, ``lossless``, ``figures`` (name -> path), ``taskmix``, ``waterfall``, ``trace``,
        ``load`` and, when logged, ``mlflow_run_id``); it becomes a dict only where written
        (:meth:`~lab.analysis.comparison.Comparison.to_dict`: ``comparison.json``).
    :raises lab.analysis.comparison.CompareError: a mode's results are missing or failed.
    :raises lab.tracking.runs.TrackingError: MLflow failed; every file is written first, and
        the message names the ``lab log`` command.
    """
    from lab.profiling.report import trace_section  # bench.trace profiler traces, when captured
    from lab.report import figures
    from lab.report import html as report
    from lab.report.answer import answer_markdown
    from lab.report.sweep_figures import primary_runs, primary_summary
    from lab.report.tables import (LOSSLESS_COLUMNS, concurrency_rows, lossless_rows, write_comparison_json, write_csv,
                                   write_summary_markdown)

    root = repo_root()
    res_dir = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    rep_dir = Path(reports_dir) if Path(reports_dir).is_absolute() else root / reports_dir
    (rep_dir / "figures").mkdir(parents=True, exist_ok=True)
    results = load_results(res_dir, modes)
    launches = params.bench.launches  # >= 2: launches 2..N under results/launches/ (lab/analysis/launches.py)
    if launches > 1:
        load_launches(res_dir, modes, launches)  # every launch there and ok, or a CompareError naming its stage
    runs = runs_frame(res_dir, modes, launches)
    baseline = params.baseline_mode if params.baseline_mode in modes else None
    engine = next(iter({r.get("engine") for r in results.values()}), None)
    from lab.engine.registry import find_engine

    eng = find_engine(engine) if engine else None
    profile = eng.cost_profile(eng.own_section(params)) if eng is not None else None  # the emulator's: params.yaml's emulator.profile
    prior = prior_spread(engine, profile)  # documented launch spread (issue 32), or None
    comp = summarize(results, runs, baseline, launch_prior=prior)
    # per-prompt speedup beside the per-repeat one, clustered by launch or repeat where requests share them
    comp.merge(paired_part(comp.modes, res_dir, baseline, launches=launches, results=results, launch_prior=prior))
    prov = mode_provenance(results)  # engine, timing, weights, acceptance on every row (issue 22)
    comp.provenance = prov
    comp.rows = tag_rows(comp.rows, prov, after="engine")
    comp.caption = f"{engine_caption(results, profile).rstrip('.')}. Provenance: {provenance_sentence(prov)}"
    comp.interval_note = interval_note(comp)  # what the intervals span, on every figure
    comp.effective_config = {m: r.get("effective_config") for m, r in results.items()}
    comp.warnings = {m: r["warnings"] for m, r in results.items() if r.get("warnings")}  # hygiene, per mode
    comp.crosscheck = crosscheck_summary(results)  # client vs server clocks, for the answer and the report
    comp.lossless, lossless_cols = lossless_part(  # issue 15
        comp.rows, res_dir, modes, baseline, bench=params.bench, lossless=params.lossless,
        simulated={m for m, p in params.modes.items() if p.simulate_accept_length is not None})
    for mode, ws in comp.lossless["warnings"].items():
        comp.warnings.setdefault(mode, []).extend(ws)
    comp.merge(lossless_cols)
    # figures' bars and error bars: group_estimates over the same rows and launches as the intervals
    comp.figures = figures.draw_all(primary_runs(runs), requests_frame(res_dir, modes), primary_summary(comp),
                                    rep_dir / "figures")
    explained, comp.break_even, comp.crossover = report.explain_figures(params.modes, runs, comp, rep_dir / "figures")
    comp.figures.update(explained)
    from lab.analysis.taskmix import comparison_taskmix, taskmix_metrics  # per prompt category
    from lab.report.task_categories import draw_taskmix, write_categories_csv

    taskmix = comparison_taskmix(baseline, results, res_dir, requests_frame(res_dir, modes))
    if taskmix is not None:
        comp.taskmix = taskmix
    write_categories_csv(taskmix, rep_dir / "categories.csv", provenance=prov)  # dvc plots
    comp.figures.update(draw_taskmix(comp, rep_dir / "figures"))
    from lab.analysis.position_acceptance import acceptance_rows  # issue 33: why this speedup and not more
    from lab.analysis.waterfall import comparison_waterfalls, waterfall_metrics
    from lab.report.speculation import draw_speculation

    comp.acceptance_by_position = acceptance_rows(results)
    comp.waterfall = comparison_waterfalls(comp.rows, baseline, results)
    comp.figures.update(draw_speculation(comp, rep_dir / "figures"))
    comp.trace = trace_section(results, rep_dir / "figures", baseline=baseline, caption=comp.caption)
    if comp.trace and comp.trace["figure"]:
        comp.figures["verify_time_breakdown"] = comp.trace["figure"]
    # open-loop load: goodput under bench.slo, "beats up to N req/s", the Pareto points and figures
    load = load_part(comp, runs, results, baseline)
    comp.merge(load.points)
    comp.load, comp.load_flat, pareto = load.load, load.flat, load.pareto
    if pareto is not None:
        from lab.report.load_figures import pareto_figures

        write_csv(tag_rows(pareto, prov), rep_dir / "pareto.csv")
        comp.figures.update(pareto_figures(pareto, rep_dir / "figures", caption=comp.caption, baseline=baseline))
    write_csv(comp.rows, rep_dir / "summary.csv")
    write_csv(concurrency_rows(comp.rows), rep_dir / "concurrency.csv")  # dvc plots vs concurrency
    write_csv(tag_rows(lossless_rows(comp.lossless), prov), rep_dir / "lossless.csv",
              LOSSLESS_COLUMNS)  # dvc plots
    # Opens with the answer (each warning once, naming its modes), then the full table.
    write_summary_markdown(rep_dir / "summary.md", answer_markdown(comp, "report.html"), comp.rows, baseline)
    report.write_report(comp, rep_dir / "report.html", engine=params.engine, modes=params.modes)
    error = None
    if track:
        from lab.tracking.compare_log import log_comparison
        from lab.tracking.tracker import Tracker

        run_id, error = log_comparison(Tracker.from_params(params, root), params, modes, results, lean_numbers(comp),
                                       comp.figures, rep_dir, run_metrics={**taskmix_metrics(comp.get("taskmix")),
                                                                  **waterfall_metrics(comp.waterfall)})
        if run_id:
            comp.mlflow_run_id = run_id
    write_comparison_json(rep_dir, _relative_paths(comp.to_dict(), rep_dir), lean_numbers(comp))
    if error is not None:  # every file is written: the stage fails, `lab log` re-logs the run
        raise error
    return comp


def _relative_paths(obj: Any, base: Path) -> Any:
    """``obj`` with every string that is a path under ``base`` made relative to it
    (``figures/x.png``): ``comparison.json`` stays valid when the stage's attempt directory
    moves into ``reports/`` (:mod:`lab.pipeline.staging`), or the reports are copied."""
    prefix = str(base).rstrip("/") + "/"
    if isinstance(obj, str):
        return obj[len(prefix):] if obj.startswith(prefix) else obj
    if isinstance(obj, dict):
        return {k: _relative_paths(v, base) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_relative_paths(v, base) for v in obj]
    return obj
