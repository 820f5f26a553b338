"""Where the lab's repository is: the root that holds ``params.yaml`` and ``dvc.yaml``, and the
main checkout behind a DVC experiment's temporary copy (``<main>/.dvc/tmp/exps/...``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["find_repo_root", "repo_root", "main_repo_root", "launch_results_dir", "launch_stage", "bench_stage_launch",
           "LAUNCHES_DIR",
           "LAUNCH_STAGE", "RESERVED_RESULT_DIRS"]

#: ``results/<LAUNCHES_DIR>/<n>/<mode>/`` holds launch ``n >= 2`` of a mode (launch 1 is ``results/<mode>/``).
LAUNCHES_DIR = "launches"
#: The ``dvc.yaml`` stage group of launches 2..N (a matrix over ``bench.later_launches`` x ``modes``).
LAUNCH_STAGE = "bench_launch"
#: Names under ``results/`` that are not modes (a mode may not be called so).
RESERVED_RESULT_DIRS = ("figures", "physics", LAUNCHES_DIR)


def launch_results_dir(mode: str, launch: int = 1) -> str:
    """Where launch ``launch`` of ``mode`` writes, relative to the repository root:
    ``results/<mode>`` for launch 1 (the layout every reader knows), ``results/launches/<n>/<mode>``
    for launch ``n >= 2`` (``bench.launches``, docs/measurement.md "Launches").

    :raises ValueError: ``launch < 1``.
    """
    if launch < 1:
        raise ValueError(f"launch {launch}: launches count from 1. Fix: pass 1..bench.launches")
    return f"results/{mode}" if launch == 1 else f"results/{LAUNCHES_DIR}/{launch}/{mode}"


def bench_stage_launch(address: str) -> tuple[str, int] | None:
    """``(mode, launch)`` of a bench stage address (``bench@baseline`` -> ``("baseline", 1)``,
    ``bench_launch@2-baseline`` -> ``("baseline", 2)``: :func:`launch_stage` reversed), None for
    any other stage (``compare``, ``physics``). Mode names hold no ``-`` (lab/config/schema.py)."""
    group, _, key = address.partition("@")
    if group == "bench" and key:
        return key, 1
    if group == LAUNCH_STAGE and "-" in key:
        n, _, mode = key.partition("-")
        if n.isdigit() and mode:
            return mode, int(n)
    return None


def launch_stage(mode: str, launch: int = 1) -> str:
    """The DVC stage of launch ``launch`` of ``mode``: ``bench@<mode>`` (launch 1) or
    ``bench_launch@<n>-<mode>`` (DVC's matrix names: the values joined by ``-``)."""
    return f"bench@{mode}" if launch == 1 else f"{LAUNCH_STAGE}@{launch}-{mode}"



def find_repo_root(start: Path | None = None) -> Path | None:
    """The nearest directory at or above ``start`` holding ``params.yaml`` and ``dvc.yaml``."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "params.yaml").is_file() and (d / "dvc.yaml").is_file():
            return d
    return None


def repo_root() -> Path:
    """The lab's repository root (see :func:`find_repo_root`), from the cwd or this file."""
    return find_repo_root() or find_repo_root(Path(__file__).parents[1]) or Path.cwd()


def main_repo_root(root: Path) -> Path:
    """The main checkout for a DVC experiment temp copy (``<main>/.dvc/tmp/exps/...``)."""
    parts = root.resolve().parts
    for i in range(len(parts) - 3):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root
