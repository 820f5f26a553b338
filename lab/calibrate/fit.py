"""``lab calibrate``: fit the cost model (:mod:`lab.calibrate.model`) and the acceptance to measured results.

:func:`calibrate` reads result directories (:func:`lab.calibrate.observe.read_results`), builds
one row per measured window for each block, fits each block by OLS with undetermined constants
marked (:func:`lab.calibrate.linfit.fit_linear`), and estimates the per-position draft acceptance.
Blocks:

1. ``decode``, ``verify``, ``draft``, ``draft_extend``, ``extend``;
2. ``overhead``: a decode iteration's wall time (:mod:`lab.calibrate.observe`, ``decode_wall_ms``)
   minus its device time (with the fitted eager draft-extend where that ran outside graphs);
3. ``prefill_wall``: the window's busy time minus its decode iterations' wall (device + fitted
   overhead) minus the prefills' device time, per prefill.

Acceptance: per draft position j, the pooled life-table estimate ``alpha_j = successes_j /
trials_j`` over every chain-draft configuration (:mod:`lab.calibrate.observe`), with a Jeffreys
``Beta(s + 1/2, f + 1/2)`` posterior for predictions (Jeffreys 1946; Brown, Cai & DasGupta 2001,
"Interval Estimation for a Binomial Proportion", Statist. Sci. 16). ``p_accept`` (the profile's
single per-token probability) is the pooled ``sum successes / sum trials``; a chi-square test of
homogeneity across positions (``scipy.stats.chi2_contingency``) says whether one constant
describes the positions. Positions deeper than any measured draft are undetermined.

Graph capture of target-verify per variant: observed (the share of CUDA-graph passes in the
windows whose mean batch fits the captured sizes), or, in the builds of
:data:`lab.calibrate.model.MODE_PICKS_BACKEND_ONLY_VERSIONS`, captured in both attention modes
by SGLang's code (DESIGN.md); undetermined otherwise.

:class:`Calibration` is written as ``calibration.json`` (:meth:`Calibration.to_json`: the
observations and every fitted constant; loading re-fits the stored observations, so the file is
its own provenance) and exported to the emulator's profile format (:func:`export_profile`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from lab.calibrate import model
from lab.calibrate.linfit import LinearFit, fit_linear
from lab.calibrate.observe import Observations, Window, read_results

__all__ = ["AcceptanceFit", "Calibration", "calibrate", "fit_observations", "export_profile", "CALIBRATION_KIND"]

CALIBRATION_KIND = "eagle-verify-lab calibration"


@dataclass
class AcceptanceFit:
    """Per-position draft acceptance (module docstring). ``successes[j]`` / ``trials[j]`` for
    draft position ``j + 1``; ``homogeneity_p``: chi-square p-value that all measured positions
    share one rate (None with fewer than two positions); ``per_config``: each configuration's
    own rates; ``sources``: the result directories."""

    successes: list[int]
    trials: list[int]
    homogeneity_p: float | None
    per_config: dict[str, list[float | None]]
    sources: list[str]

    @property
    def depth(self) -> int:
        """Deepest draft position with at least one trial."""
        return max((j + 1 for j, t in enumerate(self.trials) if t > 0), default=0)

    def rate(self, j: int) -> float | None:
        """``alpha_j`` (1-based position), None when unmeasured."""
        if j > len(self.trials) or self.trials[j - 1] == 0:
            return None
        return self.successes[j - 1] / self.trials[j - 1]

    @property
    def p_pooled(self) -> float | None:
        """Pooled per-token accept probability (the profile's ``p_accept_per_draft_token``)."""
        t = sum(self.trials)
        return sum(self.successes) / t if t else None

    def p_pooled_stderr(self) -> float | None:
        """Binomial standard error of :attr:`p_pooled` (trials treated as independent)."""
        t, p = sum(self.trials), self.p_pooled
        return math.sqrt(p * (1 - p) / t) if t and p is not None else None

    def draw(self, rng: np.random.Generator, size: int, depth: int) -> np.ndarray:
        """``size x depth`` Jeffreys-posterior draws of ``alpha_1..alpha_depth`` (NaN where unmeasured)."""
        out = np.full((size, depth), np.nan)
        for j in range(min(depth, len(self.trials))):
            s, t = self.successes[j], self.trials[j]
            if t:
                out[:, j] = rng.beta(s + 0.5, t - s + 0.5, size)
        return out


@dataclass
class Calibration:
    """A fitted cost model and acceptance, with the observations it came from.

    :ivar blocks: block name -> :class:`lab.calibrate.linfit.LinearFit`.
    :ivar verify_columns: the verify block's columns (:func:`lab.calibrate.model.verify_columns`).
    :ivar t_ref: reference tokens per sequence of the verify block.
    :ivar variants: result dir -> verify variant (:func:`lab.calibrate.model.verify_variant`).
    :ivar verify_graph: variant -> whether verify is graph-captured (None: undetermined);
        ``verify_graph_source``: why.
    :ivar draft_extend_graph: whether the draft-extend ran in a CUDA graph (None: not seen).
    :ivar graph_max_bs: the largest captured batch the measured launches had.
    :ivar acceptance: :class:`AcceptanceFit` (None without a chain-draft measurement).
    :ivar engine, engine_versions: of the results. :ivar notes: what was skipped and why.
    """

    obs: Observations
    blocks: dict[str, LinearFit]
    verify_columns: list[str]
    t_ref: int
    variants: dict[str, str]
    verify_graph: dict[str, bool | None]
    verify_graph_source: dict[str, str]
    draft_extend_graph: bool | None
    graph_max_bs: int
    acceptance: AcceptanceFit | None
    engine: str
    engine_versions: list[str]
    notes: list[str] = field(default_factory=list)

    def constants(self) -> dict[str, dict[str, Any]]:
        """Every fitted constant: ``{name: {"block", "value", "stderr", "ci95", "determined",
        "reason", "results"}}`` (``results``: the window labels whose regressor for it is non-zero)."""
        out: dict[str, dict[str, Any]] = {}
        for bname, fit in self.blocks.items():
            for i, name in enumerate(fit.names):
                used = [fit.rows[r] for r in range(fit.n) if abs(fit.X[r, i]) > 1e-12]
                out[name] = {"block": bname, "value": fit.value(name), "stderr": fit.stderr(name),
                             "ci95": fit.ci95(name), "determined": fit.determined[i],
                             "reason": fit.reasons.get(name), "results": used, "n": fit.n, "dof": fit.dof}
        return out

    def excluded(self) -> dict[str, str]:
        """``{"<block>: <window>": why}`` for every window a block left out as an outlier."""
        return {f"{b}: {label}": why for b, fit in self.blocks.items() for label, why in fit.excluded.items()}

    def to_json(self) -> dict[str, Any]:
        """``calibration.json`` content: the observations (which re-create the fit, :meth:`from_json`),
        and the fit summarised for a reader."""
        acc = self.acceptance
        return {
            "kind": CALIBRATION_KIND, "version": 1,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "engine": self.engine, "engine_versions": self.engine_versions,
            "results": {k: c.result_dir for k, c in self.obs.configs.items()},
            "t_ref": self.t_ref, "variants": self.variants, "verify_graph": self.verify_graph,
            "verify_graph_source": self.verify_graph_source, "draft_extend_graph": self.draft_extend_graph,
            "graph_max_bs": self.graph_max_bs,
            "blocks": {k: v.to_dict() for k, v in self.blocks.items()},
            "acceptance": None if acc is None else {
                "successes": acc.successes, "trials": acc.trials, "depth": acc.depth,
                "rates": [acc.rate(j + 1) for j in range(len(acc.trials))], "p_pooled": acc.p_pooled,
                "p_pooled_stderr": acc.p_pooled_stderr(), "homogeneity_p": acc.homogeneity_p,
                "per_config": acc.per_config, "sources": acc.sources},
            "notes": self.notes, "excluded_windows": self.excluded(),
            "observations": self.obs.to_dict(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Calibration":
        """Re-fit the stored observations (deterministic: the same file gives the same fit).

        :raises ValueError: not a calibration file.
        """
        if data.get("kind") != CALIBRATION_KIND:
            raise ValueError("not a calibration file (no \"kind\": \"eagle-verify-lab calibration\"). "
                             "Fix: pass the calibration.json that `lab calibrate` wrote")
        return fit_observations(Observations.from_dict(data["observations"]))

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """:meth:`from_json` of a file. :raises FileNotFoundError, ValueError:"""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no calibration file. Fix: run `lab calibrate results/<mode> ...` first")
        return cls.from_json(json.loads(p.read_text()))


def _spec_windows(obs: Observations) -> list[tuple[Window, Any]]:
    return [(w, obs.configs[w.config]) for w in obs.windows if obs.configs[w.config].speculative and w.iters > 0]


def _fit_block(name: str, rows: list[tuple[np.ndarray, float, str]], columns: list[str]) -> LinearFit:
    X = np.array([r[0] for r in rows]) if rows else np.zeros((0, len(columns)))
    return fit_linear(X, np.array([r[1] for r in rows]), columns, [r[2] for r in rows])


def _t_ref(obs: Observations) -> int:
    counts: dict[int, int] = {}
    for w, c in _spec_windows(obs):
        counts[int(c.num_draft_tokens)] = counts.get(int(c.num_draft_tokens), 0) + 1
    return min(counts, key=lambda t: (-counts[t], t)) if counts else 3


def _eager_extend(w: Window, cfg) -> bool:
    return bool(cfg.speculative and w.iters > 0 and w.forward_ms.get("eagle_draft_extend", 0.0) <= 0.0)


def _acceptance(obs: Observations) -> AcceptanceFit | None:
    if not obs.acceptance:
        return None
    depth = max(len(a.trials) for a in obs.acceptance.values())
    succ, trials = [0] * depth, [0] * depth
    per_config = {}
    for name, a in obs.acceptance.items():
        for j, (s, t) in enumerate(zip(a.successes, a.trials)):
            succ[j] += s
            trials[j] += t
        per_config[name] = [s / t if t else None for s, t in zip(a.successes, a.trials)]
    table = [[s, t - s] for s, t in zip(succ, trials) if t > 0]
    hom = None
    if len(table) >= 2 and all(min(r) >= 0 for r in table) and sum(r[1] for r in table) > 0 and sum(r[0] for r in table) > 0:
        hom = float(stats.chi2_contingency(np.array(table), correction=False)[1])
    return AcceptanceFit(successes=succ, trials=trials, homogeneity_p=hom, per_config=per_config,
                         sources=sorted(obs.acceptance))


def _verify_graph(obs: Observations, variants: dict[str, str]) -> tuple[dict[str, bool | None], dict[str, str]]:
    flags: dict[str, bool | None] = {}
    why: dict[str, str] = {}
    by_var: dict[str, list[float]] = {}
    for w, c in _spec_windows(obs):
        if c.graph_max_bs and w.batch_mean <= c.graph_max_bs:
            by_var.setdefault(variants[c.name], []).append(w.graph_frac)
    for var in sorted(set(variants.values())):
        fr = by_var.get(var)
        if fr:
            flags[var] = statistics_mean(fr) > 0.5
            why[var] = (f"measured: {statistics_mean(fr):.0%} of the decode iterations of {len(fr)} windows with "
                        "batches within the captured sizes replayed a CUDA graph")
        else:
            flags[var] = None
            why[var] = "no window with CUDA graphs enabled and batches within the captured sizes"
    versions = {str(c.engine_version) for c in obs.configs.values() if c.speculative}
    if versions and versions <= set(model.MODE_PICKS_BACKEND_ONLY_VERSIONS):
        for var in list(flags):
            if flags[var] is None:
                flags[var] = True
                why[var] = (f"SGLang {'/'.join(sorted(versions))} captures target-verify in CUDA graphs in both "
                            "attention modes (DESIGN.md, SGLang facts; decode_cuda_graph_runner.py ~356-367)")
    return flags, why


def _device_ms(blocks: dict[str, LinearFit], vcols: list[str], t_ref: int, variant: str | None, cfg, w: Window,
               b: float) -> float:
    """The fitted device ms of one decode iteration of ``cfg`` at batch ``b`` (KV scaled with the
    batch, the window's graph share); NaN where a block needed is not estimable there."""
    kv = w.kv_mean_k * b / w.batch_mean if w.batch_mean else w.kv_mean_k
    parts: list[tuple[str, np.ndarray]]
    if not cfg.speculative:
        parts = [("decode", model.decode_x(b, kv, w.graph_frac, blocks["decode"].names))]
    else:
        parts = [("verify", model.verify_x(vcols, b, kv, w.graph_frac, cfg.num_draft_tokens, t_ref, variant)),
                 ("draft", model.draft_x(b, cfg.num_steps))]
        parts.append(("extend", model.extend_x(0.0, 0.0, 1.0, b - 1)) if _eager_extend(w, cfg)
                     else ("draft_extend", model.draft_extend_x(b)))
    total = 0.0
    for name, x in parts:
        fit = blocks[name]
        if not fit.estimable(x)[0]:
            return math.nan
        total += fit.predict(x)
    return total


def statistics_mean(xs: list[float]) -> float:
    """Arithmetic mean (``xs`` non-empty)."""
    return float(sum(xs) / len(xs))


def fit_observations(obs: Observations) -> Calibration:
    """Fit every block and the acceptance to ``obs`` (module docstring).

    :returns: the :class:`Calibration` (constants the data cannot determine are marked in
        each block's ``determined`` / ``reasons``).
    """
    notes = list(obs.notes)
    variants = {name: model.verify_variant(c.engine_version, c.attention_mode, c.verify_backend)
                for name, c in obs.configs.items() if c.speculative}
    var_list = sorted(set(variants.values()), key=lambda v: (not v.endswith("decode"), v))
    per_seq = model.spans_context([w.kv_mean_k / w.batch_mean for w in obs.windows if w.iters > 0 and w.batch_mean > 0])
    vcols = model.verify_columns(var_list, per_seq)
    dcols = model.decode_columns(per_seq)
    t_ref = _t_ref(obs)
    rows: dict[str, list[tuple[np.ndarray, float, str]]] = {b: [] for b in (*model.BLOCKS, "verify")}
    for w in obs.windows:
        cfg = obs.configs[w.config]
        f = w.forward_ms
        if w.iters > 0 and not cfg.speculative and "decode" in f:
            rows["decode"].append((model.decode_x(w.batch_mean, w.kv_mean_k, w.graph_frac, dcols), f["decode"] / w.iters,
                                   w.label))
        if w.iters > 0 and cfg.speculative:
            if "target_verify" in f:
                rows["verify"].append((model.verify_x(vcols, w.batch_mean, w.kv_mean_k, w.graph_frac, cfg.num_draft_tokens,
                                                      t_ref, variants[cfg.name]), f["target_verify"] / w.iters, w.label))
            if cfg.topk == 1 and "eagle_draft" in f:
                if f.get("decode", 0.0) > 0.0:
                    notes.append(f"{w.label}: draft ran outside CUDA graphs (booked as decode); not used for the draft cost")
                else:
                    rows["draft"].append((model.draft_x(w.batch_mean, cfg.num_steps), f["eagle_draft"] / w.iters, w.label))
            if cfg.topk == 1 and f.get("eagle_draft_extend", 0.0) > 0.0:
                rows["draft_extend"].append((model.draft_extend_x(w.batch_mean), f["eagle_draft_extend"] / w.iters, w.label))
        if w.prefill_passes is not None and "extend" in f and (w.prefill_passes > 0 or w.iters > 0):
            eager = _eager_extend(w, cfg)
            rows["extend"].append((model.extend_x(w.prefill_passes, w.prefill_tokens_k * 1e3,
                                                  w.iters if eager else 0.0,
                                                  w.iters * (w.batch_mean - 1) if eager else 0.0,
                                                  speculative=cfg.speculative), f["extend"], w.label))
    blocks = {name: _fit_block(name, rows[name], {"verify": vcols, "decode": dcols}.get(name, model.BLOCKS.get(name)))
              for name in ("decode", "verify", "draft", "draft_extend", "extend")}
    ext = blocks["extend"]
    gpu_iter: dict[str, float] = {}  # window label -> device ms per decode iteration (all of the cycle)
    for w in obs.windows:
        cfg = obs.configs[w.config]
        if w.iters <= 0:
            continue
        cats = ("target_verify", "eagle_draft", "eagle_draft_extend", "decode") if cfg.speculative else ("decode",)
        gpu = sum(w.forward_ms.get(c, 0.0) for c in cats) / w.iters
        if _eager_extend(w, cfg):  # its draft-extend is in `extend`, with the prefills
            x = model.extend_x(0.0, 0.0, 1.0, w.batch_mean - 1)
            if not ext.estimable(x)[0]:
                notes.append(f"{w.label}: draft-extend outside CUDA graphs with an undetermined cost; not used for "
                             "the scheduler overhead")
                continue
            gpu += ext.predict(x)
        gpu_iter[w.label] = gpu
        if w.decode_wall_ms is not None and w.decode_wall_batch is not None:
            # the clean requests saw larger batches than the window's mean iteration: move the device
            # time to their batch with the fitted per-sequence slopes
            shift = _device_ms(blocks, vcols, t_ref, variants.get(cfg.name), cfg, w, w.decode_wall_batch) - \
                _device_ms(blocks, vcols, t_ref, variants.get(cfg.name), cfg, w, w.batch_mean)
            if shift is None or math.isnan(shift):
                continue
            rows["overhead"].append((model.overhead_x(w.decode_wall_batch, 1.0 if cfg.speculative else 0.0),
                                     w.decode_wall_ms - gpu - shift, w.label))
    blocks["overhead"] = _fit_block("overhead", rows["overhead"], model.BLOCKS["overhead"])
    oh = blocks["overhead"]
    for w in obs.windows:
        cfg = obs.configs[w.config]
        if w.busy_ms is None or not w.prefill_passes or w.label not in gpu_iter:
            continue
        x = model.overhead_x(w.batch_mean, 1.0 if cfg.speculative else 0.0)
        if not oh.estimable(x)[0]:
            continue
        decode_wall = w.iters * (gpu_iter[w.label] + oh.predict(x))
        booked = sum(v for c, v in w.forward_ms.items() if c != "extend")  # the decode iterations' own categories
        eager_extend_total = w.iters * gpu_iter[w.label] - booked  # > 0 only where the draft-extend is in `extend`
        prefill_dev = w.forward_ms.get("extend", 0.0) - eager_extend_total
        rows["prefill_wall"].append((model.prefill_wall_x(), (w.busy_ms - decode_wall - prefill_dev) / w.prefill_passes,
                                     w.label))
    blocks["prefill_wall"] = _fit_block("prefill_wall", rows["prefill_wall"], model.BLOCKS["prefill_wall"])
    vg, vg_why = _verify_graph(obs, variants)
    extend_graph = {c.draft_extend_graph for c in obs.configs.values() if c.speculative and c.draft_extend_graph is not None}
    if len(extend_graph) > 1:
        notes.append("some launches ran the draft-extend in CUDA graphs and some did not; predictions use graphs")
    return Calibration(
        obs=obs, blocks=blocks, verify_columns=vcols, t_ref=t_ref, variants=variants, verify_graph=vg,
        verify_graph_source=vg_why, draft_extend_graph=(True in extend_graph) if extend_graph else None,
        graph_max_bs=max((c.graph_max_bs for c in obs.configs.values()), default=0),
        acceptance=_acceptance(obs), engine=",".join(sorted({c.engine for c in obs.configs.values()})),
        engine_versions=sorted({str(c.engine_version) for c in obs.configs.values()}), notes=notes)


def calibrate(dirs: list[Path], points: set[str] | None = None) -> Calibration:
    """Read ``dirs`` (only ``points``, when given) and fit (module docstring).
    :raises CalibrationInputError: see :func:`lab.calibrate.observe.read_results`."""
    return fit_observations(read_results([Path(d) for d in dirs], points))


# ---------------------------------------------------------------- profile export

def _num(cal: Calibration, name: str, *, scale: float = 1.0, what: str = "", fill: Any = None,
         fill_name: str | None = None) -> dict[str, Any]:
    """One profile constant from a fitted one (``scale`` converts units)."""
    c = cal.constants()[name]
    fit = {"stderr": None if c["stderr"] is None else c["stderr"] * scale,
           "ci95": None if c["ci95"] is None else [c["ci95"][0] * scale, c["ci95"][1] * scale],
           "determined": c["determined"], "reason": c["reason"], "results": c["results"], "n": c["n"], "dof": c["dof"]}
    if c["determined"]:
        return {"value": c["value"] * scale,
                "source": f"FITTED by lab calibrate: {name} of the {c['block']} block, OLS over {c['n']} measured "
                          f"windows{what} (lab/calibrate/fit.py)", "fit": fit}
    return _undetermined(f"{name}: {c['reason']}", fit, fill, fill_name)


def _undetermined(reason: str, fit: dict[str, Any], fill: Any, fill_name: str | None) -> dict[str, Any]:
    fit = {**fit, "determined": False, "reason": reason}
    if fill is not None:
        return {"value": fill, "source": f"NOT FITTED (undetermined by the data: {reason}); value copied from "
                                         f"profile {fill_name} (lab calibrate --fill-from)", "fit": fit}
    return {"value": None, "source": f"UNDETERMINED by the data: {reason}", "fit": fit}


def export_profile(cal: Calibration, name: str, fill_from: Any = None, fill_name: str | None = None) -> dict[str, Any]:
    """The calibration in the emulator's profile format (:mod:`lab.emulator.profile`), each constant
    with its ``fit`` record; undetermined ones null, or copied from ``fill_from`` (a
    :class:`lab.emulator.profile.CostProfile`) and marked so.

    Units: the model's ``prefill.per_token_ms`` is ms per token, as the profile's. The profile has
    one ``eagle_draft_extend_ms``: the graph-captured draft-extend's when it was measured, else
    the eager one's. ``decode.eager_over_graph`` is ``eager_ms_bs1 / graph_ms_bs1`` (delta-method
    standard error). Constants the profile format has no place for (the scheduler overhead's
    per-sequence slope and speculative extra, the prefill's wall-time extra, the draft model's
    prefill) are named with their values in the description.
    """
    f = fill_from

    def fv(path: str):
        if f is None:
            return None
        obj: Any = f
        for part in path.split("."):
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        return obj.value if hasattr(obj, "value") else obj

    def num(const: str, prof_key: str, **kw) -> dict[str, Any]:
        return _num(cal, const, fill=fv(prof_key), fill_name=fill_name, **kw)

    consts = cal.constants()
    dec_g, dec_e = consts["decode.graph_ms_bs1"], consts["decode.eager_ms_bs1"]
    if dec_g["determined"] and dec_e["determined"] and dec_g["value"]:
        r = dec_e["value"] / dec_g["value"]
        se = (r * math.sqrt((dec_e["stderr"] / dec_e["value"]) ** 2 + (dec_g["stderr"] / dec_g["value"]) ** 2)
              if dec_e["stderr"] is not None and dec_g["stderr"] is not None and dec_e["value"] else None)
        eager_ratio = {"value": r, "source": "FITTED by lab calibrate: decode.eager_ms_bs1 / decode.graph_ms_bs1 "
                                             "(lab/calibrate/fit.py)",
                       "fit": {"stderr": se, "determined": True, "results": dec_e["results"], "n": dec_e["n"],
                               "dof": dec_e["dof"]}}
    else:
        eager_ratio = _undetermined("decode.eager_over_graph: " + (dec_e["reason"] or dec_g["reason"] or "unknown"),
                                    {"results": dec_e["results"]}, fv("decode.eager_over_graph"), fill_name)
    ext_const = ("draft.eagle_draft_extend_ms", "draft.eagle_draft_extend_per_extra_seq_ms")
    if cal.draft_extend_graph is False:
        ext_const = ("draft.eager_extend_ms", "draft.eager_extend_per_extra_seq_ms")
    modes = {}
    for mode in ("prefill", "decode"):
        var = _variant_for_mode(cal, mode)
        graph = cal.verify_graph.get(var) if var else None
        flag_fit = {"determined": graph is not None, "reason": None if graph is not None else
                    f"attention mode {mode}: " + (cal.verify_graph_source.get(var, "never measured") if var else "never measured")}
        if graph is not None:
            flag = {"value": graph, "source": f"lab calibrate: {cal.verify_graph_source[var]}", "fit": flag_fit}
        else:
            flag = _undetermined(flag_fit["reason"], flag_fit, fv(f"verify.modes.{mode}.graph_captured") if f else None,
                                 fill_name)
        kv_name = f"verify.kv_ms_per_1k_tokens@{var}" if var else None
        if kv_name and kv_name in consts:
            kv = _num(cal, kv_name, fill=fv(f"verify.modes.{mode}.kv_ms_per_1k_tokens") if f else None, fill_name=fill_name)
        else:
            kv = _undetermined(f"attention mode {mode} never measured", {}, fv(f"verify.modes.{mode}.kv_ms_per_1k_tokens")
                               if f else None, fill_name)
        entry = {"graph_captured": flag, "kv_ms_per_1k_tokens": kv}
        seq_name = f"verify.kv_seq_ms_per_1k_tokens@{var}" if var else None
        if seq_name and seq_name in consts:
            entry["kv_seq_ms_per_1k_tokens"] = _num(cal, seq_name, fill=0.0 if f else None, fill_name=fill_name)
        off_name = f"verify.offset_ms@{var}" if var else None
        if off_name and off_name in consts:
            entry["offset_ms"] = _num(cal, off_name, fill=0.0 if f else None, fill_name=fill_name)
        modes[mode] = entry
    acc = cal.acceptance
    if acc is not None and acc.p_pooled is not None:
        rates = ", ".join(f"{r:.3f}" for r in (acc.rate(j + 1) for j in range(acc.depth)) if r is not None)
        p_acc = {"value": acc.p_pooled,
                 "source": (f"FITTED by lab calibrate: pooled per-position acceptance over {sum(acc.trials)} draft "
                            f"positions of {', '.join(acc.sources)} (positions 1..{acc.depth}: {rates}; chi-square "
                            f"homogeneity p = {acc.homogeneity_p if acc.homogeneity_p is None else round(acc.homogeneity_p, 3)})"),
                 "fit": {"stderr": acc.p_pooled_stderr(), "determined": True, "results": acc.sources,
                         "n": sum(acc.trials)}}
    else:
        p_acc = _undetermined("no chain-draft configuration with real acceptance was measured", {},
                              fv("acceptance.p_accept_per_draft_token"), fill_name)
    outside = [n for n in ("scheduler_overhead_per_extra_seq_ms", "spec_overhead_ms", "prefill_extra_ms",
                           "draft.prefill_base_ms", "draft.prefill_per_token_ms")]
    extra = "; ".join(f"{n} " + (f"{consts[n]['value']:.4g} ms" if consts[n]["determined"] else "undetermined")
                      for n in outside)
    versions = cal.engine_versions
    version = versions[0] if len(versions) == 1 else None
    return {
        "name": name, "version": 1,
        "description": (f"Fitted by `lab calibrate` from {', '.join(sorted(cal.obs.configs))} (engine {cal.engine}, "
                        f"build {', '.join(versions)}); every constant says which measured windows it came from and "
                        f"its uncertainty; null ones were not determined by the data. Fitted but not in this "
                        f"format (the emulator does not model them; calibration.json has them, predictions use "
                        f"them): {extra}."),
        "models_build": {"label": f"fitted to {cal.engine} {', '.join(versions)}",
                         "sglang_version": version if version and version[:1].isdigit() else None,
                         "source": "the engine_version recorded in the measured result.json files"},
        "prefill": {"base_ms": num("prefill.base_ms", "prefill.base_ms"),
                    "per_token_ms": num("prefill.per_token_ms", "prefill.per_token_ms")},
        "decode": {"graph_ms_bs1": num("decode.graph_ms_bs1", "decode.graph_ms_bs1"),
                   "per_extra_seq_ms": num("decode.per_extra_seq_ms", "decode.per_extra_seq_ms"),
                   "eager_over_graph": eager_ratio,
                   "kv_ms_per_1k_tokens": num("decode.kv_ms_per_1k_tokens", "decode.kv_ms_per_1k_tokens"),
                   **({"kv_seq_ms_per_1k_tokens": _num(cal, "decode.kv_seq_ms_per_1k_tokens", fill=0.0 if f else None,
                                                       fill_name=fill_name)}
                      if "decode.kv_seq_ms_per_1k_tokens" in consts else {})},
        "verify": {"ref_tokens": cal.t_ref,
                   "graph_ms_ref": num("verify.graph_ms_ref", "verify.graph_ms_ref"),
                   "eager_ms_ref": num("verify.eager_ms_ref", "verify.eager_ms_ref"),
                   "per_extra_token_ms": num("verify.per_extra_token_ms", "verify.per_extra_token_ms"),
                   "per_extra_seq_ms": num("verify.per_extra_seq_ms", "verify.per_extra_seq_ms"),
                   "modes": modes},
        "draft": {"eagle_draft_ms_per_step": num("draft.eagle_draft_ms_per_step", "draft.eagle_draft_ms_per_step"),
                  "eagle_draft_per_extra_seq_ms": num("draft.eagle_draft_per_extra_seq_ms",
                                                      "draft.eagle_draft_per_extra_seq_ms"),
                  "eagle_draft_extend_ms": num(ext_const[0], "draft.eagle_draft_extend_ms"),
                  "eagle_draft_extend_per_extra_seq_ms": num(ext_const[1], "draft.eagle_draft_extend_per_extra_seq_ms")},
        "acceptance": {"p_accept_per_draft_token": p_acc},
        "scheduler_overhead_ms": num("scheduler_overhead_ms", "scheduler_overhead_ms"),
        "kv_capacity_tokens": _undetermined("the KV pool size is not in the measured results (only the emulator's "
                                            "'token usage' log field uses it)", {}, fv("kv_capacity_tokens"), fill_name),
    }


def _variant_for_mode(cal: Calibration, mode: str) -> str | None:
    """The verify variant a configuration in ``mode`` with default backends would have."""
    for name, var in cal.variants.items():
        if cal.obs.configs[name].attention_mode == mode:
            return var
    pooled = [v for v in cal.variants.values() if v.startswith("backend:")]
    return pooled[0] if pooled else None
