"""Each DVC stage lists as deps exactly the lab code it runs (issue 14), checked statically.

For every stage of ``dvc.yaml``, the lab modules it runs are found by walking imports from its
entry module (the ``python -m`` of its ``cmd``) and its notebook, transitively, including
imports inside functions (lazy imports) and modules launched as processes (a string constant
naming a lab module, e.g. ``"lab.emulator"`` in the engine's argv). Then:

- every module reached is covered by one of the stage's ``deps`` (a file, or a folder above it);
- every ``deps`` entry under ``lab/`` is needed: a listed file is reached, and every ``.py``
  file of a listed folder is reached (else editing an unused file would re-run the stage).

The failure message names the module and the stage, and the line to add to or remove from
``dvc.yaml``. Other helpers move modules; this test is what keeps the lists right.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from shared import source_tree

ROOT = Path(__file__).resolve().parents[2]

#: Files under lab/ that a stage reads as data (not imports): the emulator's cost profiles
#: (``lab/emulator/profile.py`` resolves ``profile: <name>`` to ``profiles/<name>.json``; the
#: bench preflight checks it exists).
DATA_DEPS = {"bench": {"lab/emulator/profiles"}, "bench_launch": {"lab/emulator/profiles"}}  # launches 2..N: the same stage


def module_file(name: str) -> Path | None:
    """The source file of lab module ``name`` (``lab/a/b.py`` or ``lab/a/b/__init__.py``), or None."""
    base = ROOT.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _imports(tree: ast.AST, current: str, is_package: bool) -> set[str]:
    """Lab module names ``tree`` imports anywhere (function bodies included) or names as a
    string constant (``python -m lab.emulator``, ``importlib.import_module("lab.x")``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = current.split(".")
                if not is_package:
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from lab.measure import client`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"lab(\.\w+)+", node.value):
            found.add(node.value)
            if module_file(f"{node.value}.__main__") is not None:  # `python -m <package>` runs its __main__
                found.add(f"{node.value}.__main__")
    return {n for n in found if (n == "lab" or n.startswith("lab.")) and module_file(n) is not None}


def notebook_tree(path: Path) -> ast.AST:
    """The code cells of a notebook as one module (IPython magics dropped)."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    src = "\n".join("".join(c["source"]) for c in cells)
    return ast.parse("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))


def reached_modules(entry_module: str, notebook: Path) -> dict[str, str]:
    """Lab modules run by a stage: ``{module: the module that imports it}``, walked from the entry
    module and the notebook. A module ``lab.a.b`` also runs its packages ``lab``, ``lab.a``."""
    seen: dict[str, str] = {}
    todo: list[tuple[str, str]] = [(entry_module, "dvc.yaml cmd")]
    todo += [(m, str(notebook.relative_to(ROOT))) for m in _imports(notebook_tree(notebook), "__notebook__", False)]
    while todo:
        name, by = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) not in seen:
                todo.append((".".join(parts[:i]), name))
        if name in seen:
            continue
        seen[name] = by
        assert module_file(name) is not None, f"{by} imports {name}, which has no source file"
        todo += [(m, name) for m in _module_imports(name) if m not in seen]
    return seen


@functools.lru_cache(maxsize=None)
def _module_imports(name: str) -> frozenset[str]:
    """:func:`_imports` of lab module ``name``'s source, parsed once per session (every stage's
    walk reads the same files)."""
    path = module_file(name)
    return frozenset(_imports(source_tree(path), name, path.name == "__init__.py"))


def _stages() -> dict[str, dict]:
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    out = {}
    for name, spec in dvc["stages"].items():
        body = spec.get("do") or spec
        m = re.search(r"python -m ([\w.]+)", body["cmd"])
        assert m, f"stage {name}: cmd {body['cmd']!r} is not `python -m <lab module>`"
        nb = [d for d in body["deps"] if isinstance(d, str) and d.startswith("notebooks/")]
        assert len(nb) == 1, f"stage {name}: deps must list its one notebook, found {nb}"
        out[name] = {"entry": m.group(1), "notebook": ROOT / nb[0],
                     "deps": [d for d in body["deps"] if isinstance(d, str)]}
    return out


STAGES = _stages()


def _rel(module: str) -> str:
    return module_file(module).relative_to(ROOT).as_posix()


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_cover_every_module_it_runs(stage):
    spec = STAGES[stage]
    reached = reached_modules(spec["entry"], spec["notebook"])
    lab_deps = [d for d in spec["deps"] if d == "lab" or d.startswith("lab/")]
    missing = sorted((_rel(m), by) for m, by in reached.items() if not _covered(_rel(m), lab_deps))
    assert not missing, (
        f"dvc.yaml stage {stage}: these modules run in the stage but are not in its deps, so editing them "
        "would not re-run it. Add to stages." + stage + ".deps:\n"
        + "\n".join(f"  - {path}    # imported by {by}" for path, by in missing))


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_list_nothing_the_stage_does_not_run(stage):
    spec = STAGES[stage]
    files = {_rel(m) for m in reached_modules(spec["entry"], spec["notebook"])}
    data = DATA_DEPS.get(stage, set())
    unused = []
    for d in spec["deps"]:
        if not (d == "lab" or d.startswith("lab/")) or d in data:
            continue
        p = ROOT / d
        if p.is_file():
            if d not in files:
                unused.append(f"  - {d}    # never imported by the stage")
        elif p.is_dir():
            extra = sorted(f.relative_to(ROOT).as_posix() for f in p.rglob("*.py")
                           if "__pycache__" not in f.parts and f.relative_to(ROOT).as_posix() not in files)
            if extra:
                unused.append(f"  - {d}    # folder holds modules the stage never imports: {', '.join(extra)}; "
                              "list the used files instead")
        else:
            unused.append(f"  - {d}    # does not exist")
    for d in data:
        assert _covered(d, spec["deps"]), f"dvc.yaml stage {stage}: add `- {d}` to its deps (data the stage reads)"
    assert not unused, (f"dvc.yaml stage {stage}: remove (or narrow) these deps, so that editing code the stage "
                        "does not run does not re-run it:\n" + "\n".join(unused))


def test_walker_sees_lazy_imports_and_launched_modules():
    """The walk itself: a lazy import inside a function and the emulator launched as
    ``python -m lab.emulator`` (a string in lab/engine/command.py) are both reached."""
    reached = reached_modules("lab.pipeline.bench_stage", ROOT / "notebooks" / "bench.ipynb")
    assert "lab.engine.preflight" in reached  # imported inside bench_stage's preflight()
    assert "lab.emulator.__main__" in reached or "lab.emulator" in reached
    assert "lab.report.figures" not in reached  # compare's code
