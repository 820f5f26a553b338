"""Every launch the lab builds is accepted by each supported SGLang's own argument parser.

For SGLang 0.5.23 and 0.5.16 (fixture ``sglang_nodeps_each``: each installed without
dependencies), ``tests/sglang_argparser.py`` builds SGLang's real ``launch_server`` parser
(0.5.23: the field namespaces of ``srt/arg_groups/fields/``; 0.5.16: ``ServerArgs.add_cli_args``
of ``srt/server_args.py``, imported with its heavy imports stubbed) and parses the flags
:func:`lab.engine.command.build_server_command` emits for every mode of ``params.yaml``,
``configs/h200/params-tiny.yaml``, ``configs/h200/params-kshard.yaml`` and every other H200 preset,
with ``engine: sglang``. Every ``--flag`` must be one of the parser's own option strings (an abbreviation that
argparse would complete does not count) and parse to the value the lab meant. A misspelled flag
and a bad choice must be rejected, so the check has teeth. The argv that actually ran on the
H200 (``tests/fixtures/sglang-0.5.16/*/*/launch.json``) is what the lab builds today.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.config import load_params
from lab.engine.command import build_server_command
from sglang_argparser import sglang_parse

ROOT = Path(__file__).resolve().parents[2]
FX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16"
#: The default params and every H200 preset (tiny, kshard, kimi-tp8...).
PARAMS_FILES = ("params.yaml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "h200").glob("params-*.yaml")))


def _sglang_params(rel: str):
    p = load_params(ROOT / rel).model_copy(deep=True)
    p.engine = "sglang"
    return p


def _launches() -> dict[str, tuple[object, str, list[str]]]:
    """``"<file>:<mode>" -> (params, mode, flags)`` for every mode of :data:`PARAMS_FILES`."""
    out = {}
    for rel in PARAMS_FILES:
        p = _sglang_params(rel)
        for mode in p.modes:
            out[f"{rel}:{mode}"] = (p, mode, build_server_command(p, mode).flags)
    return out


@pytest.fixture(scope="module")
def parsed(sglang_nodeps_each):
    version, root = sglang_nodeps_each
    launches = _launches()
    out = sglang_parse(root, [flags for _, _, flags in launches.values()])
    assert out["version"] == version, out["version"]
    return version, launches, dict(zip(launches, out["results"])), set(out["options"]), out


def test_every_mode_of_every_params_file_parses(parsed):
    version, launches, res, options, _ = parsed
    assert {"configs/h200/params-tiny.yaml", "configs/h200/params-kshard.yaml"} <= set(PARAMS_FILES)
    assert len(launches) >= 3 + 6 + 6  # default three modes, six H200 modes per preset
    for name, (p, mode_name, flags) in launches.items():
        r = res[name]
        assert r["ok"], f"SGLang {version} rejects {name}: {r['error'][-600:]}"
        unknown = [f for f in flags if f.startswith("--") and f not in options]
        assert not unknown, f"{name}: not SGLang {version} option strings (abbreviations?): {unknown}"
        a, mode, s = r["args"], p.mode(mode_name), p.server
        assert a["tp_size"] == p.model.tp_size and a["host"] == s.host and a["port"] == s.port
        assert a["max_running_requests"] == s.max_running_requests
        assert a["cuda_graph_max_bs_decode"] == s.cuda_graph_max_bs_decode
        assert a["decode_log_interval"] == s.decode_log_interval and a["enable_metrics"] is True
        assert a["load_format"] == ("dummy" if p.model.synthetic else "auto"), name
        if mode.is_speculative:
            assert a["speculative_algorithm"] == "EAGLE3"
            assert (a["speculative_num_steps"], a["speculative_eagle_topk"], a["speculative_num_draft_tokens"]) == (
                mode.num_steps, mode.eagle_topk, mode.num_draft_tokens), name
            assert a["speculative_attention_mode"] == mode.attention_mode, name
            assert a["speculative_draft_model_path"], name
        else:
            assert a["speculative_algorithm"] is None, name
        extra = list(s.extra_args) + list(mode.extra_args)
        if "--attention-backend" in extra:
            assert a["attention_backend"] == extra[extra.index("--attention-backend") + 1] == "triton", name
        if "--grammar-backend" in extra:
            assert a["grammar_backend"] == "none", name
        if "--disable-cuda-graph" in extra:
            # an exact registration in both (server_args.py add_cli_args), deprecated, not an
            # abbreviation argparse completes to --disable-cuda-graph-padding
            assert a["disable_cuda_graph"] is True and a["disable_cuda_graph_padding"] is False, name
            assert "deprecated" in r["error"], (name, r["error"])  # SGLang says so itself


def test_the_h200_presets_use_the_flags_the_issue_names(parsed):
    """The flags issue 24 lists are among what the lab emits, and each version's parser has them."""
    version, launches, _, options, _ = parsed
    emitted = {f for _, _, flags in launches.values() for f in flags if f.startswith("--")}
    for flag in ("--load-format", "--attention-backend", "--grammar-backend", "--disable-cuda-graph",
                 "--cuda-graph-max-bs-decode", "--speculative-attention-mode", "--speculative-draft-model-path",
                 "--enable-metrics", "--decode-log-interval", "--max-running-requests", "--mem-fraction-static"):
        assert flag in emitted, flag
        assert flag in options, f"SGLang {version} has no {flag}"


