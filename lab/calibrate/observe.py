"""What a calibration reads from measured results: configurations, windows, acceptance, workload.

Input: result directories ``results/<mode>/`` as :func:`lab.pipeline.bench.run_mode` leaves
them, from either engine (``engine: emulator`` or ``engine: sglang``):

- ``result.json``: ``status``, ``engine``, ``engine_version``, ``effective_config`` (the
  resolved speculative arguments, attention backends, CUDA-graph batch sizes), ``levels``
  (the measured means per point), ``server_command`` (environment such as
  ``SGLANG_SIMULATE_ACC_LEN``), ``dataset`` (dataset size, categories);
- ``runs.json``: one row per (point, repeat) *window*, with the ``/metrics`` deltas of that
  window (``server.deltas``: device-timer seconds per forward category, decode CUDA-graph
  passes; SGLang's ``sglang:forward_execution_seconds_total`` and
  ``sglang:cuda_graph_passes_total``, DESIGN.md "Measurement definitions");
- ``requests.jsonl``: per request its point, repeat, prompt index, ``prompt_tokens``,
  ``completion_tokens``, ``meta_info`` (``spec_verify_ct``, ``cached_tokens``,
  ``spec_correct_drafts_histogram``) and streamed chunks.

A ``lab capture`` folder (:mod:`lab.pipeline.capture`: ``window.json``, ``launch.json``,
``server_info.after.json``, ``server.log``, ``requests.jsonl``; no ``result.json``) is read the
same way through :func:`capture_as_result`: its measured windows are the runs, one repeat each,
keyed ``c<N>`` / ``c<N>_ctx<T>`` as in ``window.json``, warm-up records left out.

The emulator's ``ground_truth.jsonl`` is never read: a calibration sees only what a real
SGLang server would have given it. Nothing here fits anything; :mod:`lab.calibrate.fit` does.

Per window (all times ms, KV in thousands of tokens):

- ``iters``: decode iterations = delta of ``cuda_graph_passes_total{mode=decode_cuda_graph}``
  + ``{mode=decode_none}``; ``graph_frac`` the graph share;
- ``batch_mean``: sequences per decode iteration = sum over the window's requests of their
  decode iterations (``spec_verify_ct``, or ``completion_tokens - 1`` without speculation:
  SGLang's first token comes from the prefill) / ``iters``;
- ``kv_mean_k``: mean KV tokens of a decode iteration's batch / 1000 = sum over requests and
  their decode iterations of ``prompt_tokens + tokens generated so far`` / ``iters`` / 1000
  (exact from the chunks when each chunk is one iteration, else ``(1 + N) / 2`` tokens so far
  on average);
- ``prefill_tokens``: prompt tokens the window's prefills computed (``prompt_tokens -
  cached_tokens``: SGLang's radix cache skips cached prefixes); ``prefill_passes`` from the
  ``prefill_*`` pass counters when recorded, else (closed loop at concurrency 1, where each
  request is prefilled alone) the number of requests, else the number of groups of first-chunk
  times (requests prefilled together get their first token in the same iteration; times closer
  than half the median inter-chunk gap are one group), else None;
- ``decode_wall_ms``: wall time per decode iteration, from the requests whose decode ran with no
  prefill in between (no other request's first chunk between their first and last chunk; at
  concurrency 1 every request): their ``(last chunk - first chunk)`` summed over their decode
  iterations summed. Only a request's end points enter, so the client's per-chunk receive jitter
  at high concurrency does not. Minus the device time per iteration it is the scheduler's CPU
  time per iteration (:mod:`lab.calibrate.fit`, block ``overhead``). ``decode_wall_batch``: the
  mean batch of those iterations as those requests saw them (requests running at each of their
  chunks), which weighs large batches more than ``batch_mean`` does.
- ``busy_ms``: how long the engine had work: the length of the union of the requests'
  ``[t_send, last chunk]`` intervals (idle gaps between them, e.g. between closed-loop requests at
  concurrency 1 or between open-loop arrivals, left out); busy time minus all device time and the
  decode iterations' scheduling is what the prefills added beyond their device time (block
  ``prefill_wall``).

Acceptance (chain drafts, ``eagle_topk`` 1, real acceptance: no ``SGLANG_SIMULATE_ACC_LEN``):
per draft position j, ``successes[j]`` and ``trials[j]`` of "draft token j accepted given
tokens 1..j-1 were". A cycle that emitted ``g`` tokens (chunk size) had ``g - 1`` accepted
drafts and, if ``g - 1 < num_steps``, a rejection at position ``g``; a request's last cycle is
right-censored (it was cut to the tokens the request still needed, so no rejection is
counted). This is the life-table (actuarial) estimate of a per-position hazard (Kaplan &
Meier 1958; Kalbfleisch & Prentice, "The Statistical Analysis of Failure Time Data", 2nd ed.,
ch. 1.4). Requests whose chunks are not one per cycle fall back to
``spec_correct_drafts_histogram`` (no censoring: the last cycle counts as observed).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.analysis.position_acceptance import add_histogram
from lab.measure.request_record import RequestRecord, as_records

__all__ = ["CalibrationInputError", "MeasuredConfig", "Window", "Acceptance", "Observations", "read_results", "measured_config",
           "config_key"]


class CalibrationInputError(ValueError):
    """A result directory cannot be calibrated from; the message names it and the fix."""


@dataclass(frozen=True)
class MeasuredConfig:
    """One measured server configuration (a result directory).

    ``graph_max_bs``: the largest decode/verify batch that replays a CUDA graph (0 when decode
    graphs are disabled). ``simulate_accept_length``: ``SGLANG_SIMULATE_ACC_LEN`` of the launch.
    ``draft_extend_graph``: whether the draft-extend forward was graph-captured (False when its
    time was booked as ``extend``: SGLang 0.5.16 under fa3, or ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``);
    None when not speculative or not seen.
    """

    name: str
    result_dir: str
    engine: str
    engine_version: str | None
    speculative: bool
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None
    attention_mode: str | None
    verify_backend: str | None
    graph_max_bs: int
    max_running_requests: int | None
    simulate_accept_length: float | None
    draft_extend_graph: bool | None = None

    @property
    def key(self) -> str:
        """:func:`config_key` of this configuration."""
        return config_key(self.speculative, self.num_steps, self.topk, self.num_draft_tokens, self.attention_mode,
                          self.simulate_accept_length)


def config_key(speculative: bool, num_steps: int | None, topk: int | None, num_draft_tokens: int | None,
               attention_mode: str | None, simulate_accept_length: float | None = None) -> str:
    """A readable identity of a speculative configuration: ``baseline`` or
    ``s2_k1_d3_decode`` (``_acc2.5`` with a simulated accept length)."""
    if not speculative:
        return "baseline"
    key = f"s{num_steps}_k{topk}_d{num_draft_tokens}_{attention_mode}"
    return key + (f"_acc{simulate_accept_length:g}" if simulate_accept_length else "")


@dataclass
class Window:
    """One (point, repeat) of one configuration: its ``/metrics`` deltas and workload (see module docstring)."""

    config: str
    point: str
    repeat: int
    concurrency: int
    request_rate: float | None
    context_tokens: int
    max_new_tokens: int
    requests: int
    iters: float
    graph_frac: float
    forward_ms: dict[str, float]
    batch_mean: float
    kv_mean_k: float
    prefill_tokens_k: float
    prefill_passes: float | None
    draft_incomplete: bool
    busy_ms: float | None
    chunks_per_iteration: bool
    decode_wall_ms: float | None = None
    decode_wall_batch: float | None = None

    @property
    def label(self) -> str:
        """``<result dir name>/<point>/r<repeat>``: where a fitted constant's data came from."""
        return f"{self.config}/{self.point}/r{self.repeat}"


