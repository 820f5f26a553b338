"""``lab predict``: decode tok/s, output tok/s, verify ms and speedup of configurations not measured.

For each candidate configuration (the baseline, params.yaml's modes and its sweep grid, or a
grid given on the command line) and each measurement point of ``bench`` (concurrency levels,
request rates, context/output lengths), the calibrated model (:class:`lab.calibrate.fit.Calibration`)
is replayed on the virtual clock of :func:`lab.calibrate.simulate.simulate_run` with the same
workload the lab would send (prompt order :func:`lab.workload.dataset.workload_indices`, output
lengths :func:`lab.workload.dataset.output_lengths`, arrivals
:func:`lab.workload.arrivals.arrival_times`, seeds ``bench.seed + repeat``), once per repeat,
and the repeats averaged, as the lab reports a measured point.

Uncertainty (the 95 % prediction interval of the *measured* repeat mean): ``draws`` joint draws
of every block's ``(beta, sigma)`` from its posterior (:meth:`lab.calibrate.linfit.LinearFit.draw`,
Gelman et al. BDA3 section 14.2), of each draft position's acceptance from its Jeffreys posterior,
and, per simulated repeat, of a window's residual per cost block (``N(0, sigma^2)``, what a new
measured window adds) and of how the first closed-loop burst split across prefills (one of the
measured splits); the acceptance of every cycle is drawn again in the simulation. The
interval is the 2.5 and 97.5 percentiles of the simulated repeat means, the prediction their
median. The same draw serves every candidate (common random numbers), so a speedup (candidate
over baseline, draw by draw) and a ranking carry the shared uncertainty once. ``p_win`` is the
share of draws in which the speedup exceeds 1.

A prediction is refused (``status: undetermined``, with ``needs`` naming the constants) when it
depends on a constant the data did not determine: its mean regressors are checked with
:meth:`lab.calibrate.linfit.LinearFit.estimable`, its draft depth against the deepest measured
draft position, its verify variant and graph capture against the calibration, and its
replayed mean batch and KV per sequence against the measured windows' range
(:func:`range_needs`: c16 from c1/c8 alone is refused, naming the launch to run). It is never
extrapolated silently.

**Launch-to-launch noise** (issue 32): a measurement is one engine launch, and launches differ
(docs/measurement.md, "Launches"). Each draw's timing metrics are multiplied by a launch effect
``exp(N(0, launch_cv^2))`` of their own (tok/s times it, ms divided), drawn independently for every
candidate and point, so the interval is for *a new launch's* repeat mean and a speedup carries
two launches' noise. ``launch_cv`` is the documented spread of the engine
(:func:`launch_cv_for`: the emulator's default profile 2.2 %); where none is known the interval
says it leaves launch noise out (a note).

**Measured beside predicted only when the whole workload matches**: a measurement is set beside a
prediction only when its configuration key, point, per-point output and context length, and every
other workload key of ``bench`` (the regression sentinel's ``workload``: prompts, repeats, seed,
dataset and its sha256, temperature, output spread, burstiness, SLO...) and the server's batch
limits are the same (:func:`workload_mismatch`); otherwise the prediction says "not measured"
with what differs (``not_measured``).

Residual noise of the prefill blocks (``extend``, ``prefill_wall``) is not drawn (their rows are
window totals or per-prefill means, not per-iteration costs); their coefficients' uncertainty is.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lab.calibrate import model
from lab.calibrate.fit import Calibration
from lab.calibrate.observe import config_key
from lab.calibrate.simulate import SimRequest, chain_sampler, simulate_run, simulated_sampler

__all__ = ["percentile_interval", "Candidate", "PredictPoint", "Workload", "Prediction", "candidates_from_params", "points_from_bench",
           "workload_from_params", "predict", "METRICS"]

#: Predicted metrics (names as in result.json ``levels``), then the speedup of decode tok/s over the baseline.
METRICS = ("decode_tok_s", "output_tok_s", "verify_ms", "draft_ms", "decode_ms", "accept_length", "cycle_ms")


@dataclass(frozen=True)
class Candidate:
    """A server configuration to predict. ``name``: the mode name it has (or would have in a sweep);
    ``backend``: the verify attention backend set for its attention mode (None: the default)."""

    name: str
    speculative: bool
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    attention_mode: str | None = None
    backend: str | None = None
    simulate_accept_length: float | None = None

    @property
    def key(self) -> str:
        """:func:`lab.calibrate.observe.config_key` (plus ``_b<backend>`` when one is set)."""
        k = config_key(self.speculative, self.num_steps, self.topk, self.num_draft_tokens, self.attention_mode,
                       self.simulate_accept_length)
        return k + (f"_b{self.backend}" if self.backend else "")


@dataclass(frozen=True)
class PredictPoint:
    """A measurement point: ``key`` (``c8``, ``r4``, ``c8_ctx4096_out64``), closed-loop
    ``concurrency`` or open-loop ``request_rate`` (req/s), ``context_tokens``, ``output_tokens``."""

    key: str
    concurrency: int
    context_tokens: int
    output_tokens: int
    request_rate: float | None = None


@dataclass(frozen=True)
class Workload:
    """What the lab sends at each point (``bench`` and ``server`` of params.yaml)."""

    num_prompts: int
    repeats: int
    seed: int
    output_tokens_spread: float = 0.0
    burstiness: float = 1.0
    rate_max_concurrency: int = 0
    max_running_requests: int = 48
    graph_max_bs: int = 48
    #: None: the bench stage's workload (``num_prompts`` per point, seeds ``seed + repeat``); an int N:
    #: what ``lab capture --requests N`` sends (:func:`lab.pipeline.capture.capture_mode`: one window of
    #: ``max(N, 2 x concurrency)`` requests per point, seed ``seed + concurrency``; ``repeats`` 1)
    capture_requests: int | None = None


@dataclass
class Prediction:
    """One (candidate, point): ``metrics`` ``{name: {"pred", "lo", "hi"}}`` (the median and the
    95 % prediction interval; ``speedup_decode_tok_s`` included for speculative candidates),
    ``p_win``, ``status`` (``ok`` | ``undetermined``), ``needs`` (what it would take), ``notes``,
    and ``measured`` ``{name: value}`` where the configuration was measured at this point."""

    candidate: Candidate
    point: PredictPoint
    status: str
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)
    p_win: float | None = None
    needs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)
    #: why a measurement of this configuration and point is not set beside it (another workload), or None
    not_measured: str | None = None
    samples: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (samples left out)."""
        return {"candidate": asdict(self.candidate), "config": self.candidate.key, "point": asdict(self.point),
                "status": self.status, "metrics": self.metrics, "p_win": self.p_win, "needs": self.needs,
                "notes": self.notes, "measured": self.measured, "not_measured": self.not_measured,
                "error_pct": {m: 100.0 * (self.metrics[m]["pred"] - v) / v for m, v in self.measured.items()
                              if m in self.metrics and self.metrics[m].get("pred") is not None and v}}


