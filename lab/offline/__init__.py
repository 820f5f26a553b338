"""Air-gapped GPU nodes: an offline bundle of the lab's locked environment and SGLang's serving
set (bundle), built here from ``uv.lock`` and ``sglang-<version>.toml``; installed on the node
by the standard library alone (install); the lock's dependency closure (lockfile).

Nothing here imports a third-party package at module level: :mod:`lab.offline.install` runs
on a node that has only Python and PyTorch.
"""
