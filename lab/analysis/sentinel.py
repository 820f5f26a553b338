"""Regression sentinel: compare a launch with earlier launches of the *same* configuration.

The seeds' engineer lost hours to a "regression" (89 vs 82 tok/s) that was two
measurements taken under different conditions. The sentinel makes that comparison
explicit and conditional:

1. :func:`config_fingerprint` hashes everything that changes what is measured: the resolved
   server arguments read back from ``/server_info`` (``result["effective_config"]``), the
   mode's own flags (``modes.<name>``: algorithm, steps, attention mode, simulated accept
   length...), the server environment and extra arguments (credentials redacted), the
   model, the engine and its version, the hardware (the GPU model from NVML; for the
   emulator, the cost profile's name), the **content hash of every file a param points at**
   (the emulator's cost profile, the dataset, a file in the server's args or environment:
   :func:`lab.inputs.param_files`), and the whole workload: dataset path **and content
   hash**, prompts per run, output length(s) and their spread, context length(s),
   concurrency levels, the open-loop rates, burstiness, in-flight cap and SLO, repeats, warm-up
   settings, temperature and seed: every ``bench`` key but :data:`NOT_WORKLOAD`, so a new key
   is hashed unless it is listed there. The hash is the MLflow tag ``config_hash``.
2. The statistic compared is **launch-level**: one value per launch and (point, metric), the
   launch's mean over its repeats (the headline metric ``<point>.<metric>`` that every mode
   run logs). Repeats inside one launch share the launch's conditions (server process,
   warm state, GPU clocks), so pooling them across launches would understate the
   launch-to-launch variance and flag ordinary relaunches.
3. :func:`launch_delta` asks whether this launch's value could come from the launches
   before it: a Student-t **prediction interval** for one new observation from the ``k``
   earlier launch values, ``mean(h) ± t_{1-alpha/2, k-1} * s_h * sqrt(1 + 1/k)`` (e.g.
   Montgomery & Runger, *Applied Statistics and Probability for Engineers*, sec. 8.7). It
   needs ``k >= 2`` earlier launches (a spread); with fewer, the change is reported but never
   flagged. A metric is *outside noise* when the value is outside that interval **and** the
   relative change exceeds ``min_effect`` (a practical floor).

What is not in the hash, by design: the hardware's real speed. For a GPU the hash names the
model, not its clocks, driver or kernels. A slower kernel under the same name is the hidden
change the sentinel exists to catch. (The emulator's "hardware" is its cost profile: an
edited profile is a declared configuration change, so its content is hashed.) The false-alarm rate on real emulator launches is measured by
``python benchmarks/sentinel_false_alarms.py`` (docs/measurement.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.analysis.stats import finite, t_quantile, t_sf
from lab.catalog import sentinel_metrics
from lab.engine.registry import any_modelled

__all__ = ["NOT_WORKLOAD", "gpu_model", "config_fingerprint", "file_sha256",
           "launch_delta", "compare", "current_launch", "history_launches", "log_to_run", "check",
           "sentinel_table", "MIN_HISTORY", "decide"]

#: ``bench`` params that do not change what a launch measures: the thresholds of the hygiene
#: checks and of the sentinel itself, the request timeout, the profiler trace taken after
#: the measured points, and the number of launches. Every other ``bench`` key is part of the workload hash. (The metrics
#: watched are those :mod:`lab.catalog` marks ``sentinel``, :func:`lab.catalog.sentinel_metrics`.)
NOT_WORKLOAD = frozenset({"ngram_n", "ngram_repeat_threshold", "degenerate_max_fraction", "sentinel_history_runs",
                          "sentinel_alpha", "sentinel_min_effect", "request_timeout_s", "trace",
                          "trace_requests", "trace_max_new_tokens",
                          # how many launches a session makes: each launch measures the same, and
                          # the comparison borrows the spread of earlier launches by this hash
                          "launches", "later_launches"})
#: Earlier launches needed before a change can be flagged (a spread needs two values).
MIN_HISTORY = 2


def gpu_model() -> str:
    """Name of GPU 0 from NVML (``nvidia-ml-py``), or ``"none"`` when NVML is unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"{count}x {name}"
    except Exception:  # no driver, no GPU, no library: nothing to name
        return "none"


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes, or ``"missing: <path>"``."""
    p = Path(path)
    if not p.is_file():
        return f"missing: {p}"
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_fingerprint(result: Mapping[str, Any], workload: Mapping[str, Any], *,
                       gpu: str | None = None, setup: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The configuration hash of a launch and what went into it.

    :param result: ``result.json`` content (``engine``, ``engine_version``, ``effective_config``).
    :param workload: the ``bench`` params (all but :data:`NOT_WORKLOAD` are hashed), plus
        ``dataset_sha256`` when known.
    :param gpu: hardware name; None: :func:`gpu_model` for SGLang, ``"none (emulator)"`` for
        the emulator.
    :param setup: the rest of what shapes the launch (the mode's flags, model, server
        environment and extra args, the emulator profile's name):
        :func:`lab.pipeline.bench.launch_setup`.
    :returns: ``(sha256 hex prefix of 16 chars, material dict)``.
    """
    engine = result.get("engine", "unknown")
    if gpu is None:
        gpu = "none (emulator)" if any_modelled([engine]) else gpu_model()
    material = {
        "engine": engine,
        "engine_version": str(result.get("engine_version", "unknown")),
        "gpu_model": gpu,
        "effective_config": dict(sorted((result.get("effective_config") or {}).items())),
        "workload": {k: workload[k] for k in sorted(workload) if k not in NOT_WORKLOAD},
        "setup": dict(setup or {}),
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16], material


