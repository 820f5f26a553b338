"""Contract tests: SGLang 0.5.23's own code is the judge of the emulator and the fixtures.

SGLang 0.5.23 is installed without dependencies (fixture ``sglang_nodeps``) and its code runs
on the CPU, or, where it needs torch/CUDA, its source is read with ``ast``:

- argument resolution: ``tests/sglang_resolve.py`` runs SGLang's parser, its
  ``cuda_graph_hook.parse_cuda_graph_config`` / ``generate_decode_cuda_graph_batch_sizes`` and
  its topk-1 draft-token rewrite on the lab's three command lines (model path: a
  DeepSeek-V3/Kimi-K2.5-shaped ``config.json`` in tmp). The emulator's ``/server_info``
  must hold the same keys with the same shapes and values, and ``lab/engine/effective.py`` must
  read the same effective values from both. ``attention_backend`` (fa3 for MLA on Hopper)
  needs the GPU platform and the model's HF config through transformers: not checked here;
  the emulator's value copies DESIGN.md's "SGLang 0.5.23 facts".
- metric names, label keys and label values, from ``observability/metrics_collector.py``
  and the runners' ``device_timer_ctx`` calls;
- the "Decode batch" / "Prefill batch" lines (with the device-timer suffix), the CUDA-graph
  capture lines and the ready line: regular expressions built from the f-strings of
  ``metrics_reporter.py``, ``pool_stats_observer.py``, ``cuda_graph_setup.py``,
  ``eagle_worker_v2.py`` and ``http_server.py``.

A drift of the emulator, of a fixture or of the lab's parser from SGLang's code fails here.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.config import load_params
from lab.engine.effective import effective_config
from lab.emulator.args import parse_args
from lab.emulator.metrics import FORWARD_CATEGORIES, EmulatorMetrics
from lab.emulator.sglog import decode_batch_line, prefill_batch_line, startup_lines
from lab.measure.decode_log import parse_decode_log
from lab.measure.prometheus import CUDA_GRAPH_PASSES, FORWARD_SECONDS, parse_prometheus
from lab.engine.command import build_server_command

# sglang_nodeps: the shared fixture of tests/conftest.py (SGLang 0.5.23's source, no deps)

ROOT = Path(__file__).resolve().parents[2]
FX = Path(__file__).resolve().parents[1] / "fixtures"
SRT = ("sglang", "srt")

#: A DeepSeek-V3-shaped text config (Kimi-K2.5's language model is DeepSeek-V3's
#: architecture: 61 layers, hidden 7168, MLA with kv_lora_rank 512, 384 experts, 8 active).
MODEL_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 163840, "max_position_embeddings": 262144,
    "first_k_dense_replace": 1, "torch_dtype": "bfloat16",
}

#: Emulator-only /server_info keys (not SGLang ServerArgs fields).
EMULATOR_ONLY = {"emulator_profile", "ground_truth_file", "emulator_startup_delay_s", "emulator_faults",
                 "emulator_output", "emulator_prompt_categories"}


def _src(root: Path, *parts: str) -> Path:
    return root.joinpath(*SRT, *parts)


# --------------------------------------------------------------------------- resolution


def _resolve(root: Path, argvs: list[list[str]]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "sglang_resolve.py"), str(root)],
                         input=json.dumps(argvs), capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _lab_argvs(tmp_path: Path) -> dict[str, list[str]]:
    model = tmp_path / "kimi-k25-shaped"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    p = load_params(ROOT / "params.yaml").model_copy(deep=True)
    p.engine = "sglang"
    p.model.path = str(model)
    argvs = {m: build_server_command(p, m).flags for m in p.modes}
    dec = list(argvs["eagle3_decode"])
    i = dec.index("--speculative-num-draft-tokens")
    argvs["draft_tokens_5"] = dec[: i + 1] + ["5"] + dec[i + 2:]  # SGLang runs 3 (topk 1)
    argvs["graphs_disabled"] = argvs["baseline"] + ["--cuda-graph-backend-decode", "disabled"]
    argvs["decode_backend_set"] = dec + ["--decode-attention-backend", "flashinfer"]
    return argvs


@pytest.fixture(scope="module")
def resolved(sglang_nodeps, tmp_path_factory):
    argvs = _lab_argvs(tmp_path_factory.mktemp("contract"))
    out = _resolve(sglang_nodeps, list(argvs.values()))
    return argvs, dict(zip(argvs, out["results"])), out


def test_emulator_server_info_matches_sglang_resolution(resolved):
    argvs, res, out = resolved
    sglang_fields = set(out["ns_fields"]) | {"disable_cuda_graph"}  # no-CLI field (server_args.py add_cli_args)
    for name, argv in argvs.items():
        r = res[name]
        assert r["ok"], f"{name}: {r['error']}"
        emu = parse_args(argv)[0].to_dict()
        assert set(emu) - EMULATOR_ONLY <= sglang_fields, set(emu) - EMULATOR_ONLY - sglang_fields
        sg_dec, emu_dec = r["resolved"]["cuda_graph_config"]["decode"], emu["cuda_graph_config"]["decode"]
        assert set(emu["cuda_graph_config"]) == set(r["resolved"]["cuda_graph_config"])  # same shape
        assert set(emu_dec) == set(sg_dec)
        for key in ("backend", "max_bs", "bs"):
            assert emu_dec[key] == sg_dec[key], (name, key, emu_dec[key], sg_dec[key])
        assert emu["speculative_num_draft_tokens"] == r["resolved"]["speculative_num_draft_tokens"], name
        for key in ("cuda_graph_bs_decode", "cuda_graph_max_bs_decode", "cuda_graph_backend_decode",
                    "prefill_attention_backend", "decode_attention_backend", "speculative_attention_mode",
                    "speculative_num_steps", "speculative_eagle_topk", "max_running_requests", "tp_size"):
            assert emu[key] == r["parsed"][key], (name, key, emu[key], r["parsed"][key])
    # the facts issue 12 names, as SGLang's code computes them
    assert res["eagle3_decode"]["resolved"]["cuda_graph_config"]["decode"]["bs"] == [
        *range(1, 9), *range(10, 33, 2), 40, 44, 48]
    assert res["draft_tokens_5"]["resolved"]["speculative_num_draft_tokens"] == 3
    assert res["draft_tokens_5"]["parsed"]["speculative_num_draft_tokens"] == 5  # raw input
    assert res["graphs_disabled"]["resolved"]["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert res["graphs_disabled"]["parsed"]["cuda_graph_max_bs_decode"] == 48
    assert res["eagle3_decode"]["parsed"]["cuda_graph_bs_decode"] is None
    assert res["eagle3_decode"]["parsed"]["prefill_attention_backend"] is None
    # the hand-written /server_info fixture (an EAGLE-3 prefill-mode server) holds these values
    fx = json.loads((FX / "server_info_eagle3_c1_after.json").read_text())
    sg = res["eagle3_prefill"]
    assert fx["cuda_graph_config"]["decode"]["bs"] == sg["resolved"]["cuda_graph_config"]["decode"]["bs"]
    assert set(fx["cuda_graph_config"]["decode"]) == set(sg["resolved"]["cuda_graph_config"]["decode"])
    for key in ("cuda_graph_bs_decode", "prefill_attention_backend", "decode_attention_backend"):
        assert fx[key] == sg["parsed"][key], key
    assert fx["speculative_num_draft_tokens"] == sg["resolved"]["speculative_num_draft_tokens"]
    server_info_extras = {"status", "max_total_num_tokens", "version", "internal_states", "tokenizer_path"}
    assert set(fx) - server_info_extras <= set(out["ns_fields"]) | {"disable_cuda_graph"}, (
        set(fx) - server_info_extras - set(out["ns_fields"]))


def test_effective_config_reads_the_same_from_sglang_and_emulator(resolved):
    argvs, res, _ = resolved
    # attention_backend resolution needs the GPU platform: both sides get the emulator's fa3
    skip = {"attention_backend", "engine_version", "modelled_build", "effective_max_running_requests"}
    for name, argv in argvs.items():
        r = res[name]
        emu = parse_args(argv)[0].to_dict()
        sg_info = {**r["parsed"], **r["resolved"], "attention_backend": emu["attention_backend"], "version": "0.5.23"}
        a = effective_config(sg_info)
        b = effective_config({**emu, "version": "0.5.23"})
        diff = {k: (a[k], b.get(k)) for k in a if k not in skip and a[k] != b.get(k)}
        assert not diff, (name, diff)
    eff = effective_config({**res["graphs_disabled"]["parsed"], **res["graphs_disabled"]["resolved"]})
    assert eff["decode_cuda_graph_disabled"] is True and eff["disable_cuda_graph"] is False
    eff = effective_config({**res["eagle3_decode"]["parsed"], **res["eagle3_decode"]["resolved"]})
    assert eff["cuda_graph_bs_decode"][-3:] == [40, 44, 48]
    d = res["decode_backend_set"]
    eff = effective_config({**d["parsed"], **d["resolved"], "attention_backend": "fa3"})
    assert eff["verify_attention_backend"] == "flashinfer"


# --------------------------------------------------------------------------- metrics


def _calls(tree: ast.AST, func_name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == func_name or getattr(n.func, "attr", None) == func_name)]


def _str_consts(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def sglang_metric_contract(root: Path) -> dict:
    """Names, scheduler label keys, cuda-graph pass modes and forward-time categories from
    SGLang's source (``metrics_collector.py``; ``device_timer_ctx`` callers)."""
    coll = ast.parse(_src(root, "observability", "metrics_collector.py").read_text())
    names = set()
    for kind in ("Counter", "Gauge", "Histogram"):
        for c in _calls(coll, kind):
            for kw in c.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    names.add(kw.value.value)
    init_new = next(n for n in ast.walk(coll) if isinstance(n, ast.FunctionDef) and n.name == "init_new")
    labels = next(n.value for n in ast.walk(init_new) if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", None) == "labels" and isinstance(n.value, ast.Dict))
    label_keys = {k.value for k in labels.keys}
    modes = set()
    for fn in ("increment_decode_cuda_graph_pass", "increment_prefill_cuda_graph_pass"):
        node = next(n for n in ast.walk(coll) if isinstance(n, ast.FunctionDef) and n.name == fn)
        modes |= _str_consts(node)
    categories = set()
    for path in root.joinpath(*SRT).rglob("*.py"):
        text = path.read_text(errors="replace")
        if "device_timer_ctx(" not in text:
            continue
        tree = ast.parse(text)
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            calls = [c for c in _calls(fn, "device_timer_ctx") if fn.name != "device_timer_ctx"]
            for c in calls:
                if len(c.args) > 1 and isinstance(c.args[1], ast.Constant):
                    categories.add(c.args[1].value)
                elif len(c.args) > 1 and isinstance(c.args[1], ast.Name):  # category = "a" if .. else "b"
                    for a in ast.walk(fn):
                        if isinstance(a, ast.Assign) and getattr(a.targets[0], "id", None) == c.args[1].id:
                            categories |= _str_consts(a.value)
    fb = ast.parse(_src(root, "model_executor", "forward_batch_info.py").read_text())
    fwd = next(n for n in ast.walk(fb) if isinstance(n, ast.ClassDef) and n.name == "ForwardMode")
    categories |= {t.id.lower() for a in fwd.body if isinstance(a, ast.Assign) for t in a.targets}  # .name.lower()
    return {"names": names, "label_keys": label_keys, "modes": modes, "categories": categories}


@pytest.fixture(scope="module")
def metric_contract(sglang_nodeps):
    return sglang_metric_contract(sglang_nodeps)


def test_metric_names_labels_and_values_match_sglang(metric_contract):
    c = metric_contract
    assert {CUDA_GRAPH_PASSES, FORWARD_SECONDS} <= c["names"]
    assert c["label_keys"] == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
    assert {"decode_cuda_graph", "decode_none", "prefill_cuda_graph", "prefill_none"} == c["modes"]
    assert {"target_verify", "extend", "decode", "eagle_draft", "eagle_draft_extend"} <= c["categories"]
    m = EmulatorMetrics("moonshotai/Kimi-K2.5", True, tp_size=8)
    m.on_forward({cat: 0.001 for cat in FORWARD_CATEGORIES}, True, True)
    m.on_forward({"extend": 0.01}, False, False)
    m.on_finish(10, 5, 2, True)
    snap = parse_prometheus(m.render().decode())
    emitted = {n for n in snap.names() if n.startswith("sglang:") and not n.endswith("_created")}
    assert emitted <= c["names"], emitted - c["names"]  # counters keep SGLang's _total names
    assert set(FORWARD_CATEGORIES) <= c["categories"]
    assert set(snap.label_values(CUDA_GRAPH_PASSES, "mode")) <= c["modes"]
    assert set(snap.label_values(FORWARD_SECONDS, "category")) <= c["categories"]
    assert snap.label_values(CUDA_GRAPH_PASSES, "tp_rank") == [str(r) for r in range(8)]
    for fixture in sorted(FX.glob("metrics_*.prom")):  # hand-written fixtures copy these names
        fx = parse_prometheus(fixture.read_text())
        for family in text_string_to_metric_families(fixture.read_text()):
            if family.name.startswith("sglang:"):
                for sample in family.samples:
                    assert c["label_keys"] <= set(sample.labels), (fixture.name, sample)
        for name in (CUDA_GRAPH_PASSES, FORWARD_SECONDS):
            assert set(fx.label_values(name, "mode" if name == CUDA_GRAPH_PASSES else "category")) <= (
                c["modes"] if name == CUDA_GRAPH_PASSES else c["categories"]), fixture.name


# --------------------------------------------------------------------------- log lines


def _fstring_regex(node: ast.JoinedStr, subs: dict[str, str]) -> str:
    """A regex for what an f-string prints: literals verbatim, ``{x:.2f}`` as a 2-decimal
    number, ``{x}`` as ``subs[ast.unparse(x)]`` or a lazy ``.*?``."""
    out = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            out.append(re.escape(v.value))
            continue
        expr = ast.unparse(v.value)
        spec = ast.unparse(v.format_spec) if v.format_spec is not None else ""
        if expr in subs:
            out.append(subs[expr])
        elif ".2f" in spec:
            out.append(r"-?\d+\.\d{2}")
        else:
            out.append(r".*?")
    return "".join(out)


def _fstrings(path: Path, func: str, marker: str) -> list[ast.JoinedStr]:
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func)
    found = [n for n in ast.walk(fn) if isinstance(n, ast.JoinedStr)
             and marker in "".join(v.value for v in n.values if isinstance(v, ast.Constant))]
    assert found, f"{path.name}:{func}: no f-string with {marker!r} (SGLang changed)"
    return found


