"""Regression sentinel: compare a run with earlier runs of the *same* effective configuration.

The seeds' engineer lost hours to a "regression" (89 vs 82 tok/s) that was two
measurements taken under different conditions. The sentinel makes that comparison
explicit and conditional:

1. :func:`config_fingerprint` hashes what decides the numbers: the resolved server
   arguments read back from ``/server_info`` (``result["effective_config"]``), the engine,
   its version (SGLang's, or the emulated one), the GPU model (NVML; ``"none (emulator)"``
   for the emulator) and the workload (dataset, prompts per run, output length,
   temperature, seed). The hash is stored as the MLflow tag ``config_hash``, and each
   repeat's value of :data:`SENTINEL_METRICS` is logged as a metric history
   ``sample.<level>.<metric>`` (step = repeat), so later runs can test against the sample.
2. :func:`history_samples` pools the per-repeat samples of up to N earlier FINISHED runs
   with the same hash (newest first).
3. :func:`welch_delta` compares the current repeats with that pool: the difference of means
   with a 95 % Welch interval (Welch 1947, *Biometrika* 34:28-35; Satterthwaite degrees of
   freedom; ``scipy.stats.ttest_ind(equal_var=False)``). A metric is *outside noise* when
   Welch's p-value is below ``alpha`` **and** the relative change exceeds ``min_effect``
   (a practical floor: very stable engines make sub-percent shifts "significant").

Only the hash decides comparability; the emulator's cost profile is deliberately *not* in
it, in the way that the real speed of a GPU is not: a changed profile plays the role of a
hardware or kernel change that the configuration does not show, which is exactly what the
sentinel must catch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = ["SENTINEL_METRICS", "gpu_model", "config_fingerprint", "welch_delta", "compare",
           "history_samples", "log_to_run", "check", "sentinel_table", "SAMPLE_PREFIX"]

#: Headline metrics watched by the sentinel: name -> higher is better.
SENTINEL_METRICS: dict[str, bool] = {
    "decode_tok_s": True, "output_tok_s": True, "accept_length": True, "cycle_ms": False, "p50_ttft_ms": False,
}
SAMPLE_PREFIX = "sample"


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


def config_fingerprint(result: Mapping[str, Any], workload: Mapping[str, Any], *,
                       gpu: str | None = None) -> tuple[str, dict[str, Any]]:
    """The configuration hash of a run and what went into it.

    :param result: ``result.json`` content (``engine``, ``engine_version``, ``effective_config``).
    :param workload: the bench params that shape the load (dataset, num_prompts,
        max_new_tokens, temperature, seed); extra keys are ignored.
    :param gpu: GPU model; None: :func:`gpu_model` for SGLang, ``"none (emulator)"`` for the emulator.
    :returns: ``(sha256 hex prefix of 16 chars, material dict)``.
    """
    engine = result.get("engine", "unknown")
    if gpu is None:
        gpu = "none (emulator)" if engine == "emulator" else gpu_model()
    keys = ("dataset", "num_prompts", "max_new_tokens", "temperature", "seed")
    material = {
        "engine": engine,
        "engine_version": str(result.get("engine_version", "unknown")),
        "gpu_model": gpu,
        "effective_config": dict(sorted((result.get("effective_config") or {}).items())),
        "workload": {k: workload.get(k) for k in keys},
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16], material


def _clean(xs: Sequence[float | None]) -> np.ndarray:
    a = np.asarray([x for x in xs if x is not None], dtype=float)
    return a[np.isfinite(a)]


def welch_delta(current: Sequence[float | None], history: Sequence[float | None], *, alpha: float = 0.01,
                min_effect: float = 0.02, confidence: float = 0.95) -> dict[str, Any]:
    """Difference of means ``mean(current) - mean(history)`` with Welch's test and interval.

    ``se = sqrt(s1^2/n1 + s2^2/n2)``, Welch-Satterthwaite degrees of freedom, interval
    ``delta ± t_{(1+confidence)/2, df} * se``; p-value from ``scipy.stats.ttest_ind(...,
    equal_var=False)``. When both samples have zero variance the p-value is 0 for a
    non-zero delta and 1 otherwise.

    :param current: this run's per-repeat values (>= 2 for a test).
    :param history: pooled per-repeat values of earlier runs (>= 2 for a test).
    :param alpha: test level. :param min_effect: relative change ``|delta| / mean(history)``
        below which a difference is never flagged.
    :returns: ``{"current_mean", "history_mean", "delta", "delta_lo", "delta_hi",
        "rel_delta", "p_value", "n_current", "n_history", "outside_noise": bool|None,
        "method"}``; ``outside_noise`` is None when either sample has fewer than 2 values.
    """
    c, h = _clean(current), _clean(history)
    out: dict[str, Any] = {"n_current": int(c.size), "n_history": int(h.size),
                           "method": "Welch t-test (unequal variances), 95 % Welch interval",
                           "current_mean": float(c.mean()) if c.size else None,
                           "history_mean": float(h.mean()) if h.size else None,
                           "delta": None, "delta_lo": None, "delta_hi": None, "rel_delta": None,
                           "p_value": None, "outside_noise": None}
    if c.size == 0 or h.size == 0:
        return out
    delta = float(c.mean() - h.mean())
    out["delta"] = delta
    out["rel_delta"] = delta / abs(h.mean()) if h.mean() else None
    if c.size < 2 or h.size < 2:
        return out
    v1, v2 = c.var(ddof=1) / c.size, h.var(ddof=1) / h.size
    se = math.sqrt(v1 + v2)
    if se == 0.0:
        p, half = (0.0 if delta != 0 else 1.0), 0.0
    else:
        df = (v1 + v2) ** 2 / ((v1 ** 2 / (c.size - 1) if v1 else 0.0) + (v2 ** 2 / (h.size - 1) if v2 else 0.0))
        half = float(_st.t.ppf((1 + confidence) / 2, df) * se)
        p = float(_st.ttest_ind(c, h, equal_var=False).pvalue)
    out.update(delta_lo=delta - half, delta_hi=delta + half, p_value=p)
    big = out["rel_delta"] is not None and abs(out["rel_delta"]) > min_effect
    out["outside_noise"] = bool(p < alpha and big)
    return out


def compare(current: Mapping[str, Mapping[str, Sequence[float]]], history: Mapping[str, Mapping[str, Sequence[float]]],
            *, alpha: float, min_effect: float) -> dict[str, Any]:
    """:func:`welch_delta` for every (level, metric) present in both.

    :param current, history: ``{"c1": {"decode_tok_s": [v_rep0, ...]}}``.
    :returns: ``{"c1": {"decode_tok_s": {...welch_delta..., "direction": "better"|"worse"|None}}}``.
    """
    out: dict[str, Any] = {}
    for level, metrics in current.items():
        for m, vals in metrics.items():
            hist = (history.get(level) or {}).get(m)
            if not hist:
                continue
            d = welch_delta(vals, hist, alpha=alpha, min_effect=min_effect)
            d["direction"] = None
            if d["outside_noise"]:
                up = d["delta"] > 0
                d["direction"] = "better" if up == SENTINEL_METRICS.get(m, True) else "worse"
            out.setdefault(level, {})[m] = d
    return out


def current_samples(result: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Per level, the per-repeat values of :data:`SENTINEL_METRICS` from ``result["levels"]``."""
    out: dict[str, dict[str, list[float]]] = {}
    for level, agg in (result.get("levels") or {}).items():
        for m in SENTINEL_METRICS:
            v = agg.get(m)
            if isinstance(v, Mapping) and v.get("values"):
                out.setdefault(level, {})[m] = [float(x) for x in v["values"]]
    return out