# ---------------------------------------------------------------- candidates, points, workload

def _candidate(name: str, mode: Any) -> Candidate:
    get = (lambda k: mode.get(k)) if isinstance(mode, dict) else (lambda k: getattr(mode, k, None))
    if not get("algorithm"):
        return Candidate(name=name, speculative=False)
    steps = int(get("num_steps") or 3)
    topk = int(get("eagle_topk") or 1)
    tokens = steps + 1 if topk == 1 else int(get("num_draft_tokens") or steps + 1)
    att = get("attention_mode") or "prefill"
    backend = get("prefill_attention_backend") if att == "prefill" else get("decode_attention_backend")
    return Candidate(name=name, speculative=True, num_steps=steps, topk=topk, num_draft_tokens=tokens,
                     attention_mode=att, backend=backend, simulate_accept_length=get("simulate_accept_length"))


def candidates_from_params(params, grid: dict[str, list[Any]] | None = None) -> list[Candidate]:
    """The baseline, every mode of ``params.modes`` and every mode of the sweep grid
    (:func:`lab.pipeline.sweep.expand`; ``grid`` replaces keys of ``params.sweep.grid``), one per
    distinct configuration (the first name wins; a baseline is always included).

    :raises lab.config.ParamsError: an invalid sweep section or grid.
    """
    from lab.pipeline.sweep import expand

    out: dict[str, Candidate] = {"baseline": Candidate(name="baseline", speculative=False)}
    for name, mode in params.modes.items():
        c = _candidate(name, mode)
        if c.key == "baseline":
            out["baseline"] = c
        else:
            out.setdefault(c.key, c)
    section = dict(params.sweep or {})
    if grid:
        section["grid"] = {**(section.get("grid") or {}), **grid}
    if section:
        modes, _ = expand(section)
        for name, mode in modes.items():
            c = _candidate(name, mode)
            out.setdefault(c.key, c)
    return list(out.values())


