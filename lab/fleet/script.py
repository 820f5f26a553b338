"""The batch script of one stage's Slurm job, and the resources it asks for.

A plain ``sbatch`` script per stage, written into the sweep directory before submission so
that anyone can read exactly what ran (``<sweep>/jobs/<stage>.sbatch``). Its ``#SBATCH``
lines hold the whole request; its body clones the sweep's commit into the job's own checkout
(``git clone --shared``: the head checkout's objects, read-only) and hands over to
:mod:`lab.fleet.job` from that checkout's code.

Resources, honestly sized (:func:`stage_resources`):

- ``bench@<mode>`` (and ``bench_launch@<n>-<mode>``, a later launch of it) with ``engine: sglang``: ``server.nnodes`` whole nodes (``--exclusive``)
  with ``ceil(model.tp_size / nnodes)`` GPUs each, or with ``share`` only those GPUs
  (``--gpus-per-node``) and the CPUs asked for, so other teams' jobs may use the rest;
- ``bench@<mode>`` with the emulator, ``compare``: CPUs and memory only, no GPU;
- ``physics``: ``physics.tp`` GPUs on a GPU sweep (``engine: sglang``), none on an emulator
  sweep (it then records "not run", as ``dvc repro`` does on a machine without CUDA), unless
  ``physics_gpus`` says otherwise.

The job's environment (:func:`exported_names`): the shell's basics, TLS and proxy settings
(:data:`PASS_BY_NAME`), and every variable set at submission whose name starts with one of
:data:`PASS_BY_PREFIX` (``MLFLOW_*``, ``HF_*``, ``HUGGING_FACE_*``, the lab's ``LAB_*``), so a
user never names each; not the lab's per-job and per-invocation variables (:data:`JOB_OWN`: the
job sets them itself) nor ``MLFLOW_RUN_ID``. The script itself turns telemetry off
(:data:`TELEMETRY_OFF`: MLflow's telemetry thread, Hugging Face's, DVC's analytics). No
credential is ever written here: variables such as ``HF_TOKEN`` or ``MLFLOW_TRACKING_PASSWORD``
reach the job *by name* (``--export=NAME,...``: Slurm copies the value from the submitting
shell's environment).

Node set-up and containers (optional, :class:`Options`): ``setup`` lines run first on the node
(``module load cuda/12.4``); with ``container_image`` the job runs in one ``srun`` step inside
that image (``srun --container-image --container-mounts``, the pyxis/enroot flags SGLang's Slurm
recipes use), with the head checkout, the sweep directory and the DVC cache mounted at their own
paths besides ``container_mounts``; the clone happens on the node, outside the image.

Requeue: the job asks Slurm to requeue it after a node failure (``--requeue``), appends to its
log (``--open-mode=append``: a requeued attempt keeps the first attempt's log above its own) and
clones a fresh checkout per attempt (``checkouts/<stage>-<job id>`` for the first attempt,
``...-<job id>.r<N>`` for the N-th requeue, ``$SLURM_RESTART_COUNT``), so a rerun never meets
the killed attempt's checkout.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.config import LabParams

__all__ = ["Resources", "Options", "stage_resources", "render", "PASS_BY_NAME", "PASS_BY_PREFIX", "JOB_OWN",
           "TELEMETRY_OFF", "exported_names", "container_mounts"]

#: Variables a job takes from the submitting shell, by name only: the shell's basics, Hugging
#: Face (token, cache, offline mode), MLflow's client credentials and TLS settings, proxies.
PASS_BY_NAME = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ",
                "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE",
                "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                "MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "REQUESTS_CA_BUNDLE",
                "SSL_CERT_FILE", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")

#: Every variable set at submission whose name starts with one of these reaches the job (by name).
PASS_BY_PREFIX = ("LAB_", "MLFLOW_", "HF_", "HUGGING_FACE_")

#: Never passed from the submitting shell: the job sets the placement and the parent run itself
#: (:mod:`lab.fleet.job`), a stage names its own invocation and start
#: (``lab.tracking.grouping.INVOCATION_ENV``, ``lab.tracking.runs.STAGE_STARTED_ENV``), and
#: ``MLFLOW_RUN_ID`` would make MLflow reuse the shell's active run.
JOB_OWN = frozenset({"LAB_MLFLOW_PARENT_RUN_ID", "LAB_SERVER_PORT", "LAB_SERVER_DIST_INIT_ADDR", "LAB_INVOCATION",
                     "LAB_STAGE_STARTED_MS", "LAB_RESULTS_SAFE_FILE", "MLFLOW_RUN_ID"})

#: Written into every job script: no telemetry from a compute node (MLflow's telemetry thread
#: once failed an e2e job; Hugging Face Hub; DVC's analytics; the common opt-out).
TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_DISABLE_TELEMETRY": "1", "DVC_NO_ANALYTICS": "1",
                 "DO_NOT_TRACK": "1"}


@dataclass
class Options:
    """What the user chose at ``lab fleet submit`` (all optional).

    :ivar partition, account, qos: passed as ``--partition`` etc. when set.
    :ivar time: wall-clock limit of every job (``HH:MM:SS``); default 04:00:00 for a GPU
        bench job (a 1T-parameter model loads for 10+ minutes), 01:00:00 otherwise.
    :ivar cpus_per_task, mem: for jobs that do not take whole nodes (default 2 CPUs, 4G).
    :ivar share: GPU bench jobs take only their GPUs instead of whole nodes.
    :ivar physics_gpus: GPUs of the physics job (default: see the module docstring).
    :ivar export: more variable names to pass by name (never values).
    :ivar sbatch_args: extra ``#SBATCH`` arguments for every job, e.g. ``--constraint=h200``.
    :ivar setup: shell lines run first on the node, e.g. ``module load cuda/12.4`` (written
        into the script as given: never a secret there).
    :ivar container_image: run the job inside this image (``srun --container-image``, pyxis).
    :ivar container_mounts: more ``SRC:DST[:FLAGS]`` mounts for the container.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    cpus_per_task: int = 2
    mem: str = "4G"
    share: bool = False
    physics_gpus: int | None = None
    export: list[str] = field(default_factory=list)
    sbatch_args: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    container_image: str | None = None
    container_mounts: list[str] = field(default_factory=list)