def launch_delta(current: float | None, history: Sequence[float | None], *, alpha: float = 0.01,
                 min_effect: float = 0.02) -> dict[str, Any]:
    """Is one launch's value ``current`` outside the noise of earlier launches ``history``?

    Prediction interval for one new launch from ``k`` earlier ones (one value each):
    ``mean(h) ± t_{1-alpha/2, k-1} * s_h * sqrt(1 + 1/k)``; the two-sided p-value of
    ``(current - mean(h)) / (s_h * sqrt(1 + 1/k))`` under Student-t with ``k - 1`` degrees
    of freedom. Flagged ("outside noise") when ``p < alpha`` and ``|rel_delta| > min_effect``.
    With ``s_h == 0`` the p-value is 0 for a changed value and 1 otherwise.

    :param current: this launch's value (its mean over repeats).
    :param history: earlier launches' values, one per launch.
    :param alpha: test level (1 - prediction level). :param min_effect: relative floor.
    :returns: ``{"current_mean", "history_mean", "history_sd", "delta", "delta_lo",
        "delta_hi", "rel_delta", "p_value", "n_history", "outside_noise": bool|None,
        "method"}``; ``delta_lo``/``delta_hi`` bound ``current - mean(h)`` for a launch from
        the same distribution (the prediction interval shifted by ``mean(h)``);
        ``outside_noise`` is None with fewer than :data:`MIN_HISTORY` earlier launches.
    """
    h = finite(history)
    c = None if current is None or not math.isfinite(float(current)) else float(current)
    out: dict[str, Any] = {"n_history": int(h.size), "current_mean": c,
                           "method": f"launch-level prediction interval (t, 1 - alpha), >= {MIN_HISTORY} earlier launches",
                           "history_mean": float(h.mean()) if h.size else None, "history_sd": None,
                           "delta": None, "delta_lo": None, "delta_hi": None, "rel_delta": None,
                           "p_value": None, "outside_noise": None}
    if c is None or h.size == 0:
        return out
    delta = c - float(h.mean())
    out["delta"] = delta
    out["rel_delta"] = delta / abs(h.mean()) if h.mean() else None
    if h.size < MIN_HISTORY:
        return out
    sd = float(h.std(ddof=1))
    out["history_sd"] = sd
    scale = sd * math.sqrt(1.0 + 1.0 / h.size)
    df = h.size - 1
    if scale == 0.0:
        p, half = (0.0 if delta != 0 else 1.0), 0.0
    else:
        p = 2.0 * t_sf(abs(delta) / scale, df)
        half = t_quantile(1.0 - alpha / 2.0, df) * scale
    out.update(delta_lo=-half, delta_hi=half, p_value=p)
    big = out["rel_delta"] is not None and abs(out["rel_delta"]) > min_effect
    out["outside_noise"] = bool(p < alpha and big)
    return out