def sglang_line_regexes(root: Path) -> dict[str, re.Pattern]:
    """Message regexes (the part after SGLang's ``[time TPr] `` logger prefix) built from
    SGLang 0.5.23's f-strings, composed in the order its code appends them:

    - Decode batch: ``metrics_reporter.py:report_decode_stats`` ~963 head, usage parts of
      ``pool_stats_observer.py:get_decode_usage_msg_parts`` ~145-148 (plain pool) joined with
      ", " plus ", ", spec ~1005, tail ~1038-1042, device-timer suffix ~1065-1068 (", " +
      ``_ForwardOccupancyLogWindow.log_string`` ~222-225);
    - Prefill batch: ``report_prefill_stats`` ~753-762 head, prefill usage parts ~115-116, tail
      ~782-783, suffix ~800-802;
    - capture lines: ``cuda_graph_setup.py:capture_decode_graph`` ~758-762, ~794-799 and the
      draft's in ``eagle_worker_v2.py`` ~515-537;
    - ready line: ``entrypoints/http_server.py`` ~2600.
    """
    rep = _src(root, "managers", "scheduler_components", "metrics_reporter.py")
    pool = _src(root, "managers", "scheduler_components", "pool_stats_observer.py")
    two = r"-?\d+\.\d{2}"
    occ = _fstring_regex(_fstrings(rep, "log_string", "fwd occupancy: ")[0], {})
    dec_usage = _fstring_regex(next(f for f in _fstrings(pool, "get_decode_usage_msg_parts", "#token: ")
                                    if isinstance(f.values[0], ast.Constant)
                                    and f.values[0].value == "#token: "), {}) + ", "  # plain pool
    pre_usage = _fstring_regex(next(f for f in _fstrings(pool, "get_prefill_usage_msg_parts", "token usage: ")
                                    if isinstance(f.values[0], ast.Constant)
                                    and f.values[0].value == "token usage: "), {}) + ", "  # plain pool
    label = {"self._graph_backend_label": "cuda graph"}  # metrics_reporter.py ~286-290 default
    d_head = _fstring_regex(_fstrings(rep, "report_decode_stats", "Decode batch")[0],
                            {"iter_msg": r"(?: \[\d+\])?", "token_usage_msg": dec_usage})
    d_spec = _fstring_regex(_fstrings(rep, "report_decode_stats", "accept len: ")[0], {})
    d_tail = _fstring_regex(_fstrings(rep, "report_decode_stats", "gen throughput (token/s): ")[0],
                            {**label, "can_run_cuda_graph": "(?:True|False)"})
    p_head = _fstring_regex(_fstrings(rep, "report_prefill_stats", "Prefill batch")[0],
                            {"iter_msg": r"(?: \[\d+\])?", "token_usage_msg": pre_usage})
    p_graph = _fstring_regex(next(f for f in _fstrings(rep, "report_prefill_stats", ": ")
                                  if "self._graph_backend_label" in ast.unparse(f)),
                             {**label, "can_run_cuda_graph": "(?:True|False)"})
    p_tail = _fstring_regex(_fstrings(rep, "report_prefill_stats", "input throughput (token/s): ")[0], {})
    setup = _src(root, "model_executor", "model_runner_components", "cuda_graph_setup.py")
    cap = {"capture_name": "target (?:verify|decode)", "graph_backend[model_runner.device]": "CUDA graph",
           "runner.capture_bs": r"\[[0-9, ]*\]", "decode_backend": r"\w+"}
    cap_begin = _fstring_regex(_fstrings(setup, "capture_decode_graph", " begin. ")[0], cap)
    cap_end = _fstring_regex(_fstrings(setup, "capture_decode_graph", " end. ")[0], cap)
    eagle = _src(root, "speculative", "eagle_worker_v2.py")
    ebs = {"capture_bs": r"\[[0-9, ]*\]", "decode_backend": r"\w+"}
    draft_begin = _fstring_regex(next(f for f in ast.walk(ast.parse(eagle.read_text())) if isinstance(f, ast.JoinedStr)
                                      and "Capture draft decode CUDA graph begin" in ast.unparse(f)), ebs)
    draft_end = _fstring_regex(next(f for f in ast.walk(ast.parse(eagle.read_text())) if isinstance(f, ast.JoinedStr)
                                    and "Capture draft decode CUDA graph end" in ast.unparse(f)), ebs)
    ebs_x = {**ebs, "self.speculative_num_draft_tokens": r"\d+"}
    extend_begin = _fstring_regex(next(f for f in ast.walk(ast.parse(eagle.read_text())) if isinstance(f, ast.JoinedStr)
                                       and "Capture draft extend CUDA graph begin" in ast.unparse(f)), ebs_x)
    extend_end = _fstring_regex(next(f for f in ast.walk(ast.parse(eagle.read_text())) if isinstance(f, ast.JoinedStr)
                                     and "Capture draft extend CUDA graph end" in ast.unparse(f)), ebs)
    http = _src(root, "entrypoints", "http_server.py").read_text()
    ready = next(n.value for n in ast.walk(ast.parse(http)) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and "fired up and ready to roll" in n.value)
    assert two in d_spec and "fwd occupancy" in occ.replace("\\", "")
    return {
        "decode": re.compile(f"^{d_head}(?:{d_spec})?{d_tail}(?:, {occ})?$"),
        "decode_timer": re.compile(f"^{d_head}(?:{d_spec})?{d_tail}, {occ}$"),
        "prefill": re.compile(f"^{p_head}{p_graph}{p_tail}(?:, {occ})?$"),
        "prefill_timer": re.compile(f"^{p_head}{p_graph}{p_tail}, {occ}$"),
        "capture_begin": re.compile(f"^{cap_begin}$"),
        "capture_end": re.compile(f"^{cap_end}$"),
        "draft_capture_begin": re.compile(f"^{draft_begin}$"),
        "draft_capture_end": re.compile(f"^{draft_end}$"),
        "draft_extend_capture_begin": re.compile(f"^{extend_begin}$"),
        "draft_extend_capture_end": re.compile(f"^{extend_end}$"),
        "ready": re.compile(f"^{re.escape(ready)}$"),
    }


