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

from shared import source_tree

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
        for node in ast.walk(source_tree(path)):
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
               if not (ast.get_docstring(source_tree(p)) or "").strip()]
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


def engine_name_uses(source: str | ast.Module, names: set[str]) -> list[tuple[int, str]]:
    """``(line, form)`` of every place ``source`` asks which engine it is by name rather than
    asking the engine (:mod:`lab.engine.registry`), read with :mod:`ast`:

    - a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) with an engine or engine-section
      name in ``names`` on either side, alone or in a tuple/list/set (``params_section ==
      "emulator"``, ``"emulator" in engines``, ``engine in ("emulator", "sglang")``);
    - a comparison of something that names an engine (``.engine``, ``.params_section``, a variable
      ``engine``/``eng``/``engine_name``, ``x.get("engine")``, ``x["engine"]``) with any string;
    - a ``match`` case on such a name; a dict keyed by a tuple holding one (``("emulator", profile)``);
      ``choices=[...]`` or ``Literal[...]`` listing one;
    - the registry's table itself (``ENGINES``) read outside ``lab/engine/``.
    """
    tree = ast.parse(source) if isinstance(source, str) else source  # a parsed module: read only
    found: list[tuple[int, str]] = []

    def named(node) -> bool:  # a str constant that is an engine or section name, or a collection of them
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in node.elts)

    def names_engine(node) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("engine", "params_section")
        if isinstance(node, ast.Name):
            return node.id in ("engine", "eng", "engine_name", "params_section")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "engine"
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == "engine"
        return False

    def is_str(node) -> bool:
        return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or (
            isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(is_str(e) for e in node.elts))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            if any(named(o) for o in ops) or (any(names_engine(o) for o in ops) and any(is_str(o) for o in ops)):
                found.append((node.lineno, "comparison"))
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue) and named(node.pattern.value):
            found.append((node.pattern.lineno, "match case"))
        elif isinstance(node, ast.Dict) and any(isinstance(k, ast.Tuple) and named(k) for k in node.keys if k):
            found.append((node.lineno, "dict keyed by engine name"))
        elif isinstance(node, ast.keyword) and node.arg == "choices" and named(node.value):
            found.append((node.value.lineno, "choices"))
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal"
              and named(node.slice)):
            found.append((node.lineno, "Literal"))
        elif isinstance(node, ast.Name) and node.id == "ENGINES":
            found.append((node.lineno, "registry table"))
        elif isinstance(node, ast.alias) and node.name == "ENGINES":
            found.append((getattr(node, "lineno", 0), "registry table"))
    return sorted(set(found))


def _engine_and_section_names() -> set[str]:
    from lab.engine.registry import engine_named, engine_names

    return set(engine_names()) | {s for n in engine_names() if (s := engine_named(n).params_section)}


#: Every form in which code outside lab/engine/ compared engine names before issue 31 (the
#: lines as they were, file:line of commit fe5e855); each must be found.
OLD_FORMS = {
    "lab/inputs.py:42": 'if engine_for(params).params_section == "emulator":\n    pass',
    "lab/engine/command.py:185": 'if engine_for(params).params_section == "emulator":\n    pass',
    "lab/engine/ports.py:59": 'if port_is_explicit(params.server) or engine_for(params).params_section != "emulator":\n    pass',
    "lab/analysis/provenance.py:57": 'if engine in ENGINES and ENGINES[engine].modelled:\n    pass',
    "lab/analysis/provenance.py:100": 'if p.get("engine") == "emulator":\n    pass',
    "lab/analysis/comparison.py:168": 'if "emulator" in engines:\n    pass',
    "lab/calibrate/prediction_report.py:92": 'what = "E" if "emulator" in eng else f"{eng} measurements"',
    "lab/analysis/sentinel.py:117": 'gpu = "none" if getattr(ENGINES.get(engine), "modelled", False) else gpu_model()',
    "lab/analysis/launches.py:96": 'P = {("emulator", "kimi_k25_tp8_pcie"): (0.022, 14, "s")}',
    "lab/cli.py:337": 'p_doc.add_argument("--engine", choices=["emulator", "sglang"], default=None)',
    "lab/config/schema.py:386": 'class LabParams:\n    engine: Literal["emulator", "sglang"] = "emulator"',
    "issue 20's regex": 'if params.engine == "sglang":\n    pass',
    "a tuple": 'if cmd.engine in ("emulator", "sglang"):\n    pass',
    "a match": 'match engine:\n    case "sglang":\n        pass',
    "a new engine's name": 'if engine != "vllm":\n    pass',
}


def test_engine_name_reader_finds_every_old_form():
    """The reader below is not blind: it finds each form the lab used before engines were
    classes (issue 31 lists them), and passes a line that only sets or prints a name."""
    names = _engine_and_section_names() | {"vllm"}
    missed = [where for where, line in OLD_FORMS.items() if not engine_name_uses(line, names)]
    assert not missed, missed
    fine = 'upd = {"engine": "emulator"}\nprint(f"engine {name}")\nx = manifest["sglang"]\nok = "none (emulator)"'
    assert engine_name_uses(fine, names) == []


def test_engine_names_are_compared_only_in_the_engines():
    """One seam per engine (issues 20, 31): what an engine is (modelled, records ground truth,
    holds GPUs, its params section, its launch, its preflight...) is asked of the engine
    (:mod:`lab.engine.registry`), never by comparing its name or its section's name outside
    ``lab/engine/``, in any form :func:`engine_name_uses` reads."""
    root = Path(__file__).resolve().parents[2] / "lab"
    names = _engine_and_section_names()
    found = [f"{p.relative_to(root.parent)}:{n}: {form}: {p.read_text().splitlines()[n - 1].strip()}"
             for p in sorted(root.rglob("*.py")) if "engine" not in p.relative_to(root).parts[:1]
             for n, form in engine_name_uses(source_tree(p), names)]
    assert not found, "\n".join(found)
