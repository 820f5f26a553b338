"""DVC's run cache as the fleet's hand-over: a job saves its stage there, collect restores it.

DVC's run cache (``<cache dir>/runs/``) maps a stage's command, dependency hashes and params
to the hashes of the outputs it produced; ``dvc repro`` restores outputs from it ("Stage 'x'
is cached - skipping run, checking out outputs") instead of running the command. Every fleet
job uses one shared cache directory, so what a job on a GPU node saved, collect on the head
node restores. DVC 3.67 withholds two of this lab's stages from the run cache, and the fleet
lifts both guards in its own processes only (plain ``dvc repro`` is unchanged):

- ``dvc/stage/cache.py`` ``_can_hash`` refuses a stage with a ``persist: true`` output,
  because such an output may build on its previous content. The ``bench@<mode>`` outputs are
  persistent only so that a stage that fails before its engine starts leaves the previous
  results readable; once the engine is about to start :func:`lab.pipeline.lifetime.prepare`
  deletes them and the run writes every output afresh, so a saved entry is a function of the
  stage's inputs like any other. :func:`persistent_outputs_cacheable` evaluates that guard
  as if ``persist`` were false.
- ``dvc/stage/__init__.py`` ``Stage.run`` saves no entry when an output that is not a metric
  or plot has ``cache: false`` (compare's CSVs, which git tracks). :func:`save_entry` saves
  the entry explicitly after a successful run; DVC's ``StageCache.save`` then commits copies
  of those uncached outputs, as it does for ``cache: false`` metrics.

Outputs that git commits (the ``cache: false`` ones: ``results/<mode>/metrics.json``,
``reports/*.csv``, ``reports/comparison.json``, the headlines; committed so that ``lab summary``
on a fresh clone prints the committed answer) differ from a sweep's new ones (``written_at`` at
least), and DVC's checkout refuses to replace a file its cache does not hold ("unable to
remove ... without a confirmation"). Before restoring a stage, :func:`clear_committed_outputs`
removes those of its outputs that git tracks and that equal the checked-out commit's copy:
git holds them, so nothing is lost; an edited one stays and DVC's refusal stands.

A complete measurement survives a tracking-server outage: ``run`` names a file in
:data:`lab.pipeline.stage.RESULTS_SAFE_ENV`; a stage whose complete result is on disk and whose
only failure was MLflow notes so there before it fails. ``run`` then saves the stage as a
successful run would (:func:`save_entry` with ``commit``: outputs into the cache, the run-cache
entry) and exits :data:`RESULTS_SAFE`; the job counts the stage done, and ``lab fleet log``
logs its run (:mod:`lab.tracking.relog`, from the run record among its outputs) once the server
is back.

``python -m lab.fleet.runcache run STAGE`` (in a job) runs ``dvc repro --single-item STAGE``
and saves its entry; ``python -m lab.fleet.runcache restore STAGE...`` (a job's upstream
stages, and collect) restores each stage from the run cache and refuses, running nothing, when
one is not there. Exit codes: DVC's own, 3 when a stage to restore is not cached, 4 when the
stage's result was saved but MLflow failed (:data:`RESULTS_SAFE`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import chdir, contextmanager
from pathlib import Path

__all__ = ["persistent_outputs_cacheable", "open_repo", "cached", "save_entry", "stage_order", "main", "NOT_CACHED",
           "clear_committed_outputs", "RESULTS_SAFE"]

#: Exit code of ``restore`` when a stage is not in the run cache.
NOT_CACHED = 3
#: Exit code of ``run`` when the stage's complete result is in the run cache but MLflow failed.
RESULTS_SAFE = 4


@contextmanager
def persistent_outputs_cacheable() -> Iterator[None]:
    """While active, DVC's run cache treats ``persist: true`` outputs as ordinary ones
    (module docstring). Patches ``dvc.stage.cache._can_hash``, which ``StageCache.save``,
    ``StageCache.restore`` and ``_get_stage_hash`` look up at call time.

    :raises RuntimeError: this DVC has no ``dvc.stage.cache._can_hash`` (another major
        version: the fleet's run-cache hand-over must be checked against it).
    """
    from dvc.stage import cache as stage_cache

    original = getattr(stage_cache, "_can_hash", None)
    if original is None:
        raise RuntimeError("dvc.stage.cache._can_hash not found: this DVC version is not the one the fleet "
                           "was written for (3.67). Fix: install the locked environment (uv sync --frozen)")

    def can_hash(stage) -> bool:
        flags = [(out, out.persist) for out in stage.outs]
        for out, _ in flags:
            out.persist = False
        try:
            return original(stage)
        finally:
            for out, persist in flags:
                out.persist = persist

    stage_cache._can_hash = can_hash
    try:
        yield
    finally:
        stage_cache._can_hash = original


@contextmanager
def open_repo(root: Path):
    """DVC's ``Repo`` of ``root``, opened from ``root`` itself: a stage's ``addressing``
    (``bench@baseline``) is relative to the current directory."""
    from dvc.repo import Repo

    with chdir(root), Repo(str(root)) as repo:
        yield repo


def _stage(repo, address: str):
    for stage in repo.index.stages:
        if stage.addressing == address:
            return stage
    names = ", ".join(s.addressing for s in repo.index.stages)
    raise KeyError(f"no stage {address!r} in dvc.yaml (stages: {names})")


def stage_order(root: Path) -> list[tuple[str, list[str]]]:
    """Every stage of ``root``'s ``dvc.yaml`` as ``(address, direct upstream addresses)``,
    upstream stages first (DVC's own pipeline graph, ``repo.index.graph``)."""
    import networkx as nx

    with open_repo(root) as repo:
        graph = repo.index.graph
        order = list(reversed(list(nx.topological_sort(graph))))
        return [(s.addressing, sorted(t.addressing for t in graph.successors(s))) for s in order]


def cached(root: Path, *addresses: str) -> dict[str, bool]:
    """For each stage, whether ``dvc repro`` in ``root`` would restore it from the run cache
    now (with :func:`persistent_outputs_cacheable`): the same decision as DVC's
    ``StageCache.restore`` (``dvc/stage/cache.py``), without checking anything out. Reads the
    workspace's dependencies (hashing them), writes nothing but DVC's hash state."""
    with persistent_outputs_cacheable(), open_repo(root) as repo, repo.lock:
        return {a: _restorable(repo, _stage(repo, a)) for a in addresses}


def _restorable(repo, stage) -> bool:
    from dvc.stage import cache as stage_cache
    from dvc.stage.serialize import to_single_stage_lockfile

    if not stage_cache._can_hash(stage):
        return False
    try:
        if (not stage.changed_stage() and stage.deps_cached()
                and all(bool(out.hash_info) for out in stage.outs)):
            entry = to_single_stage_lockfile(stage)
        else:
            stage.save_deps()
            entry = repo.stage_cache._load(stage)
    except Exception:  # a dependency missing: DVC would have to run the stage
        return False
    return bool(entry) and repo.stage_cache._create_stage(entry, wdir=stage.wdir).outs_cached()


def save_entry(root: Path, address: str, commit: bool = False) -> None:
    """Save ``address``'s run-cache entry from the workspace as it is now (after a successful
    ``dvc repro``): DVC's ``Stage.save`` with the run cache on (module docstring). Idempotent.

    :param commit: first commit the outputs into the cache, as ``dvc repro`` does after a
        successful command (needed when the command failed after its complete result: the
        tracking-outage rescue, module docstring)."""
    with persistent_outputs_cacheable(), open_repo(root) as repo, repo.lock:
        stage = _stage(repo, address)
        if commit:
            stage.save(run_cache=False)
            stage.commit()
        stage.save(run_cache=True)


def clear_committed_outputs(root: Path, address: str) -> list[str]:
    """Remove ``address``'s outputs that git tracks and that equal ``HEAD``'s copy (module
    docstring), so that restoring the stage needs no confirmation; returns their paths
    (relative to ``root``). Outputs git does not track, or that differ from ``HEAD``, stay."""
    import subprocess

    with open_repo(root) as repo:
        outs = [o.def_path for o in _stage(repo, address).outs]
    tracked = subprocess.run(["git", "ls-files", "-z", "--", *outs], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split("\0")
    tracked = [t for t in tracked if t]
    if not tracked:
        return []
    changed = set(subprocess.run(["git", "diff", "--name-only", "-z", "HEAD", "--", *tracked], cwd=root,
                                 capture_output=True, text=True, check=True).stdout.split("\0"))
    removed = []
    for rel in tracked:
        path = root / rel
        if rel not in changed and path.is_file():
            path.unlink()
            removed.append(rel)
    if removed:
        print(f"[lab] fleet: {address}: {len(removed)} committed output(s) git holds make way for the restored ones: "
              f"{', '.join(removed[:6])}{' ...' if len(removed) > 6 else ''}", flush=True)
    return removed


def _dvc(argv: list[str]) -> int:
    from dvc.cli import main as dvc_main

    with persistent_outputs_cacheable():
        return dvc_main(argv)


def main(argv: list[str] | None = None) -> int:
    """``run STAGE`` | ``restore STAGE...`` | any other ``dvc`` arguments (passed through
    with the persist guard lifted). Runs in the current directory's DVC repository."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path.cwd()
    if args[:1] == ["run"] and len(args) == 2:
        import json
        import os

        from lab.pipeline.stage import RESULTS_SAFE_ENV

        note = root / ".dvc" / "tmp" / "lab-results-safe.json"
        note.unlink(missing_ok=True)
        os.environ[RESULTS_SAFE_ENV] = str(note)
        rc = _dvc(["repro", "--single-item", args[1]])
        if rc == 0:
            save_entry(root, args[1])
            print(f"[lab] fleet: saved {args[1]} in the run cache", flush=True)
        elif note.is_file():
            safe = json.loads(note.read_text())
            save_entry(root, args[1], commit=True)
            print(f"[lab] fleet: MLflow failed after {args[1]}'s complete result ({safe['cause']}); the result "
                  f"({safe['results_dir']}) is saved in the run cache all the same. Once the tracking server is "
                  "back: lab fleet collect, then lab fleet log", flush=True)
            return RESULTS_SAFE
        return rc
    if args[:1] == ["restore"]:
        for address in args[1:]:
            if not cached(root, address)[address]:
                print(f"error: stage {address} is not in the run cache (DVC cache {_cache_dir(root)}), so it would "
                      "have to run here; nothing was run. Fix: lab fleet submit (it runs only what is missing), "
                      "then lab fleet status --wait", file=sys.stderr)
                return NOT_CACHED
            clear_committed_outputs(root, address)
            rc = _dvc(["repro", "--single-item", address])
            if rc != 0:
                return rc
        return 0
    return _dvc(args)


def _cache_dir(root: Path) -> str:
    with open_repo(root) as repo:
        return str(repo.cache.local_cache_dir)


if __name__ == "__main__":
    sys.exit(main())
