"""Orchestration: one DVC entry module per stage (bench_stage, compare_stage, physics_stage), each importing only its own stage's code, on a shared runner (stage); one mode's benchmark (bench), the engine's lifetime around it (lifetime), the compare stage (compare), the physics stage (physics), interrupt handling (interrupt), the `lab` CLI (cli) and sweep expansion (sweep). Calls analysis, report and tracking; none of them calls back."""

# A stage's `python -m lab.pipeline.<stage>_stage` under an interpreter without the lab's packages
# (`.venv/bin/dvc repro` from an unactivated shell: dvc.yaml's `python` is the system's) re-runs
# itself under the project's environment, or stops with the fix, before any import fails.
from lab.interpreter import ensure_lab_python as _ensure_lab_python

_ensure_lab_python()
