"""Replays of real SGLang 0.5.16 on the H200 with ``--speculative-adaptive`` against fixed num_steps
1, 2, 3 and no speculation, at concurrency 1, 8, 32, 64 and two context lengths
(``tests/fixtures/sglang-0.5.16/kshard-adaptive.tar.xz``, made by the commands in
``docs/benchmarks/h200-sglang-0.5.16-adaptive.md``), and the two launches 0.5.16 refused.

What these pin down, against what the real server and SGLang's own code did:

- a ``num_steps`` outside the tiers' candidates: SGLang 0.5.16's own ``_init_adaptive_speculative_params``
  refuses exactly the values the emulator's parser and the lab's preflight refuse, with its words,
  and the H200 launch of num_steps 2 died with them;
- 0.5.16's logits-buffer crash (num_steps 3 under candidates up to 7, CUDA graphs on): the lab's
  rule refuses that launch's argv, passes the one that served, and the sizing it cites is in
  0.5.16's source and gone from 0.5.23's;
- the tiers the server ran (read from its decode log) are the default table's, and the finding the
  page reports (0 steps at 64 requests is slower than no speculation) holds on the records;
- the benchmark page's tables are what ``scripts/h200_adaptive.py`` prints.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import types
from pathlib import Path

import pytest

from lab.emulator.args import parse_args
from lab.engine.adaptive_rules import adaptive_launch_refusal

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16-adaptive.md"


@functools.cache
def _script():
    """scripts/h200_adaptive.py as a module, loaded once (its functions keep no state)."""
    spec = importlib.util.spec_from_file_location("h200_adaptive", ROOT / "scripts" / "h200_adaptive.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cap(tmp_path_factory) -> Path:
    return _script().extract(tmp_path_factory.mktemp("adaptive"))


def _flags(d: Path) -> list[str]:
    argv = json.loads((d / "launch.json").read_text())["argv"]
    return argv[argv.index("sglang.launch_server") + 1:]


@pytest.fixture(scope="module")
def sglang_init_adaptive(sglang_nodeps_0516, sglang_adaptive):
    """SGLang 0.5.16's ``_init_adaptive_speculative_params`` (``speculative_hook.py``), its source
    cut from the file (the hook module imports the whole server), its one import (0.5.16's own
    ``resolve_candidate_steps_from_config``, from ``sglang_adaptive``) given by name."""
    hook = sglang_nodeps_0516 / "sglang" / "srt" / "arg_groups" / "speculative_hook.py"
    fn = next(n for n in ast.parse(hook.read_text()).body
              if isinstance(n, ast.FunctionDef) and n.name == "_init_adaptive_speculative_params")
    assert isinstance(fn.body[0], ast.ImportFrom) and fn.body[0].module == "sglang.srt.speculative.adaptive_spec_params"
    fn.body = fn.body[1:]
    ns: dict = {"ServerArgs": object, "resolve_candidate_steps_from_config": sglang_adaptive.resolve_candidate_steps_from_config}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(hook), "exec"), ns)

    def call(steps):
        args = types.SimpleNamespace(speculative_adaptive_config=None, speculative_eagle_topk=1,
                                     speculative_num_steps=steps, speculative_num_draft_tokens=None)
        ns["_init_adaptive_speculative_params"](args)
        return args
    return call


@pytest.mark.parametrize("steps", range(1, 9))
def test_num_steps_outside_the_candidates_is_refused_as_sglang_refuses_it(sglang_init_adaptive, steps, capsys):
    base = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-eagle-topk", "1",
            "--speculative-adaptive", "--speculative-num-steps", str(steps)]
    try:
        resolved = sglang_init_adaptive(steps)
        theirs = None
    except ValueError as exc:
        theirs = str(exc)
    ours = adaptive_launch_refusal(base, "0.5.23")  # membership only (0.5.23: no logits-buffer rule)
    if theirs is None:
        assert ours is None and resolved.speculative_num_draft_tokens == steps + 1
        args, _ = parse_args(["--emulator-profile", "fast", *base])
        assert args.speculative_num_draft_tokens == steps + 1
    else:
        assert ours is not None and ours.startswith(theirs.split(". ")[0]), (ours, theirs)
        with pytest.raises(SystemExit):
            parse_args(["--emulator-profile", "fast", *base])
        assert theirs.split(". ")[0] in capsys.readouterr().err


def test_the_h200_refusals_are_what_the_lab_refuses_before_launching(cap):
    refused = cap / "failed" / "steps2_refused"
    log = (refused / "server.log").read_text()
    assert "ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps [0, 1, 3, 7]" in log
    assert adaptive_launch_refusal(_flags(refused), "0.5.16").startswith(
        "--speculative-num-steps=2 is not in the adaptive config candidate_steps [0, 1, 3, 7]")
    crashed = cap / "failed" / "steps3_logits_buffer"
    log = (crashed / "server.log").read_text()
    assert "AssertionError: shared logits buffer holds 256 rows but caller needs 512" in log
    why = adaptive_launch_refusal(_flags(crashed), "0.5.16")
    assert why and "num_steps: 7" in why and "graph_shared_output.py:56" in why
    assert adaptive_launch_refusal(_flags(crashed), "0.5.23") is None
    assert adaptive_launch_refusal(_flags(crashed) + ["--disable-cuda-graph"], "0.5.16") is None
    assert adaptive_launch_refusal(_flags(cap / "eagle3_adaptive"), "0.5.16") is None  # the launch that served


def test_the_logits_buffer_sizing_is_0516s_and_gone_in_0523(sglang_nodeps_0516, sglang_nodeps):
    """The rule's citation: 0.5.16 sizes the shared buffer from the launch's draft tokens only
    (model_runner.py:722-726), 0.5.23 over every adaptive candidate (model_runner.py:905-917)."""
    def body(root: Path) -> str:
        src = (root / "sglang" / "srt" / "model_executor" / "model_runner.py").read_text()
        fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "max_decode_logits_rows")
        return ast.get_source_segment(src, fn)
    old, new = body(sglang_nodeps_0516), body(sglang_nodeps)
    assert "decode_num_tokens_per_req()" in old and "candidate" not in old
    assert "resolve_candidate_steps_from_config" in new


def test_tiers_ran_are_the_default_table_and_zero_steps_loses_to_no_speculation(cap):
    mod = _script()
    tiers = mod.steps_by_batch((cap / "eagle3_adaptive" / "server.log").read_text())
    # slot 1 [1, 3, 7] from 7 down to 3; slot 8 [0, 1, 3] from the middle up to 3; slot 32 [0, 1]; slot 64 [0]
    assert (tiers[1], tiers[8], tiers[32], tiers[64]) == (3, 3, 1, 0)
    # what the lab records per window, SGLang's gauge sglang:spec_num_steps after it, says the same
    win = json.loads((cap / "eagle3_adaptive" / "window.json").read_text())
    for key, w in win.items():
        assert w["server"]["deltas"]["spec_num_steps"]["after"] == tiers[w["concurrency"]], key
    rows = mod.load(cap)
    for ctx in (0, 2048):
        at = {r["mode"]: r for r in rows if r["concurrency"] == 64 and r["context_tokens"] == ctx}
        ad, base = at["eagle3_adaptive"], at["baseline"]
        assert ad["steps"] == 0 and ad["accept_length"] < 1.05
        assert ad["speedup"].ci95_hi < 1 and ad["output_tok_s"] < base["output_tok_s"]
        assert ad["verify_ms"] > 2 * base["decode_ms"]  # one token per sequence still costs a verify forward
        assert ad["decode_tok_s"] < min(at[m]["decode_tok_s"] for m in ("eagle3_steps1", "eagle3_decode", "eagle3_steps3"))


def test_the_benchmark_page_holds_what_the_script_prints(capsys):
    assert _script().main([]) == 0
    printed = capsys.readouterr().out.strip()
    text = DOC.read_text()
    start, end = text.index("<!-- tables -->"), text.index("<!-- /tables -->")
    assert text[start + len("<!-- tables -->"):end].strip() == printed
    assert "eagle3_adaptive at 0 steps" in printed


def test_the_rule_module_cites_the_lines_it_depends_on():
    import lab.engine.adaptive_rules as rules

    doc = inspect.getdoc(rules)
    for cite in ("speculative_hook.py:752-757", "model_runner.py:722-726", "graph_shared_output.py:56",
                 "model_runner.py:905-917"):
        assert cite in doc


def test_the_shipped_adaptive_config_passes_the_preflight_and_the_old_one_fails():
    """The preflight's adaptive[<mode>] check on configs/h200/params-kshard-adaptive.yaml's own argv
    (what lab capture and the bench stage launch), and on it with the num_steps that crashed."""
    from lab.config.loading import load_params
    from lab.engine.command import build_server_command
    from lab.engine.preflight import FAIL, OK, adaptive_checks

    params = load_params(ROOT / "configs" / "h200" / "params-kshard-adaptive.yaml")
    flags = {m: build_server_command(params, m).flags for m in params.modes}
    checks = adaptive_checks(flags, "0.5.16")
    assert [(c.name, c.status) for c in checks] == [("adaptive[eagle3_adaptive]", OK)]
    mode = params.modes["eagle3_adaptive"].model_copy(update={"num_steps": 3, "num_draft_tokens": 4})
    old = params.model_copy(update={"modes": {**params.modes, "eagle3_adaptive": mode}})
    bad = adaptive_checks({"eagle3_adaptive": build_server_command(old, "eagle3_adaptive").flags}, "0.5.16")
    assert bad[0].status == FAIL and "num_steps: 7" in bad[0].detail and "modes.eagle3_adaptive" in bad[0].fix


def test_the_emulator_serves_the_h200s_tiers_and_the_page_holds_its_tables(cap, tmp_path, capsys):
    """The emulator's run of configs/emulator/params-adaptive.yaml (docs/benchmarks/emulator-adaptive.tar.xz):
    at each concurrency its adaptive mode ran the tier the real 0.5.16 server ran, by the same reading
    of the decode log (the gauge after a window is the tier at its last log line: on the emulator a
    c32 wave's tail reaches batch 2, slot 1, where the H200's ended at 32); docs/speculation.md holds
    what the script prints."""
    mod = _script()
    emu = mod.extract(tmp_path, ROOT / "docs" / "benchmarks" / "emulator-adaptive.tar.xz")
    real = mod.steps_by_batch((cap / "eagle3_adaptive" / "server.log").read_text())
    ours = mod.steps_by_batch((emu / "eagle3_adaptive" / "server.log").read_text())
    assert {c: ours[c] for c in (1, 8, 32, 64)} == {c: real[c] for c in (1, 8, 32, 64)}
    rows = mod.load(emu)
    for r in rows:
        if r["mode"] == "eagle3_adaptive":
            fixed = {0: None, 1: "eagle3_steps1", 3: "eagle3_steps3"}[r["steps"]]
            if fixed:  # the same steps as a fixed mode at that point: the same accept length within noise
                twin = next(x for x in rows if x["mode"] == fixed and x["key"] == r["key"])
                assert r["accept_length"] == pytest.approx(twin["accept_length"], abs=0.1), r["key"]
    assert mod.main(["--captures", str(emu)]) == 0  # the tarball's folder, unpacked above
    printed = capsys.readouterr().out.strip()
    text = (ROOT / "docs" / "speculation.md").read_text()
    start, end = text.index("<!-- emulator tables -->"), text.index("<!-- /emulator tables -->")
    assert text[start + len("<!-- emulator tables -->"):end].strip() == printed
