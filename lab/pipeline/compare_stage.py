"""DVC entry point of the ``compare`` stage: ``python -m lab.pipeline.compare_stage``.

Imports only what the comparison runs (loading every mode's results, the report, the
runner in :mod:`lab.pipeline.stage`, the sweep check); the notebook
``notebooks/compare.ipynb`` imports the rest. ``dvc.yaml`` lists exactly that code as the
stage's deps, checked by ``tests/unit/test_dvc_deps.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.config import LabParams
from lab.pipeline.stage import PreflightFailed, Stage, stage_main

__all__ = ["compare_stage", "check_sweep_current", "main", "REPORT_FILES"]


def check_sweep_current(path: Path) -> None:
    """Refuse generated sweep modes that no longer match params.yaml's ``sweep`` section
    (:func:`lab.pipeline.sweep.check_current`). Run by the compare stage only, which declares
    ``sweep`` in ``dvc.yaml``: the bench stages do not read it, so a sweep edit re-runs none.

    :raises ParamsError: stale generated modes, naming the fix (``lab sweep``).
    """
    from lab.config import yamlio
    from lab.pipeline.sweep import check_current

    check_current(yamlio.safe_load(path.read_text()) or {})


def compare_stage(params: LabParams, params_file: str | None = None) -> Stage:
    """The ``compare`` stage: notebook ``compare`` over every mode, outputs in ``reports/``.

    :raises ParamsError: stale generated sweep modes (:func:`check_sweep_current`).
    """
    from lab.config import repo_root

    check_sweep_current(Path(params_file) if params_file else repo_root() / "params.yaml")

    def preflight(params: LabParams, root: Path, out_dir: Path) -> None:
        """Every mode's ``result.json`` exists and says ``ok``, in each of ``bench.launches`` launches.

        :raises PreflightFailed: naming the missing or failed mode (and launch).
        """
        from lab.analysis.comparison import CompareError, load_launches, load_results

        try:
            load_results(root / "results", list(params.modes))
            load_launches(root / "results", list(params.modes), params.bench.launches)
        except CompareError as exc:
            raise PreflightFailed(f"stage compare: {exc}") from None

    return Stage(dvc_name="compare", notebook="compare", results_dir="reports", preflight=preflight,
                 parameters={"modes": list(params.modes), "results_dir": "results"}, dir_param="reports_dir",
                 complete=lambda work: (work / "comparison.json").is_file() and (work / "summary.json").is_file(),
                 owned=REPORT_FILES)


#: What the compare stage writes in ``reports/`` (its ``dvc.yaml`` outputs and its run record).
REPORT_FILES = ("summary.csv", "concurrency.csv", "pareto.csv", "lossless.csv", "categories.csv", "compare.ipynb",
                "comparison.json", "report.html", "summary.md", "figures", "summary.json", "headline", "mlflow_run.json")


def print_answer(notebook: Path) -> None:
    """The last stage: ``dvc repro`` ends with the answer on one screen (:func:`lab.report.answer.answer_brief`,
    at most 30 lines of 120 columns; ``lab summary`` prints it whole).
    Inside a DVC experiment the report is named as the experiment's (its temporary copy is
    gone once the experiment ends), with how to get it into the workspace."""
    import os

    from lab.pipeline.stage import in_experiment
    from lab.report.answer import load_answer

    shown = None
    if in_experiment(notebook.parent.parent):
        name = os.environ.get("DVC_EXP_NAME")
        shown = (f"reports/report.html of experiment {name} (`dvc exp apply {name}` puts it in the workspace)"
                 if name else "reports/report.html of this experiment (`dvc exp show` names it; "
                              "`dvc exp apply <name>` puts it in the workspace)")
    print("\n" + load_answer(notebook.parent, shown, brief=True), flush=True)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m lab.pipeline.compare_stage [--params FILE]``; exit code as
    :func:`lab.pipeline.stage.stage_main`."""
    ap = argparse.ArgumentParser(prog="python -m lab.pipeline.compare_stage", description="run the compare DVC stage (sweep check, results present, notebook)")
    ap.add_argument("--params", help="params file (default: <repo>/params.yaml)")
    args = ap.parse_args(argv)
    return stage_main("compare", lambda params: compare_stage(params, args.params), args.params,
                      on_success=print_answer)


if __name__ == "__main__":
    sys.exit(main())
