"""``lab tune``: which ``num_steps`` (chain drafts, ``eagle_topk`` 1, ``num_draft_tokens`` =
``num_steps + 1``) to run at each concurrency and context length, from a calibration, with the
predicted speedup and its interval; the same choice as an SGLang ``--speculative-adaptive-config``
tier table and as params.yaml modes; and, once those modes are measured, predicted against
measured and the tuned tiers against SGLang's default tiers.

**The choice** (:func:`tune`). Every candidate ``num_steps`` 1..``max_steps`` and the baseline are
predicted together by :func:`lab.calibrate.predict.predict` (the same posterior draws for every
candidate: common random numbers), at each closed-loop point (concurrency x context length) of
``bench``. At a point, the candidate with the highest median predicted speedup (decode tok/s per
request over the baseline, or output tok/s of the window with ``objective="output_tok_s"``) is
the *best*; ``p_best`` is the share of draws in which it beats every other determined candidate.
The recommendation is:

- ``speculate`` with the best's steps when its 95 % prediction interval lies above 1;
- ``no speculation`` when every determined candidate's interval lies below 1;
- ``undetermined`` otherwise (measure the best and the baseline at that point: the calibration
  cannot tell).

Candidates the calibration cannot predict (a draft position deeper than any measured,
:func:`lab.calibrate.predict._needs`) are listed with what they need, never guessed.

**The tier table** (:func:`adaptive_config`). SGLang 0.5.16's ``adaptive_spec_params.py`` keys its
tiers by batch size only (a batch is padded to the next CUDA-graph size, then served by the largest
slot key not above it, ~262-345); each concurrency of the chosen context length becomes a slot
whose ``candidate_steps`` is the one recommended step count, so the EMA logic has nothing to
switch and the slot serves exactly what was predicted. A slot where no speculation (or nothing
determined) won gets the least-slow determined positive tier and a note: SGLang's 0-step tier
still runs target-verify on every token (``eagle_worker_v2.py`` ~1179-1182; on the H200 it
measured 0.42x of no speculation at 64 requests, docs/benchmarks/h200-sglang-0.5.16-adaptive.md),
which the calibration does not predict; where traffic lives at those batch sizes, serve it
without speculation. The launch's ``num_steps`` is the largest tier (SGLang refuses one outside
the candidates, and 0.5.16 with CUDA graphs crashes below the largest:
:func:`lab.engine.adaptive_rules.adaptive_launch_refusal`).

**Measured** (:func:`measured_report`). ``lab capture`` folders (or result directories) of the
written modes: per point the measured per-request decode tok/s speedup of each mode over the
measured baseline (:func:`median_ratio`: the ratio of medians the lab reports, a bootstrap
interval over requests, one launch;
widened with the engine's documented launch spread where one is known,
:func:`lab.analysis.launches.withhold`), beside the prediction; and the tuned tiers over SGLang's
default tiers (``sglang_adaptive``) at every point, with a verdict word only where the lab's rule
grants one (launches measured for the configuration; one launch per mode never does).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.calibrate.fit import Calibration
from lab.calibrate.predict import (Candidate, Prediction, PredictPoint, percentile_interval, predict,
                                   workload_from_params)

if TYPE_CHECKING:
    from lab.analysis.estimates import Ratio

__all__ = ["TunePoint", "Tuning", "tune", "adaptive_config", "tuned_modes", "measured_report", "median_ratio", "markdown", "OBJECTIVES",
           "DEFAULT_TIERS_MODE", "TUNED_MODE"]

#: What a tuning maximizes: ``decode_tok_s`` (per-request decode rate, the lab's headline) or
#: ``output_tok_s`` (all requests' tokens over the window: throughput).
OBJECTIVES = ("decode_tok_s", "output_tok_s")
#: Mode names :func:`tuned_modes` writes: the tuned tier table and SGLang's default tiers.
TUNED_MODE = "tune_adaptive"
DEFAULT_TIERS_MODE = "sglang_adaptive"


@dataclass
class TunePoint:
    """The recommendation at one point.

    :ivar point: the :class:`lab.calibrate.predict.PredictPoint` (concurrency, context tokens).
    :ivar verdict: ``speculate`` | ``no speculation`` | ``undetermined`` (module docstring).
    :ivar steps: the recommended ``num_steps`` (``speculate``), else None.
    :ivar best_steps: the determined candidate with the highest median speedup (None: none determined).
    :ivar speedup: ``{"pred", "lo", "hi"}`` of ``best_steps`` (objective over the baseline).
    :ivar p_best: share of draws in which ``best_steps`` beats every other determined candidate.
    :ivar p_win: share of draws in which ``best_steps`` beats the baseline.
    :ivar ranked: ``[(steps, {"pred", "lo", "hi"}), ...]`` every determined candidate, best first.
    :ivar refused: ``{steps: [what it needs]}`` for candidates the calibration cannot predict.
    :ivar reason: one line saying why.
    """

    point: PredictPoint
    verdict: str
    steps: int | None
    best_steps: int | None
    speedup: dict[str, float | None]
    p_best: float | None
    p_win: float | None
    ranked: list[tuple[int, dict[str, float | None]]] = field(default_factory=list)
    refused: dict[int, list[str]] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        d = asdict(self)
        d["ranked"] = [{"steps": s, **iv} for s, iv in self.ranked]
        d["refused"] = {str(k): v for k, v in self.refused.items()}
        return d


@dataclass
class Tuning:
    """What :func:`tune` found: ``points`` (one :class:`TunePoint` per point), the ``objective``,
    the ``template`` mode the candidates copy (attention mode, backend, simulated acceptance),
    ``predictions`` (every :class:`lab.calibrate.predict.Prediction`), the calibration's ``engine``
    and ``engine_versions``, ``notes``."""

    points: list[TunePoint]
    objective: str
    template: dict[str, Any]
    predictions: list[Prediction]
    engine: str
    engine_versions: list[str]
    calibration: str
    notes: list[str] = field(default_factory=list)
    #: None: predicted for the bench stage's workload; N: for ``lab capture --requests N``
    capture_requests: int | None = None

    def prediction(self, steps: int | None, point_key: str) -> Prediction | None:
        """The prediction of ``num_steps`` ``steps`` (None: the baseline) at ``point_key``."""
        for p in self.predictions:
            if p.point.key == point_key and (p.candidate.num_steps if p.candidate.speculative else None) == steps:
                return p
        return None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tuning":
        """From ``tune.json`` (:meth:`to_dict`); predictions come back without their samples."""
        def point(x: dict[str, Any]) -> PredictPoint:
            return PredictPoint(**x)

        preds = [Prediction(candidate=Candidate(**p["candidate"]), point=point(p["point"]), status=p["status"],
                            metrics=p.get("metrics") or {}, p_win=p.get("p_win"), needs=list(p.get("needs") or []),
                            notes=list(p.get("notes") or [])) for p in d.get("predictions") or []]
        pts = [TunePoint(point=point(x["point"]), verdict=x["verdict"], steps=x["steps"], best_steps=x["best_steps"],
                         speedup=x["speedup"], p_best=x["p_best"], p_win=x["p_win"],
                         ranked=[(r["steps"], {k: r.get(k) for k in ("pred", "lo", "hi")}) for r in x.get("ranked") or []],
                         refused={int(k): v for k, v in (x.get("refused") or {}).items()}, reason=x.get("reason", ""))
               for x in d.get("points") or []]
        return cls(pts, d["objective"], d.get("template") or {}, preds, d.get("engine") or "",
                   list(d.get("engine_versions") or []), d.get("calibration") or "", list(d.get("notes") or []),
                   d.get("capture_requests"))

    def to_dict(self) -> dict[str, Any]:
        """``tune.json``'s content (predictions without their samples)."""
        return {"objective": self.objective, "template": self.template, "engine": self.engine,
                "capture_requests": self.capture_requests,
                "engine_versions": self.engine_versions, "calibration": self.calibration, "notes": self.notes,
                "points": [p.to_dict() for p in self.points], "predictions": [p.to_dict() for p in self.predictions]}


