"""The layout of `lab/` by concern: no import cycle among lab modules (lazy imports inside
functions included), analysis imports no report, tracking or pipeline module, and every
module opens with a docstring saying its concern.

The import graph is read from the source with :mod:`ast` (nothing is imported): every
``import lab.x`` and ``from lab.x import y`` anywhere in a module, at top level or inside a
function, is an edge to the module it names (``from lab.pkg import mod`` to ``lab.pkg.mod``
when that is a module, else to ``lab.pkg``). A package's own ``__init__`` importing its
submodules is an edge too; the implicit import of a parent package is not.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[2] / "lab"


def _modules() -> dict[str, tuple[Path, bool]]:
    """``dotted name -> (file, is a package __init__)`` for every module under lab/."""
    mods = {}
    for path in sorted(LAB.rglob("*.py")):
        parts = list(path.relative_to(LAB.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """``module -> modules it imports`` over lab/, lazy imports included (module docstring);
    read once per session (callers must not change it)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                target = resolve(t) if t.split(".")[0] == "lab" else None
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_graph_sees_lazy_and_package_imports():
    """The reader finds what the test relies on: an import inside a function and a
    ``from lab.pkg import module`` form (so an empty result below is not a blind spot)."""
    graph = import_graph()
    assert "lab.report.figures" in graph["lab.pipeline.compare"]  # imported inside run_compare
    assert "lab.physics.stack_bench" in graph["lab.physics.run"]  # `from lab.physics import stack_bench as bench`, in a function
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_among_lab_modules_lazy_imports_included():
    graph = import_graph()
    cycles = import_cycles(graph)
    detail = [f"{a} -> {b}" for c in cycles for a in c for b in sorted(graph[a] & set(c))]
    assert not cycles, f"import cycles {cycles}: {detail}"


def package_of(module: str) -> str:
    """The package a module belongs to: ``lab.measure.point`` -> ``lab.measure``; a top-level
    module (``lab.atomic``, ``lab.catalog``) and the ``lab`` package itself are their own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``package -> packages it imports`` (:func:`package_of` of every edge of ``graph``)."""
    out: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for m, ts in graph.items():
        out[package_of(m)] |= {package_of(t) for t in ts} - {package_of(m)}
    return out


def test_no_import_cycle_among_lab_packages():
    """No package imports a package that imports it back, through any chain (issue 20: measure
    <-> analysis, config -> emulator -> workload -> config, config -> physics -> profiling ->
    measure -> ... -> config were such chains). Each module edge of a cycle is named."""
    graph = import_graph()
    pkgs = package_graph(graph)
    assert import_cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]  # the reader finds a two-package cycle
    cycles = import_cycles(pkgs)
    detail = sorted(f"{m} -> {t}" for c in cycles for m, ts in graph.items() if package_of(m) in c
                    for t in ts if package_of(t) in c and package_of(t) != package_of(m))
    assert not cycles, f"package cycles {cycles}: {detail}"


def test_config_imports_no_other_lab_package():
    """Every lab package reads lab.config; lab.config reads none of them, so it can never close a
    cycle (the physics stage's schema lives in it: lab.config.physics_config)."""
    graph = import_graph()
    outside = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("lab.config")
                     for t in ts if not t.startswith("lab.config") and t != "lab")
    assert not outside, outside


@pytest.mark.parametrize("upstream", ["lab.report", "lab.tracking", "lab.pipeline"])
def test_analysis_is_a_leaf(upstream):
    """pipeline -> {analysis, report, tracking} -> analysis: never back into the callers."""
    graph = import_graph()
    back = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("lab.analysis")
                  for t in ts if t == upstream or t.startswith(upstream + "."))
    assert not back, back


def test_no_two_modules_share_a_name():
    """Each module's file name says which one it is: no two modules under lab/ share a basename
    (``__init__`` and ``__main__`` aside), so a traceback, an import or a search names one file
    (issue 20: bench, compare, cli, args, trace, report, taskmix and profile existed twice)."""
    seen: dict[str, list[str]] = {}
    for path, _ in _modules().values():
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(LAB.parent)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, twice


