"""Reading ``params.yaml``: YAML, overrides (a papermill-injected mode slice), validation, and
errors that name every bad key with its fix (:class:`lab.config.schema.ParamsError`)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from lab.config import yamlio
from lab.config import schema
from lab.config.paths import repo_root
from lab.config.schema import LabParams, ParamsError

__all__ = ["load_params", "RENAMED", "SERVER_PLACEMENT_ENV"]

#: Where a scheduler places a job's engine, which params.yaml cannot know: the HTTP port on a
#: node that other jobs share, and node 0's address of a multi-node server. A fleet job
#: (:mod:`lab.fleet.job`) sets them; they override ``server.port`` / ``server.dist_init_addr``
#: for that process and its children, are validated like the file's values, and leave
#: params.yaml (so DVC's params and run cache) untouched.
SERVER_PLACEMENT_ENV = {"LAB_SERVER_PORT": "port", "LAB_SERVER_DIST_INIT_ADDR": "dist_init_addr"}

#: Keys ``params.yaml`` once had, and their names now: the error says the new one.
RENAMED = {"bench.profile": "bench.trace", "bench.profile_requests": "bench.trace_requests",
           "bench.profile_max_new_tokens": "bench.trace_max_new_tokens"}


def _all_param_keys() -> set[str]:
    """Every key any params section defines (the models of :mod:`lab.config.schema`), for the
    "did you mean" hint of an unknown key."""
    keys: set[str] = set()
    for obj in vars(schema).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj is not BaseModel:
            keys.update(obj.model_fields)
    return keys


#: pydantic's error types of a value of the right type outside its bounds, and how the fix says it.
_BOUND_TYPES = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
                "less_than": ("<", "lt"), "too_short": ("to at least this many entries:", "min_length"),
                "too_long": ("to at most this many entries:", "max_length")}


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"{source} is invalid:"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(e["loc"][-1]), _all_param_keys(), n=1)
            if key in RENAMED:
                msg = f"renamed. Fix: call it {RENAMED[key]} (\"profile\" is the emulator's cost profile only)"
            else:
                msg = (f"unknown key. Fix: did you mean {close[0]!r}?" if close else
                       "unknown key. Fix: remove it or check its spelling against README's params table")
        elif e["type"] == "list_type":
            msg += f" (got {e.get('input')!r}). Fix: give a list, e.g. [{e.get('input')!r}]"
        elif e["type"] == "missing":
            msg = "required key missing. Fix: add it (see README's params table)"
        elif e["type"] in _BOUND_TYPES and "Fix:" not in msg:  # the right type, out of range
            word, ctx_key = _BOUND_TYPES[e["type"]]
            bound = (e.get("ctx") or {}).get(ctx_key)
            msg += f" (got {e.get('input')!r}). Fix: set {key} {word} {bound}" if bound is not None else \
                f" (got {e.get('input')!r}). Fix: give a value within the bound"
        elif "Fix:" not in msg:
            msg += f" (got {e.get('input')!r}). Fix: give a value of the right type"
        lines.append(f"  {key}: {msg}" if key else f"  {msg}")
    return "\n".join(lines)


def load_params(path: str | os.PathLike[str] | None = None, *, overrides: dict[str, Any] | None = None) -> LabParams:
    """Load and validate ``params.yaml``.

    :param path: the file; default ``<repo root>/params.yaml``.
    :param overrides: top-level sections or ``{"modes": {name: {...}}}`` slices to merge
        over the file (how a papermill-injected mode slice reaches the model). The
        environment's :data:`SERVER_PLACEMENT_ENV` apply after them.
    :returns: the validated :class:`LabParams`.
    :raises ParamsError: file missing, not YAML, or any key invalid (message names each
        key and its fix).
    """
    p = Path(path) if path is not None else repo_root() / "params.yaml"
    if not p.is_file():
        raise ParamsError(f"{p}: params file not found. Fix: run from the repository root or pass its path")
    try:
        raw = yamlio.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{p}: not valid YAML ({exc}). Fix: correct the syntax at the line shown") from exc
    if not isinstance(raw, dict):
        raise ParamsError(f"{p}: top level must be a mapping of sections. Fix: see README's params table")
    for key, value in (overrides or {}).items():
        if key == "modes" and isinstance(value, dict):
            raw.setdefault("modes", {}).update(value)
        else:
            raw[key] = value
    for env, key in SERVER_PLACEMENT_ENV.items():
        if os.environ.get(env) and isinstance(raw.setdefault("server", {}), dict):
            raw["server"] = {**raw["server"], key: os.environ[env]}
    try:
        return LabParams.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(_format_validation_error(exc, str(p))) from None
