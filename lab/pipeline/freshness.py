"""Whether the results in this checkout still match its ``params.yaml`` and code.

DVC is the judge: ``dvc.lock`` records, per stage, the parameter values and the hashes of the
code and data a stage's outputs were computed from, and ``dvc status`` (``dvc.repo.Repo.status``)
lists the stages whose dependencies no longer match. After ``dvc exp run -S modes.eagle3_decode.num_steps=3``
and ``git checkout params.yaml``, the workspace results are the experiment's while params.yaml
says otherwise: ``lab summary`` then opens with :func:`stale_lines`, naming each stale stage, the
parameters that differ (``dvc.lock``'s value against params.yaml's, leaf by leaf) or the code
files that changed, and the command that refreshes them.

Outputs missing from the checkout (a fresh clone holds the git-committed ones, not DVC's cache)
do not make a stage stale: only changed dependencies do, and of those not another stage's
outputs (``results/`` for ``compare``: absent from a clone, or changed with a stage that is
named stale itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.config import yamlio

__all__ = ["FreshnessError", "stale_stages", "stale_lines"]

#: what DVC's status calls a dependency that no longer matches ``dvc.lock``
_CHANGED_DEPS = "changed deps"


class FreshnessError(RuntimeError):
    """DVC could not read the project's status (the message says why)."""


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _leaf_diff(key: str, was: Any, now: Any) -> list[str]:
    """``["<key>.<leaf> <was> -> <now>", ...]`` for every leaf that differs."""
    if isinstance(was, dict) and isinstance(now, dict):
        out: list[str] = []
        for k in sorted(set(was) | set(now), key=str):
            out += _leaf_diff(f"{key}.{k}", was.get(k), now.get(k))
        return out
    return [] if was == now else [f"{key} {was!r} -> {now!r}"]


def stale_stages(root: str | Path) -> dict[str, list[str]]:
    """Stages of the DVC project at ``root`` whose dependencies changed since ``dvc.lock``.

    :returns: ``{stage: [what changed, ...]}`` (e.g. ``"params.yaml modes.eagle3_decode.num_steps 2 -> 3"``,
        ``"lab/analysis/theory.py modified"``); empty when every stage matches.
    :raises FreshnessError: DVC cannot read the project (not a DVC repository, a broken dvc.yaml).
    """
    root = Path(root)
    try:
        from dvc.repo import Repo

        with Repo(str(root)) as repo:
            status = repo.status()
    except Exception as exc:  # noqa: BLE001 - DVC raises its own error classes by case
        raise FreshnessError(f"dvc status failed in {root} ({type(exc).__name__}: {exc}). Fix: run `dvc status` "
                             "there to see why") from exc
    lock_path = root / "dvc.lock"
    lock = (yamlio.safe_load(lock_path.read_text()) or {}).get("stages", {}) if lock_path.is_file() else {}
    outs = {str(o.get("path")).rstrip("/") for st in lock.values() for o in (st.get("outs") or []) if o.get("path")}

    def produced(path: str) -> bool:  # another stage's output (absent from a clone: DVC caches it, git does not)
        p = path.rstrip("/")
        return any(p == o or o.startswith(p + "/") or p.startswith(o + "/") for o in outs)

    params_cache: dict[str, Any] = {}
    out: dict[str, list[str]] = {}
    for name, entries in status.items():
        stage = name.rsplit("dvc.yaml:", 1)[-1]  # DVC prefixes the dvc.yaml path when run from elsewhere
        reasons: list[str] = []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            for path, what in (entry.get(_CHANGED_DEPS) or {}).items():
                if not isinstance(what, dict):  # a file or folder: "modified", "deleted", "new"
                    if not produced(path):  # an upstream output changes with its stage, named there
                        reasons.append(f"{path} {what}")
                    continue
                if path not in params_cache:
                    p = root / path
                    params_cache[path] = yamlio.safe_load(p.read_text()) if p.is_file() else {}
                recorded = ((lock.get(stage) or {}).get("params") or {}).get(path) or {}
                for key, how in what.items():
                    leaves = _leaf_diff(key, recorded.get(key), _get(params_cache[path], key))
                    reasons += [f"{path} {x}" for x in leaves] or [f"{path} {key} {how}"]
        if reasons:
            out[stage] = reasons
    return out


def stale_lines(root: str | Path, width: int = 120, most: int = 4) -> list[str]:
    """The first lines ``lab summary`` prints when results are stale (none when they are current).

    One line saying which stages' results do not match params.yaml and the code, one per stale
    stage (at most ``most`` reasons each), and the command that refreshes them. A project DVC
    cannot read gives one line saying so (the results may still be current).
    """
    try:
        stale = stale_stages(root)
    except FreshnessError as exc:
        return [f"Could not check whether these results are current: {exc}"]
    if not stale:
        return []
    lines = [f"STALE: {len(stale)} stage(s) no longer match params.yaml or the code (dvc status); "
             "their numbers are from dvc.lock's:"]
    for stage, reasons in sorted(stale.items()):
        more = f"; and {len(reasons) - most} more" if len(reasons) > most else ""
        line = f"  {stage}: {'; '.join(reasons[:most])}{more}"
        lines.append(line if len(line) <= width else line[: width - 3] + "...")
    fix = "dvc repro"
    try:
        from lab.config import ParamsError, load_params

        load_params(Path(root) / "params.yaml")
    except ParamsError as exc:  # `dvc repro` would stop at once: say so, with the fix
        msg = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
        first = next((x for x in msg if not x.endswith(":")), msg[0] if msg else "")
        lines.append(f"  params.yaml is not valid now (dvc repro would stop): {first}"[:width])
        fix = "fix params.yaml (lab doctor names the key), dvc repro"
    except Exception:  # noqa: BLE001 - a missing file etc.: the stale lines stand on their own
        pass
    lines.append(f"  Refresh: {fix}; or back to the results' params: dvc exp apply <exp>")
    return lines