def history_samples(client, experiment_id: str, config_hash: str, *, exclude_run_id: str | None,
                    max_runs: int) -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    """Pooled per-repeat samples of the newest ``max_runs`` FINISHED runs tagged ``config_hash``.

    :param client: an ``mlflow.tracking.MlflowClient``.
    :returns: ``(run_ids, {"c1": {"decode_tok_s": [...]}})``.
    :raises Exception: whatever MLflow raises (the caller turns it into a recorded error).
    """
    runs = client.search_runs([experiment_id], filter_string=f"tags.config_hash = '{config_hash}' "
                              "and attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"], max_results=max_runs + 1)
    ids = [r.info.run_id for r in runs if r.info.run_id != exclude_run_id][:max_runs]
    pooled: dict[str, dict[str, list[float]]] = {}
    for rid in ids:
        run = client.get_run(rid)
        for key in run.data.metrics:
            parts = key.split(".")
            if len(parts) != 3 or parts[0] != SAMPLE_PREFIX:
                continue
            _, level, m = parts
            vals = [h.value for h in sorted(client.get_metric_history(rid, key), key=lambda h: h.step)]
            pooled.setdefault(level, {}).setdefault(m, []).extend(vals)
    return ids, pooled


def log_to_run(run, result: Mapping[str, Any]) -> None:
    """Tag the MLflow run with ``config_hash`` and log the per-repeat samples and the verdicts.

    :param run: a :class:`lab.tracking.RunHandle`. :raises lab.tracking.TrackingError: as its methods.
    """
    s = result.get("sentinel") or {}
    if s.get("config_hash"):
        run.set_tags({"config_hash": s["config_hash"], "sentinel.status": s.get("status", "unknown")})
    for level, metrics in current_samples(result).items():
        for m, vals in metrics.items():
            for i, v in enumerate(vals):
                run.log_metrics({f"{SAMPLE_PREFIX}.{level}.{m}": v}, step=i)
    flags = {f"sentinel.{lv}.{m}.rel_delta": d["rel_delta"] for lv, ms in (s.get("comparison") or {}).items()
             for m, d in ms.items()}
    run.log_metrics(flags)