def points_from_bench(bench, concurrency: list[int] | None = None, request_rates: list[float] | None = None) -> list[PredictPoint]:
    """:func:`lab.measure.point.measurement_points` of ``bench`` (with ``concurrency`` /
    ``request_rates`` replacing its lists when given)."""
    from lab.measure.point import measurement_points

    upd = {}
    if concurrency:
        upd["concurrency"] = sorted(set(concurrency))
    if request_rates is not None:
        upd["request_rates"] = list(request_rates)
    b = bench.model_copy(update=upd) if upd else bench
    return [PredictPoint(key=p.key, concurrency=p.concurrency, context_tokens=p.context_tokens,
                         output_tokens=p.output_tokens, request_rate=p.request_rate) for p in measurement_points(b)]


def workload_from_params(params) -> Workload:
    """:class:`Workload` of params.yaml's ``bench`` and ``server``."""
    b, s = params.bench, params.server
    return Workload(num_prompts=b.num_prompts, repeats=b.repeats, seed=b.seed, output_tokens_spread=b.output_tokens_spread,
                    burstiness=b.burstiness, rate_max_concurrency=b.rate_max_concurrency,
                    max_running_requests=s.max_running_requests, graph_max_bs=s.cuda_graph_max_bs_decode)


# ---------------------------------------------------------------- costs of one draw

class _DrawCosts:
    """:class:`lab.calibrate.simulate.Costs` of one posterior draw for one candidate; optionally
    accumulates the regressor rows it used (for the estimability check)."""

    def __init__(self, cal: Calibration, betas: dict[str, np.ndarray], noise: dict[str, float], cand: Candidate,
                 variant: str | None, graph_max_bs: int, record: bool = False) -> None:
        self.cal, self.b, self.e, self.c, self.var = cal, betas, noise, cand, variant
        self.gmax = graph_max_bs
        self.vgraph = bool(cal.verify_graph.get(variant)) if variant else False
        self.ext_graph = cal.draft_extend_graph is not False
        self.rec: dict[str, list] | None = {k: [] for k in cal.blocks} if record else None
        #: (batch, KV tokens of the batch / 1000) of every decode iteration, when recording
        self.iters: list[tuple[int, float]] | None = [] if record else None
        self._by_batch: dict[tuple[str, int], float] = {}

    def _use(self, block: str, x: np.ndarray) -> float:
        if self.rec is not None:
            self.rec[block].append(x)
        return float(x @ self.b[block]) + self.e.get(block, 0.0)

    def _use_per_batch(self, block: str, batch: int, row) -> float:
        """:meth:`_use` of a row that depends on the batch only (``row()`` builds it): computed once
        per batch size in this draw, the same product each time; every row is kept when recording."""
        if self.rec is not None:
            return self._use(block, row())
        v = self._by_batch.get((block, batch))
        if v is None:
            v = self._by_batch[(block, batch)] = self._use(block, row())
        return v

    def prefill(self, new_tokens: int) -> float:
        """Wall time of a prefill iteration: device time (the draft model's too, under speculation)
        plus what a prefill adds beyond it (block ``prefill_wall``)."""
        return (self._use("extend", model.extend_x(1.0, float(new_tokens), speculative=self.c.speculative))
                + self._use("prefill_wall", model.prefill_wall_x()))

    def decode(self, batch: int, kv_k: float) -> float:
        if self.iters is not None:
            self.iters.append((batch, kv_k))
        return self._use("decode", model.decode_x(batch, kv_k, 1.0 if batch <= self.gmax else 0.0,
                                                  self.cal.blocks["decode"].names))

    def spec(self, batch: int, kv_k: float) -> tuple[float, float]:
        if self.iters is not None:
            self.iters.append((batch, kv_k))
        g = 1.0 if (batch <= self.gmax and self.vgraph) else 0.0
        v = self._use("verify", model.verify_x(self.cal.verify_columns, batch, kv_k, g, self.c.num_draft_tokens,
                                               self.cal.t_ref, self.var))
        d = self._use_per_batch("draft", batch, lambda: model.draft_x(batch, self.c.num_steps))
        if self.ext_graph:
            d += self._use_per_batch("draft_extend", batch, lambda: model.draft_extend_x(batch))
        else:
            d += self._use_per_batch("extend", batch, lambda: model.extend_x(0.0, 0.0, 1.0, batch - 1.0))
        return v, d

    def overhead(self, batch: int) -> float:
        """Scheduling of one decode iteration (a speculative cycle's extra when speculative)."""
        return self._use_per_batch("overhead", batch,
                                   lambda: model.overhead_x(batch, 1.0 if self.c.speculative else 0.0))


