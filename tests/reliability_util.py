"""Shared helpers of the fault, interruption and bad-input tests (tests/component/test_faults.py,
tests/e2e/test_interrupt.py, tests/unit/test_bad_input.py, tests/component/test_bad_input_live.py).

:func:`tally` records, per injected fault, whether the lab survived it (the run ended the
way ``docs/reliability.md`` says), how many engine processes outlived it and how many
measured results were lost. ``scripts/reliability_counts.py`` runs the tests with
``LAB_RELIABILITY_TALLY=<file>`` and prints the totals that ``docs/reliability.md`` quotes.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import psutil

from lab.config import LabParams, load_params
from scratch import free_port  # noqa: F401  (re-exported for the fault tests)

ROOT = Path(__file__).resolve().parents[1]


def params_file(tmp_path: Path, mutate) -> Path:
    """``params.yaml`` of the repository, changed by ``mutate(raw_dict)``, written under ``tmp_path``."""
    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    mutate(raw)
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def engines_on(port: int) -> list[psutil.Process]:
    """Live (non-zombie) emulator processes launched for ``port``."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if "lab.emulator" in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1] == str(port) \
                    and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, IndexError, ValueError):
            continue
    return out


def small_params(tmp_path: Path, faults: list[str] | None = None, **bench) -> LabParams:
    """Repo params with a tiny bench, a free port, a temp sqlite MLflow and ``faults``."""
    p = load_params(ROOT / "params.yaml").model_copy(deep=True)
    p.server.port = free_port()
    p.server.startup_timeout_s = 30
    p.server.stop_grace_s = 1.0
    p.emulator.startup_delay_s = 0.05
    p.emulator.faults = list(faults or [])
    b = {"num_prompts": 4, "max_new_tokens": 12, "concurrency": [1, 2], "warmup_requests": 0, "context_tokens": [0],
         "repeats": 1, "request_timeout_s": 60,
         "request_rates": []}  # closed-loop levels only: the fault cases count requests per level
    b.update(bench)
    for k, v in b.items():
        setattr(p.bench, k, v)
    p.mlflow.tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return p


def lost_results(out: Path) -> int:
    """Requests the emulator finished (its ground truth) that have no record in
    requests.jsonl: work the lab silently dropped. (A request the engine finished but the
    client saw fail, e.g. a timeout, is recorded with its error: accounted for, not lost.)"""
    from lab.emulator.truth import load_truth

    gt = out / "ground_truth.jsonl"
    if not gt.exists():
        return 0
    done = {rid for rid, r in load_truth(gt).requests.items()
            if r.get("finish_reason") == "length" and "-warmup-" not in rid}
    kept = set()
    req = out / "requests.jsonl"
    if req.exists():
        kept = {json.loads(line)["rid"] for line in req.read_text().splitlines()
                if line.strip()}
    return len(done - kept)


def tally(case: str, *, survived: bool, leaked: int, lost: int) -> None:
    """Append one fault outcome to ``$LAB_RELIABILITY_TALLY`` (no-op when unset)."""
    path = os.environ.get("LAB_RELIABILITY_TALLY")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": case, "survived": survived, "leaked": leaked, "lost": lost}) + "\n")
