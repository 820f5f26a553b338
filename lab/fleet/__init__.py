"""Fleet mode: a sweep's stages as Slurm jobs across GPU nodes, one shared DVC cache, one MLflow.

``lab fleet submit`` (on a login/head node, in a clean checkout of the commit to run) submits
one plain ``sbatch`` job per stage that ``dvc repro`` would run and that is missing
(``bench@<mode>``, ``physics``; ``compare`` after them with ``afterok``); ``lab fleet status``
shows them; ``lab fleet collect`` restores every stage into the checkout from DVC's run cache.
Slurm schedules; nothing here does. What runs where:

- head node: :mod:`lab.fleet.head` (checks, the MLflow parent run, ``sbatch``, collect), the
  sweep directory on the shared filesystem (:mod:`lab.fleet.fleet_sweep`);
- each job, on its node: a ``git clone --shared`` of the commit of its own (no two jobs share
  a DVC repo lock), the shared DVC cache, :mod:`lab.fleet.job` running the stage through
  :mod:`lab.fleet.runcache`, the engine on loopback (a free port), ranks 1..N-1 of a
  multi-node server on the job's other nodes (:mod:`lab.fleet.rank`);
- the tracking server (``mlflow server`` on PostgreSQL): every job's runs, nested under one
  parent run per sweep.

Job scripts (:mod:`lab.fleet.script`) hold no credential: secrets pass by name through
``sbatch --export``. The CLI is :mod:`lab.fleet.fleet_cli` (``lab fleet ...``).
"""
