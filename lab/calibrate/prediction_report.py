"""What ``lab predict`` writes: predictions beside measurements, ranked, with the break-even reading.

- :func:`measured_by_config`: the measured means of result directories, keyed by configuration
  (:attr:`lab.calibrate.predict.Candidate.key`) and point, with the measured speedup of decode
  tok/s over the baseline at the same point;
- :func:`markdown`: the ranked table (prediction, 95 % prediction interval, measured value and
  the prediction's error where the configuration was measured), what each undetermined
  prediction needs, and one break-even sentence per ranked configuration from
  :func:`lab.analysis.theory.explain` on the *predicted* costs (:func:`predicted_costs`);
- :func:`figure`: predicted decode tok/s with its interval beside the measured value, per
  configuration and point;
- :func:`write_outputs`: ``predictions.json``, ``predictions.csv``, ``predictions.md``,
  ``predicted_vs_measured.png`` and ``predicted_break_even.png``.

Every output says which engine the calibration came from; an emulator calibration is never
presented as a GPU measurement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.analysis.theory import ModeCosts, break_even_figure, explain
from lab.atomic import savefig_atomic, write_json_atomic, write_text_atomic
from lab.calibrate.fit import Calibration
from lab.calibrate.observe import measured_config
from lab.calibrate.order import rank
from lab.calibrate.predict import METRICS, Prediction

__all__ = ["measured_by_config", "predicted_costs", "markdown", "figure", "write_outputs", "caption", "fmt",
           "held_out_errors", "error_table"]

_SHOWN = ("decode_tok_s", "output_tok_s", "verify_ms", "accept_length", "speedup_decode_tok_s")


def measured_by_config(dirs: list[Path], engine: str | None = None,
                       versions: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """``{config key: {point: {metric: mean}}}`` from ``result.json`` of each directory (status ok;
    with ``engine`` / ``versions`` only results of that engine and build, so an emulator run is
    never set beside a GPU prediction), plus ``speedup_decode_tok_s`` where a baseline was
    measured at the same point. A configuration measured in several directories keeps the first.

    Configuration keys match :attr:`lab.calibrate.predict.Candidate.key` for default attention
    backends (a launch with a per-mode backend is keyed with ``_b<backend>``). Each point also
    holds ``_workload`` (the sentinel's ``workload``, the server's batch limits and the point's
    output/context length; None when the result does not record them), which
    :func:`lab.calibrate.predict.workload_mismatch` compares before a measurement is set beside
    a prediction."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for d in dict.fromkeys(Path(x).resolve() for x in dirs):
        p = Path(d) / "result.json"
        if not p.is_file():
            continue
        res = json.loads(p.read_text())
        if res.get("status") != "ok":
            continue
        if engine is not None and res.get("engine") not in engine.split(","):
            continue
        if versions is not None and str(res.get("engine_version")) not in versions:
            continue
        cfg = measured_config(Path(d).name, Path(d), res)
        eff = res.get("effective_config") or {}
        per_mode = eff.get("prefill_attention_backend") if cfg.attention_mode == "prefill" else eff.get("decode_attention_backend")
        key = cfg.key + (f"_b{per_mode}" if cfg.speculative and per_mode else "")
        if key in out:
            continue
        wl = ((res.get("sentinel") or {}).get("material") or {}).get("workload")
        limits = {k: eff.get(k) for k in ("max_running_requests", "cuda_graph_max_bs_decode") if eff.get(k) is not None}
        out[key] = {pt: {**{m: float(v["mean"]) for m, v in lvl.items() if isinstance(v, dict) and v.get("mean") is not None},
                         # what the point measured, for lab.calibrate.predict.workload_mismatch (issue 32)
                         "_workload": None if wl is None else {
                             "workload": wl, "limits": limits,
                             "level": {k: lvl.get(k) for k in ("max_new_tokens", "context_tokens", "concurrency")}}}
                    for pt, lvl in (res.get("levels") or {}).items()}
    base = out.get("baseline", {})
    for key, points in out.items():
        if key == "baseline":
            continue
        for pt, m in points.items():
            b = base.get(pt, {}).get("decode_tok_s")
            same = (base.get(pt, {}).get("_workload") or {}).get("workload") == (m.get("_workload") or {}).get("workload")
            if b and m.get("decode_tok_s") and same:  # a speedup only between the same workloads
                m["speedup_decode_tok_s"] = m["decode_tok_s"] / b
    return out