@dataclass
class Resources:
    """One job's request: ``nodes`` x (``gpus_per_node`` GPUs), whole nodes when ``exclusive``,
    else ``cpus_per_task`` CPUs and ``mem`` memory; ``time`` limit ``HH:MM:SS``."""

    nodes: int = 1
    gpus_per_node: int = 0
    exclusive: bool = False
    cpus_per_task: int | None = 2
    mem: str | None = "4G"
    time: str = "01:00:00"

    def sbatch_lines(self) -> list[str]:
        """The ``#SBATCH`` arguments for this request."""
        out = [f"--nodes={self.nodes}", "--ntasks-per-node=1", f"--time={self.time}"]
        if self.exclusive:
            out.append("--exclusive")
        else:
            if self.cpus_per_task:
                out.append(f"--cpus-per-task={self.cpus_per_task}")
            if self.mem:
                out.append(f"--mem={self.mem}")
        if self.gpus_per_node:
            out.append(f"--gpus-per-node={self.gpus_per_node}")
        return out

    def describe(self) -> str:
        """``2 node(s), whole node(s), 8 GPU(s) per node, 04:00:00`` / ``1 node(s), 2 CPU(s), 4G, no GPU, 01:00:00``."""
        gpu = f"{self.gpus_per_node} GPU(s) per node" if self.gpus_per_node else "no GPU"
        what = "whole node(s)" if self.exclusive else f"{self.cpus_per_task} CPU(s), {self.mem}"
        return f"{self.nodes} node(s), {what}, {gpu}, {self.time}"


def stage_resources(stage: str, params: LabParams, opts: Options) -> Resources:
    """The request of ``stage`` (``bench@<mode>``, ``bench_launch@<n>-<mode>``, ``physics``,
    ``compare``): module docstring."""
    from lab.config.paths import bench_stage_launch
    from lab.engine.registry import engine_for

    gpu_sweep = engine_for(params).holds_gpus  # a real engine's bench job asks for the GPUs its TP needs
    base = Resources(cpus_per_task=opts.cpus_per_task, mem=opts.mem, time=opts.time or "01:00:00")
    if bench_stage_launch(stage) and gpu_sweep:
        nnodes = params.server.nnodes
        return Resources(nodes=nnodes, gpus_per_node=math.ceil(params.model.tp_size / nnodes),
                         exclusive=not opts.share, cpus_per_task=opts.cpus_per_task, mem=opts.mem,
                         time=opts.time or "04:00:00")
    if stage == "physics":
        base.gpus_per_node = opts.physics_gpus if opts.physics_gpus is not None else (
            params.physics.tp if gpu_sweep else 0)
    return base