def _template(params, mode: str) -> dict[str, Any]:
    """EAGLE-3 mode ``mode`` of ``params.modes`` as the candidates' template (attention mode,
    backends, simulated acceptance, extra_args without adaptive flags).

    :raises ValueError: no such mode, or it does not speculate (the message lists those that do).
    """
    m = params.modes.get(mode)
    if m is None or not m.algorithm:
        raise ValueError(f"mode {mode!r}: {'not in modes:' if m is None else 'does not speculate'}. Fix: pass "
                         f"--mode with one of {', '.join(speculative_modes(params)) or '(none: add an EAGLE3 mode)'}")
    d = m.model_dump(exclude_none=True)
    extra = [a for a in d.get("extra_args") or [] if not str(a).startswith("--speculative-adaptive")]
    if "--speculative-adaptive-config" in (d.get("extra_args") or []):  # drop the flag's value too
        i = d["extra_args"].index("--speculative-adaptive-config")
        extra = [a for j, a in enumerate(d["extra_args"]) if j not in (i, i + 1) and a != "--speculative-adaptive"]
    d["extra_args"] = extra
    d["eagle_topk"] = 1
    return {"from_mode": mode, **d}


def speculative_modes(params) -> list[str]:
    """Names of ``params.modes`` that speculate, the first of each distinct candidate family (attention
    mode, prefill and decode backends, simulated acceptance: launch flags each, which SGLang's adaptive
    tiers never change), in params order."""
    seen, out = set(), []
    for name, m in params.modes.items():
        key = (m.attention_mode or "prefill", m.prefill_attention_backend, m.decode_attention_backend,
               m.simulate_accept_length)
        if m.algorithm and key not in seen:
            seen.add(key)
            out.append(name)
    return out