def caption(cal: Calibration, verb: str = "Predicted by lab predict from") -> str:
    """One line naming the calibration's engine and build (never a GPU claim for the emulator)."""
    from lab.engine.registry import any_modelled

    eng = cal.engine
    what = "EMULATOR results: modelled step costs, not GPU measurements" if any_modelled(eng.split(",")) else f"{eng} measurements"
    return (f"{verb} a calibration on {what} (build {', '.join(cal.engine_versions)}; "
            f"calibrated from {', '.join(sorted(cal.obs.configs))}).")


def predicted_costs(preds: list[Prediction], point: str) -> list[ModeCosts]:
    """:class:`lab.analysis.theory.ModeCosts` of each predictable speculative candidate at ``point``
    from the *predicted* medians (decode step from the baseline's prediction), so the break-even
    model reads predictions exactly as it reads measurements. The accept-length interval is the
    prediction interval; ``measured_speedup`` is the predicted speedup (labelled so by the caller)."""
    base = next((p for p in preds if not p.candidate.speculative and p.point.key == point and p.status == "ok"), None)
    dec = (base.metrics.get("decode_ms") or {}).get("pred") if base else None
    out = []
    for p in preds:
        if not p.candidate.speculative or p.point.key != point or p.status != "ok" or not dec:
            continue
        m = p.metrics
        acc, ver, dr = m.get("accept_length", {}), m.get("verify_ms", {}), m.get("draft_ms", {})
        if not (acc.get("pred") and ver.get("pred")):
            continue
        out.append(ModeCosts(mode=p.candidate.name, concurrency=p.point.concurrency, decode_ms=dec,
                             draft_ms=dr.get("pred") or 0.0, verify_ms=ver["pred"], accept_length=acc["pred"],
                             accept_lo=acc.get("lo") or acc["pred"], accept_hi=acc.get("hi") or acc["pred"],
                             max_accept=(p.candidate.num_steps or 0) + 1,
                             measured_speedup=(m.get("speedup_decode_tok_s") or {}).get("pred")))
    return out


def _cell(v: dict[str, float | None] | None, digits: int = 1) -> str:
    if not v or v.get("pred") is None:
        return "-"
    lo, hi = v.get("lo"), v.get("hi")
    return f"{v['pred']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None else f"{v['pred']:.{digits}f}"


def _err(p: Prediction, m: str) -> str:
    v, pr = p.measured.get(m), (p.metrics.get(m) or {}).get("pred")
    if v is None:
        return "-"
    if pr is None:
        return f"{v:.2f} (-)"
    return f"{v:.2f} ({100 * (pr - v) / v:+.1f} %)"


