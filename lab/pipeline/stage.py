"""DVC stage runner shared by the three stage entry points: validate params, run the stage's
fast checks, then execute its notebook through papermill's Python API.

``dvc.yaml`` calls one entry module per stage, each importing only its own stage's code so
that each stage's ``deps`` can list exactly the code it runs (``tests/unit/test_dvc_deps.py``):
``python -m lab.pipeline.bench_stage --mode <name>`` (:mod:`lab.pipeline.bench_stage`),
``python -m lab.pipeline.compare_stage`` (:mod:`lab.pipeline.compare_stage`) and
``python -m lab.pipeline.physics_stage`` (:mod:`lab.pipeline.physics_stage`). This module
holds what they share and imports no stage's own code: an entry module describes its stage
as a :class:`Stage` and hands it to :func:`stage_main`.

The stage validates ``params.yaml`` first (a bad key fails here, before any server starts),
then executes the notebook with that stage's slice of the params as papermill parameters.
The Python API keeps their types: papermill's CLI ``-p flag false`` would inject the truthy
string ``"false"``. The notebook writes into a new attempt directory
(:mod:`lab.pipeline.staging`: ``<results_dir>/partial/<UTC time>/``, the executed notebook
``<notebook>.ipynb`` included); only a complete result replaces the previous one in
``<results_dir>``. Committed notebooks under ``notebooks/`` stay output-free.

Every stage logs through one :class:`lab.tracking.tracker.Tracker` per process; the stage
names its pipeline invocation (:data:`lab.tracking.grouping.INVOCATION_ENV`: the ``dvc``
process under DVC, else the stage itself) for the kernel it starts, so each ``dvc repro``
has its own MLflow parent run. Exit codes and messages (:func:`stage_main`): 0 ok; 2 bad
params, a check before the notebook, or a conflicting ``MLFLOW_TRACKING_URI`` (nothing
started, nothing deleted); 130 interrupted; 1 the notebook failed, or MLflow failed after
a complete result (then the message says the results are safe and names ``lab log``; with
:data:`RESULTS_SAFE_ENV` set, as a fleet job sets it, the stage also notes so in that file).
An interrupted or failed stage's message names the attempt directory holding its partial
result, and only paths that exist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import yamlio
from lab.config import LabParams, ParamsError, load_params, repo_root

__all__ = ["Stage", "PreflightFailed", "StageFailed", "run_stage", "stage_main", "stage_deps", "check_deps_tracked",
           "in_experiment", "log_executed_notebook", "stage_params", "params_edited", "RESULTS_SAFE_ENV"]

#: A file path: when set, a stage whose complete result is on disk and only MLflow failed writes
#: there ``{"results_dir": ..., "cause": ...}`` before it fails (a fleet job then saves the result in
#: DVC's run cache: :mod:`lab.fleet.runcache`).
RESULTS_SAFE_ENV = "LAB_RESULTS_SAFE_FILE"


class PreflightFailed(RuntimeError):
    """A check before the notebook failed; the message is the table or error to show."""


class StageFailed(RuntimeError):
    """The stage ran and failed; the message says what, where its results are, and the fix.

    :ivar exit_code: 1 (failed) or 130 (interrupted).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Stage:
    """One DVC stage as the runner sees it (built by its entry module from the validated params).

    :ivar dvc_name: the stage's name in ``dvc.yaml`` (``bench`` for every ``bench@<mode>``).
    :ivar notebook: ``notebooks/<notebook>.ipynb`` is executed.
    :ivar parameters: papermill parameters (``params_file`` is added when one was given;
        ``dir_param`` is set to the attempt directory).
    :ivar results_dir: where the complete result goes, relative to the repo root.
    :ivar complete: ``(attempt_dir) -> bool``: the attempt holds a complete result (it then
        replaces the previous one, even when a later step such as MLflow failed).
    :ivar owned: names the stage writes in ``results_dir`` (a previous result's leftovers
        among them are removed when a new complete result moves in).
    :ivar dir_param: the notebook parameter naming the output directory.
    :ivar preflight: ``(params, root, out_dir)``: seconds-long checks before any kernel;
        raises :class:`PreflightFailed`.
    :ivar without_kernel: ``(params, root, out_dir)``: the stage's outcome when no kernel can
        measure here (returns the written notebook's path), or None to run the notebook.
    :ivar cleanup: called after the notebook on every path (success, failure, interrupt).
    """

    dvc_name: str
    notebook: str
    parameters: dict[str, Any]
    results_dir: str
    complete: Callable[[Path], bool]
    owned: tuple[str, ...] = ()
    dir_param: str = "results_dir"
    preflight: Callable[[LabParams, Path, Path], None] | None = None
    without_kernel: Callable[[LabParams, Path, Path], Path | None] | None = None
    cleanup: Callable[[], None] | None = None