# ---------------------------------------------------------------- the workload of a point

def _requests(cal: Calibration, point: PredictPoint, wl: Workload, rep: int, notes: list[str]) -> list[SimRequest]:
    from lab.workload.dataset import output_lengths, workload_indices

    obs = cal.obs
    table = obs.prompt_tokens.get(point.context_tokens)
    base = obs.prompt_tokens.get(0) or next(iter(obs.prompt_tokens.values()), {})
    n_data = obs.dataset_size or (max(base) + 1 if base else 1)
    if wl.capture_requests:  # lab capture's window (Workload.capture_requests)
        n, seed = max(wl.capture_requests, 2 * point.concurrency), wl.seed + point.concurrency
    else:
        n, seed = wl.num_prompts, wl.seed + rep
    idx = workload_indices(n_data, n, seed)
    lengths = output_lengths(len(idx), point.output_tokens, wl.output_tokens_spread, seed)
    mean_p = statistics.fmean(v[0] for v in base.values()) if base else 100.0
    out = []
    estimated = False
    for i, n in zip(idx, lengths):
        if table and i in table:
            p, cached = table[i]
        elif i in base:
            p, cached = base[i][0] + point.context_tokens, 0
            estimated = estimated or point.context_tokens > 0
        else:
            p, cached = int(mean_p) + point.context_tokens, 0
            estimated = True
        out.append(SimRequest(prompt_tokens=int(p), new_prompt_tokens=max(1, int(p) - int(cached)), max_tokens=int(n)))
    if estimated:
        notes.append(f"prompt lengths at context {point.context_tokens} not measured: estimated as the measured "
                     "prompt + the context tokens")
    return out


def _first_group(cal: Calibration) -> int | None:
    g = cal.obs.first_prefill_group
    return int(statistics.median_low(g)) if g else None


# ---------------------------------------------------------------- estimability

def _variant(cal: Calibration, cand: Candidate) -> str | None:
    if not cand.speculative:
        return None
    versions = [str(c.engine_version) for c in cal.obs.configs.values() if c.speculative] or cal.engine_versions
    backends = [c.verify_backend for c in cal.obs.configs.values() if c.speculative and c.verify_backend]
    default = statistics.mode(backends) if backends else None
    return model.verify_variant(versions[0] if versions else None, cand.attention_mode, cand.backend or default)


