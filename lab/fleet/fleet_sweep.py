"""A sweep's state on the shared filesystem: what was submitted, and what each job recorded.

One directory per sweep, ``<work dir>/sweep-<commit[:12]>/`` (one sweep per commit: the jobs
check out the commit, so its params.yaml and code are the sweep's):

- ``sweep.json``: written by the head-node commands only (``lab fleet submit``): the commit,
  the head checkout, the Python environment, the shared DVC cache, the MLflow tracking URI,
  experiment and parent run, the stage graph, and every job submitted per stage;
- ``jobs/<stage>.sbatch``: the last script submitted for the stage (:mod:`lab.fleet.script`);
- ``records/<stage>-<job id>.json``: written by the job itself (:mod:`lab.fleet.job`): node,
  start, end, status (``running``, ``ok``, ``failed``, ``cancelled``) and exit code;
- ``logs/<stage>-<job id>.log``: the job's output (Slurm's ``--output``);
- ``checkouts/<stage>-<job id>/``: the job's own checkout; removed by the job when it
  succeeds, kept after a failure (its partial results and executed notebook) until
  ``lab fleet collect`` finishes the sweep.

A stage's state joins its latest job's record with what Slurm says (:func:`stage_rows`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.atomic import write_json_atomic
from lab.fleet.slurm import JobState

__all__ = ["Sweep", "StageRow", "stage_rows", "sweep_dir_for", "DONE", "write_record"]

#: The state of a stage whose latest job finished its stage (its outputs are in the run cache).
DONE = "COMPLETED"


def sweep_dir_for(work_dir: Path, commit: str) -> Path:
    """``<work_dir>/sweep-<commit[:12]>``."""
    return work_dir / f"sweep-{commit[:12]}"


@dataclass
class Sweep:
    """``sweep.json`` of one sweep directory (module docstring)."""

    dir: Path
    data: dict[str, Any]

    @property
    def id(self) -> str:
        """``sweep-<commit[:12]>``."""
        return self.dir.name

    @classmethod
    def load(cls, sweep_dir: Path) -> "Sweep":
        """:raises FileNotFoundError: no sweep.json there (naming the fix)."""
        path = sweep_dir / "sweep.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: no sweep was submitted there. Fix: lab fleet submit "
                                    "(or pass --sweep DIR of an existing sweep)")
        return cls(sweep_dir, json.loads(path.read_text()))

    def save(self) -> None:
        """Write ``sweep.json`` atomically."""
        write_json_atomic(self.dir / "sweep.json", self.data, indent=1)

    def stages(self) -> list[tuple[str, list[str]]]:
        """``(stage, direct upstream stages)``, upstream first."""
        return [(s["stage"], list(s["upstream"])) for s in self.data["stages"]]

    def ancestors(self, stage: str) -> list[str]:
        """Every stage ``stage`` depends on, transitively, upstream first."""
        up = dict(self.stages())
        need: set[str] = set()
        todo = list(up.get(stage, []))
        while todo:
            s = todo.pop()
            if s not in need:
                need.add(s)
                todo += up.get(s, [])
        return [s for s, _ in self.stages() if s in need]

    def jobs(self, stage: str) -> list[dict[str, Any]]:
        """The jobs submitted for ``stage``, oldest first."""
        return list(self.data.setdefault("jobs", {}).get(stage, []))

    def add_job(self, stage: str, job: dict[str, Any]) -> None:
        """Record a submitted job and save at once (a later failure loses no job id)."""
        self.data.setdefault("jobs", {}).setdefault(stage, []).append(job)
        self.save()

    def all_job_ids(self) -> list[str]:
        """Every job id this sweep submitted."""
        return [j["job_id"] for jobs in self.data.get("jobs", {}).values() for j in jobs]

    def record(self, stage: str, job_id: str) -> dict[str, Any] | None:
        """The job's own record, or None when it wrote none (never started, or killed hard)."""
        path = self.dir / "records" / f"{stage}-{job_id}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None


def write_record(sweep_dir: Path, stage: str, job_id: str, record: dict[str, Any]) -> None:
    """Write a job's record (by the job itself) atomically."""
    (sweep_dir / "records").mkdir(parents=True, exist_ok=True)
    write_json_atomic(sweep_dir / "records" / f"{stage}-{job_id}.json", record, indent=1)


@dataclass
class StageRow:
    """One line of ``lab fleet status``.

    :ivar state: Slurm's state while the job lives (``PENDING``, ``RUNNING``...), then the
        job's own outcome: ``COMPLETED`` (:data:`DONE`), ``FAILED``, ``CANCELLED``; ``LOST``
        when the job ended without recording an outcome (killed hard, node failure);
        ``NOT SUBMITTED`` when no job ran it in this sweep.
    """

    stage: str
    job_id: str | None
    state: str
    reason: str
    node: str
    log: str | None
    started: float | None
    ended: float | None

    @property
    def live(self) -> bool:
        """True while the latest job has not ended."""
        return self.state not in (DONE, "FAILED", "CANCELLED", "LOST", "NOT SUBMITTED", "TIMEOUT",
                                  "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


_OUTCOME = {"ok": DONE, "failed": "FAILED", "cancelled": "CANCELLED"}


def stage_rows(sweep: Sweep, queue: dict[str, JobState]) -> list[StageRow]:
    """The state of every stage's latest job (:class:`StageRow`), from ``queue``
    (:func:`lab.fleet.slurm.queue` of the sweep's job ids) and the job's record.

    Slurm's word comes first whenever Slurm still knows the job: its state while the job lives
    (``PENDING`` again after a requeue), and its final state after (``CANCELLED``, ``FAILED``,
    ``TIMEOUT``, ``NODE_FAIL``...), with the record's exit code as the reason when the record is
    of the job's last attempt. ``COMPLETED`` is :data:`DONE` only when the record says ``ok``
    (else ``LOST``: the job ended without finishing its stage). Only when Slurm no longer lists
    the job (after ``MinJobAge``, and no accounting) does the record alone decide."""
    rows = []
    for stage, _ in sweep.stages():
        jobs = sweep.jobs(stage)
        if not jobs:
            rows.append(StageRow(stage, None, "NOT SUBMITTED", "", "", None, None, None))
            continue
        job = jobs[-1]
        jid = job["job_id"]
        rec = sweep.record(stage, jid) or {}
        q = queue.get(jid)
        ended = rec.get("status") in _OUTCOME
        if q is not None and q.live:
            state, reason = q.state, q.reason
        elif q is not None and q.state == "COMPLETED":
            state, reason = ((DONE, f"exit {rec.get('exit_code')}") if rec.get("status") == "ok" else
                             ("LOST", "the job ended without recording its stage's outcome"))
        elif q is not None:  # Slurm's final word: FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
            state = q.state
            reason = (f"exit {rec.get('exit_code')}" if ended and rec.get("status") != "ok" else
                      q.reason if q.reason and q.reason != "None" else
                      f"attempt {rec.get('attempt', 0)} recorded {rec.get('status')}" if rec else "")
        elif ended:
            state, reason = _OUTCOME[rec["status"]], f"exit {rec.get('exit_code')}"
        else:
            state, reason = "LOST", "Slurm no longer lists the job and it recorded no outcome"
        log = job.get("log", "").replace("%j", jid)
        rows.append(StageRow(stage, jid, state, reason, rec.get("node") or (q.nodes if q else ""),
                             log if log and Path(log).is_file() else None, rec.get("started"), rec.get("ended")))
    return rows


def now() -> float:
    """Epoch seconds (one clock for records and sweep.json)."""
    return time.time()


__all__ += ["now"]
