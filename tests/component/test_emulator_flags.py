"""The emulator refuses a launch flag SGLang's parser would refuse (issue 34, item 5: a typo in a
mode's extra_args was ignored with a note in server.log and the run exited 0), judged against
SGLang's own option set (lab/emulator/sglang_options.json, checked here against
``ServerArgs.add_cli_args`` through tests/sglang_argparser.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lab.config.loading import load_params
from lab.emulator.args import sglang_options, sglang_refuses
from lab.engine.command import build_server_command
from lab.engine.ports import free_port
from sglang_argparser import sglang_parse

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_option_sets_are_sglangs(sglang_nodeps_each):
    version, root = sglang_nodeps_each
    out = sglang_parse(root, [])
    assert out["version"] == version
    assert sglang_options()[version] == frozenset(out["options"])


def test_refused_as_argparse_would():
    assert sglang_refuses(["--attention-backend", "triton", "--disable-cuda-graph", "--grammar-backend", "none"]) == []
    assert sglang_refuses(["--cuda-graph-max-bs", "8"]) == []  # 0.5.16's alias: accepted by one build
    assert sglang_refuses(["--disable-cuda-graf", "--enable-metrcs=1"]) == ["--disable-cuda-graf", "--enable-metrcs"]


def test_a_typo_in_extra_args_stops_the_emulator_at_once_naming_it(tmp_path):
    params = load_params(ROOT / "params.yaml", overrides={"emulator": {"startup_delay_s": 0.0}})
    mode = next(iter(params.modes))
    params.modes[mode].extra_args = ["--disable-cuda-graf"]
    cmd = build_server_command(params, mode, port=free_port())
    t0 = time.monotonic()
    proc = subprocess.run(cmd.argv, env={**__import__("os").environ, **cmd.env}, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and time.monotonic() - t0 < 30
    text = proc.stdout + proc.stderr
    assert "unrecognized arguments: --disable-cuda-graf" in text and "extra_args" in text