def _needs(cal: Calibration, cand: Candidate, point: PredictPoint, wl: Workload, variant: str | None) -> list[str]:
    """What this prediction depends on that the data did not determine (empty: predictable)."""
    needs: list[str] = []
    if cand.speculative:
        if cand.topk != 1:
            needs.append(f"eagle_topk {cand.topk}: tree drafts are not modelled (lab calibrate fits chain drafts)")
        why = model.verify_needs(cal.verify_columns, variant)
        if why:
            needs.append(why)
        elif cal.verify_graph.get(variant) is None:
            needs.append(f"whether verify runs in a CUDA graph for {variant} ({cal.verify_graph_source.get(variant)})")
        if cand.simulate_accept_length is None:
            depth = cal.acceptance.depth if cal.acceptance else 0
            if cand.num_steps > depth:
                needs.append(f"acceptance at draft positions {depth + 1}..{cand.num_steps} (deepest measured: {depth}); "
                             f"measure a configuration with num_steps >= {cand.num_steps}")
        if cal.draft_extend_graph is None and not cal.blocks["draft_extend"].n:
            needs.append("the draft-extend cost (no speculative window measured it)")
    if needs:
        return needs
    betas = {k: f.coef for k, f in cal.blocks.items()}
    recs: dict[str, list[np.ndarray]] = {}
    iters: list[tuple[int, float]] = []
    for rep in range(wl.repeats):  # the plug-in replay of every repeat: the rows this prediction uses
        costs = _DrawCosts(cal, betas, {}, cand, variant, wl.graph_max_bs, record=True)
        reqs = _requests(cal, point, wl, rep, [])
        simulate_run(reqs, costs, sampler=_sampler(cal, cand, None), rng=random.Random(rep),
                     concurrency=point.concurrency, arrivals_s=_arrivals(point, wl, rep, len(reqs)),
                     max_running=wl.max_running_requests, first_group=_first_group(cal),
                     rate_max_concurrency=wl.rate_max_concurrency)
        for block, rows in (costs.rec or {}).items():
            if rows:  # extend rows are window totals, the others per-iteration means
                recs.setdefault(block, []).append(np.sum(rows, axis=0) if block == "extend" else np.mean(rows, axis=0))
        iters += costs.iters or []
    for block, rows in recs.items():
        x = np.mean(rows, axis=0)
        ok, bad = cal.blocks[block].estimable(x)
        if not ok:
            fit = cal.blocks[block]
            needs += [f"{name} ({fit.reasons.get(name)})" for name in bad]
    return needs + range_needs(cal, cand, point, iters)


#: How far (relative) a prediction's mean batch or KV per sequence may lie beyond the largest
#: measured window's before it is refused as an extrapolation (:func:`range_needs`). 10 %: the
#: spread of a closed-loop window's mean batch around its concurrency at the lab's default
#: workload (requests finishing at different cycles), not a fitted value.
EXTRAPOLATION_TOLERANCE = 0.10


