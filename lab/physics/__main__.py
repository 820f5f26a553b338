"""``python -m lab.physics``: see :mod:`lab.physics.stack_cli`."""

from lab.physics.stack_cli import main

raise SystemExit(main())
