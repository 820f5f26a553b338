"""Synthetic result directories for the calibration tests: what a bench stage would leave, made in
memory (no engine, no socket) by replaying a known cost profile on the virtual clock of
:func:`lab.calibrate.simulate.simulate_run` with :class:`lab.calibrate.simulate.ProfileCosts`.

The files have the shapes :mod:`lab.calibrate.observe` reads (``result.json`` with
``effective_config`` and ``levels``; ``runs.json`` rows with ``server.deltas``;
``requests.jsonl`` with chunks and ``meta_info``), summarised by the lab's own pure functions
(:func:`lab.measure.records.summarize_run`, :func:`lab.analysis.aggregate.aggregate_levels`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from lab.analysis.aggregate import aggregate_levels
from lab.calibrate.simulate import ProfileCosts, SimRequest, chain_sampler, simulate_run
from lab.measure.records import summarize_run

PROMPTS = [80, 120, 100, 90, 140, 70, 110, 95]


def write_result(path: Path, profile, *, spec: dict | None = None, engine_version: str = "0.5.16",
                 points: tuple[int, ...] = (1, 4), repeats: int = 3, tokens: int = 24, seed: int = 0,
                 num_prompts: int = 4, draft_extend_graph: bool = True, graph_max_bs: int = 48) -> Path:
    """Write one mode's result directory at ``path`` (closed loop, each point ``num_prompts``
    requests, the first burst in one prefill) and return it.

    :param spec: ``{"num_steps", "attention_mode"}`` for a chain-draft EAGLE-3 mode (None: baseline).
    """
    path.mkdir(parents=True, exist_ok=True)
    steps = spec["num_steps"] if spec else None
    mode = spec["attention_mode"] if spec else None
    rows, records = [], []
    for c in points:
        for rep in range(repeats):
            costs = ProfileCosts(profile, graph_max_bs=graph_max_bs, num_steps=steps,
                                 num_draft_tokens=steps + 1 if spec else None, attention_mode=mode,
                                 draft_extend_graph=draft_extend_graph)
            idx = [(rep + i) % len(PROMPTS) for i in range(num_prompts)]
            reqs = [SimRequest(PROMPTS[i], PROMPTS[i], tokens) for i in idx]
            trace: list[dict] = []
            simulate_run(reqs, costs, sampler=chain_sampler([profile.p_accept] * steps) if spec else None,
                         rng=random.Random(seed * 7919 + c * 101 + rep), concurrency=c, trace=trace,
                         turnaround_ms=0.5)
            recs = []
            for i, (pi, tr) in enumerate(zip(idx, trace)):
                meta = {"prompt_tokens": PROMPTS[pi], "completion_tokens": tr["tokens"], "cached_tokens": 0}
                if spec:
                    meta["spec_verify_ct"] = tr["cycles"]
                chunks = [[t / 1e3, n] for t, n in tr["chunks"]]
                recs.append({"rid": f"{path.name}-c{c}-r{rep}-{i}", "mode": path.name, "concurrency": c, "repeat": rep,
                             "prompt_index": pi, "t_dispatch": tr["send_ms"] / 1e3, "t_send": tr["send_ms"] / 1e3,
                             "t_end": chunks[-1][0], "chunks": chunks, "completion_tokens": tr["tokens"],
                             "prompt_tokens": PROMPTS[pi], "meta_info": meta, "ok": True, "error": None,
                             "point": f"c{c}", "context_tokens": 0, "max_new_tokens": tokens, "request_rate": None})
            fwd = {k: v / 1e3 for k, v in costs.booked.items()}
            server = {"deltas": {"forward_s": fwd, "decode_cuda_graph_passes": float(costs.passes["decode_cuda_graph"]),
                                 "decode_none_passes": float(costs.passes["decode_none"]),
                                 "prefill_cuda_graph_passes": 0.0,
                                 "prefill_none_passes": float(costs.passes["prefill_none"])},
                      "draft_incomplete": bool(spec) and not draft_extend_graph}
            wall = max(r["t_end"] for r in recs) - min(r["t_dispatch"] for r in recs)
            row = summarize_run(recs, wall_s=wall).to_dict()  # a runs.json row
            row.update(point=f"c{c}", repeat=rep, concurrency=c, context_tokens=0, max_new_tokens=tokens,
                       request_rate=None, server=server)
            rows.append(row)
            records += recs
    eff = {"speculative_algorithm": "EAGLE3" if spec else None, "speculative_num_steps": steps,
           "speculative_eagle_topk": 1 if spec else None, "speculative_num_draft_tokens": steps + 1 if spec else None,
           "speculative_attention_mode": mode, "verify_attention_backend": "fa3" if spec else None,
           "attention_backend": "fa3", "cuda_graph_bs_decode": list(range(1, graph_max_bs + 1)),
           "decode_cuda_graph_disabled": False, "max_running_requests": 48, "engine_version": engine_version}
    env = "" if draft_extend_graph else "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 "
    result = {"status": "ok", "mode": path.name, "engine": "emulator", "engine_version": engine_version,
              "server_command": env + "python -m lab.emulator", "effective_config": eff,
              "dataset": {"num_prompts": len(PROMPTS)}, "levels": aggregate_levels(rows),
              # the workload the regression sentinel records (lab.calibrate.predict.workload_mismatch reads it)
              "sentinel": {"material": {"workload": {"num_prompts": num_prompts, "repeats": repeats, "seed": 0,
                                                     "output_tokens_spread": 0.0, "max_new_tokens": tokens,
                                                     "concurrency": list(points)}}}}
    (path / "result.json").write_text(json.dumps(result))
    (path / "runs.json").write_text(json.dumps(rows))
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
