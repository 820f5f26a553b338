"""Bad input, the offline part: each invalid ``params.yaml`` of docs/reliability.md's "Bad input"
table gets an error naming the key and the fix; servers bind loopback by default; commands are
argv lists, never shell strings. The cases that start an engine, a stage or MLflow are in
tests/component/test_bad_input_live.py.
"""

from __future__ import annotations

import pytest

from lab.config import ParamsError, load_params
from lab.engine.process import exposure_warning
from reliability_util import ROOT, params_file
from shared import source_tree


@pytest.mark.parametrize("mutate, words", [
    (lambda r: r["bench"].update(concurency=[1]), ["bench.concurency", "unknown key", "Fix"]),
    (lambda r: r["server"].update(port="thirty"), ["server.port", "integer", "Fix"]),
    (lambda r: r["bench"].update(concurrency=[0]), ["bench.concurrency", "not positive", "Fix"]),
    (lambda r: r["bench"].update(concurrency=[-4, 1]), ["bench.concurrency", "[-4]", "Fix"]),
    (lambda r: (r["model"].update(draft_path=None)), ["modes.eagle3_prefill", "needs a draft model", "Fix"]),
    (lambda r: r["modes"]["eagle3_decode"].update(num_draft_tokens=5),
     ["modes.eagle3_decode", "SGLang silently rewrites", "set num_draft_tokens: 3"]),
    (lambda r: r["emulator"].update(faults=["explode"]), ["emulator.faults", "unknown emulator fault", "Fix"]),
    (lambda r: r["bench"].update(repeats=0), ["bench.repeats", "(got 0)", "Fix: set bench.repeats >= 1"]),
], ids=["unknown key", "wrong type", "zero concurrency", "negative concurrency", "EAGLE-3 without draft",
        "topk 1 with num_draft_tokens != num_steps+1", "unknown fault", "right type, out of range"])
def test_bad_params(tmp_path, mutate, words):
    with pytest.raises(ParamsError) as err:
        load_params(params_file(tmp_path, mutate))
    for w in words:
        assert w in str(err.value), str(err.value)


def test_loopback_by_default_and_warning_otherwise(tmp_path):
    assert load_params(ROOT / "params.yaml").server.host == "127.0.0.1"
    assert exposure_warning("127.0.0.1") is None and exposure_warning("::1") is None
    w = exposure_warning("0.0.0.0")
    assert w and "WARNING" in w and "Fix: set server.host: 127.0.0.1" in w


def test_commands_are_argv_lists_never_shell_strings():
    import ast

    for path in (ROOT / "lab").rglob("*.py"):
        tree = source_tree(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "shell":
                        assert isinstance(kw.value, ast.Constant) and kw.value.value is False, \
                            f"{path}:{node.lineno}: shell=True"
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                assert name not in ("system", "popen") or not isinstance(node.func, ast.Attribute) \
                    or getattr(node.func.value, "id", "") != "os", f"{path}:{node.lineno}: os.{name}"