def _name_invocation() -> None:
    """Set :data:`lab.tracking.grouping.INVOCATION_ENV` for this stage and its kernel: the
    ``dvc`` process that runs the stage (``DVC_STAGE`` set, ``dvc/stage/run.py``; the first
    non-shell ancestor, :func:`lab.pipeline.interrupt.launcher_chain`), else this process."""
    import os

    from lab.tracking.grouping import INVOCATION_ENV, process_id

    if os.environ.get(INVOCATION_ENV):
        return
    chain = []
    if os.environ.get("DVC_STAGE"):
        from lab.pipeline.interrupt import launcher_chain

        chain = launcher_chain()
    try:
        os.environ[INVOCATION_ENV] = process_id(chain[-1] if chain else None)
    except Exception:  # psutil could not read the launcher: this process is the invocation
        os.environ[INVOCATION_ENV] = process_id()


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def run_stage(build: Callable[[LabParams], Stage], params_file: str | None = None, where: str = "",
              started: dict[str, Any] | None = None) -> Path:
    """Validate params, build the stage, run its fast checks, then execute its notebook in a
    new attempt directory and move a complete result into place; returns the executed
    notebook's final path.

    The pipeline key of the params read here is recorded for the stage and its kernel
    (:data:`lab.tracking.grouping.PIPELINE_KEY_ENV`), and the stage's tracker in ``started``:
    the kernel's runs and the stage's end (:func:`stage_main`) find one parent by it, whatever
    params.yaml says by then.

    :param build: the entry module's stage description from the validated params.
    :param where: the stage as named in messages (``bench baseline``).
    :param started: filled with ``tracker`` (:class:`lab.tracking.tracker.Tracker`) once it is built.
    :raises ParamsError: invalid params, or ``MLFLOW_TRACKING_URI`` names another store
        (before anything starts).
    :raises PreflightFailed: a check before the notebook failed (nothing started or deleted).
    :raises StageFailed: the notebook failed or was interrupted (its partial result kept in
        its attempt directory, named in the message), MLflow failed after a complete result, or
        a parameter of the stage changed in the params file while it ran (the result is kept;
        DVC must not record the edited value for it).
    """
    import os
    import time

    from lab.pipeline.staging import attempt_dir, check_output_dir, promote
    from lab.tracking.grouping import PIPELINE_KEY_ENV, pipeline_key
    from lab.tracking.runs import STAGE_STARTED_ENV, TrackingError, results_safe, tracking_cause
    from lab.tracking.tracker import Tracker

    os.environ[STAGE_STARTED_ENV] = str(int(time.time() * 1000))  # the kernel inherits it
    _name_invocation()
    root = repo_root()
    params_path = Path(params_file) if params_file else root / "params.yaml"
    declared_at_start = _read_yaml(params_path)
    params = load_params(params_path)
    os.environ[PIPELINE_KEY_ENV] = pipeline_key(params, root)  # the kernel inherits it, the end reads it
    try:
        tracker = Tracker.from_params(params, root)  # refuses a conflicting MLFLOW_TRACKING_URI
    except TrackingError as exc:
        raise ParamsError(str(exc)) from None
    if started is not None:
        started["tracker"] = tracker
    stage = build(params)
    check_deps_tracked(root, stage.dvc_name)
    out_dir = root / stage.results_dir
    problem = check_output_dir(out_dir)
    if problem:
        raise PreflightFailed(f"stage {where or stage.dvc_name}: {problem}")
    if stage.preflight is not None:
        stage.preflight(params, root, out_dir)
    work = attempt_dir(out_dir)
    output = work / f"{stage.notebook}.ipynb"
    parameters = {**stage.parameters, stage.dir_param: _rel(work, root)}
    if params_file:
        parameters["params_file"] = str(Path(params_file).resolve())
    received: list[int] = []
    error: BaseException | None = None
    try:
        written = stage.without_kernel(params, root, work) if stage.without_kernel is not None else None
        if written is None:
            import papermill as pm

            from lab.pipeline.interrupt import forward_signals

            try:
                with forward_signals() as received:
                    pm.execute_notebook(str(root / "notebooks" / f"{stage.notebook}.ipynb"), str(output),
                                        parameters=parameters, cwd=str(root), kernel_name="python3",
                                        progress_bar=False, log_output=True)
            finally:
                if stage.cleanup is not None:
                    stage.cleanup()
        else:
            output = written
    except BaseException as exc:  # noqa: BLE001 - judged below, then re-raised as a StageFailed
        error = exc
    attach_error = log_executed_notebook(tracker, output)
    complete = stage.complete(work)
    final = out_dir / output.name
    if complete:
        promote(work, out_dir, stage.owned)
    name = where or stage.dvc_name
    if received or isinstance(error, KeyboardInterrupt):
        sig = f"signal {received[0]}" if received else str(error) or "KeyboardInterrupt"
        raise StageFailed(f"stage {name} interrupted ({sig}); no engine left running; "
                          + _where_partial(work, out_dir, root, complete), exit_code=130) from None
    tracking = _tracking_failure(error) or (attach_error if error is None else None)
    if complete and tracking:
        if os.environ.get(RESULTS_SAFE_ENV):
            from lab.atomic import write_json_atomic

            write_json_atomic(Path(os.environ[RESULTS_SAFE_ENV]), {"results_dir": _rel(out_dir, root),
                                                                  "cause": tracking_cause(tracking)})
        raise StageFailed(f"stage {name}: {results_safe(tracking_cause(tracking), _rel(out_dir, root))}") from None
    if error is not None:
        cell = getattr(error, "ename", None)  # papermill's error: the failing cell's exception
        detail = tracking_cause(tracking) if tracking else _short(
            f"{cell}: {getattr(error, 'evalue', '')}" if cell else f"{type(error).__name__}: {error}")
        raise StageFailed(failure_message(name, detail, _where_partial(work, out_dir, root, complete))) from None
    edited = params_edited(root, stage, declared_at_start, _read_yaml(params_path))
    if edited:
        raise StageFailed(
            f"stage {name}: {_rel(params_path, root)} changed while it ran ({'; '.join(edited)}). It measured with "
            "the values read at its start (its MLflow runs record them, the result is in "
            f"{_rel(out_dir, root)}), but DVC would record the edited ones for it, so it reports a failure and "
            f"dvc.lock keeps its previous entry. Fix: run `dvc repro` again to measure with the edited values") from None
    return final


