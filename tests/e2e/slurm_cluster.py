"""A throwaway single-node Slurm cluster on this machine, for the fleet tests.

Debian's ``slurm-wlm`` and ``munge`` packages (``.ci/run`` installs them); nothing under
``/etc`` is read or written. Everything lives in one temp dir: a generated munge key and a
``munged`` on its own socket, a ``slurm.conf`` with one node of :data:`CPUS` CPUs (this
machine's memory as ``slurmd -C`` reports it), ``slurmctld`` and ``slurmd`` in the foreground on free
loopback ports, as root (Slurm's daemons launch jobs as the submitting user; the tests run
as root here and in CI). Client commands find the cluster through ``SLURM_CONF``.

slurmd reads the temp ``slurm.conf`` itself (``-f``) rather than fetching it from
slurmctld ("configless", ``--conf-server``): before it has a configuration it can only reach
munge on the system socket, and this cluster's munged listens on its own.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SlurmCluster", "missing_binaries", "INSTALL_HINT"]

INSTALL_HINT = ("sh scripts/need-system-packages.sh (the first step of README's test command: Debian's "
                "slurm-wlm and munge)")
#: CPUs of the test node: two one-CPU jobs at a time.
CPUS = 2
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def missing_binaries() -> list[str]:
    """The Slurm/munge commands this machine lacks (``/usr/sbin`` included)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _which(name: str) -> str:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])) or name


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class SlurmCluster:
    """A running cluster: ``env`` holds ``SLURM_CONF`` for client commands; ``cpus`` is the
    node's CPU count (:data:`CPUS`)."""

    base: Path
    env: dict[str, str]
    cpus: int
    node: str = "labnode"
    procs: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(cls, timeout_s: float = 60.0) -> "SlurmCluster":
        """Generate the key and configuration, start munged, slurmctld and slurmd, wait until
        the node is idle.

        :raises RuntimeError: a daemon did not come up (its log's tail in the message).
        """
        base = Path(tempfile.mkdtemp(prefix="lab-slurm-"))
        os.chmod(base, 0o755)  # munged and slurmstepd check the path to their files
        for sub in ("munge", "state", "spool", "log"):
            (base / sub).mkdir(mode=0o755)
        key = base / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        sock = base / "munge" / "socket"
        cluster = cls(base, {}, 0)
        cluster._spawn([_which("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                        f"--pid-file={base / 'munge' / 'pid'}", f"--log-file={base / 'log' / 'munged.log'}",
                        f"--seed-file={base / 'munge' / 'seed'}"], "munged.out")
        cluster._wait(lambda: sock.exists(), "munged", base / "log" / "munged.log", timeout_s)
        node_line = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
        hw = dict(kv.split("=", 1) for kv in node_line.split()[1:] if "=" in kv and not kv.startswith("UpTime"))
        cluster.cpus = CPUS
        ctl_port, d_port = _free_ports(2)
        conf = base / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=labtest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctl_port}",
            f"SlurmdPort={d_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={sock}",
            f"StateSaveLocation={base / 'state'}",
            f"SlurmdSpoolDir={base / 'spool'}",
            f"SlurmctldPidFile={base / 'slurmctld.pid'}",
            f"SlurmdPidFile={base / 'slurmd.pid'}",
            f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={base / 'log' / 'slurmd.log'}",
            # every process a job starts is tracked through its parent chain (no cgroup needed)
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "KillWait=30",  # Slurm's default: SIGTERM, then SIGKILL 30 s later
            "MinJobAge=600",
            "InactiveLimit=0",
            # A node of exactly CPUS CPUs whatever the machine has (config_overrides: the node
            # line, not the hardware), so jobs of one CPU run CPUS at a time on any CI machine.
            "SlurmdParameters=config_overrides",
            f"NodeName={cluster.node} NodeAddr=127.0.0.1 CPUs={CPUS} Boards=1 SocketsPerBoard=1 "
            f"CoresPerSocket={CPUS} ThreadsPerCore=1 RealMemory={hw['RealMemory']} State=UNKNOWN",
            f"PartitionName=lab Nodes={cluster.node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        cluster.env = {"SLURM_CONF": str(conf)}
        env = {**os.environ, **cluster.env}
        cluster._spawn([_which("slurmctld"), "-D", "-f", str(conf)], "slurmctld.out", env)
        cluster._spawn([_which("slurmd"), "-D", "-f", str(conf), "-N", cluster.node], "slurmd.out", env)
        cluster._wait(lambda: cluster.node_state() == "idle", "slurmctld/slurmd", base / "log" / "slurmctld.log",
                      timeout_s, also=base / "log" / "slurmd.log")
        return cluster

    def _spawn(self, argv: list[str], out: str, env: dict[str, str] | None = None) -> None:
        log = open(self.base / "log" / out, "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))
        log.close()

    def _wait(self, ready, what: str, log: Path, timeout_s: float, also: Path | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tails = "\n".join(f"--- {p.name}:\n{p.read_text()[-2000:]}" for p in (log, also)
                                  if p is not None and p.exists())
                outs = "\n".join(f"--- {p.name}:\n{p.read_text()[-1000:]}" for p in sorted((self.base / "log").glob("*.out")))
                self.stop()
                raise RuntimeError(f"{what} did not come up ({'exited' if dead else f'{timeout_s:.0f} s'}):\n{tails}\n{outs}")
            time.sleep(0.5)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=check,
                              env={**os.environ, **self.env})

    def node_state(self) -> str:
        """``sinfo``'s state of the node (``idle``, ``mixed``, ``alloc``...), or "" before slurmctld answers."""
        try:
            return self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip()
        except subprocess.TimeoutExpired:
            return ""

    def stop(self) -> None:
        """Cancel every job, stop the daemons (their process groups) and remove the temp dir."""
        if self.env and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "-u", "root", check=False)
            deadline = time.monotonic() + 60
            while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
                time.sleep(1)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)
