"""``python -m lab.physics``: see :mod:`lab.physics.cli`."""

from lab.physics.cli import main

raise SystemExit(main())