def _score(t: "Tuning") -> float:
    """Mean log predicted speedup of each point's best num_steps (-inf when no point is determined)."""
    logs = [math.log(p.speedup["pred"]) for p in t.points if p.speedup.get("pred")]
    return sum(logs) / len(logs) if logs else -math.inf


def _candidate(t: dict[str, Any], steps: int) -> Candidate:
    att = t.get("attention_mode") or "prefill"
    backend = t.get("prefill_attention_backend") if att == "prefill" else t.get("decode_attention_backend")
    return Candidate(name=f"tune_s{steps}", speculative=True, num_steps=steps, topk=1, num_draft_tokens=steps + 1,
                     attention_mode=att, backend=backend, simulate_accept_length=t.get("simulate_accept_length"))


def _ratios(pred: Prediction, base: Prediction, objective: str) -> list[float]:
    if objective == "decode_tok_s":
        return list(pred.samples.get("speedup_decode_tok_s") or [])
    a, b = pred.samples.get(objective) or [], base.samples.get(objective) or []
    if len(a) != len(b):
        return []
    return [x / y for x, y in zip(a, b) if x and y]


def tune(cal: Calibration, params, *, calibration_path: str = "", concurrency: list[int] | None = None,
         context_tokens: list[int] | None = None, max_steps: int = 7, objective: str = "decode_tok_s",
         draws: int = 100, seed: int = 0, capture_requests: int | None = None, mode: str | None = None,
         log=None) -> Tuning:
    """Recommend ``num_steps`` per closed-loop point (module docstring).

    The candidates copy one speculative mode (``mode``). Without ``mode``, each distinct speculative
    mode of ``params`` (:func:`speculative_modes`: attention mode, backends, simulated acceptance; a
    launch each) is tuned and the one whose chosen num_steps predict the highest mean log speedup
    over the points is returned, with a note giving every mode's figure.

    :param cal: a calibration (:meth:`lab.calibrate.fit.Calibration.load`).
    :param params: :class:`lab.config.LabParams` (bench workload, server limits, the template mode).
    :param concurrency, context_tokens: the points (default ``bench``'s); request rates are not tuned.
    :param max_steps: the deepest candidate (SGLang's default tiers go to 7).
    :param objective: one of :data:`OBJECTIVES`.
    :param draws: posterior draws per prediction (the interval's resolution).
    :param capture_requests: predict what ``lab capture --requests N`` measures (one window of
        ``max(N, 2 x concurrency)`` requests per point) instead of the bench stage's workload
        (:attr:`lab.calibrate.predict.Workload.capture_requests`).
    :param mode: the speculative mode the candidates copy (default: the best, above).
    :raises ValueError: an unknown objective, ``max_steps`` < 1, no speculative mode, or ``mode`` not one.
    """
    from lab.calibrate.predict import points_from_bench

    if mode is None:
        names = speculative_modes(params)
        if not names:
            raise ValueError("params has no speculative mode (algorithm: EAGLE3) whose attention mode, backends and "
                             "acceptance the candidates could copy. Fix: add one to modes:, or pass --params with one")
        kw = dict(calibration_path=calibration_path, concurrency=concurrency, context_tokens=context_tokens,
                  max_steps=max_steps, objective=objective, draws=draws, seed=seed, capture_requests=capture_requests,
                  log=log)
        each = {name: tune(cal, params, mode=name, **kw) for name in names}
        if len(each) == 1:
            return each[names[0]]
        score = {n: _score(t) for n, t in each.items()}
        best = max(names, key=score.get)
        figures = ", ".join(f"{n} {math.exp(score[n]):.2f}x" if score[n] > -math.inf else f"{n} undetermined"
                            for n in names)
        each[best].notes.insert(0, f"candidates copy mode {best}: of the speculative modes, its chosen num_steps "
                                   f"predict the highest geometric-mean speedup over the points ({figures}); "
                                   "--mode picks another")
        return each[best]

    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: not one of {', '.join(OBJECTIVES)}")
    if max_steps < 1:
        raise ValueError(f"max_steps {max_steps}: must be >= 1 (num_steps 1 is the shallowest chain draft)")
    t = _template(params, mode)
    upd: dict[str, Any] = {"request_rates": []}
    if context_tokens is not None:
        upd["context_tokens"] = sorted(set(int(c) for c in context_tokens))
    bench = params.bench.model_copy(update=upd)
    points = [p for p in points_from_bench(bench, concurrency, []) if p.request_rate is None]
    cands = [Candidate(name="baseline", speculative=False)] + [_candidate(t, s) for s in range(1, max_steps + 1)]
    wl = workload_from_params(params)
    if capture_requests:
        wl = dataclasses.replace(wl, capture_requests=int(capture_requests), repeats=1)
    preds = predict(cal, cands, points, wl, draws=draws, seed=seed, log=log)
    out: list[TunePoint] = []
    for pt in points:
        base = next(p for p in preds if p.point.key == pt.key and not p.candidate.speculative)
        spec = [p for p in preds if p.point.key == pt.key and p.candidate.speculative]
        refused = {p.candidate.num_steps: list(p.needs) for p in spec if p.status != "ok"}
        ratios = {p.candidate.num_steps: _ratios(p, base, objective) for p in spec if p.status == "ok"}
        ratios = {s: r for s, r in ratios.items() if r}
        if base.status != "ok" or not ratios:
            why = "; ".join(base.needs) if base.status != "ok" else "no candidate is determined"
            out.append(TunePoint(pt, "undetermined", None, None, {"pred": None, "lo": None, "hi": None}, None, None,
                                 [], refused, f"nothing to choose from: {why}"))
            continue
        ivs = {s: percentile_interval(r) for s, r in ratios.items()}
        ranked = sorted(ivs.items(), key=lambda kv: -(kv[1]["pred"] or -math.inf))
        best = ranked[0][0]
        n = min(len(r) for r in ratios.values())
        p_best = sum(1 for k in range(n) if all(ratios[best][k] >= ratios[s][k] for s in ratios)) / n if n else None
        p_win = sum(1 for v in ratios[best] if v > 1.0) / len(ratios[best])
        iv = ivs[best]
        if iv["lo"] is not None and iv["lo"] > 1.0:
            verdict, steps = "speculate", best
            reason = f"num_steps {best} predicted {iv['pred']:.2f}x [{iv['lo']:.2f}, {iv['hi']:.2f}] (P(best) {p_best:.2f})"
        elif all(v["hi"] is not None and v["hi"] < 1.0 for v in ivs.values()):
            verdict, steps = "no speculation", None
            reason = (f"every num_steps predicted slower; the least slow, {best}, {iv['pred']:.2f}x "
                      f"[{iv['lo']:.2f}, {iv['hi']:.2f}]")
        else:
            verdict, steps = "undetermined", None
            reason = (f"num_steps {best} predicted {iv['pred']:.2f}x [{iv['lo']:.2f}, {iv['hi']:.2f}]: the interval "
                      f"spans 1; measure it and the baseline at {pt.key}")
        out.append(TunePoint(pt, verdict, steps, best, iv, p_best, p_win, ranked, refused, reason))
    notes = []
    if not capture_requests:
        short = [p.key for p in points if p.concurrency > wl.num_prompts]
        if short:
            notes.append(f"bench.num_prompts {wl.num_prompts} is below the concurrency at {', '.join(short)}: those "
                         "points never run that many requests at once (raise num_prompts, with repeat_prompts: true)")
    refused: dict[int, list[str]] = {}
    for p in out:
        for s in p.refused:
            refused.setdefault(s, []).append(p.point.key)
    for s, keys in sorted(refused.items()):
        need = next(p.refused[s][0] for p in out if s in p.refused and p.refused[s])
        notes.append(f"num_steps {s} not predicted at {', '.join(keys)}: needs {need}")
    return Tuning(out, objective, t, preds, cal.engine, list(cal.engine_versions or []), calibration_path, notes,
                  capture_requests)


