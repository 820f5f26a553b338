"""Follow the whole parameters object (``LabParams``) from a stage entry point through the code.

    .venv/bin/python scripts/params_walk.py [--root DIR] [--entry lab.pipeline.bench:run_mode] [--param params] [-v]

Static, read from the source with :mod:`ast` (nothing is imported, so it runs on any checkout,
e.g. ``git archive <commit> lab | tar -x -C /tmp/old`` then ``--root /tmp/old``). Starting at
the entry function with its parameter ``--param`` tracked, every call that passes a tracked
name (positionally or by keyword; also ``x = params`` and ``x = params.model_copy(...)``
aliases) to a function the walk can resolve is an edge, and the walk goes on inside the callee
with the parameter that received it. A call resolves to:

- a function of the same module, one imported from a ``lab`` module, or a ``lab`` module's
  attribute (``mod.func``);
- a class (defined in the module or imported from a ``lab`` module), whose ``__init__`` is then
  entered (positional offset 1: ``self``);
- ``self.method``: the method of the enclosing class (offset 1);
- ``Class.method(...)``, ``Class`` as above: the method found on the class or, failing that, on
  its ``lab`` base classes; a classmethod (its first declared parameter is ``cls``) takes the
  call's arguments from its second parameter on (offset 1), a staticmethod (or an unbound
  method called with its instance) from its first (offset 0);
- ``<expr>.meth(...)`` (any other receiver: ``engine_for(params).argv(...)``, ``eng.preflight(...)``)
  where ``meth`` is a method of an *engine class*: a class under ``lab/engine/`` that subclasses
  :class:`lab.engine.registry.Engine` (directly or through another engine class) or is
  decorated with ``register(...)``; the base class counts too. The walk cannot know which
  engine runs, so it follows EVERY engine class's own implementation of ``meth`` (offset 1).

A section (``params.bench``) passed on is not the whole object and is not followed.

Prints: functions that receive the object, *modules entered* ("rooms": distinct ``lab`` modules
with such a function), packages entered, cross-module edges, and *re-entries* ("returns":
cross-module edges into a module the walk had already entered before: it left the module and
came back), with ``-v`` each edge. Issue 20 asked for these before and after "callees take the
section they need"; issue 31 bounds them for ``run_mode`` (at most 10 rooms, 10 returns;
``tests/unit/test_params_walk.py``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def _modules(root: Path) -> dict[str, ast.Module]:
    out = {}
    for path in sorted((root / "lab").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


class Index:
    """Functions, classes and import names of every module under ``root/lab``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees = _modules(root)
        self.funcs: dict[tuple[str, str], ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[tuple[str, str], ast.ClassDef] = {}
        self.imports: dict[str, dict[str, tuple[str, str | None]]] = {}
        for mod, tree in self.trees.items():
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.funcs[(mod, node.name)] = node
                elif isinstance(node, ast.ClassDef):
                    self.classes[(mod, node.name)] = node
                    for sub in node.body:
                        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            self.funcs[(mod, f"{node.name}.{sub.name}")] = sub
            names: dict[str, tuple[str, str | None]] = {}
            package = mod if self._is_pkg(root, mod) else mod.rpartition(".")[0]
            for node in ast.walk(tree):  # lazy imports inside functions count too
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.startswith("lab"):
                            names[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                        base = ".".join(up + ([base] if base else []))
                    if not base.startswith("lab"):
                        continue
                    for a in node.names:
                        full = f"{base}.{a.name}"
                        names[a.asname or a.name] = (full, None) if full in self.trees else (base, a.name)
            self.imports[mod] = names
        self.engine_classes = self._engine_classes()

    def class_ref(self, mod: str, name: str) -> tuple[str, str] | None:
        """``(module, class name)`` that ``name`` names in ``mod`` (defined there or imported from
        a ``lab`` module, a re-export followed), or None."""
        if (mod, name) in self.classes:
            return mod, name
        target = self.imports.get(mod, {}).get(name)
        for _ in range(3):  # re-exports through package __init__ modules
            if not target or not target[1]:
                return None
            if target in self.classes:
                return target
            target = self.imports.get(target[0], {}).get(target[1])
        return None

    def _base_refs(self, mod: str, node: ast.ClassDef) -> list[tuple[str, str]]:
        out = []
        for b in node.bases:
            ref = None
            if isinstance(b, ast.Name):
                ref = self.class_ref(mod, b.id)
            elif isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name):
                target = self.imports.get(mod, {}).get(b.value.id)
                if target and target[1] is None:
                    ref = self.class_ref(target[0], b.attr)
            if ref:
                out.append(ref)
        return out

    def _engine_classes(self) -> set[tuple[str, str]]:
        """The engine classes (module docstring): the base class ``lab.engine.registry:Engine``,
        its subclasses (transitively) and the ``register(...)``-decorated classes under ``lab/engine``."""
        base = ("lab.engine.registry", "Engine")
        found = {base} if base in self.classes else set()
        engine_mods = [k for k in self.classes if k[0] == "lab.engine" or k[0].startswith("lab.engine.")]

        def registered(node: ast.ClassDef) -> bool:
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                if (isinstance(f, ast.Name) and f.id == "register") or (isinstance(f, ast.Attribute) and f.attr == "register"):
                    return True
            return False

        changed = True
        while changed:
            changed = False
            for key in engine_mods:
                if key in found:
                    continue
                node = self.classes[key]
                if registered(node) or any(b in found for b in self._base_refs(key[0], node)):
                    found.add(key)
                    changed = True
        return found

    def _method(self, cref: tuple[str, str], meth: str, depth: int = 0) -> tuple[str, str] | None:
        """``(module, "Class.meth")`` of ``meth`` on class ``cref`` or its ``lab`` bases."""
        key = (cref[0], f"{cref[1]}.{meth}")
        if key in self.funcs:
            return key
        if depth < 8:
            for b in self._base_refs(cref[0], self.classes[cref]):
                got = self._method(b, meth, depth + 1)
                if got:
                    return got
        return None

    @staticmethod
    def _is_pkg(root: Path, mod: str) -> bool:
        return (root / Path(*mod.split(".")) / "__init__.py").is_file()

    def resolve(self, mod: str, func: ast.AST | None, cls: str | None, call: ast.Call) -> list[tuple[tuple[str, str], int]]:
        """Every ``((module, qualname), positional offset)`` the call may run (module docstring);
        empty when it resolves to none."""
        f = call.func
        imports = self.imports.get(mod, {})
        if isinstance(f, ast.Name):
            if (mod, f.id) in self.funcs:
                return [((mod, f.id), 0)]
            if (mod, f.id) in self.classes:
                return self._listed(self._init(mod, f.id))
            target = imports.get(f.id)
            if target and target[1]:
                return self._listed(self._named(*target))
            return []
        if not isinstance(f, ast.Attribute):
            return []
        if isinstance(f.value, ast.Name):
            if f.value.id == "self" and cls and (mod, f"{cls}.{f.attr}") in self.funcs:
                return [((mod, f"{cls}.{f.attr}"), 1)]
            target = imports.get(f.value.id)
            if target and target[1] is None:  # a lab module's attribute
                return self._listed(self._named(target[0], f.attr))
            cref = self.class_ref(mod, f.value.id)
            if cref:  # Class.method(...): a classmethod (cls) or a staticmethod
                key = self._method(cref, f.attr)
                if key:
                    pos, _ = _params_of(self.funcs[key])
                    return [(key, 1 if pos[:1] == ["cls"] else 0)]
                return []
        # <expr>.meth(...): every engine class's own implementation of meth
        return [((m, f"{c}.{f.attr}"), 1) for m, c in sorted(self.engine_classes)
                if (m, f"{c}.{f.attr}") in self.funcs]

    @staticmethod
    def _listed(got: tuple[tuple[str, str], int] | None) -> list[tuple[tuple[str, str], int]]:
        return [got] if got else []

    def _named(self, mod: str, name: str) -> tuple[tuple[str, str], int] | None:
        if (mod, name) in self.funcs:
            return (mod, name), 0
        if (mod, name) in self.classes:
            return self._init(mod, name)
        target = self.imports.get(mod, {}).get(name)  # a re-export: follow it once
        if target and target[1] and (target[0], target[1]) != (mod, name):
            return self._named(*target) if (target[0], target[1]) in self.funcs or (target[0], target[1]) in self.classes else None
        return None

    def _init(self, mod: str, cls: str) -> tuple[tuple[str, str], int] | None:
        return ((mod, f"{cls}.__init__"), 1) if (mod, f"{cls}.__init__") in self.funcs else None


def _params_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], set[str]]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args)], {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _tracked(fn: ast.AST, start: str) -> set[str]:
    """``start`` and its aliases in ``fn`` (``x = start``, ``x = start.model_copy(...)``)."""
    names = {start}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "model_copy":
                v = v.func.value
            if isinstance(v, ast.Name) and v.id in names:
                names.add(node.targets[0].id)
    return names


def walk(root: Path, entry: str, param: str) -> dict:
    """The walk (module docstring): ``{"functions", "modules", "packages", "edges", "reentries"}``."""
    idx = Index(root)
    mod, name = entry.split(":")
    start = (mod, name)
    if start not in idx.funcs:
        raise SystemExit(f"{entry}: no such function under {root}/lab")
    seen: set[tuple[tuple[str, str], str]] = set()
    order: list[str] = []  # modules in the order the walk first entered them
    edges: list[tuple[tuple[str, str], tuple[str, str]]] = []
    todo = [(start, param)]
    while todo:
        key, pname = todo.pop(0)
        if (key, pname) in seen:
            continue
        seen.add((key, pname))
        if key[0] not in order:
            order.append(key[0])
        fn = idx.funcs[key]
        cls = key[1].split(".")[0] if "." in key[1] else None
        names = _tracked(fn, pname)
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            for callee, offset in idx.resolve(key[0], fn, cls, call):
                pos, allowed = _params_of(idx.funcs[callee])
                for i, arg in enumerate(call.args):
                    if isinstance(arg, ast.Name) and arg.id in names and i + offset < len(pos):
                        edges.append((key, callee))
                        todo.append((callee, pos[i + offset]))
                for kw in call.keywords:
                    if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in names and kw.arg in allowed:
                        edges.append((key, callee))
                        todo.append((callee, kw.arg))
    funcs = sorted({k for k, _ in seen})
    modules = list(dict.fromkeys(k[0] for k in funcs))
    cross = sorted({(a, b) for a, b in edges if a[0] != b[0]})
    reentries = [(a, b) for a, b in cross if order.index(b[0]) < order.index(a[0])]
    return {"functions": funcs, "modules": modules, "packages": sorted({".".join(m.split(".")[:2]) for m in modules}),
            "edges": cross, "reentries": sorted(set(reentries))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="checkout holding lab/")
    ap.add_argument("--entry", default="lab.pipeline.bench:run_mode", help="module:function to start from")
    ap.add_argument("--param", default="params", help="the entry's parameter holding the object")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the functions and edges")
    a = ap.parse_args(argv)
    w = walk(a.root, a.entry, a.param)
    print(f"{a.entry}: the params object reaches {len(w['functions'])} functions in {len(w['modules'])} modules "
          f"({len(w['packages'])} packages); {len(w['edges'])} cross-module edges, {len(w['reentries'])} re-entries "
          "into a module entered before")
    if a.verbose:
        print("modules:", ", ".join(w["modules"]))
        for x, y in w["edges"]:
            mark = "  (re-entry)" if (x, y) in w["reentries"] else ""
            print(f"  {x[0]}:{x[1]} -> {y[0]}:{y[1]}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