def _read_yaml(path: Path) -> Any:
    """The params file's content as YAML, or None when it cannot be read or parsed."""
    import yaml

    try:
        return yamlio.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None


def stage_params(root: Path, stage: Stage) -> list[str]:
    """The params ``dvc.yaml`` declares for ``stage`` (dotted keys, DVC records their values in
    ``dvc.lock``): a ``foreach``/``matrix`` stage's ``${key}`` / ``${item.mode}`` is its mode."""
    import yaml

    spec = ((yamlio.safe_load((root / "dvc.yaml").read_text()) or {}).get("stages") or {}).get(stage.dvc_name) or {}
    mode = str(stage.parameters.get("mode_name", ""))
    return [p.replace("${key}", mode).replace("${item.mode}", mode)
            for p in ((spec.get("do") or spec).get("params") or []) if isinstance(p, str)]


def params_edited(root: Path, stage: Stage, before: Any, after: Any) -> list[str]:
    """``"<key>: <before> -> <after>"`` for each param of :func:`stage_params` whose value
    differs between two loads of the params file (values cut at 80 characters); [] when none
    did, or when ``dvc.yaml`` cannot be read.

    :param before: the params file's YAML at the stage's start. :param after: at its end.
    """
    import json

    def value(doc: Any, key: str) -> Any:
        for part in key.split("."):
            doc = doc.get(part) if isinstance(doc, dict) else None
        return doc

    def text(v: Any) -> str:
        t = json.dumps(v, sort_keys=True, default=str)
        return t if len(t) <= 80 else t[:77] + "..."

    try:
        keys = stage_params(root, stage)
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for key in keys:
        a, b = value(before, key), value(after, key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):  # name the sub-keys that changed
            out += [f"{key}.{k}: {text(a.get(k))} -> {text(b.get(k))}" for k in sorted(set(a) | set(b), key=str)
                    if a.get(k) != b.get(k)]
        else:
            out.append(f"{key}: {text(a)} -> {text(b)}")
    return out


