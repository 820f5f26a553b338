"""The comparison across modes, as numbers: load every mode's results, summarize them with
intervals and speedups over the baseline, and flatten the headline numbers.

Inputs are ``results/<mode>/result.json``, ``runs.json`` (one row per concurrency level x
repeat) and ``requests.jsonl`` written by :mod:`lab.pipeline.bench`, and with ``bench.launches``
>= 2 the same files of each later launch (:func:`lab.config.launch_results_dir`). Pure computation
over :mod:`lab.analysis.stats`, :mod:`lab.analysis.launches` (what an interval spans) and
:mod:`lab.config`: the stage that writes the files, draws the figures and logs the MLflow run is
:mod:`lab.pipeline.compare`; the tables and summary files are :mod:`lab.report.tables`.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from lab import catalog
from lab.analysis import launches as lz
from lab.analysis.estimates import Estimate, PointColumns, Ratio, group_estimates
from lab.config import BenchParams, LosslessParams, launch_stage, repo_root
from lab.engine.effective import identical_modes, identical_notice

if TYPE_CHECKING:  # pandas is imported where used: `lab summary` must start fast
    import pandas as pd

__all__ = ["CompareError", "Comparison", "UNSET", "load_results", "load_launches", "runs_frame", "launch_unit_frame", "interval_note",
           "requests_frame", "summarize", "engine_caption", "lean_numbers", "scope_labels", "entry_backends", "lossless_part"]


class CompareError(RuntimeError):
    """A mode's results are missing or marked failed; the message names the mode and the fix."""


class _Unset:
    """The value of a :class:`Comparison` part not computed (absent from :meth:`Comparison.to_dict`)."""

    def __repr__(self) -> str:
        return "UNSET"


#: A :class:`Comparison` part that was not computed: it is absent from the comparison's files.
UNSET: Any = _Unset()


@dataclass(eq=False)
class Comparison(Mapping):
    """The comparison across modes: :func:`summarize`'s numbers, then each part the compare stage
    adds (:func:`lab.pipeline.compare.run_compare` assembles it). It becomes ``comparison.json``'s
    dict only when written (:meth:`to_dict`: the parts in field order, those left :data:`UNSET`
    absent). Readers of the report code may index it as a read-only mapping (``c["modes"]``,
    ``c.get("caption")``): the same keys as :meth:`to_dict`; parts are set by attribute.

    :ivar baseline: the baseline mode, or None.
    :ivar modes: ``mode -> point -> entry`` (an entry: ``concurrency``, ``repeats``, ``launches``,
        ``interval_scope``, each metric's :meth:`Estimate.to_dict`, each speedup's
        :meth:`Ratio.to_dict`...: comparison.json's shape).
    :ivar rows: one flat row per mode x point (``summary.csv``); not in ``comparison.json``.
    :ivar identical_effective_config: groups of modes that resolved to the same configuration.
    :ivar notice: the sentence saying so, or None.
    :ivar provenance, caption, interval_note, effective_config, warnings, crosscheck, lossless, figures,
        break_even, crossover, taskmix, acceptance_by_position, waterfall, trace, load, load_flat,
        mlflow_run_id: the compare stage's parts (:mod:`lab.pipeline.compare`), :data:`UNSET` until set.
    """

    baseline: str | None
    modes: dict[str, dict[str, dict[str, Any]]]
    rows: list[dict[str, Any]]
    identical_effective_config: list[Any] = field(default_factory=list)
    notice: str | None = None
    provenance: Any = UNSET
    caption: Any = UNSET
    interval_note: Any = UNSET
    effective_config: Any = UNSET
    warnings: Any = UNSET
    crosscheck: Any = UNSET
    lossless: Any = UNSET
    figures: Any = UNSET
    break_even: Any = UNSET
    crossover: Any = UNSET
    taskmix: Any = UNSET
    acceptance_by_position: Any = UNSET
    waterfall: Any = UNSET
    trace: Any = UNSET
    load: Any = UNSET
    load_flat: Any = UNSET
    mlflow_run_id: Any = UNSET

    def _set(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not UNSET]

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str) or key not in _COMPARISON_FIELDS or getattr(self, key) is UNSET:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())

    def merge(self, points: Mapping[tuple[str, str], PointColumns]) -> None:
        """Put each part's :class:`PointColumns` into the entry and the row of its ``(mode, point)``
        (a key without an entry or a row adds nothing there): how the compare stage assembles the
        comparison from the parts :func:`lab.analysis.paired.paired_part`,
        :func:`lab.analysis.load.load_part` and :func:`lossless_part` return."""
        for (mode, point), cols in points.items():
            entry = (self.modes.get(mode) or {}).get(point)
            if entry is not None:
                entry.update(cols.entry)
            for row in self.rows:
                if row.get("mode") == mode and row.get("point") == point:
                    row.update(cols.row)

    def to_dict(self) -> dict[str, Any]:
        """``{"baseline", "modes", "rows", "identical_effective_config", "notice", <each set part>}``
        in that order (comparison.json without ``rows``: :func:`lab.report.tables.write_comparison_json`)."""
        return {k: getattr(self, k) for k in self._set()}


