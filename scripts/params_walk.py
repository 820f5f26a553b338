"""Follow the whole parameters object (``LabParams``) from a stage entry point through the code.

    .venv/bin/python scripts/params_walk.py [--root DIR] [--entry lab.pipeline.bench:run_mode] [--param params] [-v]

Static, read from the source with :mod:`ast` (nothing is imported, so it runs on any checkout,
e.g. ``git archive <commit> lab | tar -x -C /tmp/old`` then ``--root /tmp/old``). Starting at
the entry function with its parameter ``--param`` tracked, every call that passes a tracked
name (positionally or by keyword; also ``x = params`` and ``x = params.model_copy(...)``
aliases) to a function the walk can resolve (a function of the same module, one imported from a
``lab`` module, a ``lab`` module's attribute, a class, whose ``__init__`` is then entered, or
``self.method``) is an edge, and the walk goes on inside the callee with the parameter that
received it. A section (``params.bench``) passed on is not the whole object and is not followed.

Prints: functions that receive the object, *modules entered* (distinct ``lab`` modules with
such a function), packages entered, cross-module edges, and *re-entries*: cross-module edges
into a module the walk had already entered before (it left the module and came back), with
``-v`` each edge. Issue 20 asks for these before and after "callees take the section they need".
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

    @staticmethod
    def _is_pkg(root: Path, mod: str) -> bool:
        return (root / Path(*mod.split(".")) / "__init__.py").is_file()

    def resolve(self, mod: str, func: ast.AST | None, cls: str | None, call: ast.Call) -> tuple[tuple[str, str], int] | None:
        """``((module, qualname), positional offset)`` of the called function, or None."""
        f = call.func
        imports = self.imports.get(mod, {})
        if isinstance(f, ast.Name):
            if (mod, f.id) in self.funcs:
                return (mod, f.id), 0
            if (mod, f.id) in self.classes:
                return self._init(mod, f.id)
            target = imports.get(f.id)
            if target and target[1]:
                return self._named(*target)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id == "self" and cls and (mod, f"{cls}.{f.attr}") in self.funcs:
                return (mod, f"{cls}.{f.attr}"), 1
            target = imports.get(f.value.id)
            if target and target[1] is None:
                return self._named(target[0], f.attr)
        return None

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
            got = idx.resolve(key[0], fn, cls, call)
            if not got:
                continue
            callee, offset = got
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
