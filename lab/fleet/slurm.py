"""Slurm's own commands, called as a user would: ``sbatch``, ``squeue``, ``scontrol``, ``scancel``.

Nothing here schedules: Slurm does. The fleet submits plain batch scripts
(:mod:`lab.fleet.script`) with ``sbatch --parsable``, reads job states with ``squeue``
(``--states=all`` also lists jobs that ended within the cluster's ``MinJobAge``), and cancels
with ``scancel``. Commands find the cluster as they do for the user (``SLURM_CONF`` or the
node's configuration). For a job that ``squeue`` no longer lists (it ended longer ago than the
cluster's ``MinJobAge``) :func:`queue` asks accounting (``sacct``), where the cluster keeps
one; without accounting a job's outcome is still in its own record (:mod:`lab.fleet.fleet_sweep`).
"""

from __future__ import annotations

import getpass
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SlurmError", "JobState", "LIVE_STATES", "require", "submit", "queue", "accounted", "cancel", "hostnames"]

#: squeue states of a job that has not ended (``squeue(1)`` JOB STATE CODES).
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                         "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})


class SlurmError(RuntimeError):
    """A Slurm command is missing or failed; the message names the command, its output and the fix."""


@dataclass(frozen=True)
class JobState:
    """One job as ``squeue`` lists it.

    :ivar state: ``PENDING``, ``RUNNING``, ``COMPLETED``, ``CANCELLED``, ``FAILED``, ...
    :ivar reason: why it waits or ended (``Dependency``, ``Resources``, ``None``, ...).
    :ivar nodes: the node list (empty while pending).
    """

    job_id: str
    state: str
    reason: str
    nodes: str

    @property
    def live(self) -> bool:
        """True while the job has not ended."""
        return self.state in LIVE_STATES


def _run(cmd: list[str], timeout: float = 60) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} not found. Fix: run on a Slurm login node (or install the Slurm client "
                         "commands, Debian: apt-get install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(cmd)} did not answer in {timeout:.0f} s: is slurmctld up? (scontrol ping)") from None
    if proc.returncode != 0:
        raise SlurmError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc.stdout


def require() -> None:
    """Check that the Slurm commands exist and the controller answers.

    :raises SlurmError: naming what is missing.
    """
    for cmd in ("sbatch", "squeue", "scancel", "scontrol"):
        if shutil.which(cmd) is None:
            raise SlurmError(f"{cmd} not found on PATH. Fix: run lab fleet on a Slurm login node")
    _run(["squeue", "-h", "-o", "%i", "-u", getpass.getuser()])


def submit(script: Path, dependency: list[str] | None = None) -> str:
    """``sbatch --parsable [--dependency=afterok:...] script``; returns the job id.

    :param dependency: job ids that must end COMPLETED first (``afterok``); the script itself
        says ``--kill-on-invalid-dep=yes``, so a failed dependency cancels the job.
    :raises SlurmError: sbatch refused (the message is sbatch's: partition, limits...).
    """
    cmd = ["sbatch", "--parsable"]
    if dependency:
        cmd.append("--dependency=afterok:" + ":".join(dependency))
    out = _run([*cmd, str(script)]).strip()
    return out.split(";")[0]  # "<id>[;<cluster>]"


def queue(job_ids: list[str]) -> dict[str, JobState]:
    """The states of ``job_ids`` that Slurm still knows (live, or ended within MinJobAge)."""
    if not job_ids:
        return {}
    out = _run(["squeue", "-h", "--states=all", "-u", getpass.getuser(), "-o", "%i|%T|%r|%N"])
    wanted = set(job_ids)
    states = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] in wanted:
            states[parts[0]] = JobState(*parts)
    gone = sorted(wanted - set(states))
    if gone and shutil.which("sacct"):
        states.update(accounted(gone))
    return states


def accounted(job_ids: list[str]) -> dict[str, JobState]:
    """The final states ``sacct`` records for ``job_ids`` (the job allocation's line, the last
    attempt's: ``sacct -X`` without ``--duplicates``); ``{}`` when the cluster keeps no accounting
    (``sacct`` fails: "Slurm accounting storage is disabled") or lists none of them."""
    try:
        out = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode,NodeList"],
                   timeout=30)
    except SlurmError:
        return {}
    states = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] in job_ids:
            # "CANCELLED by 0" -> CANCELLED; sacct's NodeList is "None assigned" for a job never started
            states[parts[0]] = JobState(parts[0], parts[1].split()[0], f"exit {parts[2]}",
                                        "" if parts[3].startswith("None") else parts[3])
    return states


def cancel(job_ids: list[str]) -> None:
    """``scancel`` the jobs (SIGTERM to every process of each, SIGKILL after KillWait)."""
    if job_ids:
        _run(["scancel", *job_ids])


def hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames``: ``gpu[01-02]`` -> ``["gpu01", "gpu02"]``."""
    return _run(["scontrol", "show", "hostnames", nodelist]).split()