def compare(current: Mapping[str, Mapping[str, float]], history: Mapping[str, Mapping[str, Sequence[float]]],
            *, alpha: float, min_effect: float) -> dict[str, Any]:
    """:func:`launch_delta` for every (point, metric) present in both.

    :param current: ``{"c1": {"decode_tok_s": launch_mean}}``.
    :param history: ``{"c1": {"decode_tok_s": [launch_mean, ...]}}`` (one value per earlier launch).
    :returns: ``{"c1": {"decode_tok_s": {...launch_delta..., "direction": "better"|"worse"|None}}}``.
    """
    out: dict[str, Any] = {}
    watched = sentinel_metrics()
    for level, metrics in current.items():
        for m, val in metrics.items():
            hist = (history.get(level) or {}).get(m)
            if not hist:
                continue
            d = launch_delta(val, hist, alpha=alpha, min_effect=min_effect)
            d["direction"] = None
            if d["outside_noise"]:
                up = d["delta"] > 0
                d["direction"] = "better" if up == watched.get(m, True) else "worse"
            out.setdefault(level, {})[m] = d
    return out


def current_launch(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per point, this launch's mean over repeats of each metric the sentinel watches
    (``result["levels"][point][metric]["mean"]``, logged to MLflow as ``<point>.<metric>``)."""
    out: dict[str, dict[str, float]] = {}
    for level, agg in (result.get("levels") or {}).items():
        for m in sentinel_metrics():
            v = agg.get(m)
            if isinstance(v, Mapping) and v.get("mean") is not None:
                out.setdefault(level, {})[m] = float(v["mean"])
    return out


def history_launches(client, experiment_id: str, config_hash: str, *, exclude_run_id: str | None,
                     max_runs: int, points: Sequence[str]) -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    """One value per earlier launch: the ``<point>.<metric>`` means of the newest ``max_runs``
    FINISHED runs tagged ``config_hash``.

    :param client: an ``mlflow.tracking.MlflowClient``.
    :param points: the point keys to read (``"c1"``, ...).
    :returns: ``(run_ids, {"c1": {"decode_tok_s": [run1_mean, run2_mean, ...]}})``.
    :raises Exception: whatever MLflow raises (the caller turns it into a recorded error).
    """
    runs = client.search_runs([experiment_id], filter_string=f"tags.config_hash = '{config_hash}' "
                              "and attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"], max_results=max_runs + 1)
    chosen = [r for r in runs if r.info.run_id != exclude_run_id][:max_runs]
    out: dict[str, dict[str, list[float]]] = {}
    for run in chosen:
        for point in points:
            for m in sentinel_metrics():
                v = run.data.metrics.get(f"{point}.{m}")
                if v is not None:
                    out.setdefault(point, {}).setdefault(m, []).append(float(v))
    return [r.info.run_id for r in chosen], out


def log_to_run(run, result: Mapping[str, Any]) -> None:
    """Tag the MLflow run with ``config_hash`` and ``sentinel.status`` and log each compared
    metric's relative change as ``sentinel.<point>.<metric>.rel_delta``. (The launch values
    the next launches compare with are the headline metrics ``<point>.<metric>``, logged by
    :mod:`lab.tracking.record`.)

    :param run: a :class:`lab.tracking.runs.RunHandle`. :raises lab.tracking.runs.TrackingError: as its methods.
    """
    s = result.get("sentinel") or {}
    if s.get("config_hash"):
        run.set_tags({"config_hash": s["config_hash"], "sentinel.status": s.get("status", "unknown")})
    flags = {f"sentinel.{lv}.{m}.rel_delta": d["rel_delta"] for lv, ms in (s.get("comparison") or {}).items()
             for m, d in ms.items()}
    run.log_metrics(flags)


def check(result: Mapping[str, Any], *, bench: Any, setup: Mapping[str, Any], run_id: str | None,
          root: Path, tracker, log=print) -> dict[str, Any]:
    """The sentinel of one finished launch: hash, earlier launches from MLflow, comparison.

    Never raises: an MLflow failure is recorded as ``status: "error"`` with its message.

    :param result: ``result.json`` content with ``levels`` (and ``mode``).
    :param bench: the ``bench`` section (:class:`lab.config.BenchParams`: the workload hashed,
        the sentinel's thresholds).
    :param setup: the rest of what shapes the launch (:func:`lab.pipeline.bench.launch_setup`).
    :param run_id: this run's MLflow id (excluded from the history).
    :param root: the repository root a relative ``bench.dataset`` is read from.
    :param tracker: the stage's :class:`lab.tracking.tracker.Tracker` (its client reads the history).
    :returns: ``{"config_hash", "material", "status": "no history"|"too little history"|"ok"|
        "regression"|"improvement"|"error", "history_run_ids", "comparison", "flagged": [...],
        "alpha", "min_effect"}``.
    """
    from lab.config import is_hf_id

    b = bench
    data = Path(b.dataset)
    # A Hugging Face set has no file here: the hash of the prompts it loaded (result["dataset"]).
    sha = ((result.get("dataset") or {}).get("prompts_sha256") if is_hf_id(b.dataset)
           else file_sha256(data if data.is_absolute() else root / data))
    workload = {**b.model_dump(), "dataset_sha256": sha}
    h, material = config_fingerprint(result, workload, setup=setup)
    out: dict[str, Any] = {"config_hash": h, "material": material, "alpha": b.sentinel_alpha,
                           "min_effect": b.sentinel_min_effect, "history_run_ids": [], "comparison": {},
                           "flagged": [], "status": "no history"}
    now = current_launch(result)
    try:
        exp_id = tracker.experiment_id(create=False)
        ids, hist = (history_launches(tracker.client, exp_id, h, exclude_run_id=run_id,
                                      max_runs=b.sentinel_history_runs, points=list(now)) if exp_id else ([], {}))
    except Exception as exc:  # MLflow down: the run's own results stay valid
        out.update(status="error", error=f"{type(exc).__name__}: {exc}")
        log(f"[lab] sentinel: could not read MLflow history ({exc})")
        return out
    out["history_run_ids"] = ids
    if not ids:
        log(f"[lab] sentinel: config {h}: no earlier launch of this configuration")
        return out
    return decide(out, now, hist, log=log)


def decide(out: dict[str, Any], now: Mapping[str, Mapping[str, float]],
           hist: Mapping[str, Mapping[str, Sequence[float]]], *, log=print) -> dict[str, Any]:
    """Fill ``out`` (as :func:`check` builds it, with ``alpha``, ``min_effect``,
    ``history_run_ids``) with the comparison of launch values ``now`` against earlier launch
    values ``hist``, the flagged metrics and the status; log one line. Pure decision logic:
    tests and ``benchmarks/sentinel_false_alarms.py`` call it on recorded launch values."""
    cmp_ = compare(now, hist, alpha=out["alpha"], min_effect=out["min_effect"])
    out["comparison"] = cmp_
    out["flagged"] = [f"{lv}.{m}" for lv, ms in cmp_.items() for m, d in ms.items() if d["outside_noise"]]
    worse = any(d["direction"] == "worse" for ms in cmp_.values() for d in ms.values())
    testable = any(d["outside_noise"] is not None for ms in cmp_.values() for d in ms.values())
    out["status"] = ("regression" if worse else "improvement" if out["flagged"] else
                     "ok" if testable else "too little history")
    n = len(out.get("history_run_ids") or [])
    log(f"[lab] sentinel: config {out.get('config_hash')} vs {n} earlier launch(es): {out['status']}"
        + (f" ({', '.join(out['flagged'])})" if out["flagged"] else "")
        + (f" (needs {MIN_HISTORY} earlier launches to judge)" if out["status"] == "too little history" else ""))
    return out


def sentinel_table(result: Mapping[str, Any]):
    """A pandas table of ``result["sentinel"]``: one row per (point, metric): this launch's
    mean, the earlier launches' mean, the change and the band a same-configuration launch
    falls in (``1 - alpha`` prediction interval, as a change)."""
    import pandas as pd

    s = result.get("sentinel") or {}
    rows = []
    for level, ms in (s.get("comparison") or {}).items():
        for m, d in ms.items():
            rows.append({"level": level, "metric": m, "now": d["current_mean"], "before": d["history_mean"],
                         "delta": d["delta"], "noise band": (f"[{d['delta_lo']:.3g}, {d['delta_hi']:.3g}]"
                                                              if d["delta_lo"] is not None else "n/a"),
                         "rel": d["rel_delta"], "p": d["p_value"], "earlier launches": d["n_history"],
                         "outside noise": d["outside_noise"], "direction": d["direction"]})
    df = pd.DataFrame(rows)
    df.attrs["caption"] = (f"config {s.get('config_hash')}: {s.get('status')} vs "
                           f"{len(s.get('history_run_ids') or [])} earlier launch(es)")
    return df