def test_misspelled_flags_and_bad_choices_are_rejected(sglang_nodeps_each):
    version, root = sglang_nodeps_each
    res = sglang_parse(root, [
        ["--model-path", "m", "--attention-backnd", "triton"],
        ["--model-path", "m", "--speculative-attention-mode", "verify"],
        ["--model-path", "m", "--load-format", "dumy"],
        ["--model-path", "m", "--cuda-graph-max-bs", "8"],
    ])["results"]
    assert not res[0]["ok"] and "unrecognized arguments: --attention-backnd" in res[0]["error"]
    assert not res[1]["ok"] and "invalid choice" in res[1]["error"]
    assert not res[2]["ok"] and "invalid choice" in res[2]["error"]
    # a named difference: 0.5.16 still registers --cuda-graph-max-bs as a deprecated alias of
    # --cuda-graph-max-bs-decode (server_args.py add_cli_args); 0.5.23 dropped it, so argparse
    # finds it ambiguous. The lab emits only --cuda-graph-max-bs-decode, valid in both.
    if version == "0.5.16":
        assert res[3]["ok"] and res[3]["args"]["cuda_graph_max_bs_decode"] == 8 and "deprecated" in res[3]["error"]
    else:
        assert not res[3]["ok"] and "ambiguous" in res[3]["error"]


def test_parser_is_sglangs_server_args(sglang_nodeps_each):
    """The parser comes from ``ServerArgs.add_cli_args`` (field options plus the deprecated and
    dynamic registrations); stubs stand in for modules only, and the option set is SGLang's."""
    version, root = sglang_nodeps_each
    out = sglang_parse(root, [])
    assert out["version"] == version
    layout_0516 = not (root / "sglang" / "srt" / "arg_groups" / "fields").exists()
    assert layout_0516 == (version == "0.5.16")
    assert ("sglang.srt.platforms" in out["stubbed"]) == layout_0516  # 0.5.23: only absent third-party modules
    opts = set(out["options"])
    assert {"--model-path", "--speculative-num-draft-tokens", "--cuda-graph-backend-decode", "--disable-cuda-graph",
            "--disable-cuda-graph-padding", "--reasoning-parser", "--config"} <= opts
    assert ("--cuda-graph-max-bs" in opts) == layout_0516  # the alias 0.5.23 dropped
    assert len(opts) > 400  # the whole ServerArgs surface, not a hand-picked subset


def test_the_argv_that_ran_on_the_h200_is_what_the_lab_builds(sglang_nodeps_0516):
    """``launch.json`` of each real capture: its flags equal today's build (paths aside), and
    0.5.16's parser accepts them."""
    presets = {"tiny": _sglang_params("configs/h200/params-tiny.yaml"),
               "kshard": _sglang_params("configs/h200/params-kshard.yaml"),
               "kshard-context": _sglang_params("configs/h200/params-kshard-context.yaml")}
    ran = {}
    for launch in sorted(FX.glob("*/*/launch.json")):
        d = json.loads(launch.read_text())
        preset, mode = launch.parent.parent.name, d["mode"]
        assert d["argv"][1:3] == ["-m", "sglang.launch_server"]
        flags = d["argv"][3:]
        built = build_server_command(presets[preset], mode).flags

        def norm(fl):  # the synthetic model's folder differs between checkouts
            return [Path(x).name if x.endswith(("/target", "/draft")) else x for x in fl]

        assert norm(flags) == norm(built), (launch, flags, built)
        assert d["env"] == {k: v for k, v in build_server_command(presets[preset], mode).env.items()}, launch
        ran[str(launch.parent.relative_to(FX))] = flags
    # tiny: 3 graph + 3 eager modes; kshard: 3 eager modes; kshard-context: 3 modes x 2 backends
    assert len(ran) == 15
    res = sglang_parse(sglang_nodeps_0516, list(ran.values()))["results"]
    for name, r in zip(ran, res):
        assert r["ok"], (name, r["error"][-500:])


def test_backend_sweep_modes_parse_with_each_backend_flag(sglang_nodeps_each):
    """``sweep.attention_backends`` (lab/pipeline/sweep.py) crosses the default modes with
    backends; every crossed launch, and one setting each per-role backend flag
    (--prefill-attention-backend, --decode-attention-backend,
    --speculative-draft-attention-backend), parses in SGLang's own parser to the backend named."""
    import yaml

    from lab.pipeline.sweep import expand

    version, root = sglang_nodeps_each
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    modes, _ = expand({"grid": None, "attention_backends": ["triton", "flashinfer", "fa3"]}, raw["modes"])
    modes["roles"] = {**raw["modes"]["eagle3_decode"], "prefill_attention_backend": "fa3",
                      "decode_attention_backend": "flashinfer", "draft_attention_backend": "triton"}
    p = load_params(ROOT / "params.yaml", overrides={"engine": "sglang", "modes": modes})
    names = list(modes)
    out = sglang_parse(root, [build_server_command(p, n).flags for n in names])
    assert out["version"] == version
    for n, r in zip(names, out["results"]):
        assert r["ok"], f"SGLang {version} rejects {n}: {r['error'][-400:]}"
        want = p.mode(n)
        assert r["args"]["attention_backend"] == want.attention_backend, n
    a = out["results"][names.index("roles")]["args"]
    assert (a["prefill_attention_backend"], a["decode_attention_backend"], a["speculative_draft_attention_backend"]) == (
        "fa3", "flashinfer", "triton")
