"""Interruption: a signal to `dvc repro`, to the stage process (papermill) or to the
notebook kernel leaves no engine process alive and its port free (lab/pipeline/interrupt.py),
and what was measured stays in the attempt's directory (results/baseline/partial/<time>/,
lab/pipeline/staging.py), never over a previous result.

Each case starts a real stage in a scratch copy of the repo (like tests/e2e/test_pipeline.py),
waits until the engine listens, sends the signal, then checks the process table (psutil)
and the port. The launcher-chain watcher alone is tests/component/test_interrupt_live.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from scratch import dvc_env, scratch_repo
from reliability_util import ROOT, engines_on, free_port, lost_results, port_free, tally

pytestmark = pytest.mark.integration

LONG_BENCH = {"num_prompts": 400, "repeat_prompts": True, "max_new_tokens": 64, "concurrency": [1], "warmup_requests": 0,
              "repeats": 1, "request_timeout_s": 600}


def _params(repo: Path, faults=()) -> int:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["bench"].update(LONG_BENCH)
    port = free_port()
    params["server"].update(port=port, stop_grace_s=1.0)
    params["emulator"].update(startup_delay_s=0.05, faults=list(faults))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return port


_env = dvc_env


# DVC runs a stage as [$SHELL, -c, cmd] (dvc/stage/run.py). dash and bash exec a lone
# command, so the stage's parent is dvc; a shell that does not stays alive as the stage's
# parent when dvc dies (what CI's machine did). This wrapper is such a shell.
NOEXEC_SHELL = '#!/bin/sh\n/bin/sh "$@"\nstatus=$?\nexit $status\n'


def _start(repo: Path, how: str) -> subprocess.Popen:
    env = _env()
    if how.startswith("dvc"):
        argv = [str(Path(sys.executable).with_name("dvc")), "repro", "bench@baseline"]
        if how == "dvc-noexec-shell":
            wrapper = repo / ".cache" / "noexec" / "sh"
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            wrapper.write_text(NOEXEC_SHELL)
            wrapper.chmod(0o755)
            env["SHELL"] = str(wrapper)
        else:
            env["SHELL"] = "/bin/sh"
    else:
        argv = [sys.executable, "-m", "lab.pipeline.bench_stage", "--mode", "baseline"]
    # own session, like a terminal's foreground job: Ctrl-C = SIGINT to this process group
    return subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _kernel(proc: subprocess.Popen) -> psutil.Process:
    for child in psutil.Process(proc.pid).children(recursive=True):
        if any("ipykernel" in part for part in child.cmdline()):
            return child
    raise AssertionError("no kernel process")


# case -> (what runs, who gets which signal, emulator faults). All cases run at once, each
# in its own scratch copy of the repo, so the suite costs about one stage start-up.
CASES = {
    "SIGINT to the stage (papermill)": ("stage", "stage", signal.SIGINT, ()),
    "SIGTERM to the stage (papermill)": ("stage", "stage", signal.SIGTERM, ()),
    "SIGINT to the notebook kernel": ("stage", "kernel", signal.SIGINT, ()),
    "SIGTERM to the notebook kernel": ("stage", "kernel", signal.SIGTERM, ()),
    "SIGKILL to the kernel, engine ignores SIGTERM": ("stage", "kernel", signal.SIGKILL, ("ignore-sigterm",)),
    "SIGKILL to kernel and stage, engine ignores SIGTERM": ("stage", "all", signal.SIGKILL, ("ignore-sigterm",)),
    "Ctrl-C (SIGINT to the foreground group) to dvc repro": ("dvc", "group", signal.SIGINT, ()),
    "SIGTERM to dvc repro": ("dvc", "dvc", signal.SIGTERM, ()),
    "SIGTERM to dvc repro, a shell between dvc and the stage": ("dvc-noexec-shell", "dvc", signal.SIGTERM, ()),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    runs = {}
    for case, (how, _, _, faults) in CASES.items():
        repo = scratch_repo(tmp_path_factory.mktemp("lab-int"))
        port = _params(repo, faults)
        runs[case] = {"repo": repo, "port": port, "proc": _start(repo, how), "target": CASES[case][1]}
        time.sleep(2.0)  # jupyter_client picks kernel ports racily: stagger the kernel starts
    deadline = time.monotonic() + 240
    pending = set(runs)
    while pending and time.monotonic() < deadline:
        for case in list(pending):
            r = runs[case]
            _, target, sig, _ = CASES[case]
            if r["proc"].poll() is not None:
                pending.discard(case)
                r["early_exit"] = True
                continue
            if not _busy(r["repo"], r["port"]):
                continue
            pending.discard(case)
            if target == "stage" or target == "dvc":
                r["proc"].send_signal(sig)
            elif target == "group":
                os.killpg(r["proc"].pid, sig)
            elif target == "kernel":
                _kernel(r["proc"]).send_signal(sig)
            else:  # all: kernel and stage killed hard together
                _kernel(r["proc"]).kill()
                r["proc"].kill()
        time.sleep(0.2)
    for case in pending:
        os.killpg(runs[case]["proc"].pid, signal.SIGKILL)
        runs[case]["not_busy"] = True
    for case, r in runs.items():
        try:
            r["out"], _ = r["proc"].communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(r["proc"].pid, signal.SIGKILL)
            r["out"], _ = r["proc"].communicate()
            r["hung"] = True
        r["returncode"] = r["proc"].returncode
        if CASES[case][1] == "all":
            time.sleep(1.0)
            r["survived_hard_kill"] = bool(engines_on(r["port"]))
            r["recorded"] = bool(list((r["repo"] / ".cache" / "servers").glob("*.json")))
            nxt = subprocess.run([sys.executable, "-c", "from lab.engine.process import stop_stale_servers as s; s()"],
                                 cwd=r["repo"], env=_env(), capture_output=True, text=True, timeout=60)
            r["next_launch"] = nxt.stdout + nxt.stderr
    for case, r in runs.items():
        end = time.monotonic() + 15
        while (engines_on(r["port"]) or not port_free(r["port"])) and time.monotonic() < end:
            time.sleep(0.1)
        r["leaked"] = len(engines_on(r["port"]))
        r["port_free"] = port_free(r["port"])
        r["lost"] = lost_results(attempt(r["repo"]))
        tally(case, survived=r["leaked"] == 0 and r["port_free"] and not r.get("hung"), leaked=r["leaked"],
              lost=r["lost"])
        for p in engines_on(r["port"]):  # never leave one behind, even when the test fails
            p.kill()
    return runs


def attempt(repo: Path, mode: str = "baseline") -> Path:
    """The stage's one attempt directory (``results/<mode>/partial/<UTC time>/``), or where it
    would be when none was made yet."""
    found = sorted((repo / "results" / mode / "partial").glob("*"))
    return found[-1] if found else repo / "results" / mode / "partial" / "none"


def _busy(repo: Path, port: int) -> bool:
    """The engine listens and measured requests are being recorded (the attempt's
    requests.jsonl grows one line per finished request)."""
    req = attempt(repo) / "requests.jsonl"
    return not port_free(port) and req.exists() and req.stat().st_size > 0


def _check(r: dict, case: str) -> str:
    out = r.get("out", "")
    assert not r.get("early_exit") and not r.get("not_busy"), f"{case}: never benchmarked: {out[-3000:]}"
    assert not r.get("hung"), f"{case}: the stage did not exit: {out[-3000:]}"
    assert r["leaked"] == 0, f"{case}: engine survived: {out[-3000:]}"
    assert r["port_free"]
    assert r["lost"] == 0, f"{case}: finished requests missing from requests.jsonl"
    recs = (attempt(r["repo"]) / "requests.jsonl").read_text().splitlines()
    assert len(recs) >= 1  # what was measured before the signal is on disk, in the attempt's directory
    assert not (r["repo"] / "results" / "baseline" / "requests.jsonl").exists()  # nothing promoted as complete
    if r["target"] != "all":  # a stage that lived to say so names where the partial result is
        assert f"its partial result is in {attempt(r['repo']).relative_to(r['repo'])}" in out, out[-2000:]
    return out


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] == "stage" and CASES[c][1] == "stage"])
def test_signal_to_stage(outcomes, case):
    out = _check(outcomes[case], case)
    assert outcomes[case]["returncode"] == 130, out[-2000:]
    assert "interrupting the notebook kernel" in out


@pytest.mark.parametrize("case", ["SIGINT to the notebook kernel", "SIGTERM to the notebook kernel"])
def test_signal_to_kernel(outcomes, case):
    _check(outcomes[case], case)
    assert outcomes[case]["returncode"] != 0
    metrics = (attempt(outcomes[case]["repo"]) / "metrics.json").read_text()
    assert '"status": "failed"' in metrics


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0].startswith("dvc")])
def test_signal_to_dvc_repro(outcomes, case):
    out = _check(outcomes[case], case)
    assert outcomes[case]["returncode"] != 0
    if outcomes[case]["target"] == "dvc":  # dvc died at once; the stage heard of it and stopped the engine
        assert "interrupting the notebook kernel" in out, out[-2000:]


def test_kernel_sigkill_engine_ignoring_sigterm_is_cleaned(outcomes):
    """Kernel killed hard: no `finally` runs; the engine ignores the SIGTERM of its
    parent-death signal; the stage stops the group after papermill returns, saying so."""
    case = "SIGKILL to the kernel, engine ignores SIGTERM"
    out = _check(outcomes[case], case)
    assert "stopping stale engine process group" in out and "owner pid" in out


def test_everything_killed_hard_next_launch_cleans(outcomes):
    """Kernel and stage SIGKILLed together (an OOM killer): the engine, ignoring SIGTERM,
    stays up with its group recorded; the next launch stops it before starting, saying so."""
    case = "SIGKILL to kernel and stage, engine ignores SIGTERM"
    r = outcomes[case]
    assert r["survived_hard_kill"] and r["recorded"]
    assert "stopping stale engine process group" in r["next_launch"] and "owner pid" in r["next_launch"]
    _check(r, case)
