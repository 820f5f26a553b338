"""How closely the emulator keeps its *planned* step times, and how late chunks reach a client.

    python benchmarks/emulator_fidelity.py [--requests 4] [--tokens 48]   # ~15 s; prints a table

The tests compare the lab's measurement with the emulator's ground truth (what it actually
did), which holds on a busy machine. The emulator's own schedule keeping depends on the
machine's load: it sleeps to a deadline per phase, so a busy CPU makes iterations longer
than the profile planned. This script prints that error, per iteration kind, from the
ground-truth file (:meth:`lab.emulator.truth.Truth.fidelity`), plus the profile's and the
measured verify/decode ms per pass (``/metrics`` deltas) and the chunk delivery delay
(client arrival time minus the emulator's token time, one monotonic clock). Run it on an
idle machine and under load to see the difference; nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.measure import client  # noqa: E402
from lab.emulator.profile import load_profile  # noqa: E402
from lab.emulator.truth import load_truth  # noqa: E402
from lab.engine.ports import free_port  # noqa: E402

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3-mla",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
MODES = {"baseline": [], "eagle3_prefill": SPEC + ["--speculative-attention-mode", "prefill"],
         "eagle3_decode": SPEC + ["--speculative-attention-mode", "decode"]}


_free_port = free_port  # lab.engine.ports


def _counter(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_mode(name: str, extra: list[str], tmp: Path, n: int, tokens: int) -> dict:
    """One emulator launch, ``n`` streamed requests at concurrency 1; returns the figures."""
    port, truth_path = _free_port(), tmp / f"{name}.truth.jsonl"
    argv = [sys.executable, "-m", "lab.emulator", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
            "--host", "127.0.0.1", "--port", str(port), "--enable-metrics", "--max-running-requests", "48",
            "--cuda-graph-max-bs-decode", "48", "--ground-truth-file", str(truth_path),
            "--emulator-startup-delay-s", "0", *extra]
    env = {**os.environ, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    with open(tmp / f"{name}.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            try:
                client.fetch_text(url + "/health")
                break
            except Exception:
                if time.monotonic() - t0 > 30 or proc.poll() is not None:
                    raise RuntimeError(f"emulator {name} did not start: {(tmp / f'{name}.log').read_text()[-2000:]}")
                time.sleep(0.05)
        before = client.fetch_text(url + "/metrics")
        recs = client.run_requests_sync(url, [(i, f"prompt {i}") for i in range(n)], concurrency=1,
                                        max_new_tokens=tokens, temperature=0.0, timeout_s=60,
                                        rid_prefix=name, progress_desc=None)
        after = client.fetch_text(url + "/metrics")
    finally:
        proc.terminate()
        proc.wait(10)
    truth = load_truth(truth_path)
    passes = sum(_counter(after, "sglang:cuda_graph_passes_total", mode=m) - _counter(before, "sglang:cuda_graph_passes_total", mode=m)
                 for m in ("decode_cuda_graph", "decode_none"))
    cat = "target_verify" if extra else "decode"
    fwd = _counter(after, "sglang:forward_execution_seconds_total", category=cat) - _counter(
        before, "sglang:forward_execution_seconds_total", category=cat)
    delays = []
    for r in recs:
        t = truth.requests.get(r["rid"])
        if t and r.get("ok"):
            if r.get("chunks"):
                delays.append((r["chunks"][0][0] - t["first_token"]) * 1e3)
    return {"mode": name, "fidelity": truth.fidelity(), "measured_ms_per_pass": fwd / passes * 1e3 if passes else None,
            "category": cat, "delivery_ms": delays}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args(argv)
    prof = load_profile("kimi_k25_tp8_pcie")[0]
    planned = {"baseline": prof.decode_s(1, 0, True) * 1e3,
               "eagle3_prefill": prof.verify_s(1, 3, 0, "prefill", graph=False) * 1e3,
               "eagle3_decode": prof.verify_s(1, 3, 0, "decode", graph=True) * 1e3}
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} CPUs")
    print("| mode | kind | iterations | planned ms | actual ms | mean abs error ms | max abs error ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lab-fidelity-") as tmp:
        for name, extra in MODES.items():
            res = run_mode(name, extra, Path(tmp), args.requests, args.tokens)
            rows.append(res)
            for kind, f in res["fidelity"].items():
                print(f"| {name} | {kind} | {f.n} | {f.mean_planned_ms:.2f} | {f.mean_actual_ms:.2f} | "
                      f"{f.mean_abs_error_ms:.3f} | {f.max_abs_error_ms:.3f} |")
    print("\n| mode | forward | profile ms per pass | measured ms per pass (/metrics) | first-chunk delivery ms, median / max |")
    print("| --- | --- | ---: | ---: | ---: |")
    for res in rows:
        d = res["delivery_ms"]
        m = res["measured_ms_per_pass"]
        print(f"| {res['mode']} | {res['category']} | {planned[res['mode']]:.2f} | "
              f"{'-' if m is None else f'{m:.2f}'} | "
              f"{f'{statistics.median(d):.2f} / {max(d):.2f}' if d else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