def range_needs(cal: Calibration, cand: Candidate, point: PredictPoint, iters: list[tuple[int, float]]) -> list[str]:
    """Refusals of a prediction outside the measured range (issue 32 item 4): the decode
    iterations of its plug-in replay (``iters``: ``(batch, KV tokens of the batch / 1000)`` each)
    against the measured windows of the same kind (speculative or not) that the calibration read.

    A linear cost fitted at batches 1..8 says nothing checked about batch 16 (a CUDA-graph bucket,
    a kernel's tile count, the scheduler's sort can all change beyond it), nor a KV cost fitted at
    up to 1k tokens per sequence about 8k; out-of-sample checks extrapolating c8 -> c16 on the
    emulator missed by 19-26 % (issue 32). So a prediction whose mean batch, or mean KV tokens per
    sequence, exceeds the largest measured window's by more than :data:`EXTRAPOLATION_TOLERANCE`
    is refused, and the message names the launch that would determine it.

    :returns: one sentence per refusal (empty: within the measured range).
    """
    if not iters:
        return []
    wins = [w for w in cal.obs.windows if w.batch_mean > 0 and w.config in cal.obs.configs
            and cal.obs.configs[w.config].speculative == cand.speculative]
    if not wins:
        return []
    kind = "speculative" if cand.speculative else "non-speculative"
    b = statistics.fmean(n for n, _ in iters)
    kv = 1e3 * sum(k for _, k in iters) / sum(n for n, _ in iters)  # as a window's kv_mean_k / batch_mean
    top_b = max(wins, key=lambda w: w.batch_mean)
    top_kv = max(wins, key=lambda w: w.kv_mean_k / w.batch_mean)
    kv_max = 1e3 * top_kv.kv_mean_k / top_kv.batch_mean
    where = (f"request_rates including {point.request_rate:g}" if point.request_rate is not None
             else f"concurrency including {point.concurrency}")
    out = []
    tol = 1.0 + EXTRAPOLATION_TOLERANCE
    if b > top_b.batch_mean * tol:
        out.append(f"a mean batch of {b:.1f} sequences at {point.key}, beyond the largest measured {kind} window's "
                   f"{top_b.batch_mean:.1f} ({top_b.label}): extrapolating the per-sequence costs is refused; "
                   f"run the launch that measures it: this configuration's mode with bench.{where} "
                   f"(or `lab capture --concurrency {point.concurrency}`)")
    if kv > kv_max * tol:
        out.append(f"a mean KV context of {kv:.0f} tokens per sequence at {point.key}, beyond the largest measured "
                   f"{kind} window's {kv_max:.0f} ({top_kv.label}): extrapolating the KV cost is refused; run the launch "
                   f"that measures it: this configuration's mode with bench.context_tokens including "
                   f"{point.context_tokens} and max_new_tokens {point.output_tokens} (or `lab capture --context-tokens "
                   f"{point.context_tokens}`)")
    return out


def _sampler(cal: Calibration, cand: Candidate, alphas: np.ndarray | None):
    if not cand.speculative:
        return None
    if cand.simulate_accept_length is not None:
        return simulated_sampler(cand.simulate_accept_length, min(cand.num_steps + 1, cand.num_draft_tokens))
    if alphas is None:
        acc = cal.acceptance
        alphas = np.array([acc.rate(j + 1) or 0.0 for j in range(cand.num_steps)]) if acc else np.zeros(cand.num_steps)
    return chain_sampler([float(a) for a in alphas[: cand.num_steps]])


def _arrivals(point: PredictPoint, wl: Workload, rep: int, n: int) -> list[float] | None:
    if point.request_rate is None:
        return None
    from lab.workload.arrivals import arrival_times

    return arrival_times(n, point.request_rate, wl.burstiness, wl.seed + rep)


# ---------------------------------------------------------------- predict

