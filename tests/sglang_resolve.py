"""Resolve argv lists with SGLang 0.5.23's own resolution code, on the CPU, without torch.

Run as ``python tests/sglang_resolve.py <sglang install dir>`` with JSON on stdin:
``[[flag, ...], ...]``. Prints ``{"results": [{"ok", "error", "parsed", "resolved"}, ...],
"ns_fields": [...]}``.

Steps, each SGLang's own code:

1. parse with SGLang's own parser (``tests/sglang_argparser.py``: ``ServerArgs.add_cli_args``,
   i.e. ``arg_groups/arg_utils.add_cli_args_from_dataclass`` over ``arg_groups/fields/*.py`` plus
   the deprecated registrations such as ``--disable-cuda-graph``);
2. ``arg_groups/cuda_graph_hook.py:parse_cuda_graph_config`` (flags -> ``cuda_graph_config``)
   and ``generate_decode_cuda_graph_batch_sizes`` (the batch-size list that
   ``memory_hook.py`` ~201-205 materialises), imported from the wheel; missing third-party
   modules (torch...) are replaced by inert stubs (``sglang_argparser.bootstrap``), and the two
   record accessors the hook calls (``resolving_view``, ``declare_resolution``, ``arg_groups/overrides.py``) are
   replaced by plain attribute access on the parsed namespace;
3. the topk-1 draft-token rewrite: the ``if`` statement of
   ``speculative_hook.py:_handle_eagle_family`` (~1255-1266) whose test compares
   ``speculative_eagle_topk == 1``, extracted with ``ast`` and executed on the namespace.

The full ``resolve_once()`` needs the model's Hugging Face config through transformers and
the GPU platform (torch); those parts (e.g. ``attention_backend`` = fa3 for MLA on Hopper)
are out of reach on the CPU and are not claimed here.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _plain(x):
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _topk1_rewrite(root: str):
    """The topk-1 rewrite statement of ``_handle_eagle_family``, compiled."""
    path = os.path.join(root, "sglang", "srt", "arg_groups", "speculative_hook.py")
    tree = ast.parse(open(path).read())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_handle_eagle_family")
    stmt = next(n for n in ast.walk(fn) if isinstance(n, ast.If)
                and "speculative_eagle_topk == 1" in ast.unparse(n.test)
                and "speculative_num_steps + 1" in ast.unparse(n.test))
    return compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec"), stmt.lineno


def main() -> None:
    root = sys.argv[1]
    sys.path.insert(0, HERE)
    from sglang_argparser import build_parser  # SGLang's own parser (ServerArgs.add_cli_args), stubs installed

    parser, _ = build_parser(root)
    hook = importlib.import_module("sglang.srt.arg_groups.cuda_graph_hook")

    def declare_resolution(ns, source, **fields):
        for k, v in fields.items():
            setattr(ns, k, v)

    hook.resolving_view = lambda ns: ns
    hook.declare_resolution = declare_resolution
    rewrite, rewrite_line = _topk1_rewrite(root)
    results = []
    for argv in json.load(sys.stdin):
        try:
            ns = parser.parse_args(argv)
            parsed = {k: v for k, v in vars(ns).items() if isinstance(v, (str, int, float, bool, list, type(None)))}
            for k in ("disable_cuda_graph", "cuda_graph_config"):  # no-CLI fields (server_args.py add_cli_args)
                if not hasattr(ns, k):
                    setattr(ns, k, False if k == "disable_cuda_graph" else None)
                parsed.setdefault(k, getattr(ns, k))
            hook.parse_cuda_graph_config(ns)
            dec = ns.cuda_graph_config.decode
            if dec.bs is None and dec.max_bs is not None:
                dec.bs = hook.generate_decode_cuda_graph_batch_sizes(ns, dec.max_bs)
            if ns.speculative_algorithm is not None:
                exec(rewrite, {"cfg": ns, "server_args": ns, "declare_resolution": declare_resolution,
                               "logger": logging.getLogger("sglang_resolve")})
            resolved = {"cuda_graph_config": _plain(ns.cuda_graph_config),
                        "speculative_num_draft_tokens": ns.speculative_num_draft_tokens}
            results.append({"ok": True, "error": "", "parsed": parsed, "resolved": resolved})
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}", "parsed": None, "resolved": None})
    json.dump({"results": results, "topk1_rewrite_line": rewrite_line,
               "ns_fields": sorted(a.dest for a in parser._actions)}, sys.stdout, default=str)


if __name__ == "__main__":
    main()