_COMPARISON_FIELDS = frozenset(f.name for f in fields(Comparison))


def _read_result(path: Path, stage: str) -> dict[str, Any]:
    """One ``result.json``, or :class:`CompareError` naming the file, what is wrong with it and the
    stage that rewrites it (a file cut short by a full disk or a killed copy is not JSON).

    :raises CompareError: the file is not complete UTF-8 JSON, or not a JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        what = f"{exc.msg} at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) \
            else f"not UTF-8: {exc.reason} at byte {exc.start}"
        raise CompareError(f"{path} is not a complete result ({what}; {path.stat().st_size} bytes: cut short, e.g. "
                           f"by a full disk or an interrupted copy). Fix: re-run that mode, `dvc repro -f {stage}`"
                           ) from None
    if not isinstance(data, dict):
        raise CompareError(f"{path} holds a JSON {type(data).__name__}, not a result object. "
                           f"Fix: re-run that mode, `dvc repro -f {stage}`")
    return data


def load_results(results_dir: Path, modes: list[str]) -> dict[str, dict[str, Any]]:
    """``mode -> result.json`` (the full record of :func:`lab.pipeline.bench.run_mode`) for every mode.

    :raises CompareError: a result file is missing, not complete JSON, or its status is not ``ok``.
    """
    out = {}
    for mode in modes:
        path = results_dir / mode / "result.json"
        if not path.is_file():
            raise CompareError(f"{path} missing. Fix: run `dvc repro bench@{mode}` first")
        data = _read_result(path, f"bench@{mode}")
        if data.get("status") != "ok":
            raise CompareError(f"mode {mode} failed ({data.get('error', 'no error recorded')}); its "
                               f"log is {results_dir / mode / 'server.log'}. Fix the cause and re-run "
                               f"`dvc repro bench@{mode}`")
        out[mode] = data
    return out


def load_launches(results_dir: Path, modes: list[str], launches: int) -> dict[str, dict[int, dict[str, Any]]]:
    """``mode -> {launch: result.json}`` for launches 1..``launches`` of every mode.

    :raises CompareError: a launch's result is missing or failed (naming its stage).
    """
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for mode in modes:
        for n, d in lz.launch_dirs(results_dir, mode, launches):
            path = d / "result.json"
            if not path.is_file():
                raise CompareError(f"{path} missing (launch {n} of bench.launches {launches}). "
                                   f"Fix: run `dvc repro {launch_stage(mode, n)}` first")
            data = _read_result(path, launch_stage(mode, n))
            if data.get("status") != "ok":
                raise CompareError(f"mode {mode} launch {n} failed ({data.get('error', 'no error recorded')}); its "
                                   f"log is {d / 'server.log'}. Fix the cause and re-run "
                                   f"`dvc repro {launch_stage(mode, n)}`")
            out.setdefault(mode, {})[n] = data
    return out


def runs_frame(results_dir: Path, modes: list[str], launches: int = 1) -> pd.DataFrame:
    """One row per (mode, launch, point, repeat) with that run's summary metrics; ``launch``
    counts from 1 (``results/<mode>``) to ``launches`` (:func:`lab.analysis.launches.launch_dirs`)."""
    import pandas as pd

    rows = []
    for mode in modes:
        for n, d in lz.launch_dirs(results_dir, mode, launches):
            for run in json.loads((d / "runs.json").read_text()):
                rows.append({"mode": mode, "launch": n,
                             **{k: v for k, v in run.items() if not isinstance(v, (dict, list))}})
    df = pd.DataFrame(rows)
    if len(df) and "point" not in df:  # results from before the context/output axes
        df["point"] = [f"c{int(c)}" for c in df["concurrency"]]
    return df


def launch_unit_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows figures draw intervals over: ``runs`` itself with one launch per mode; with two
    or more, one row per (mode, point, launch) holding that launch's means (``repeat`` set to
    the launch), so that a t-interval over rows spans launches as the comparison's do
    (:mod:`lab.analysis.launches`)."""
    if "launch" not in runs or runs["launch"].nunique() < 2:
        return runs
    keys = [k for k in ("mode", "point", "concurrency", "launch") if k in runs]
    num = [c for c in runs.columns if c not in keys and c != "repeat" and runs[c].dtype.kind in "fiub"]
    out = runs.groupby(keys, sort=False, dropna=False)[num].mean().reset_index()
    return out.assign(repeat=out["launch"])