def exported_names(opts: Options, environ: os._Environ | dict | None = None) -> list[str]:
    """The variable names a job takes from the submitting shell (module docstring):
    :data:`PASS_BY_NAME`, every name with a prefix of :data:`PASS_BY_PREFIX` but not in
    :data:`JOB_OWN`, and ``opts.export``; those set now only (sorted, no duplicates)."""
    env = os.environ if environ is None else environ
    by_prefix = {n for n in env if n.startswith(PASS_BY_PREFIX) and n not in JOB_OWN and n not in TELEMETRY_OFF}
    return sorted({n for n in (*PASS_BY_NAME, *opts.export) if n in env} | by_prefix)


def container_mounts(opts: Options, *paths: Path | str) -> str:
    """The ``--container-mounts`` value: each of ``paths`` (head checkout, sweep dir, DVC cache)
    at its own path, unless one above it is mounted already, then ``opts.container_mounts``."""
    own: list[str] = []
    for p in sorted({str(Path(x)) for x in paths}, key=len):
        if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in own):
            own.append(p)
    return ",".join([*(f"{p}:{p}" for p in own), *opts.container_mounts])


def render(*, stage: str, sweep_id: str, sweep_dir: Path, repo: Path, commit: str, python: str,
           resources: Resources, opts: Options, names: list[str], dependent: bool,
           cache_dir: str | None = None) -> str:
    """The job script of ``stage`` (module docstring). ``dependent``: the job waits for others
    (``afterok``) and is cancelled when one of them fails (``--kill-on-invalid-dep=yes``).
    ``cache_dir``: the shared DVC cache (mounted into a container).

    :returns: the script text; it contains paths, the commit and names, never a value of the
        environment.
    """
    q = shlex.quote
    header = [f"--job-name=evl-{sweep_id[-8:]}-{stage}",
              f"--output={sweep_dir / 'logs' / f'{stage}-%j.log'}",
              f"--chdir={sweep_dir}",
              f"--export={','.join(names) if names else 'NONE'}",
              "--requeue",
              "--open-mode=append",
              *resources.sbatch_lines()]
    for flag, value in (("partition", opts.partition), ("account", opts.account), ("qos", opts.qos)):
        if value:
            header.append(f"--{flag}={value}")
    if dependent:
        header.append("--kill-on-invalid-dep=yes")
    header += list(opts.sbatch_args)
    venv_bin = str(Path(python).parent)
    checkout = f"{q(str(sweep_dir / 'checkouts'))}/{q(stage)}-$SLURM_JOB_ID$attempt_suffix"
    setup = (["# node set-up (lab fleet submit --setup), as given", "set +u", *opts.setup, "set -u"]
             if opts.setup else [])
    run = f"{q(python)} -m lab.fleet.job {q(str(sweep_dir))} {q(stage)}"
    if opts.container_image:
        mounts = container_mounts(opts, repo, sweep_dir, *([cache_dir] if cache_dir else []))
        run = (f"srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 --container-image={q(opts.container_image)} "
               f"--container-mounts={q(mounts)} --container-workdir=\"$checkout\" {run}")
    lines = [
        "#!/bin/bash",
        f"# eagle-verify-lab fleet job: stage {stage} of sweep {sweep_id} (commit {commit}).",
        "# Written by `lab fleet submit`. No credential is written here: the names in --export",
        "# take their values from the submitting shell's environment.",
        *(f"#SBATCH {h}" for h in header),
        "set -euo pipefail",
        *setup,
        "export SLURM_EXPORT_ENV=ALL  # srun steps of this job (multi-node ranks) get its environment",
        "export " + " ".join(f"{k}={v}" for k, v in TELEMETRY_OFF.items()) + "  # no telemetry from a job",
        "attempt=${SLURM_RESTART_COUNT:-0}  # > 0 after Slurm requeued the job (node failure, scontrol requeue)",
        "attempt_suffix=\"\"; [ \"$attempt\" = 0 ] || attempt_suffix=\".r$attempt\"",
        f"checkout={checkout}",
        "rm -rf \"$checkout\"  # a fresh checkout per attempt",
        f"git clone --quiet --shared --no-checkout {q(str(repo))} \"$checkout\"",
        f"git -C \"$checkout\" -c advice.detachedHead=false checkout --quiet --detach {q(commit)}",
        "cd \"$checkout\"",
        f"export PATH={q(venv_bin)}:/usr/local/bin:/usr/bin:/bin PYTHONPATH=\"$checkout\" PYTHONUNBUFFERED=1",
        f"exec {run}",
        "",
    ]
    return "\n".join(lines)


def resources_dict(r: Resources) -> dict:
    """``r`` as JSON-able data (sweep.json)."""
    return asdict(r)


__all__ += ["resources_dict"]