def _short(text: str, limit: int = 4000) -> str:
    """The failing cell's exception message, ``text``, whole up to ``limit`` characters (papermill's
    ``evalue`` is the message alone, its traceback is apart: a message of several lines, such as
    the preflight's table, is the reason, not noise; the executed notebook keeps everything)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def failure_message(name: str, detail: str, where: str) -> str:
    """``stage <name> failed (<reason>); <where>``; a reason of several lines (the preflight's
    table after "preflight failed before launching the engine:") follows on its own lines, so
    nothing after its first line's colon is lost.

    :param name: the stage (``bench@<mode>``). :param detail: ``<Exception>: <message>``.
    :param where: what the attempt left and where (:func:`_where_partial`).
    """
    head, _, rest = detail.partition("\n")
    if not rest.strip():
        return f"stage {name} failed ({head}); {where}"
    return f"stage {name} failed ({head.rstrip().rstrip(':')}: the reason follows); {where}\n{rest.rstrip()}"


def _tracking_failure(error: BaseException | None) -> str | None:
    """The message of a tracking error, raised here or in the notebook (papermill's
    ``PapermillExecutionError`` carries the cell's exception name and value), else None."""
    from lab.tracking.runs import TrackingError

    if isinstance(error, TrackingError):
        return str(error)
    if getattr(error, "ename", None) == "TrackingError":
        return str(getattr(error, "evalue", "")) or "TrackingError"
    return None


def _where_partial(work: Path, out_dir: Path, root: Path, complete: bool) -> str:
    """Where a failed attempt left what it wrote (only paths that exist)."""
    if complete:
        return f"the complete result is in {_rel(out_dir, root)}"
    files = [p for p in ("metrics.json", "requests.jsonl", "server.log", "bench.ipynb", "compare.ipynb",
                         "physics.ipynb") if (work / p).exists()]
    kept = "its previous results are untouched" if any(out_dir.glob("*.json")) else "no earlier result was there"
    if not files:
        try:
            work.rmdir()  # nothing written: no empty attempt left behind
            work.parent.rmdir()
        except OSError:
            pass
        return f"nothing was written; {kept} in {_rel(out_dir, root)}"
    return (f"its partial result is in {_rel(work, root)} ({', '.join(files)}); {kept} in {_rel(out_dir, root)}")


def stage_main(where: str, build: Callable[[LabParams], Stage], params_file: str | None,
               on_success: Callable[[Path], None] | None = None) -> int:
    """Run a stage as a CLI: :func:`run_stage`, then end this invocation's MLflow parent with
    the outcome. Exit codes: 0 ok, 2 bad params or preflight (nothing started), 130
    interrupted, 1 the notebook failed or MLflow failed (module docstring).

    :param where: the stage as named in messages (``bench baseline``).
    :param on_success: called with the executed notebook's path after success.
    """
    from lab.pipeline.interrupt import die_with_launcher

    die_with_launcher()  # dvc killed -> SIGTERM here -> forwarded to the kernel
    started: dict[str, Any] = {}
    try:
        out = run_stage(build, params_file, where, started)
    except (ParamsError, PreflightFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        _close_pipeline_runs(started.get("tracker"), ok=False)
        return 2
    except StageFailed as exc:
        _close_pipeline_runs(started.get("tracker"), ok=False)
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # a second signal before the kernel was told
        print(f"error: stage {where} interrupted ({exc}); no engine left running", file=sys.stderr)
        _close_pipeline_runs(started.get("tracker"), ok=False)
        return 130
    _close_pipeline_runs(started.get("tracker"), ok=True)
    root = repo_root()
    print(f"[lab] executed notebook: {out}" if not in_experiment(root) else
          f"[lab] executed notebook: {_rel(out, root)} (in this DVC experiment; `dvc exp apply` puts it in the workspace)")
    if on_success is not None:
        on_success(out)
    return 0


def log_executed_notebook(tracker, notebook: Path) -> str | None:
    """Attach the executed notebook to the MLflow run its stage recorded (the run record
    beside it, :data:`lab.tracking.runs.RECORD_FILE`, gets it too, for ``lab log``), and end
    that run now (its duration is the stage's). Returns the tracking error's message, or None."""
    from lab.tracking.runs import RECORD_FILE, TrackingError, load_record

    rec_path = notebook.parent / RECORD_FILE
    if not notebook.is_file() or not rec_path.is_file():
        return None
    try:
        rec = load_record(rec_path)
    except (OSError, ValueError):
        return None
    if [notebook.name, None] not in rec["artifacts"]:
        rec["artifacts"].append([notebook.name, None])
        from lab.atomic import write_json_atomic

        write_json_atomic(rec_path, rec, indent=1)
    try:
        tracker.attach(rec["run_id"], notebook)
        tracker.end_run_now(rec["run_id"])
    except TrackingError as exc:
        print(f"[lab] could not attach {notebook.name} to MLflow run {rec['run_id']}: {exc}", file=sys.stderr)
        return str(exc)
    return None


def in_experiment(root: Path) -> bool:
    """True inside a DVC experiment: ``$DVC_EXP_NAME`` set or a temp copy under ``.dvc/tmp/exps``."""
    import os

    return bool(os.environ.get("DVC_EXP_NAME")) or ".dvc/tmp/exps" in root.resolve().as_posix()


def stage_deps(root: Path, stage: str) -> list[str]:
    """The paths ``dvc.yaml`` lists as deps of ``stage`` (``${...}`` resolved from params.yaml)."""
    import re

    import yaml

    dvc = yamlio.safe_load((root / "dvc.yaml").read_text()) or {}
    params = yamlio.safe_load((root / "params.yaml").read_text()) or {}
    spec = (dvc.get("stages") or {}).get(stage) or {}
    deps = (spec.get("do") or spec).get("deps") or []

    def resolve(m: re.Match) -> str:
        node: object = params
        for part in m.group(1).split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return str(node) if node is not None else m.group(0)

    paths = [re.sub(r"\$\{([\w.]+)\}", resolve, d) for d in deps if isinstance(d, str) and "${key}" not in d]
    # results/ and reports/ are other stages' outputs (DVC's cache), not git's.
    return [p for p in paths if p.split("/")[0] not in ("results", "reports")]


def check_deps_tracked(root: Path, stage: str) -> None:
    """Refuse to run inside a DVC experiment when a dependency of the stage is missing or untracked.

    ``dvc exp run --queue`` runs in a temporary copy made from git: files git does not
    track never reach it, and an experiment's commit would not contain them either. Outside
    experiments (plain ``dvc repro``) nothing is checked.

    :raises ParamsError: naming the files and the fix (``git add`` + ``git commit``).
    """
    import subprocess

    if not in_experiment(root):
        return
    deps = stage_deps(root, stage)
    missing = [d for d in deps if not (root / d).exists()]
    untracked: list[str] = []
    try:
        out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", *deps], cwd=root,
                             capture_output=True, text=True, timeout=30)
        untracked = [ln for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        pass
    if missing or untracked:
        raise ParamsError(
            f"stage {stage} runs in a DVC experiment, and its dependencies "
            f"{sorted(set(missing + untracked))} are {'missing from this copy' if missing else 'untracked by git'}: "
            "queued experiments run in a temporary copy made from git, so untracked files do not reach it "
            "(and the experiment's commit would not record them). Fix: git add them and git commit, "
            "then queue the experiment again")


def _close_pipeline_runs(tracker, ok: bool) -> None:
    """End this invocation's parent run with this stage's outcome (and, after a failure, its
    children left RUNNING): :meth:`lab.tracking.tracker.Tracker.close_pipeline` of the tracker
    the stage built at its start (its pipeline key is the one the kernel's runs used; the params
    file is not read again: an edit during the stage would name another parent). Nothing when the
    stage stopped before building one (invalid params: no run was opened). Never raises."""
    if tracker is None:
        return
    try:
        changed = tracker.close_pipeline(ok)
        if not ok and changed:
            print(f"[lab] MLflow runs marked FAILED (this stage failed): {', '.join(changed)}", file=sys.stderr)
    except Exception as exc:  # MLflow down: the stage's own outcome is what matters
        print(f"[lab] could not end the pipeline's MLflow run: {exc}", file=sys.stderr)