def interval_note(summary: Mapping[str, Any]) -> str:
    """One sentence for figure captions and the report: what the comparison's intervals span,
    e.g. ``"95 % intervals within one launch per mode (bench.launches: 1): they carry no
    launch-to-launch variation."``"""
    scopes = sorted({e.get("interval_scope") for lv in summary["modes"].values() for e in lv.values()} - {None})
    if not scopes:
        return ""
    if scopes == [lz.WITHIN_ONE_LAUNCH]:
        return ("95 % intervals within one launch per mode (bench.launches: 1): they carry no launch-to-launch "
                "variation (docs/measurement.md, \"Launches\").")
    return f"95 % intervals {' / '.join(scopes)} per mode: launch means are the units."


def requests_frame(results_dir: Path, modes: list[str]) -> pd.DataFrame:
    """One row per measured ok request at a primary point: mode, concurrency, point, rid,
    prompt_index, completion_tokens, spec_verify_ct, accept_length."""
    import pandas as pd

    rows = []
    for mode in modes:
        path = results_dir / mode / "requests.jsonl"
        if not path.is_file():
            continue
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if not r.get("ok") or r.get("point", f"c{r.get('concurrency')}") != f"c{r.get('concurrency')}":
                    continue  # failed, or off the primary context/output length
                meta = r.get("meta_info") or {}
                ct, vct = r.get("completion_tokens"), meta.get("spec_verify_ct")
                rows.append({"mode": mode, "concurrency": r.get("concurrency"), "point": f"c{r.get('concurrency')}",
                             "rid": r.get("rid"), "prompt_index": r.get("prompt_index"), "completion_tokens": ct,
                             "spec_verify_ct": vct,
                             "accept_length": (ct / vct) if ct and vct else None})
    return pd.DataFrame(rows)


def engine_caption(results: dict[str, dict[str, Any]], profile: str | None = None) -> str:
    """Who produced the numbers, for every figure: the engine, and for the emulator that it is
    not a GPU, with its cost profile (``emulator.profile``; None: "see params.yaml")."""
    engines = sorted({r.get("engine", "?") for r in results.values()})
    versions = sorted({str(r.get("engine_version", "?")) for r in results.values()})
    from lab.engine.registry import any_modelled

    modelled = [e for e in engines if any_modelled([e])]
    if modelled:
        profile = profile or "see params.yaml"
        text = (f"engine: {', '.join(modelled)} (SGLang-compatible, profile {profile}: {_profile_description(profile)}). "
                "Modelled step costs. Not a GPU measurement.")
    else:
        text = f"engine: {', '.join(engines)} (SGLang {', '.join(versions)})"
    return text


