"""Tests of lab.physics: byte arithmetic, floor, ratios, the not-run paths, result assembly and
the CLI, in-process. They run without torch; the few that need it are skipped cleanly when it
is absent (torch is not a lab dependency). Processes: tests/component/test_physics_live.py.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import lab.physics as phys
from lab.physics import run
from lab.physics import stack_bench as bench
from lab.physics import stack_cli as cli
from lab.physics.shapes import PhysicsConfig
from shared import PHYSICS_TINY, numbers

ROOT = Path(__file__).resolve().parents[2]
KIMI = PhysicsConfig()


# ---------------------------------------------------------------- shape arithmetic


def test_weight_bytes_per_layer_kimi_by_hand():
    # attention 4 * 7168 * (8*128) * 2, MLP 3 * 7168 * 2304 * 2, norms 2 * 7168 * 2
    per = phys.weight_bytes_per_layer(KIMI)
    assert per == {"attention": 58_720_256, "mlp": 99_090_432, "norm": 28_672, "total": 157_839_360}
    assert phys.weight_bytes(KIMI) == 61 * 157_839_360 == 9_628_200_960


def test_weight_bytes_small_shape_and_dtype():
    cfg = PhysicsConfig(hidden_size=64, heads_per_gpu=2, head_dim=16, mlp_intermediate_per_gpu=48, num_layers=5)
    # A = 32: attention 4*64*32*2 = 16384, MLP 3*64*48*2 = 18432, norm 2*64*2 = 256
    assert phys.weight_bytes_per_layer(cfg) == {"attention": 16384, "mlp": 18432, "norm": 256, "total": 35072}
    assert phys.weight_bytes(cfg) == 5 * 35072
    f32 = PhysicsConfig(hidden_size=64, heads_per_gpu=2, head_dim=16, mlp_intermediate_per_gpu=48, dtype="float32")
    assert phys.weight_bytes_per_layer(f32)["total"] == 2 * 35072


def test_kv_bytes_and_bytes_moved_by_hand():
    assert phys.kv_bytes_per_layer(KIMI, 2048) == 2 * 2048 * 1024 * 2 == 8_388_608
    assert phys.kv_bytes_per_layer(KIMI, 0) == 0
    # weights + 61 layers of K and V for 2048 cached + 1 new token
    assert phys.bytes_moved(KIMI, 1) == 9_628_200_960 + 61 * 2 * 2049 * 1024 * 2 == 10_140_155_904
    assert phys.bytes_moved(KIMI, 3) - phys.bytes_moved(KIMI, 1) == 61 * 2 * 2 * 1024 * 2
    with pytest.raises(ValueError):
        phys.kv_bytes_per_layer(KIMI, -1)
    with pytest.raises(ValueError):
        phys.bytes_moved(KIMI, 0)


def test_floor_ms():
    assert phys.floor_ms(2e9, 4000.0) == pytest.approx(0.5)
    assert phys.floor_ms(10_140_155_904, 4237.0) == pytest.approx(2.3932, abs=1e-4)
    assert phys.floor_ms(0, 1.0) == 0.0
    for bad_bw in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            phys.floor_ms(1e9, bad_bw)
    with pytest.raises(ValueError):
        phys.floor_ms(-1, 100.0)


def test_percentiles_match_numpy():
    assert phys.percentiles_ms(list(range(1, 11))) == pytest.approx((5.5, 9.1))
    assert phys.percentiles_ms([7.0]) == (7.0, 7.0)
    rng = np.random.default_rng(0)
    x = rng.lognormal(size=57).tolist()
    assert phys.percentiles_ms(x) == pytest.approx((np.percentile(x, 50), np.percentile(x, 90)))
    with pytest.raises(ValueError):
        phys.percentiles_ms([])


# ---------------------------------------------------------------- ratios


def _rows():
    return [
        {"T": 1, "eager_ms_p50": 20.0, "graph_ms_p50": 5.0},
        {"T": 2, "eager_ms_p50": 24.0, "graph_ms_p50": 5.5},
        {"T": 3, "eager_ms_p50": 30.0, "graph_ms_p50": 6.0},
    ]


def test_compute_ratios_synthetic():
    r = phys.compute_ratios(_rows(), 3)
    assert r == pytest.approx({"verify_over_decode_eager": 1.5, "verify_over_decode_graph": 1.2,
                               "eager_verify_over_graph_decode": 6.0})
    r2 = phys.compute_ratios(_rows(), 2)
    assert r2["verify_over_decode_graph"] == pytest.approx(1.1)


def test_compute_ratios_missing_values_are_none():
    assert set(phys.compute_ratios(_rows(), 4).values()) == {None}
    assert set(phys.compute_ratios(_rows()[1:], 3).values()) == {None}
    rows = [dict(r, graph_ms_p50=None) for r in _rows()]
    r = phys.compute_ratios(rows, 3)
    assert r["verify_over_decode_eager"] == pytest.approx(1.5)
    assert r["verify_over_decode_graph"] is None and r["eager_verify_over_graph_decode"] is None


# ---------------------------------------------------------------- config


def test_defaults_match_lab_config_and_params_yaml():
    from lab.config import PhysicsParams, load_params

    dumped = PhysicsParams().model_dump()
    assert dumped == phys.PHYSICS_DEFAULTS
    assert PhysicsConfig.from_mapping(dumped).as_dict() == dumped == PhysicsConfig().as_dict()
    from_yaml = load_params(ROOT / "params.yaml").physics.model_dump()
    assert PhysicsConfig.from_mapping(from_yaml).as_dict() == from_yaml


@pytest.mark.parametrize("bad", [{"nope": 1}, {"tokens": []}, {"tokens": [0, 1]}, {"tokens": [1, 1]},
                                 {"num_layers": 0}, {"tp": True}, {"dtype": "int8"}, {"timed_iters": 2.5}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        PhysicsConfig.from_mapping(bad)


# ---------------------------------------------------------------- run_physics without a GPU


def _fake_torch(monkeypatch, *, cuda: bool, count: int = 0):
    """Pretend torch is installed, with or without CUDA devices (no real torch needed)."""
    monkeypatch.setattr(run, "_probe_torch", lambda: (True, cuda, count if cuda else 0))


def _assert_not_run(m, out, status):
    assert m["status"] == status
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["status"] == status
    assert on_disk["rows"] == [] and on_disk["ratios"] == {} and on_disk["figures"] == []
    assert numbers(on_disk) == [], "a not-run result must carry no numbers"
    assert not any((out / f).exists() for f in phys.FIGURE_FILES)
    assert not list(out.glob("*.png"))


def test_no_torch_writes_not_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    out = tmp_path / "res"
    out.mkdir()
    (out / "time_per_forward.png").write_bytes(b"stale figure from an earlier run")
    m = phys.run_physics(phys.PHYSICS_DEFAULTS, out, log=lambda s: None)
    _assert_not_run(m, out, phys.STATUS_NO_TORCH)


def test_no_cuda_writes_not_run(tmp_path, monkeypatch):
    _fake_torch(monkeypatch, cuda=False)
    m = phys.run_physics({}, tmp_path, log=lambda s: None)
    _assert_not_run(m, tmp_path, phys.STATUS_NO_CUDA)


def test_too_few_gpus_for_tp(tmp_path, monkeypatch):
    _fake_torch(monkeypatch, cuda=True, count=1)
    m = phys.run_physics({"tp": 8}, tmp_path, log=lambda s: None)
    _assert_not_run(m, tmp_path, "not run: tp=8 needs 8 CUDA devices, found 1")


def test_failed_measurement_is_marked_failed(tmp_path, monkeypatch):
    _fake_torch(monkeypatch, cuda=True, count=1)

    def boom(*a, **k):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(bench, "measure", boom)
    with pytest.raises(RuntimeError):
        phys.run_physics({}, tmp_path, log=lambda s: None)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"].startswith("failed: RuntimeError: CUDA error")
    assert m["rows"] == [] and not list(tmp_path.glob("*.png"))


def _synthetic_measure(cfg, device, **kw):
    rows = [{"T": T, "eager_ms_p50": 15.0 + T, "eager_ms_p90": 17.0 + T, "graph_ms_p50": 5.0 + 0.1 * T,
             "graph_ms_p90": 5.2 + 0.1 * T, "graph_vs_eager_rel_err": 0.0, "output_finite": True} for T in cfg.tokens]
    return {"device": {"type": "cuda", "name": "Fake GPU", "count": 1, "driver": "1.0", "torch": "x", "cuda": "y",
                       "nccl": None}, "copy_bandwidth_gb_s": 4000.0, "rows": rows}


def test_ok_result_assembly_and_figures(tmp_path, monkeypatch):
    _fake_torch(monkeypatch, cuda=True, count=1)
    monkeypatch.setattr(bench, "measure", _synthetic_measure)
    m = phys.run_physics({}, tmp_path, log=lambda s: None)
    assert m["status"] == "ok" and m["tp"] == 1
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["status"] == "ok" and on_disk["device"]["name"] == "Fake GPU"
    for r in on_disk["rows"]:
        assert r["bytes_moved"] == phys.bytes_moved(KIMI, r["T"])
        assert r["floor_ms"] == pytest.approx(r["bytes_moved"] / 4000e9 * 1e3)
    assert on_disk["ratios"]["verify_over_decode_eager"] == pytest.approx(18 / 16)
    assert on_disk["ratios"]["verify_over_decode_graph"] == pytest.approx(5.3 / 5.1)
    assert on_disk["ratios"]["eager_verify_over_graph_decode"] == pytest.approx(18 / 5.1)
    assert on_disk["shapes"]["weight_bytes"] == 9_628_200_960
    assert on_disk["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert on_disk["figures"] == list(phys.FIGURE_FILES)
    for f in phys.FIGURE_FILES:
        assert (tmp_path / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = phys.markdown_report(on_disk)
    assert "| 3 | 18.00 | 20.00 | 5.30 | 5.50 | 2.54 | 3.40 | n/a | n/a |" in md and "Fake GPU" in md
    assert "not run" in phys.markdown_report({"status": phys.STATUS_NO_CUDA, "params": KIMI.as_dict()})
    with pytest.raises(ValueError):
        phys.make_figures({"status": phys.STATUS_NO_CUDA}, tmp_path)


def test_nccl_safety_env_forced(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    bench.set_nccl_safety_env()
    import os

    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NVSHMEM_DISABLE_NVLS"] == "1"


# ---------------------------------------------------------------- CLI


def test_cli_defaults_and_overrides(tmp_path):
    ns = cli.parse_args(["--out", str(tmp_path)])
    assert ns.config == PhysicsConfig() and ns.out == tmp_path and ns.cpu is False and ns.figures is True
    ns = cli.parse_args(["--out", "x", "--tp", "2", "--tokens", "1, 3,5", "--num-layers", "4",
                         "--kv-context", "512", "--dtype", "float16", "--cpu", "--no-figures"])
    c = ns.config
    assert (c.tp, c.tokens, c.num_layers, c.kv_context, c.dtype) == (2, (1, 3, 5), 4, 512, "float16")
    assert c.hidden_size == 7168 and ns.cpu and not ns.figures


def test_cli_params_file_then_overrides(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"engine": "emulator", "physics": {"num_layers": 7, "tokens": [1, 3]}}))
    c = cli.parse_args(["--out", "x", "--params", str(p), "--tokens", "2,4"]).config
    assert (c.num_layers, c.tokens) == (7, (2, 4))
    assert cli.parse_args(["--out", "x", "--params", str(ROOT / "params.yaml")]).config == PhysicsConfig()


@pytest.mark.parametrize("argv", [[], ["--out", "x", "--tokens", "1,a"], ["--out", "x", "--dtype", "int8"],
                                  ["--out", "x", "--tp", "0"], ["--out", "x", "--num-layers", "two"]])
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2


def test_cli_rejects_unknown_key_in_params_file(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"physics": {"num_layer": 7}}))
    with pytest.raises(SystemExit):
        cli.parse_args(["--out", "x", "--params", str(p)])


def test_notebook_parameters_cell_is_a_thin_shell():
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "physics.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    ns: dict = {}
    exec(code[0].source, ns)
    # No copy of the schema: None means the params file's `physics:` section (PhysicsConfig's fields).
    assert ns["physics"] is None and ns["results_dir"] == "results/physics" and ns["params_file"] is None
    src = "\n".join(c.source for c in code)
    assert "sys.path" not in src and "log_physics" not in src and "write_text(" not in src, "a thin shell"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "commit no outputs"


# ---------------------------------------------------------------- with torch (CPU), skipped without it


def test_stack_forward_matches_naive_attention():
    torch = pytest.importorskip("torch")
    cfg = PhysicsConfig.from_mapping(PHYSICS_TINY, dtype="float32", num_layers=1)
    layers = bench.build_layers(cfg, "cpu", seed=3)
    L = {k: v.double() for k, v in layers[0].items()}
    T, ctx, d, nh, a = 3, cfg.kv_context, cfg.head_dim, cfg.heads_per_gpu, cfg.attn_width
    x = torch.randn(T, cfg.hidden_size, dtype=torch.float32, generator=torch.Generator().manual_seed(5))
    out = bench.stack_forward(x, layers, cfg, bench.attention_mask(cfg, T, "cpu"))

    def rms(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    xd = x.double()
    q, k, v = (rms(xd, L["norm1"]) @ L["wqkv"].T).split(a, dim=-1)
    K = torch.cat([L["k_cache"][0, :, :ctx], k.view(T, nh, d).transpose(0, 1)], dim=1)
    V = torch.cat([L["v_cache"][0, :, :ctx], v.view(T, nh, d).transpose(0, 1)], dim=1)
    s = q.view(T, nh, d).transpose(0, 1) @ K.transpose(1, 2) / math.sqrt(d)  # [nh, T, ctx+T]
    allowed = torch.arange(ctx + T)[None, :] <= ctx + torch.arange(T)[:, None]  # bottom-right causal
    o = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ V
    xd = xd + o.transpose(0, 1).reshape(T, a) @ L["wo"].T
    g, u = (rms(xd, L["norm2"]) @ L["wgu"].T).chunk(2, dim=-1)
    ref = xd + (torch.nn.functional.silu(g) * u) @ L["wd"].T
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5


def test_physics_stage_rejects_an_unknown_key_by_name(tmp_path):
    from lab.config import ParamsError
    from lab.pipeline.physics import run_physics_stage

    with pytest.raises(ParamsError, match="num_layer"):
        run_physics_stage({"num_layer": 3}, tmp_path / "physics")
    assert not (tmp_path / "physics").exists()  # nothing ran


def test_forward_tables_from_a_measured_run():
    from lab.physics.stack_report import forward_tables

    rows = [{"T": 1, "eager_ms_p50": 2.0, "graph_ms_p50": 1.0, "floor_ms": 0.5},
            {"T": 3, "eager_ms_p50": 3.0, "graph_ms_p50": 1.5, "floor_ms": 0.6}]
    m = {"rows": rows, "device": {"name": "GPU", "count": 1, "driver": "d", "torch": "t", "cuda": "c"},
         "copy_bandwidth_gb_s": 100.0, "tp": 1, "params": {"verify_tokens": 3}, "ratios": {"eager": 1.5}}
    line, table, ratios = forward_tables(m)
    assert "copy bandwidth 100 GB/s" in line and table.loc[3, "eager_over_graph"] == 2.0
    assert ratios.columns.tolist() == ["T=3 over T=1"]