def test_every_module_and_folder_opens_with_a_docstring():
    missing = [str(p.relative_to(LAB.parent)) for p, _ in _modules().values()
               if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert not missing, missing


def test_architecture_module_map_names_every_module():
    """docs/architecture.md's module map has a line for every module (a folder's line covers the
    folders it names as a whole, like ``lab/emulator/``)."""
    page = (LAB.parent / "docs" / "architecture.md").read_text()
    table = page[page.index("## Module map"):]
    table = table[: table.index("\n## ", 1)]
    whole = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `lab/") and line.split("`")[1].endswith("/")}
    missing = []
    for path, _ in _modules().values():
        rel = path.relative_to(LAB.parent).as_posix()
        if path.name in ("__init__.py", "__main__.py") or any(rel.startswith(w) for w in whole):
            continue
        if f"`{rel}`" not in table:
            missing.append(rel)
    assert not missing, f"docs/architecture.md's module map lacks {missing}"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (lazy imports included)."""
    seen, todo = set(), [start]
    while todo:
        for t in graph[todo.pop()] - seen:
            seen.add(t)
            todo.append(t)
    return seen


def test_physics_reads_only_the_standard_library_schema_of_config():
    """lab.physics (the GPU stage, run where pydantic is absent) imports of lab.config only
    lab.config.physics_config (standard library) and the package's lazy ``__init__``, whose
    names resolve on first use; read from the import graph, lazy imports included."""
    graph = import_graph()
    physics = {m for m in graph if m == "lab.physics" or m.startswith("lab.physics.")}
    config = sorted({t for m in physics for t in graph[m] if t.startswith("lab.config")})
    assert config == ["lab.config.physics_config"], config
    assert not reachable(graph, "lab.config.physics_config"), graph["lab.config.physics_config"]
    init = (LAB / "config" / "__init__.py").read_text()
    top = [n for n in ast.parse(init).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(n, ast.ImportFrom) and n.module == "typing" for n in top), "lab/config/__init__.py imports eagerly"


#: The wings: packages around the three-mode pipeline (docs/architecture.md).
WINGS = ("lab.calibrate", "lab.physics", "lab.fleet", "lab.offline", "lab.profiling")
#: What of the wings the core's stages run: the bench stage's `bench.trace` capture is analysed
#: by lab.profiling.trace, and the compare stage's report reads it through lab.profiling.report.
CORE_USES = {"lab.profiling", "lab.profiling.trace", "lab.profiling.report"}


@pytest.mark.parametrize("entry", ["lab.pipeline.bench_stage", "lab.pipeline.bench", "lab.pipeline.compare_stage",
                                   "lab.pipeline.compare"])
def test_core_stages_stay_out_of_the_wings(entry):
    """A bench or compare stage runs no wing module but the profiling analysis of ``bench.trace``
    (docs/architecture.md draws the core apart from the wings)."""
    graph = import_graph()
    wings = sorted(m for m in reachable(graph, entry) if m.startswith(WINGS) and m not in CORE_USES)
    assert not wings, f"{entry} reaches {wings}: keep wings out of the core, or update docs/architecture.md"


def test_engine_names_are_compared_only_in_the_registry():
    """One seam per engine (issue 20): what an engine is (modelled, records ground truth, holds
    GPUs) is asked of :mod:`lab.engine.registry`, never by comparing its name elsewhere."""
    import re

    root = Path(__file__).resolve().parents[2] / "lab"
    pattern = re.compile(r"""engine\s*[!=]=\s*["']|["'](emulator|sglang)["']\s*[!=]=\s*\S*engine""")
    found = [f"{p.relative_to(root.parent)}:{n}: {line.strip()}"
             for p in sorted(root.rglob("*.py")) if p.name != "registry.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "\n".join(found)
