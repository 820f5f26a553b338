"""YAML text to Python objects with libyaml's C parser, and PyYAML's own messages on bad input.

``params.yaml``, ``dvc.yaml`` and ``dvc.lock`` are read by every stage, CLI command and many tests;
PyYAML's pure-Python ``SafeLoader`` takes about 9 ms for the default ``params.yaml`` where
``CSafeLoader`` (libyaml, bundled in PyYAML's wheels) takes about 1 ms, with the same result for
safe YAML (PyYAML docs, "LibYAML bindings"). A document that fails to parse is parsed once more
by the pure-Python loader, so the :class:`yaml.YAMLError` raised (and the line it names) is the one
users have always seen.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["safe_load"]

_FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # PyYAML built without libyaml: the same, slower


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` through libyaml when PyYAML has it.

    :param text: a YAML document.
    :returns: what :func:`yaml.safe_load` returns for it (None for an empty document).
    :raises yaml.YAMLError: not valid YAML; the pure-Python loader's error, naming the line.
    """
    try:
        return yaml.load(text, Loader=_FAST)  # noqa: S506 (a safe loader)
    except yaml.YAMLError:
        return yaml.safe_load(text)  # the message users know; raises