def markdown(preds: list[Prediction], cal: Calibration, point: str, order: str = "win") -> str:
    """The ranked table at ``point``, all points below it, what undetermined predictions need, and
    the break-even sentences (module docstring)."""
    lines = [f"# Predictions ({caption(cal)})", "",
             f"Ranked at point `{point}`, order `{order}` (lab/calibrate/order.py). Cells: prediction "
             "[95 % prediction interval of the measured repeat mean]; measured: the measured mean "
             "(the prediction's error).", ""]
    lines += ["| rank | configuration | mode name | P(win) | speedup | decode tok/s | measured decode tok/s | status |",
              "| ---: | --- | --- | ---: | --- | --- | --- | --- |"]
    for i, p in enumerate(rank(preds, point, order), 1):
        lines.append(f"| {i} | `{p.candidate.key}` | {p.candidate.name} | "
                     f"{'-' if p.p_win is None else f'{p.p_win:.2f}'} | {_cell(p.metrics.get('speedup_decode_tok_s'), 3)} | "
                     f"{_cell(p.metrics.get('decode_tok_s'))} | {_err(p, 'decode_tok_s')} | {p.status} |")
    lines += ["", "## Every configuration and point", "",
              "| configuration | point | " + " | ".join(_SHOWN) + " | measured (error) decode / output tok/s, verify ms |",
              "| --- | --- | " + " | ".join("---" for _ in _SHOWN) + " | --- |"]
    for p in preds:
        cells = [_cell(p.metrics.get(m), 3 if m in ("accept_length", "speedup_decode_tok_s") else 1) for m in _SHOWN]
        meas = ", ".join(_err(p, m) for m in ("decode_tok_s", "output_tok_s", "verify_ms")) if p.measured else (p.not_measured or "-")
        lines.append(f"| `{p.candidate.key}` | {p.point.key} | " + " | ".join(cells) + f" | {meas} |")
    undet = [p for p in preds if p.status != "ok"]
    if undet:
        lines += ["", "## Not predicted: what the data do not determine", ""]
        seen: set[str] = set()
        for p in undet:
            text = "; ".join(p.needs)
            key = f"{p.candidate.key}|{text}"
            if key in seen:
                continue
            seen.add(key)
            pts = sorted({q.point.key for q in undet if q.candidate.key == p.candidate.key and "; ".join(q.needs) == text})
            lines.append(f"- `{p.candidate.key}` at {', '.join(pts)}: needs {text}")
    costs = predicted_costs(preds, point)
    if costs:
        lines += ["", f"## Break-even reading of the predicted costs at `{point}` (lab/analysis/theory.py)", ""]
        lines += [f"- {explain(c)} (speedup and costs predicted, not measured)" for c in costs]
    notes = sorted({n for p in preds for n in p.notes})
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def figure(preds: list[Prediction], cal: Calibration, metric: str = "decode_tok_s"):
    """Predicted ``metric`` (o, 95 % prediction interval) and measured (x) per configuration, one
    panel per point. A measurement the calibration was fitted to (its configuration *and* point
    among the calibration's windows) is a grey x, "measured (fitted)"; a held-out one a red x,
    "measured (held out)"; a configuration's label says at which points it was fitted
    (``(fitted at c1, c8)``), so a held-out point of a fitted configuration is not called
    calibration. Returns a matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fitted_cells = {(cal.obs.configs[w.config].key, w.point) for w in cal.obs.windows if w.config in cal.obs.configs}
    fitted_at: dict[str, list[str]] = {}
    for k, pt in sorted(fitted_cells):
        fitted_at.setdefault(k, []).append(pt)
    points = list(dict.fromkeys(p.point.key for p in preds))
    keys = list(dict.fromkeys(p.candidate.key for p in preds))
    fig, axes = plt.subplots(1, len(points), figsize=(max(6.0, 3.6 * len(points)), 0.32 * len(keys) + 2.2),
                             sharey=True, squeeze=False)
    for ax, pt in zip(axes[0], points):
        for y, key in enumerate(keys):
            p = next((q for q in preds if q.candidate.key == key and q.point.key == pt), None)
            if p is None:
                continue
            v = p.metrics.get(metric) or {}
            if v.get("pred") is not None:
                lo, hi = v.get("lo", v["pred"]), v.get("hi", v["pred"])
                ax.errorbar([v["pred"]], [y], xerr=[[v["pred"] - lo], [hi - v["pred"]]], fmt="o", color="tab:blue",
                            capsize=3, ms=5, label="predicted [95 % PI]" if y == 0 else None)
            elif p.status != "ok":
                ax.text(0.02, y, "undetermined", transform=ax.get_yaxis_transform(), va="center", fontsize=7,
                        color="gray")
            if metric in p.measured:
                was_fitted = (key, pt) in fitted_cells
                ax.plot([p.measured[metric]], [y], "x", color="tab:gray" if was_fitted else "tab:red", ms=8,
                        label="measured (fitted)" if was_fitted else "measured (held out)")
        ax.set_title(pt, fontsize=9)
        ax.set_xlabel(metric)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(keys)))

    def _ylabel(k: str) -> str:
        if k not in fitted_at:
            return k + " (held out)"
        if set(points) <= set(fitted_at[k]):
            return k + " (fitted at every point)"
        return k + f" (fitted at {', '.join(pt for pt in points if pt in fitted_at[k]) or 'other points'})"

    axes[0][0].set_yticklabels([_ylabel(k) for k in keys], fontsize=7)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7, loc="lower right")
    fig.suptitle(caption(cal), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def write_outputs(out_dir: Path, preds: list[Prediction], cal: Calibration, point: str, order: str = "win",
                  extra: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write the prediction files into ``out_dir`` (module docstring); returns their paths."""
    import csv
    import io

    out_dir.mkdir(parents=True, exist_ok=True)
    ranked = [p.candidate.key for p in rank(preds, point, order)]
    paths = {k: out_dir / n for k, n in (("json", "predictions.json"), ("csv", "predictions.csv"),
                                          ("md", "predictions.md"), ("png", "predicted_vs_measured.png"),
                                          ("break_even", "predicted_break_even.png"))}
    write_json_atomic(paths["json"], {"caption": caption(cal), "engine": cal.engine, "rank_point": point,
                                      "order": order, "ranking": ranked, **(extra or {}),
                                      "predictions": [p.to_dict() for p in preds]})
    buf = io.StringIO()
    cols = ["configuration", "mode", "point", "status", "p_win"] + [
        f"{m}_{s}" for m in (*METRICS, "speedup_decode_tok_s") for s in ("pred", "lo", "hi")] + [
        f"measured_{m}" for m in (*METRICS, "speedup_decode_tok_s")]
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for p in preds:
        row: dict[str, Any] = {"configuration": p.candidate.key, "mode": p.candidate.name, "point": p.point.key,
                               "status": p.status, "p_win": p.p_win}
        for m in (*METRICS, "speedup_decode_tok_s"):
            for s in ("pred", "lo", "hi"):
                row[f"{m}_{s}"] = (p.metrics.get(m) or {}).get(s)
            row[f"measured_{m}"] = p.measured.get(m)
        w.writerow(row)
    write_text_atomic(paths["csv"], buf.getvalue())
    write_text_atomic(paths["md"], markdown(preds, cal, point, order))
    import matplotlib.pyplot as plt

    for key, fig in (("png", figure(preds, cal)),
                     ("break_even", break_even_figure(predicted_costs(preds, point),
                                                      caption(cal) + " Speedups (x) and costs are predicted."))):
        savefig_atomic(fig, paths[key], dpi=110)
        plt.close(fig)
    return paths


