"""lab.engine.command: the SGLang argv and environment of every mode (multi-node flags, the same
scheduler limits in every mode, emulator flags, simulated acceptance, redacted secrets), and the
``lab`` command's engine override. SGLang's own parser and the process lifecycle are
tests/component/test_server.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.config import load_params
from lab.engine.command import build_server_command

ROOT = Path(__file__).resolve().parents[2]
# sglang_nodeps: the shared fixture of tests/conftest.py


@pytest.fixture()
def params():
    return load_params(ROOT / "params.yaml")


def test_multi_node_params_validated(params):
    from lab.config import ParamsError, load_params
    with pytest.raises(ParamsError, match="dist_init_addr"):
        load_params(ROOT / "params.yaml", overrides={"server": {"nnodes": 2}})
    with pytest.raises(ParamsError, match="node_rank"):
        load_params(ROOT / "params.yaml", overrides={"server": {"nnodes": 2, "node_rank": 2,
                                                                "dist_init_addr": "h:1"}})


def test_same_scheduler_limits_in_every_mode(params):
    flags = {m: build_server_command(params, m).flags for m in params.modes}
    for f in flags.values():
        i = f.index("--max-running-requests")
        j = f.index("--cuda-graph-max-bs-decode")
        assert (f[i + 1], f[j + 1]) == ("48", "48")


def test_env_and_emulator_flags(params, tmp_path):
    cmd = build_server_command(params, "eagle3_decode", ground_truth_file=tmp_path / "gt.jsonl")
    assert cmd.env["SGLANG_ENABLE_METRICS_DEVICE_TIMER"] == "1"
    assert cmd.env["SGLANG_RECORD_STEP_TIME"] == "1"
    assert cmd.argv[1:3] == ["-m", "lab.emulator"]
    assert cmd.argv[cmd.argv.index("--ground-truth-file") + 1] == str(tmp_path / "gt.jsonl")
    assert cmd.argv[cmd.argv.index("--speculative-attention-mode") + 1] == "decode"


def test_simulated_accept_length_and_secrets_redacted(params):
    p = params.model_copy(deep=True)
    p.modes["eagle3_prefill"].simulate_accept_length = 2.5
    p.server.env = {"HF_TOKEN": "hf_supersecret", "NCCL_DEBUG": "INFO"}
    cmd = build_server_command(p, "eagle3_prefill")
    assert cmd.env["SGLANG_SIMULATE_ACC_LEN"] == "2.5"
    assert cmd.env["HF_TOKEN"] == "hf_supersecret"  # the server needs it...
    shown = cmd.display()
    assert "hf_supersecret" not in shown and "HF_TOKEN='***'" in shown  # ...logs never see it
    assert "NCCL_DEBUG=INFO" in shown


# --- lifecycle with fake engines -----------------------------------------------------

def test_lab_command_engine_override_prints_the_sglang_line(capsys):
    """``lab command --engine sglang`` shows the real launch line while params.yaml says emulator."""
    from lab.cli import print_command

    assert print_command(None, "eagle3_decode", None, "sglang") == 0
    line = capsys.readouterr().out
    assert "-m sglang.launch_server" in line and "--speculative-attention-mode decode" in line
    assert print_command(None, "eagle3_decode", None) == 0
    assert "-m lab.emulator" in capsys.readouterr().out  # the default params: the emulator