def check(params, result: Mapping[str, Any], *, run_id: str | None, log=print) -> dict[str, Any]:
    """The sentinel of one finished run: hash, history from MLflow, comparison, summary line.

    Never raises: an MLflow failure is recorded as ``status: "error"`` with its message.

    :param params: :class:`lab.config.LabParams` (``bench`` thresholds, ``mlflow``).
    :param result: ``result.json`` content with ``levels``.
    :param run_id: this run's MLflow id (excluded from the history).
    :returns: ``{"config_hash", "material", "status": "no history"|"ok"|"regression"|"improvement"|"error",
        "history_run_ids", "comparison", "flagged": [...], "alpha", "min_effect"}``.
    """
    b = params.bench
    h, material = config_fingerprint(result, b.model_dump())
    out: dict[str, Any] = {"config_hash": h, "material": material, "alpha": b.sentinel_alpha,
                           "min_effect": b.sentinel_min_effect, "history_run_ids": [], "comparison": {},
                           "flagged": [], "status": "no history"}
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=params.mlflow.resolved_tracking_uri())
        exp = client.get_experiment_by_name(params.mlflow.experiment)
        ids, hist = (history_samples(client, exp.experiment_id, h, exclude_run_id=run_id,
                                     max_runs=b.sentinel_history_runs) if exp else ([], {}))
    except Exception as exc:  # MLflow down: the run's own results stay valid
        out.update(status="error", error=f"{type(exc).__name__}: {exc}")
        log(f"[lab] sentinel: could not read MLflow history ({exc})")
        return out
    out["history_run_ids"] = ids
    if not ids:
        log(f"[lab] sentinel: config {h}: no earlier run of this configuration")
        return out
    cmp_ = compare(current_samples(result), hist, alpha=b.sentinel_alpha, min_effect=b.sentinel_min_effect)
    out["comparison"] = cmp_
    out["flagged"] = [f"{lv}.{m}" for lv, ms in cmp_.items() for m, d in ms.items() if d["outside_noise"]]
    worse = any(d["direction"] == "worse" for ms in cmp_.values() for d in ms.values())
    out["status"] = "regression" if worse else ("improvement" if out["flagged"] else "ok")
    log(f"[lab] sentinel: config {h} vs {len(ids)} earlier run(s): {out['status']}"
        + (f" ({', '.join(out['flagged'])})" if out["flagged"] else ""))
    return out


def sentinel_table(result: Mapping[str, Any]):
    """A pandas table of ``result["sentinel"]``: one row per (level, metric) with delta and interval."""
    import pandas as pd

    s = result.get("sentinel") or {}
    rows = []
    for level, ms in (s.get("comparison") or {}).items():
        for m, d in ms.items():
            rows.append({"level": level, "metric": m, "now": d["current_mean"], "before": d["history_mean"],
                         "delta": d["delta"], "delta 95% CI": (f"[{d['delta_lo']:.3g}, {d['delta_hi']:.3g}]"
                                                              if d["delta_lo"] is not None else "n/a"),
                         "rel": d["rel_delta"], "p (Welch)": d["p_value"],
                         "outside noise": d["outside_noise"], "direction": d["direction"]})
    df = pd.DataFrame(rows)
    df.attrs["caption"] = (f"config {s.get('config_hash')}: {s.get('status')} vs "
                           f"{len(s.get('history_run_ids') or [])} earlier run(s)")
    return df