def _profile_description(profile: str) -> str:
    """The cost profile's own ``description`` (what it models and what it is calibrated to),
    or a note that it could not be read."""
    from lab.emulator.profile import ProfileError, load_profile

    try:
        return load_profile(profile)[0].description.rstrip(".")
    except (ProfileError, OSError) as exc:
        return f"description unavailable: {exc}"


def _groups(sub: pd.DataFrame, name: str) -> list[list[float]]:
    """Metric ``name``'s values per launch (in launch order) of one mode at one point."""
    if name not in sub:
        return []
    return [g[name].dropna().tolist() for _, g in sub.groupby("launch", sort=True)]


def summarize(results: dict[str, dict[str, Any]], runs: pd.DataFrame, baseline: str | None, *,
              launch_prior: "lz.Spread | None" = None) -> Comparison:
    """Per mode and level: mean and 95 % CI of every metric :mod:`lab.catalog` shows in
    ``summary``, and the Welch speedup over the baseline of those it compares that way, with
    the launch means as units when there are two or more launches and the scope of each
    interval (:mod:`lab.analysis.launches`).

    :param results: mode -> launch 1's ``result.json`` (its sentinel history gives a one-launch
        speedup the spread of earlier launches).
    :param runs: :func:`runs_frame` (a frame without ``launch`` is one launch).
    :param launch_prior: the documented launch spread of the engine and profile
        (:func:`lab.analysis.launches.prior_spread`) that widens a one-launch interval without a
        verdict word (:func:`lab.analysis.launches.withhold`).
    :returns: a :class:`Comparison` with ``baseline``, ``modes`` (``{mode: {"c1": {...}}}``),
        ``identical_effective_config``, ``notice`` and ``rows``; ``rows`` is flat (one per mode x level) for the CSV. An
        entry holds ``launches`` (launches per mode measured at the point), ``interval_scope``
        (what its means' intervals span) and with two or more launches ``launch_means`` (each
        launch's mean of the metrics compared by Welch); each speedup its own ``scope``.
    """
    summary = Comparison(baseline, {}, [])
    if "point" not in runs:  # results from before the context/output axes
        runs = runs.assign(point=[f"c{int(c)}" for c in runs["concurrency"]])
    if "launch" not in runs:
        runs = runs.assign(launch=1)
    shown = catalog.shown_in(catalog.SUMMARY)
    estimates = group_estimates(runs, by=("mode", "point"), metrics=[m.name for m in shown])  # as the figures' bars
    for mode in results:
        summary.modes[mode] = {}
        mine = runs[runs["mode"] == mode]
        for key in dict.fromkeys(mine["point"]):
            sub = mine[mine["point"] == key]
            level = int(sub["concurrency"].iloc[0])
            n_launch = int(sub["launch"].nunique())
            entry: dict[str, Any] = {"concurrency": level, "repeats": int(len(sub)), "launches": n_launch,
                                     "interval_scope": lz.across_launches(n_launch)}
            row: dict[str, Any] = {"mode": mode, "point": key, "concurrency": level,
                                   "engine": results[mode].get("engine"), "launches": n_launch,
                                   "interval_scope": entry["interval_scope"]}
            for axis in ("context_tokens", "max_new_tokens"):
                if axis in sub and sub[axis].notna().any():
                    entry[axis] = row[axis] = int(sub[axis].iloc[0])
            entry.update(_backends(results[mode]))  # which backend served verify / draft (/server_info)
            row.update(entry_backends(entry))
            if "errors" in sub:  # failed requests are counted, never dropped
                entry["requests"] = row["requests"] = int(sub["requests"].sum())
                entry["errors"] = row["errors"] = int(sub["errors"].sum())
            for name, est in estimates.get((mode, key), {}).items():
                entry[name] = est.to_dict()
                row.update(est.columns(name))
            if n_launch >= 2:  # each launch's own mean of the compared metrics: the units, for the reader
                entry["launch_means"] = {m.name: lz.launch_means(_groups(sub, m.name)) for m in shown
                                         if "welch" in m.speedups and m.name in sub}
            if baseline and mode != baseline:
                base = runs[(runs["mode"] == baseline) & (runs["point"] == key)]
                for m in shown:
                    if "welch" in m.speedups and m.name in sub and len(base) and m.name in base:
                        r = lz.welch_speedup(_groups(base, m.name), _groups(sub, m.name),
                                             higher_is_better=m.higher_is_better,
                                             spreads=lz.spreads_for(results, baseline, mode, key, m.name),
                                             prior=launch_prior)
                        k = catalog.speedup_key(m.name, "welch")
                        entry[k] = r.to_dict()
                        row.update(r.columns(k))
            summary.modes[mode][key] = entry
            summary.rows.append(row)
    # Same resolved arguments *and* the same measured CUDA-graph share of verify: the
    # emulator (and older SGLang builds) run prefill-mode verify outside graphs.
    groups = identical_modes({
        m: ({**r["effective_config"], "measured_verify_graph_fraction":
             _round(r.get("headline", {}).get("verify_graph_fraction"))} if r.get("effective_config") else None)
        for m, r in results.items()})
    summary.identical_effective_config = groups
    summary.notice = identical_notice(groups)
    return summary


