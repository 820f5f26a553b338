"""Parse argv lists with SGLang 0.5.23's own argument definitions, without its dependencies.

Run as ``python tests/sglang_argparser.py <sglang install dir>`` with JSON on stdin:
``[[flag, ...], ...]``. Prints ``[{"ok": bool, "args": {...} | null, "error": str}, ...]``.

SGLang's flags are declared in ``sglang/srt/arg_groups/fields/*.py`` (msgspec structs) and
turned into argparse options by ``arg_groups.arg_utils.add_cli_args_from_dataclass``. The
package ``__init__`` files import torch, so this script registers empty parent packages and
rebuilds the four helpers the field modules take from ``sglang/srt/utils/common.py`` from
that file's own source (via ``ast``), leaving SGLang's definitions untouched.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import json
import os
import pkgutil
import re
import sys
import types
import typing


def _stub_packages(root: str) -> None:
    for name in ("sglang", "sglang.srt", "sglang.srt.utils"):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = mod
    want = {"human_readable_int", "json_list_type", "nullable_str",
            "LORA_TARGET_ALL_MODULES", "SUPPORTED_LORA_TARGET_MODULES"}
    src_path = os.path.join(root, "sglang", "srt", "utils", "common.py")
    tree = ast.parse(open(src_path).read())
    body = []
    for node in tree.body:
        names: set[str] = set()
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if names & want:
            body.append(node)
    common = types.ModuleType("sglang.srt.utils.common")
    common.__dict__.update(json=json, argparse=argparse, re=re,
                           Optional=typing.Optional, List=typing.List)
    exec(compile(ast.Module(body=body, type_ignores=[]), src_path, "exec"), common.__dict__)
    sys.modules["sglang.srt.utils.common"] = common


def build_parser(root: str) -> tuple[argparse.ArgumentParser, list[str]]:
    """SGLang's launch_server parser from its field namespaces; returns (parser, skipped)."""
    _stub_packages(root)
    import msgspec
    from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
    import sglang.srt.arg_groups.fields as fields

    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    skipped = []
    for info in pkgutil.iter_modules(fields.__path__):
        try:
            mod = importlib.import_module(f"sglang.srt.arg_groups.fields.{info.name}")
        except ImportError as exc:  # lora needs the runtime; its flags are not used here
            skipped.append(f"{info.name}: {exc}")
            continue
        for obj in vars(mod).values():
            if (isinstance(obj, type) and issubclass(obj, msgspec.Struct)
                    and obj.__module__ == mod.__name__ and getattr(obj, "_NS_PATH", None)):
                add_cli_args_from_dataclass(parser, obj)
    return parser, skipped


def main() -> None:
    parser, skipped = build_parser(sys.argv[1])
    results = []
    for argv in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(argv)
            results.append({"ok": True, "args": {k: v for k, v in vars(ns).items()
                                                 if isinstance(v, (str, int, float, bool, type(None)))},
                            "error": ""})
        except (SystemExit, argparse.ArgumentError) as exc:
            results.append({"ok": False, "args": None, "error": err.getvalue() + str(exc)})
    json.dump({"skipped": skipped, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
