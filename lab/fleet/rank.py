"""Ranks 1..N-1 of a multi-node server in a fleet job (``server.nnodes > 1``).

SGLang spreads ``--tp-size`` ranks over ``--nnodes`` nodes that meet at ``--dist-init-addr``
(node 0's address). The lab benchmarks rank 0, which the stage launches on the job's first
node as usual; :mod:`lab.fleet.job` starts the other ranks with one ``srun`` step over the
job's other nodes (:func:`srun_ranks_argv`), each running ``python -m lab.fleet.rank --mode M``,
which execs the engine line ``lab command --mode M --node-rank R`` prints, with
``R = $SLURM_PROCID + 1`` and node 0's address from ``LAB_SERVER_DIST_INIT_ADDR``. The HTTP
server stays on loopback (``server.host``): only the rendezvous address is the node's own,
because only a multi-node run needs one. The step ends with the job (``srun`` passes SIGTERM
to each rank) or when the runner stops it after the stage.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["srun_ranks_argv", "rank_command", "main"]


def srun_ranks_argv(mode: str, nnodes: int, python: str) -> list[str]:
    """The ``srun`` step that starts ranks 1..nnodes-1, one per node after the job's first."""
    n = nnodes - 1
    return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--relative=1",
            "--kill-on-bad-exit=1", python, "-m", "lab.fleet.rank", "--mode", mode]


def rank_command(mode: str, node_rank: int, python: str = sys.executable):
    """The engine launch (:class:`lab.engine.command.ServerCommand`) of ``mode`` at ``node_rank``.

    :raises lab.config.ParamsError: bad params or node rank (``node_rank >= nnodes``).
    """
    from lab.config import load_params
    from lab.engine.command import build_server_command

    params = load_params()
    params = load_params(overrides={"server": {**params.server.model_dump(), "node_rank": node_rank}})
    return build_server_command(params, mode, python=python)


def main(argv: list[str] | None = None) -> int:
    """Exec rank ``$SLURM_PROCID + 1`` of ``--mode``'s server (never returns on success)."""
    ap = argparse.ArgumentParser(prog="python -m lab.fleet.rank")
    ap.add_argument("--mode", required=True)
    args = ap.parse_args(argv)
    rank = int(os.environ.get("SLURM_PROCID", "0")) + 1
    cmd = rank_command(args.mode, rank)
    print(f"[lab] fleet: rank {rank} of {args.mode} on {os.uname().nodename}: {cmd.display()}", flush=True)
    os.execvpe(cmd.argv[0], cmd.argv, {**os.environ, **cmd.env})
    return 1  # pragma: no cover (exec does not return)


if __name__ == "__main__":
    sys.exit(main())