def percentile_interval(values: list[float]) -> dict[str, float | None]:
    """The median and the central 95 % of posterior draws: ``{"pred", "lo", "hi"}`` (2.5th, 50th and
    97.5th percentiles, :func:`numpy.percentile`'s linear rule); None values and non-finite draws are
    left out; all three None when no draw is left."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"pred": None, "lo": None, "hi": None}
    q = np.percentile(vals, [2.5, 50, 97.5])
    return {"pred": float(q[1]), "lo": float(q[0]), "hi": float(q[2])}


#: Keys of the sentinel's ``workload`` that name the list of points (compared per point instead).
POINT_LIST_KEYS = frozenset({"concurrency", "request_rates", "context_tokens", "output_tokens", "max_new_tokens"})


def launch_cv_for(engine: str | None) -> float | None:
    """The documented launch-to-launch CV of a launch mean for ``engine`` (the emulator's default
    profile's, :attr:`lab.engine.emulator_engine.Emulator.launch_spread_priors`), None where none is known."""
    from lab.analysis.launches import prior_spread

    s = prior_spread(engine, "kimi_k25_tp8_pcie")  # documented only for the emulator's profiles
    return s.cv if s else None


def workload_mismatch(measured: dict[str, Any] | None, point: PredictPoint, wl: Workload,
                      workload: dict[str, Any] | None) -> list[str]:
    """What differs between a measured point's workload and the prediction's (module docstring):
    ``["max_new_tokens 64 measured, 128 predicted", ...]``; empty when everything matches.

    :param measured: the measured point's ``_workload`` (:func:`lab.calibrate.prediction_report.measured_by_config`).
    :param workload: the prediction's ``bench`` workload (all but the sentinel's ``NOT_WORKLOAD``);
        None: only the point, :class:`Workload` and server limits are compared.
    """
    if not measured:
        return ["the measurement does not record its workload (result.json without sentinel.material)"]
    out = []
    level = measured.get("level") or {}
    for key, want in (("max_new_tokens", point.output_tokens), ("context_tokens", point.context_tokens)):
        have = level.get(key)
        if have is not None and want is not None and int(have) != int(want):
            out.append(f"{key} {have} measured, {want} predicted")
    mw = measured.get("workload") or {}
    ours = dict(workload or {})
    ours.setdefault("num_prompts", wl.num_prompts)
    ours.setdefault("repeats", wl.repeats)
    ours.setdefault("seed", wl.seed)
    ours.setdefault("output_tokens_spread", wl.output_tokens_spread)
    for k in sorted(set(mw) | set(ours)):
        if k in POINT_LIST_KEYS or (k not in mw or k not in ours):
            continue
        if mw[k] != ours[k]:
            out.append(f"{k} {mw[k]!r} measured, {ours[k]!r} predicted")
    lim = measured.get("limits") or {}
    for key, want in (("max_running_requests", wl.max_running_requests), ("cuda_graph_max_bs_decode", wl.graph_max_bs)):
        have = lim.get(key)
        if have is not None and want is not None and int(have) != int(want):
            out.append(f"{key} {have} measured, {want} predicted")
    return out


def predict(cal: Calibration, candidates: list[Candidate], points: list[PredictPoint], wl: Workload, *,
            draws: int = 100, seed: int = 0, measured: dict[str, dict[str, dict[str, float]]] | None = None,
            log=None, workload: dict[str, Any] | None = None, launch_cv: float | None = -1.0) -> list[Prediction]:
    """Predict every (candidate, point) (module docstring).

    :param measured: ``{config key: {point key: {metric: mean, "_workload": {...}}}}`` to show beside
        the predictions where the whole workload matches (:func:`workload_mismatch`;
        :func:`lab.calibrate.prediction_report.measured_by_config`).
    :param workload: the prediction's ``bench`` workload (the sentinel's keys), for that match.
    :param launch_cv: launch-to-launch CV folded into every interval; -1 (default): the engine's
        documented one (:func:`launch_cv_for`); None or 0: left out (a note says so).
    :param log: optional ``print``-like progress callback.
    :returns: one :class:`Prediction` per (candidate, point), candidates in the order given.
    """
    if launch_cv is not None and launch_cv < 0:
        launch_cv = launch_cv_for(cal.engine)
    rng = np.random.default_rng(seed)
    launch_rng = np.random.default_rng(seed + 7_919)  # its own stream: the block draws stay as before
    block_draws = {k: f.draw(rng, draws) for k, f in cal.blocks.items()}
    depth = max([c.num_steps or 0 for c in candidates] + [1])
    alpha_draws = cal.acceptance.draw(rng, draws, depth) if cal.acceptance else np.full((draws, depth), np.nan)
    noise = {k: rng.standard_normal((draws, wl.repeats)) for k in cal.blocks if k not in ("extend", "prefill_wall")}
    # how a closed-loop burst splits across the first prefills varies from window to window (a race
    # between the client's sends and the scheduler's first admission): each simulated repeat takes
    # one of the measured splits
    groups = list(cal.obs.first_prefill_group) or [None]
    group_idx = rng.integers(0, len(groups), (draws, wl.repeats))
    turnaround = statistics.median(cal.obs.turnaround_ms) if cal.obs.turnaround_ms else 0.5
    undetermined_blocks = [k for k, f in cal.blocks.items() if f.n and f.s2 is None]
    out: list[Prediction] = []
    base_samples: dict[str, list[float | None]] = {}
    ordered = sorted(candidates, key=lambda c: c.speculative)  # the baseline first: speedups need it
    for cand in ordered:
        variant = _variant(cal, cand)
        for point in points:
            pred = Prediction(candidate=cand, point=point, status="ok")
            pred.needs = _needs(cal, cand, point, wl, variant)
            if pred.needs:
                pred.status = "undetermined"
                out.append(pred)
                if not cand.speculative:
                    base_samples[point.key] = []
                continue
            if undetermined_blocks:
                pred.notes.append(f"no residual degrees of freedom in {', '.join(undetermined_blocks)}: "
                                  "the interval leaves out that uncertainty")
            reqs = [_requests(cal, point, wl, rep, pred.notes) for rep in range(wl.repeats)]
            pred.notes = list(dict.fromkeys(pred.notes))
            arr = [_arrivals(point, wl, rep, len(reqs[rep])) for rep in range(wl.repeats)]
            samples: dict[str, list[float | None]] = {m: [] for m in METRICS}
            for k in range(draws):
                betas = {b: d[0][k] for b, d in block_draws.items()}
                runs = []
                for rep in range(wl.repeats):
                    eps = {b: float(block_draws[b][1][k] * noise[b][k, rep]) for b in noise}
                    costs = _DrawCosts(cal, betas, eps, cand, variant, wl.graph_max_bs)
                    runs.append(simulate_run(reqs[rep], costs, sampler=_sampler(cal, cand, alpha_draws[k]),
                                             rng=random.Random(seed * 1_000_003 + k * 101 + rep),
                                             concurrency=point.concurrency, arrivals_s=arr[rep],
                                             max_running=wl.max_running_requests,
                                             first_group=groups[group_idx[k, rep]],
                                             turnaround_ms=turnaround, rate_max_concurrency=wl.rate_max_concurrency))
                for m in METRICS:
                    vals = [r[m] for r in runs if r[m] is not None]
                    samples[m].append(statistics.fmean(vals) if vals else None)
            if launch_cv:  # a new launch's own speed (module docstring)
                f = np.exp(launch_rng.normal(0.0, launch_cv, draws))
                for m in METRICS:
                    if m == "accept_length":
                        continue
                    up = m.endswith("_tok_s")
                    samples[m] = [None if v is None else (v * f[k] if up else v / f[k]) for k, v in enumerate(samples[m])]
            else:
                pred.notes.append("the interval leaves out launch-to-launch noise (none known for this engine: "
                                  "measure it with `lab launches 3`)")
            pred.metrics = {m: percentile_interval(samples[m]) for m in METRICS if any(v is not None for v in samples[m])}
            if not cand.speculative:
                base_samples[point.key] = samples["decode_tok_s"]
            else:
                base = base_samples.get(point.key)
                if base:
                    ratios = [a / b for a, b in zip(samples["decode_tok_s"], base) if a and b]
                    pred.metrics["speedup_decode_tok_s"] = percentile_interval(ratios)
                    pred.p_win = sum(1 for r in ratios if r > 1.0) / len(ratios) if ratios else None
                    samples["speedup_decode_tok_s"] = ratios
                else:
                    pred.notes.append("no speedup: the baseline is not predictable at this point")
            pred.samples = {m: [v for v in vals if v is not None] for m, vals in samples.items()}
            out.append(pred)
            if log:
                d = pred.metrics.get("decode_tok_s", {})
                log(f"[lab] predict {cand.name} {point.key}: decode {d.get('pred') or float('nan'):.1f} tok/s "
                    f"[{d.get('lo') or float('nan'):.1f}, {d.get('hi') or float('nan'):.1f}]")
    for pred in out:
        m = (measured or {}).get(pred.candidate.key, {}).get(pred.point.key)
        if m:
            why = workload_mismatch(m.get("_workload"), pred.point, wl, workload)
            if why:  # another workload: not this prediction's measurement
                pred.not_measured = "not measured: " + "; ".join(why)
                continue
            pred.measured = {k: v for k, v in m.items() if k in (*METRICS, "speedup_decode_tok_s")}
    order = {c.key: i for i, c in enumerate(candidates)}
    out.sort(key=lambda p: order[p.candidate.key])
    return out