@pytest.fixture(scope="module")
def line_regexes(sglang_nodeps):
    return sglang_line_regexes(sglang_nodeps)


_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: DP\d+)?(?: TP\d+)?\] ")


def test_emulator_batch_lines_match_sglang_format(line_regexes):
    rx = line_regexes
    spec = decode_batch_line(running=3, num_tokens=900, token_usage=0.01, accept_len=1.85, accept_rate=0.42,
                             cuda_graph=True, gen_throughput=61.2, queue=0, occupancy=(97.1, 99.0))
    plain = decode_batch_line(running=1, num_tokens=600, token_usage=0.0, accept_len=None, accept_rate=None,
                              cuda_graph=False, gen_throughput=82.47, queue=2, occupancy=(12.0, 100.0))
    pre = prefill_batch_line(new_seq=1, new_token=512, token_usage=0.0, running=0, queue=0, cuda_graph=False,
                             input_throughput=1706.67, occupancy=(50.0, 60.0))
    assert rx["decode_timer"].match(spec) and rx["decode_timer"].match(plain), (spec, rx["decode_timer"].pattern)
    assert rx["prefill_timer"].match(pre), (pre, rx["prefill_timer"].pattern)
    # the lab (which always sets SGLANG_ENABLE_METRICS_DEVICE_TIMER=1) reads them
    row = parse_decode_log(spec)[0]
    assert (row["accept_len"], row["cuda_graph"], row["queue_req"]) == (1.85, True, 0)
    # teeth: a line without the suffix is not what SGLang prints with the timer on
    no_timer = decode_batch_line(running=3, num_tokens=900, token_usage=0.01, accept_len=1.85, accept_rate=0.42,
                                 cuda_graph=True, gen_throughput=61.2, queue=0)
    assert not rx["decode_timer"].match(no_timer) and rx["decode"].match(no_timer)