def _backends(result: dict[str, Any]) -> dict[str, str]:
    """``verify_backend`` / ``draft_backend`` of a ``result.json``: the attention backends that
    served target verify and the EAGLE draft, resolved from the effective configuration read
    back from ``/server_info`` (:mod:`lab.engine.effective`: ``verify_attention_backend``,
    :func:`lab.engine.effective.draft_attention_backend`); empty without one or without speculation."""
    from lab.engine.effective import draft_attention_backend

    eff = result.get("effective_config") or {}
    out = {}
    if eff.get("verify_attention_backend"):
        out["verify_backend"] = str(eff["verify_attention_backend"])
    draft = draft_attention_backend(eff) if eff else None
    if draft:
        out["draft_backend"] = draft
    return out


def entry_backends(entry: dict[str, Any]) -> dict[str, str]:
    """The ``verify_backend`` / ``draft_backend`` keys of a summary entry (for its flat row)."""
    return {k: entry[k] for k in ("verify_backend", "draft_backend") if entry.get(k)}


def scope_labels(summary: Mapping[str, Any]) -> dict[str, str]:
    """What every interval of the comparison spans, as flat labels beside the numbers of
    :func:`lean_numbers` in ``reports/summary.json`` (``dvc metrics show``):
    ``<mode>.<point>.interval_scope`` (the means) and ``<mode>.<point>.<speedup key>_scope``
    (each speedup), e.g. ``"within one launch"``, ``"across 3 launches"``."""
    out: dict[str, str] = {}
    for mode, levels in summary["modes"].items():
        for lvl, e in levels.items():
            if e.get("interval_scope"):
                out[f"{mode}.{lvl}.interval_scope"] = e["interval_scope"]
            for m in catalog.shown_in(catalog.MLFLOW):
                for kind in m.speedups:
                    k = catalog.speedup_key(m.name, kind)
                    if isinstance(e.get(k), dict) and e[k].get("scope"):
                        out[f"{mode}.{lvl}.{k}_scope"] = e[k]["scope"]
    return out