@dataclass
class Acceptance:
    """Per-position accept counts of one configuration (module docstring): ``successes[j]``,
    ``trials[j]`` for draft position ``j + 1``; ``method`` ``chunks`` (censoring-aware) or
    ``histogram``; ``cycles`` and ``requests`` counted."""

    successes: list[int]
    trials: list[int]
    method: str
    cycles: int = 0
    requests: int = 0


@dataclass
class Observations:
    """Everything read from a set of result directories.

    ``configs``: by result dir name; ``windows``; ``acceptance``: by result dir name (chain
    drafts with real acceptance only); ``measured``: ``{dir name: {point: {metric: mean}}}``
    from ``result.json`` ``levels``; ``prompt_tokens``: ``{context_tokens: {prompt index:
    [prompt_tokens, cached_tokens]}}``; ``dataset_size``; ``first_prefill_group``: per
    closed-loop window at concurrency > 1, how many of the first burst's requests shared the
    first prefill; ``turnaround_ms``: closed loop at concurrency 1, the client's gap from a
    request's last chunk to the next request's send (median per window); ``notes``: what was
    skipped and why.
    """

    configs: dict[str, MeasuredConfig] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    acceptance: dict[str, Acceptance] = field(default_factory=dict)
    measured: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    prompt_tokens: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    dataset_size: int | None = None
    first_prefill_group: list[int] = field(default_factory=list)
    turnaround_ms: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for ``calibration.json``'s ``observations`` section)."""
        return {"configs": {k: asdict(v) for k, v in self.configs.items()},
                "windows": [asdict(w) for w in self.windows],
                "acceptance": {k: asdict(v) for k, v in self.acceptance.items()},
                "measured": self.measured,
                "prompt_tokens": {str(c): {str(i): v for i, v in m.items()} for c, m in self.prompt_tokens.items()},
                "dataset_size": self.dataset_size, "first_prefill_group": self.first_prefill_group,
                "turnaround_ms": self.turnaround_ms, "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Observations":
        """Inverse of :meth:`to_dict`."""
        return cls(configs={k: MeasuredConfig(**v) for k, v in d["configs"].items()},
                   windows=[Window(**w) for w in d["windows"]],
                   acceptance={k: Acceptance(**v) for k, v in d["acceptance"].items()},
                   measured=d["measured"],
                   prompt_tokens={int(c): {int(i): v for i, v in m.items()} for c, m in d["prompt_tokens"].items()},
                   dataset_size=d.get("dataset_size"), first_prefill_group=list(d.get("first_prefill_group") or []),
                   turnaround_ms=list(d.get("turnaround_ms") or []), notes=list(d.get("notes") or []))


_ENV = re.compile(r"(?:^|\s)([A-Z_][A-Z0-9_]*)=(\S*)")


def _env_of(command: str | None) -> dict[str, str]:
    """``KEY=value`` words leading the recorded server command line."""
    out: dict[str, str] = {}
    for word in (command or "").split():
        m = _ENV.match(word)
        if not m:
            break
        out[m.group(1)] = m.group(2)
    return out


def _graph_max_bs(eff: dict[str, Any]) -> int:
    if eff.get("decode_cuda_graph_disabled") or eff.get("disable_cuda_graph"):
        return 0
    bs = eff.get("captured_cuda_graph_bs") or eff.get("cuda_graph_bs_decode") or []
    if bs:
        return max(int(b) for b in bs)
    return int(eff.get("cuda_graph_max_bs_decode") or 0)


def measured_config(name: str, path: Path, result: dict[str, Any]) -> MeasuredConfig:
    """The :class:`MeasuredConfig` of one ``result.json`` (``name``: the result directory's name)."""
    eff = result.get("effective_config") or {}
    env = _env_of(result.get("server_command"))
    spec = bool(eff.get("speculative_algorithm"))
    sim = env.get("SGLANG_SIMULATE_ACC_LEN")
    try:
        sim_f = float(sim) if sim not in (None, "") else None
    except ValueError:
        sim_f = None
    return MeasuredConfig(
        name=name, result_dir=str(path), engine=str(result.get("engine")),
        engine_version=result.get("engine_version") or eff.get("engine_version"), speculative=spec,
        num_steps=eff.get("speculative_num_steps") if spec else None,
        topk=eff.get("speculative_eagle_topk") if spec else None,
        num_draft_tokens=eff.get("speculative_num_draft_tokens") if spec else None,
        attention_mode=eff.get("speculative_attention_mode") if spec else None,
        verify_backend=eff.get("verify_attention_backend") if spec else None,
        graph_max_bs=_graph_max_bs(eff),
        max_running_requests=eff.get("effective_max_running_requests") or eff.get("max_running_requests"),
        simulate_accept_length=sim_f if (sim_f and sim_f > 0) else None)


def _chunk_grants(rec: RequestRecord) -> list[int] | None:
    """Tokens per decode iteration of a request, when its chunks are one per iteration: the
    first chunk is the prefill's token, then one chunk per decode iteration (speculative:
    ``len(chunks) - 1 == spec_verify_ct``; baseline: every later chunk carries 1 token)."""
    chunks = rec.chunks or []
    if len(chunks) < 1 or int(chunks[0][1]) != 1:
        return None
    grants = [int(c[1]) for c in chunks[1:]]
    verify_ct = (rec.meta_info or {}).get("spec_verify_ct")
    if verify_ct:
        return grants if len(grants) == int(verify_ct) else None
    return grants if all(g == 1 for g in grants) else None


def _decode_iterations(rec: RequestRecord) -> int:
    verify_ct = (rec.meta_info or {}).get("spec_verify_ct")
    return int(verify_ct) if verify_ct else max(0, int(rec.completion_tokens or 0) - 1)


def _kv_sum(rec: RequestRecord) -> float:
    """Sum over the request's decode iterations of its KV tokens at that iteration."""
    prompt = int(rec.prompt_tokens or (rec.meta_info or {}).get("prompt_tokens") or 0)
    grants = _chunk_grants(rec)
    if grants is not None:
        total, done = 0.0, 1
        for g in grants:
            total += prompt + done
            done += g
        return total
    n = int(rec.completion_tokens or 0)
    return _decode_iterations(rec) * (prompt + (1 + n) / 2)


def _accept_counts(recs: Sequence[RequestRecord | Mapping[str, Any]], num_steps: int) -> Acceptance:
    recs = as_records(recs)
    succ, trials = [0] * num_steps, [0] * num_steps
    method = "chunks"
    cycles = used = 0
    for rec in recs:
        grants = _chunk_grants(rec)
        meta = rec.meta_info or {}
        if grants is not None:
            used += 1
            for i, g in enumerate(grants):
                last = i == len(grants) - 1
                acc = min(g - 1, num_steps)
                cycles += 1
                for j in range(acc):
                    succ[j] += 1
                    trials[j] += 1
                if acc < num_steps and not last:
                    trials[acc] += 1
            continue
        hist = meta.get("spec_correct_drafts_histogram")
        if hist:
            used += 1
            method = "histogram"
            cycles += add_histogram(succ, trials, hist)  # lab.analysis.position_acceptance: one counting rule for both
    return Acceptance(successes=succ, trials=trials, method=method, cycles=cycles, requests=used)


def _first_group(recs: list[RequestRecord], concurrency: int) -> int | None:
    """How many of a closed-loop window's first ``concurrency`` requests got their first token
    together with the earliest one (same prefill: first chunks within 1 ms)."""
    first = sorted((r.chunks[0][0], r.t_send or 0.0) for r in recs if r.ok and r.chunks)
    if len(first) < concurrency or concurrency < 2:
        return None
    burst = sorted(first, key=lambda x: x[1])[:concurrency]
    t0 = min(t for t, _ in burst)
    return sum(1 for t, _ in burst if t - t0 < 1e-3)


def _prefill_groups(recs: list[RequestRecord]) -> float | None:
    """Prefill iterations of a window counted from the client side (module docstring), or None
    when the chunks are too few to tell."""
    gaps = [b[0] - a[0] for r in recs for a, b in zip(r.chunks or [], (r.chunks or [])[1:])]
    firsts = sorted(r.chunks[0][0] for r in recs if r.chunks)
    if not gaps or not firsts:
        return None
    tol = 0.5 * sorted(gaps)[len(gaps) // 2]
    return float(1 + sum(1 for a, b in zip(firsts, firsts[1:]) if b - a > tol))


def _turnaround_ms(recs: list[RequestRecord]) -> float | None:
    """Median gap (ms) from one request's last chunk to the next request's send (closed loop, c=1)."""
    seq = sorted((r.t_send, r.chunks[-1][0]) for r in recs if r.t_send is not None and r.chunks)
    gaps = [b[0] - a[1] for a, b in zip(seq, seq[1:]) if b[0] >= a[1]]
    return sorted(gaps)[len(gaps) // 2] * 1e3 if gaps else None


def _decode_wall(recs: list[RequestRecord]) -> tuple[float | None, float | None]:
    """``(wall ms per decode iteration, mean batch)`` of the requests decoded without a prefill in
    between (module docstring); ``(None, None)`` when there is none."""
    with_chunks = [r for r in recs if len(r.chunks or []) >= 2 and _decode_iterations(r) > 0]
    gaps = [b[0] - a[0] for r in with_chunks for a, b in zip(r.chunks, r.chunks[1:])]
    if not with_chunks or not gaps:
        return None, None
    tol = 0.5 * sorted(gaps)[len(gaps) // 2]
    firsts = [r.chunks[0][0] for r in recs if r.chunks]
    spans = [(r.chunks[0][0], r.chunks[-1][0]) for r in recs if r.chunks]
    clean = [r for r in with_chunks if not any(r.chunks[0][0] + tol < f < r.chunks[-1][0] - tol for f in firsts)]
    iters = sum(_decode_iterations(r) for r in clean)
    if not iters:
        return None, None
    seen = [sum(1 for a, b in spans if a - tol <= c[0] <= b + tol) for r in clean for c in r.chunks[1:]]
    wall = sum(r.chunks[-1][0] - r.chunks[0][0] for r in clean) * 1e3 / iters
    return wall, (sum(seen) / len(seen) if seen else None)


def _busy_ms(recs: list[RequestRecord]) -> float | None:
    """Length (ms) of the union of the requests' ``[t_send, last chunk time]`` intervals."""
    spans = sorted((r.t_send, r.chunks[-1][0]) for r in recs if r.t_send is not None and r.chunks)
    if not spans:
        return None
    total, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return (total + hi - lo) * 1e3


def _window(cfg: MeasuredConfig, row: dict[str, Any], recs: list[RequestRecord]) -> Window | None:
    server = row.get("server") or {}
    deltas = server.get("deltas") or {}
    graph, eager = deltas.get("decode_cuda_graph_passes"), deltas.get("decode_none_passes")
    if graph is None and eager is None:
        return None
    iters = float(graph or 0.0) + float(eager or 0.0)
    fwd = {k: float(v) * 1e3 for k, v in (deltas.get("forward_s") or {}).items() if v is not None}
    ok = [r for r in recs if r.ok]
    steps = sum(_decode_iterations(r) for r in ok)
    pf_g, pf_n = deltas.get("prefill_cuda_graph_passes"), deltas.get("prefill_none_passes")
    if pf_g is not None or pf_n is not None:
        passes: float | None = float(pf_g or 0.0) + float(pf_n or 0.0)
    elif row.get("concurrency") == 1 and row.get("request_rate") is None:
        passes = float(len(ok))
    else:
        passes = _prefill_groups(ok)
    new_tokens = sum(int(r.prompt_tokens or 0) - int((r.meta_info or {}).get("cached_tokens") or 0)
                     for r in ok)
    per_iter = all(_chunk_grants(r) is not None for r in ok) and bool(ok)
    return Window(
        config=cfg.name, point=str(row.get("point") or f"c{row.get('concurrency')}"), repeat=int(row.get("repeat") or 0),
        concurrency=int(row.get("concurrency") or 0), request_rate=row.get("request_rate"),
        context_tokens=int(row.get("context_tokens") or 0), max_new_tokens=int(row.get("max_new_tokens") or 0),
        requests=len(ok), iters=iters, graph_frac=(float(graph or 0.0) / iters) if iters else 0.0,
        forward_ms=fwd, batch_mean=steps / iters if iters else 0.0,
        kv_mean_k=(sum(_kv_sum(r) for r in ok) / iters / 1e3) if iters else 0.0,
        prefill_tokens_k=new_tokens / 1e3, prefill_passes=passes,
        draft_incomplete=bool(server.get("draft_incomplete")),
        busy_ms=_busy_ms(ok), **dict(zip(("decode_wall_ms", "decode_wall_batch"),
                                         _decode_wall(ok) if per_iter else (None, None))),
        chunks_per_iteration=per_iter)


def _load_jsonl(path: Path) -> list[RequestRecord]:
    """The request records of a ``requests.jsonl`` ([] without the file)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            out.append(RequestRecord.from_json(json.loads(line)))
    return out


def capture_as_result(d: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[RequestRecord]]:
    """A ``lab capture`` folder as ``(result, runs, records)`` in the shapes a bench stage writes.

    ``result``: ``status`` ok, ``engine`` from ``launch.json``, ``engine_version`` and
    ``effective_config`` from ``server_info.after.json`` and ``server.log``
    (:func:`lab.engine.effective.effective_config`), ``server_command`` (the environment the
    launch set, e.g. ``SGLANG_SIMULATE_ACC_LEN``); ``runs``: each ``window.json`` entry with its key
    as ``point`` and ``repeat`` 0; ``records``: the measured (not warm-up) requests with their
    window's key as ``point``.

    :raises CalibrationInputError: a file the capture always writes is missing.
    """
    from lab.engine.effective import effective_config
    from lab.pipeline.capture import window_key

    need = [n for n in ("window.json", "launch.json", "server_info.after.json", "server.log") if not (d / n).is_file()]
    if need:
        raise CalibrationInputError(f"{d}: not a complete `lab capture` folder (missing {', '.join(need)}). "
                                    "Fix: capture it again (lab capture --params ... --out ...)")
    launch = json.loads((d / "launch.json").read_text())
    info = json.loads((d / "server_info.after.json").read_text())
    eff = effective_config(info, (d / "server.log").read_text(errors="replace"))
    env = " ".join(f"{k}={v}" for k, v in (launch.get("env") or {}).items())
    result = {"status": "ok", "engine": launch.get("engine") or "sglang", "engine_version": str(info.get("version")),
              "effective_config": eff, "server_command": env}
    runs = [{**row, "point": key, "repeat": 0} for key, row in json.loads((d / "window.json").read_text()).items()]
    recs = [r for r in _load_jsonl(d / "requests.jsonl") if not r.warmup]
    for r in recs:
        r.set(point=window_key(int(r.concurrency or 0), int(r.context_tokens or 0)), repeat=0)
    return result, runs, recs


def read_results(dirs: list[Path], points: set[str] | None = None) -> Observations:
    """Read every result directory in ``dirs`` (see module docstring); with ``points``, only the
    windows and requests of those point keys (``c1``, ``r4``...: hold points out of a calibration
    to test its predictions there).

    Directories whose ``result.json`` is not ``status: ok`` are skipped with a note (a failed
    run's numbers are partial). Speculative configurations with ``eagle_topk`` > 1 contribute
    their costs but not acceptance (the chain model does not describe a tree).

    :raises CalibrationInputError: no directory given, a directory without ``result.json`` /
        ``runs.json``, or two directories of the same name.
    """
    if not dirs:
        raise CalibrationInputError("no result directories given. Fix: pass results/<mode> directories "
                                    "(or run `dvc repro` first)")
    obs = Observations()
    for d in dirs:
        d = Path(d)
        res_path, runs_path = d / "result.json", d / "runs.json"
        captured = not res_path.is_file() and (d / "window.json").is_file()
        if captured:
            result, runs, recs = capture_as_result(d)
        elif not res_path.is_file() or not runs_path.is_file():
            raise CalibrationInputError(f"{d}: no result.json/runs.json. Fix: run `dvc repro bench@{d.name}` "
                                        "(or pass a directory a bench stage wrote, or a `lab capture` folder)")
        else:
            result = json.loads(res_path.read_text())
        if result.get("status") != "ok":
            obs.notes.append(f"{d}: skipped (status {result.get('status')!r}: a failed run's numbers are partial)")
            continue
        if d.name in obs.configs:
            raise CalibrationInputError(f"{d}: a second result directory named {d.name!r}. Fix: pass each mode once")
        cfg = measured_config(d.name, d, result)
        if not captured:
            runs = json.loads(runs_path.read_text())
            recs = _load_jsonl(d / "requests.jsonl")
        if points is not None:
            runs = [r for r in runs if str(r.get("point") or f"c{r.get('concurrency')}") in points]
            recs = [r for r in recs if str(r.point or f"c{r.concurrency}") in points]
        by_window: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
        for r in recs:
            by_window[(str(r.point or f"c{r.concurrency}"), int(r.repeat or 0))].append(r)
            ctx = int(r.context_tokens or 0)
            if r.ok and r.prompt_index is not None and r.prompt_tokens is not None:
                cached = int((r.meta_info or {}).get("cached_tokens") or 0)
                obs.prompt_tokens.setdefault(ctx, {})[int(r.prompt_index)] = [int(r.prompt_tokens), cached]
        extend_graph_seen = extend_eager_seen = False
        for row in runs:
            key = (str(row.get("point") or f"c{row.get('concurrency')}"), int(row.get("repeat") or 0))
            w = _window(cfg, row, by_window.get(key, []))
            if w is None:
                obs.notes.append(f"{d.name}/{key[0]}/r{key[1]}: no decode-pass counters in /metrics; window skipped")
                continue
            obs.windows.append(w)
            if cfg.speculative and w.iters:
                if w.forward_ms.get("eagle_draft_extend", 0.0) > 0:
                    extend_graph_seen = True
                elif w.draft_incomplete:
                    extend_eager_seen = True
            if w.request_rate is None and w.concurrency > 1:
                g = _first_group(by_window.get(key, []), w.concurrency)
                if g is not None:
                    obs.first_prefill_group.append(g)
            if w.request_rate is None and w.concurrency == 1:
                ta = _turnaround_ms(by_window.get(key, []))
                if ta is not None:
                    obs.turnaround_ms.append(ta)
        if cfg.speculative:
            cfg = MeasuredConfig(**{**asdict(cfg), "draft_extend_graph": True if extend_graph_seen else
                                    (False if extend_eager_seen else None)})
        obs.configs[d.name] = cfg
        if cfg.speculative and cfg.topk == 1 and cfg.simulate_accept_length is None and cfg.num_steps:
            obs.acceptance[d.name] = _accept_counts([r for r in recs if r.ok], int(cfg.num_steps))
        elif cfg.speculative:
            obs.notes.append(f"{d.name}: acceptance not fitted from it ("
                             + ("simulated accept length" if cfg.simulate_accept_length else f"topk {cfg.topk}: a tree draft")
                             + ")")
        ds = result.get("dataset") or {}
        if ds.get("num_prompts"):
            obs.dataset_size = int(ds["num_prompts"])
        obs.measured[d.name] = {
            point: {m: float(v["mean"]) for m, v in level.items()
                    if isinstance(v, dict) and "mean" in v and v["mean"] is not None and not
                    (isinstance(v["mean"], float) and math.isnan(v["mean"]))}
            for point, level in (result.get("levels") or {}).items()}
    if not obs.configs:
        raise CalibrationInputError("none of the result directories holds a successful run. Fix: re-run the failed "
                                    "stages (" + "; ".join(obs.notes) + ")")
    return obs