# ---------------------------------------------------------------- validation tables (benchmarks/calibration_*.py)

def fmt(v, d: int = 2) -> str:
    """A number with ``d`` decimals, ``-`` for None."""
    return "-" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))


def held_out_errors(preds: list[Prediction], held_out_keys: set[str], points: set[str] | None = None) -> list[dict]:
    """One row per prediction of a held-out configuration (or, with ``points``, also any
    configuration at a held-out point) that has a measurement: per metric the prediction, its
    interval, the measured mean, the error (%) and whether the interval covered the measurement."""
    rows = []
    for p in preds:
        if p.candidate.key not in held_out_keys and not (points and p.point.key in points):
            continue
        row: dict[str, Any] = {"configuration": p.candidate.key, "mode": p.candidate.name, "point": p.point.key,
                               "status": p.status, "needs": p.needs}
        for m in ("decode_tok_s", "output_tok_s", "verify_ms", "accept_length", "speedup_decode_tok_s"):
            pm, mv = p.metrics.get(m) or {}, p.measured.get(m)
            if pm.get("pred") is None or mv is None:
                continue
            row[m] = {"pred": pm["pred"], "lo": pm["lo"], "hi": pm["hi"], "measured": mv,
                      "error_pct": 100.0 * (pm["pred"] - mv) / mv, "covered": pm["lo"] <= mv <= pm["hi"]}
        rows.append(row)
    return rows


def _label(r: dict) -> str:
    return f" ({r['label']})" if r.get("label") else ""


def error_table(rows: list[dict], points: tuple[str, ...] | None = None) -> list[str]:
    """Markdown lines of :func:`held_out_errors` rows (only ``points`` when given); a row's
    optional ``label`` is written after its configuration (e.g. "same code as fitted ...")."""
    lines = ["| configuration | point | decode tok/s pred [95 % PI] | measured | error | in PI | output tok/s error | "
             "verify ms error | speedup pred / measured |", "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for r in rows:
        if points and r["point"] not in points:
            continue
        d = r.get("decode_tok_s")
        if d is None:
            lines.append(f"| `{r['configuration']}`{_label(r)} | {r['point']} | {r['status']}: {'; '.join(r['needs'])[:160]} | | | | | | |")
            continue
        sp = r.get("speedup_decode_tok_s") or {}
        lines.append(
            f"| `{r['configuration']}`{_label(r)} | {r['point']} | {d['pred']:.1f} [{d['lo']:.1f}, {d['hi']:.1f}] | {d['measured']:.1f} | "
            f"{d['error_pct']:+.1f} % | {'yes' if d['covered'] else 'no'} | "
            f"{fmt((r.get('output_tok_s') or {}).get('error_pct'), 1)} % | {fmt((r.get('verify_ms') or {}).get('error_pct'), 1)} % | "
            f"{fmt(sp.get('pred'), 3)} / {fmt(sp.get('measured'), 3)} |")
    return lines