def test_emulator_startup_lines_match_sglang_format(line_regexes):
    rx = line_regexes
    for verify_graph in (True, False):
        msgs = [m for _, m in startup_lines(speculative=True, graph_bs=[1, 2, 48], disable_cuda_graph=False,
                                            backend="full", num_tokens_per_req=3, verify_graph=verify_graph)]
        caps = [m for m in msgs if m.startswith("Capture")]
        assert caps
        for m in caps:
            kind = "draft_extend_capture" if "draft extend" in m else "draft_capture" if "draft" in m else "capture"
            assert rx[f"{kind}_begin"].match(m) or rx[f"{kind}_end"].match(m), m
    assert rx["ready"].match("The server is fired up and ready to roll!")


def test_live_emulator_log_and_fixtures_match_sglang_format(line_regexes, tmp_path):
    """Every batch, capture and ready line a live emulator logs, and every such line in the
    hand-written fixtures, is one SGLang 0.5.23 prints."""
    from lab.engine.process import ServerProcess
    from reliability_util import small_params
    import urllib.request

    rx = line_regexes
    p = small_params(tmp_path)
    p.server.decode_log_interval = 2
    with ServerProcess(build_server_command(p, "eagle3_decode"), tmp_path / "server.log", state_dir=tmp_path) as srv:
        srv.wait_ready(30)
        body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 16}}).encode()
        urllib.request.urlopen(urllib.request.Request(srv.base_url + "/generate", data=body), timeout=30).read()
    texts = {"emulator": (tmp_path / "server.log").read_text(),
             "fixture server_window_eagle3.log": (FX / "server_window_eagle3.log").read_text()}
    seen = {"decode": 0, "prefill": 0, "capture": 0, "ready": 0}
    for where, text in texts.items():
        for line in text.splitlines():
            msg = _PREFIX.sub("", line)
            timer = where == "emulator"  # the lab always runs with the device timer on
            if msg.startswith("Decode batch"):
                assert rx["decode_timer" if timer else "decode"].match(msg), (where, msg)
                seen["decode"] += 1
            elif msg.startswith("Prefill batch"):
                assert rx["prefill_timer" if timer else "prefill"].match(msg), (where, msg)
                seen["prefill"] += 1
            elif msg.startswith("Capture "):
                assert any(rx[k].match(msg) for k in rx if "capture" in k), (where, msg)
                seen["capture"] += 1
            elif "fired up" in msg:
                assert rx["ready"].match(msg)
                seen["ready"] += 1
    assert all(seen.values()), seen