def adaptive_config(tuning: Tuning, context_tokens: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """The SGLang ``--speculative-adaptive-config`` JSON of the tuning at one context length
    (default: the shortest) and notes on the slots that could not take the recommendation
    (module docstring). Keys are the concurrencies (batch-size slots), each
    ``{"candidate_steps": [steps]}``.

    :raises ValueError: no point at that context length, or no slot with a determined candidate.
    """
    ctxs = sorted({p.point.context_tokens for p in tuning.points})
    ctx = ctxs[0] if context_tokens is None else int(context_tokens)
    rows = sorted((p for p in tuning.points if p.point.context_tokens == ctx), key=lambda p: p.point.concurrency)
    if not rows:
        raise ValueError(f"no tuned point at context {ctx} (tuned: {ctxs}). Fix: --tier-context one of them")
    cfg: dict[str, Any] = {}
    notes: list[str] = []
    for p in rows:
        steps = p.steps if p.verdict == "speculate" else p.best_steps
        if steps is None:
            notes.append(f"slot {p.point.concurrency}: left out ({p.reason}); the slot below serves it")
            continue
        if p.verdict == "no speculation":
            notes.append(f"slot {p.point.concurrency}: no speculation ({p.reason}); given the least-slow tier {steps}, "
                         "since SGLang's 0-step tier still runs target-verify and is not predicted: where traffic runs "
                         "at this batch size, serve it without speculation")
        elif p.verdict == "undetermined":
            notes.append(f"slot {p.point.concurrency}: undetermined ({p.reason}); given the best-predicted tier {steps}")
        cfg[str(p.point.concurrency)] = {"candidate_steps": [steps]}
    if not cfg:
        raise ValueError(f"no slot at context {ctx} has a determined candidate: nothing to write")
    if "1" not in cfg:
        notes.append(f"batch sizes below {min(int(k) for k in cfg)} are served by the smallest slot (SGLang's routing)")
    return cfg, notes


def tuned_modes(tuning: Tuning, config_path: str) -> dict[str, dict[str, Any]]:
    """params.yaml ``modes:`` to measure the recommendation: ``baseline``, one fixed mode
    ``tune_s<k>`` per recommended step count, :data:`TUNED_MODE` (``--speculative-adaptive`` with
    ``config_path``, launched at its largest tier) and :data:`DEFAULT_TIERS_MODE` (SGLang's default
    tiers, launched at 7, their largest), each copying the template mode."""
    cfg = json.loads(Path(config_path).read_text())
    tiers = sorted({s for e in cfg.values() if isinstance(e, dict) for s in e.get("candidate_steps", [])})
    t = {k: v for k, v in tuning.template.items() if k not in ("from_mode",)}

    def mode(steps: int, extra: list[str]) -> dict[str, Any]:
        return {**copy.deepcopy(t), "algorithm": t.get("algorithm") or "EAGLE3", "num_steps": steps, "eagle_topk": 1,
                "num_draft_tokens": steps + 1, "extra_args": list(t.get("extra_args") or []) + extra}

    modes: dict[str, dict[str, Any]] = {"baseline": {"algorithm": None}}
    for s in sorted({p.steps for p in tuning.points if p.verdict == "speculate"}):
        modes[f"tune_s{s}"] = mode(s, [])
    modes[TUNED_MODE] = mode(max(tiers), ["--speculative-adaptive", "--speculative-adaptive-config", config_path])
    modes[DEFAULT_TIERS_MODE] = mode(7, ["--speculative-adaptive"])
    return modes


# ---------------------------------------------------------------- measured


def _measured_tok_s(d: Path) -> tuple[str, dict[tuple[int, int], list[float]], dict[tuple[int, int], Any]]:
    """``(mode, {(concurrency, context): [per-request decode tok/s]}, {(c, ctx): served tier})`` of
    one ``lab capture`` mode folder or result directory; the tier is the most frequent step count
    of the decode log lines at that many running requests
    (:func:`lab.measure.decode_log.steps_by_batch`; None where none was logged: a mode without
    speculation, or no log). The ``sglang:spec_num_steps`` gauge after a window is not used: it
    reads the tier of the window's last iterations, where the batch has drained."""
    from lab.measure.records import request_metrics
    from lab.measure.request_record import RequestRecord

    recs = [RequestRecord.from_json(json.loads(x)) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
    out: dict[tuple[int, int], list[float]] = {}
    for r in recs:
        if r.warmup or not r.ok or r.request_rate:
            continue
        v = request_metrics(r).decode_tok_s
        if v:
            out.setdefault((int(r.concurrency), int(r.context_tokens or 0)), []).append(float(v))
    from lab.measure.decode_log import steps_by_batch

    log = d / "server.log"
    by_batch = steps_by_batch(log.read_text(errors="replace")) if log.is_file() else {}
    tiers = {key: by_batch.get(key[0]) for key in out}
    mode = next((r.mode for r in recs if r.mode), d.name)
    return str(mode), out, tiers


def median_ratio(base: list[float], other: list[float], *, seed: int = 0) -> "Ratio":
    """``median(other) / median(base)`` of per-request decode tok/s (the statistic the lab reports
    per point and :func:`lab.calibrate.simulate.simulate_run` predicts), with a 95 % percentile
    bootstrap interval over requests (``scipy.stats.bootstrap``, 2000 resamples, seeded), scope
    one launch and the verdict of :func:`lab.analysis.stats.verdict`.

    :param base, other: per-request values (>= 2 each, else no interval and no verdict).
    """
    import numpy as np
    from scipy import stats as st

    from lab.analysis.estimates import Ratio
    from lab.analysis.launches import WITHIN_ONE_LAUNCH
    from lab.analysis.stats import verdict

    b, o = np.asarray(base, float), np.asarray(other, float)
    r = float(np.median(o) / np.median(b)) if b.size and o.size and np.median(b) > 0 else None
    lo = hi = None
    if r is not None and b.size >= 2 and o.size >= 2:
        res = st.bootstrap((b, o), lambda x, y, axis=-1: np.median(y, axis=axis) / np.median(x, axis=axis),
                           n_resamples=2000, method="percentile", random_state=np.random.default_rng(seed),
                           vectorized=True)
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    word = verdict(r, lo, hi) if r is not None and lo is not None else None
    return Ratio(r, lo, hi, word, {"method": "ratio of medians, bootstrap over requests", "unit": "request",
                                   "n_units": [int(b.size), int(o.size)]}, scope=WITHIN_ONE_LAUNCH,
                 note=None if lo is not None else "fewer than 2 requests on a side: no interval")


def measured_report(tuning: Tuning, dirs: list[Path], *, engine_profile: str | None = None) -> dict[str, Any]:
    """Predicted against measured for the modes :func:`tuned_modes` wrote (module docstring).

    :param dirs: one folder per measured mode (``lab capture --out DIR``'s ``DIR/<mode>``, or
        ``results/<mode>``), a ``baseline`` among them.
    :param engine_profile: the emulator's cost profile (its documented launch spread widens the
        one-launch intervals); None for a real engine.
    :returns: ``{"rows": [...], "versus_default": [...], "scope": str}``; each row: mode, point,
        concurrency, context_tokens, predicted ``{"pred", "lo", "hi"}`` (None where the mode's tier
        is not predicted), measured ratio / lo / hi / verdict, ``inside`` (measured in the interval).
    :raises ValueError: no baseline among ``dirs``.
    """
    from lab.analysis.launches import prior_spread, withhold

    got = {m: (tok, tiers) for m, tok, tiers in (_measured_tok_s(Path(d)) for d in dirs)}
    if "baseline" not in got:
        raise ValueError(f"no baseline among {', '.join(str(d) for d in dirs)}: the measured speedups need one. "
                         "Fix: capture the baseline mode too")
    prior = prior_spread(tuning.engine, engine_profile)
    rows, versus = [], []
    for p in tuning.points:
        key = (p.point.concurrency, p.point.context_tokens)
        base = got["baseline"][0].get(key)
        if not base:
            continue
        for mode, (tok, tiers) in sorted(got.items()):
            if mode == "baseline" or not tok.get(key):
                continue
            r = withhold(median_ratio(base, tok[key]), prior)
            served = tiers.get(key)
            steps = int(mode[len("tune_s"):]) if mode.startswith("tune_s") and mode[6:].isdigit() else None
            if mode in (TUNED_MODE, DEFAULT_TIERS_MODE) and served is not None:
                steps = int(served)
            pred = tuning.prediction(steps, p.point.key) if steps else None
            piv = None
            if pred is not None and pred.status == "ok":
                piv = pred.metrics.get("speedup_decode_tok_s")
            inside = bool(piv is not None and r.ratio is not None and piv["lo"] is not None
                          and piv["lo"] <= r.ratio <= piv["hi"])
            rows.append({"mode": mode, "point": p.point.key, "concurrency": key[0], "context_tokens": key[1],
                         "served_steps": served if mode in (TUNED_MODE, DEFAULT_TIERS_MODE) else steps,
                         "predicted": piv, "measured": r.to_dict(), "inside": inside if piv else None})
        a, b = got.get(TUNED_MODE, ({}, {}))[0].get(key), got.get(DEFAULT_TIERS_MODE, ({}, {}))[0].get(key)
        if a and b:
            # one launch per mode: the lab's one rule (lab.analysis.launches.withhold) leaves no verdict
            # word, whether or not a documented spread widened the interval
            r = withhold(median_ratio(b, a), prior)
            versus.append({"point": p.point.key, "concurrency": key[0], "context_tokens": key[1],
                           "tuned_steps": got[TUNED_MODE][1].get(key), "default_steps": got[DEFAULT_TIERS_MODE][1].get(key),
                           "ratio": r.to_dict()})
    scope = (f"one launch per mode; intervals widened with the documented launch spread ({prior.cv:.1%} CV), "
             "no verdict word (a documented spread is not one measured for this configuration)" if prior
             else "one launch per mode, within-launch intervals (requests as units): launch-to-launch noise not "
                  "included, so no verdict word")
    return {"rows": rows, "versus_default": versus, "scope": scope}


def _fmt(iv: dict[str, float | None] | None) -> str:
    if not iv or iv.get("pred") is None:
        return "-"
    return f"{iv['pred']:.2f}x [{iv['lo']:.2f}, {iv['hi']:.2f}]"


def _fmt_ratio(d: dict[str, Any]) -> str:
    if d.get("ratio") is None:
        return "-"
    lo, hi = d.get("ci95_lo"), d.get("ci95_hi")
    return f"{d['ratio']:.2f}x [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{d['ratio']:.2f}x"


def markdown(tuning: Tuning, cfg: dict[str, Any], cfg_notes: list[str], measured: dict[str, Any] | None = None) -> str:
    """``tune.md``: the recommendation per point, the tier table, and (when measured) predicted vs
    measured and the tuned tiers over SGLang's default."""
    lines = [f"# lab tune ({tuning.engine} {', '.join(tuning.engine_versions)}; calibration {tuning.calibration})", "",
             f"Objective: {tuning.objective} speedup over the baseline; candidates num_steps "
             f"{', '.join(str(s) for s in sorted({s for p in tuning.points for s, _ in p.ranked} | {s for p in tuning.points for s in p.refused}))}"
             f" (eagle_topk 1, num_draft_tokens = num_steps + 1, copying mode `{tuning.template.get('from_mode')}`); "
             "cells: median [95 % prediction interval].", "",
             "| concurrency | context tokens | recommendation | best num_steps | predicted speedup | P(best) | P(win) | others | not predicted |",
             "| ---: | ---: | --- | ---: | --- | ---: | ---: | --- | --- |"]
    for p in tuning.points:
        others = "; ".join(f"{s}: {_fmt(iv)}" for s, iv in p.ranked[1:])
        rec = f"num_steps {p.steps}" if p.verdict == "speculate" else p.verdict
        lines.append(f"| {p.point.concurrency} | {p.point.context_tokens} | {rec} | {p.best_steps if p.best_steps else '-'} | "
                     f"{_fmt(p.speedup)} | {'-' if p.p_best is None else f'{p.p_best:.2f}'} | "
                     f"{'-' if p.p_win is None else f'{p.p_win:.2f}'} | {others or '-'} | "
                     f"{', '.join(str(s) for s in sorted(p.refused)) or '-'} |")
    lines += ["", "Tier table (`--speculative-adaptive-config`):", "", "```json", json.dumps(cfg, indent=1), "```", ""]
    lines += [f"- {n}" for n in cfg_notes + tuning.notes]
    if measured:
        lines += ["", "## Predicted against measured", "", f"Measured: {measured['scope']}.", "",
                  "| mode | concurrency | context tokens | steps served | predicted speedup | measured speedup | inside |",
                  "| --- | ---: | ---: | ---: | --- | --- | --- |"]
        for r in measured["rows"]:
            inside = "-" if r["inside"] is None else ("yes" if r["inside"] else "no")
            lines.append(f"| {r['mode']} | {r['concurrency']} | {r['context_tokens']} | "
                         f"{'-' if r['served_steps'] is None else r['served_steps']} | {_fmt(r['predicted'])} | "
                         f"{_fmt_ratio(r['measured'])} | {inside} |")
        judged = [r for r in measured["rows"] if r["inside"] is not None]
        if judged:
            k = sum(1 for r in judged if r["inside"])
            lines += ["", f"{k} of {len(judged)} measured speedups inside their 95 % prediction intervals."]
        if measured["versus_default"]:
            lines += ["", f"## Tuned tiers ({TUNED_MODE}) over SGLang's default tiers ({DEFAULT_TIERS_MODE})", "",
                      "| concurrency | context tokens | tuned steps | default steps | tuned / default decode tok/s |",
                      "| ---: | ---: | ---: | ---: | --- |"]
            for v in measured["versus_default"]:
                lines.append(f"| {v['concurrency']} | {v['context_tokens']} | {v['tuned_steps']} | {v['default_steps']} | "
                             f"{_fmt_ratio(v['ratio'])} |")
    return "\n".join(lines) + "\n"