def lean_numbers(summary: Mapping[str, Any]) -> dict[str, float]:
    """Flat numbers for DVC (``reports/summary.json``) and MLflow: ``<mode>.<point>.<metric>``
    means of every metric :mod:`lab.catalog` shows in ``mlflow``, ``<mode>.<point>.launches`` (the
    launches per mode behind the intervals: 1 is within one launch, :func:`scope_labels` says it in
    words), each of their speedups over the baseline with its interval (``<mode>.<point>.speedup_<metric>``,
    ``...paired_speedup_<metric>``, ``..._ci95_lo``, ``..._ci95_hi``: the finite ones),
    ``<mode>.beats_up_to_req_s`` of the open-loop comparison (:mod:`lab.analysis.load`) and
    ``<mode>.lossless.*`` of the lossless check (:func:`lab.analysis.lossless.flat_metrics`)."""
    flat: dict[str, float] = {}
    shown = catalog.shown_in(catalog.MLFLOW)
    for mode, levels in summary["modes"].items():
        for lvl, e in levels.items():
            if e.get("launches"):  # launches per mode behind the intervals (1: within one launch)
                flat[f"{mode}.{lvl}.launches"] = float(e["launches"])
            for m in shown:
                if (est := Estimate.from_dict(e.get(m.name))) is not None:
                    flat[f"{mode}.{lvl}.{m.name}"] = est.mean
                for kind in m.speedups:
                    k = catalog.speedup_key(m.name, kind)
                    if (r := Ratio.from_dict(e.get(k))) is not None:
                        flat.update(r.flat(f"{mode}.{lvl}.{k}"))
    flat.update(summary.get("load_flat") or {})  # lab.analysis.load: beats_up_to_req_s
    if summary.get("lossless"):  # lab.analysis.lossless: <mode>.lossless.identical_share, ...
        from lab.analysis.lossless import flat_metrics

        flat.update(flat_metrics(summary["lossless"]))
    return flat


def lossless_part(rows: list[dict[str, Any]], results_dir: Path, modes: list[str], baseline: str | None, *,
                  bench: BenchParams, lossless: LosslessParams, simulated: Collection[str] = (),
                  root: Path | None = None) -> tuple[dict[str, Any], dict[tuple[str, str], PointColumns]]:
    """Run :func:`lab.analysis.lossless.check_lossless` on ``<results_dir>/<mode>/requests.jsonl``:
    the comparison's ``lossless`` part (the check's dict; the compare stage appends its
    ``warnings`` to each mode's) and ``lossless_identical_share`` for every checked row of ``rows``
    (summary.csv, ``dvc plots``) as :class:`PointColumns` (:meth:`Comparison.merge`).

    Prompt heads come from ``bench.dataset`` (relative to ``root``, default the repository
    root; none when it cannot be read); the modes in ``simulated`` (``simulate_accept_length``
    set) are not checked (SGLang then accepts draft tokens unverified). The threshold is
    ``lossless.min_identical_share``; sampling (``bench.temperature`` > 0) is not checked.
    """
    from lab.analysis.lossless import check_lossless
    from lab.workload.dataset import DatasetError, load_prompts

    records: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        path = results_dir / mode / "requests.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        records[mode] = [json.loads(line) for line in lines if line.strip()]
    try:
        texts = {i: p.messages[-1]["content"] for i, p in
                 enumerate(load_prompts((root or repo_root()) / bench.dataset))}
    except (DatasetError, OSError):
        texts = {}
    skip = {m: "simulated acceptance (SGLANG_SIMULATE_ACC_LEN) accepts draft tokens unverified"
            for m in modes if m in simulated}
    res = check_lossless(records, baseline, temperature=bench.temperature,
                         min_identical_share=lossless.min_identical_share, prompt_texts=texts, skip=skip)
    cols: dict[tuple[str, str], PointColumns] = {}
    for row in rows:
        pt = ((res["modes"].get(row["mode"]) or {}).get("points") or {}).get(row.get("point"))
        if pt:
            cols[(row["mode"], row.get("point"))] = PointColumns(row={"lossless_identical_share": pt["identical_share"]})
    return res, cols


def _round(x: float | None) -> float | None:
    """``x`` rounded to 0.1 (None stays None): a measured fraction compared across modes."""
    return None if x is None else round(float(x), 1)
