"""The comparison's tables and summary files: ``reports/summary.csv``, ``summary.md``,
``comparison.json``, ``summary.json`` and the headline metrics ``headline/<mode>.json`` (what DVC
shows: ``dvc metrics show``, ``dvc exp show``), and the Markdown / pandas tables built from its rows.

Formats only what :mod:`lab.analysis.comparison` computed (rows of
:func:`lab.analysis.comparison.summarize`, flat numbers of :func:`lab.analysis.comparison.lean_numbers`);
every file goes through :mod:`lab.atomic`.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab import catalog
from lab.analysis.estimates import Estimate, Ratio
from lab.atomic import atomic_path, write_json_atomic, write_text_atomic

if TYPE_CHECKING:  # pandas is imported where used: `lab summary` must start fast
    import pandas as pd

__all__ = ["write_csv", "concurrency_rows", "lossless_rows", "LOSSLESS_COLUMNS", "write_summary_markdown", "write_comparison_json", "summary_markdown",
           "read_summary_rows", "summary_table", "table_columns", "speedup_cell", "HEADLINE_DIR", "headline_record",
           "write_headlines", "context_speedups"]


def write_csv(rows: list[dict[str, Any]], path: Path, columns: tuple[str, ...] = ()) -> None:
    """Write ``rows`` (one dict per mode x point) as CSV, atomically; the columns are
    ``columns`` then the rest of the rows' keys in first-seen order (so a file with no rows
    still has its header for ``dvc plots``), a missing cell is empty."""
    cols: list[str] = list(columns)
    for r in rows:
        cols += [k for k in r if k not in cols]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def concurrency_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``reports/concurrency.csv`` (the ``dvc plots`` "vs concurrency" charts):
    ``summary.csv``'s rows at closed-loop points of the primary context/output length only
    (point key ``c<N>``), so open-loop rate points (``r<R>``, no concurrency of their own) and
    the context/output axes do not land on the concurrency axis."""
    return [r for r in rows if r.get("point") == f"c{r.get('concurrency')}"]


#: Columns of ``reports/lossless.csv`` (the provenance columns, :data:`lab.analysis.provenance.COLUMNS`,
#: follow ``mode``).
LOSSLESS_COLUMNS = ("mode", "engine", "timing", "weights", "acceptance", "point", "mode_point", "pairs",
                    "total_pairs", "identical", "identical_share")


def lossless_rows(lossless: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rows of ``reports/lossless.csv`` (``dvc plots``): one per checked mode x point with
    ``mode``, ``point``, ``mode_point`` (the bar label), ``pairs`` (compared), ``total_pairs`` (request
    slots at that point, failed and unmatched ones included), ``identical`` and ``identical_share`` (0-1: outputs equal to the baseline's token for token), read from
    :func:`lab.analysis.lossless.check_lossless`'s ``modes[mode]["points"]``. Modes not
    checked (no ids, sampling, simulated acceptance) have no row; no check: no rows.
    """
    rows: list[dict[str, Any]] = []
    for mode, res in ((lossless or {}).get("modes") or {}).items():
        if res.get("status") != "checked":
            continue
        for point, p in (res.get("points") or {}).items():
            rows.append({"mode": mode, "point": point, "mode_point": f"{mode} {point}", "pairs": p["pairs"],
                         "total_pairs": p.get("total_pairs", p["pairs"]), "identical": p["identical"],
                         "identical_share": p["identical_share"]})
    return rows


def write_summary_markdown(path: Path, answer: str, rows: list[dict[str, Any]], baseline: str | None) -> None:
    """``reports/summary.md``: the answer (:func:`lab.report.answer.answer_markdown`), then
    the full table (:func:`summary_markdown`), atomically."""
    write_text_atomic(path, "\n\n".join([answer, summary_markdown(rows, baseline)]) + "\n")


def write_comparison_json(rep_dir: Path, summary: dict[str, Any], lean: dict[str, float]) -> None:
    """``comparison.json`` (the summary without its flat ``rows``), ``summary.json`` (each mode's
    provenance, ``<mode>.engine`` / ``.timing`` / ``.weights`` / ``.acceptance``, then the flat
    numbers ``lean`` with what each interval spans beside them:
    :func:`lab.analysis.comparison.scope_labels`) and the headline metrics
    (:func:`write_headlines`) under ``rep_dir``, atomically."""
    from lab.analysis.comparison import scope_labels

    write_json_atomic(rep_dir / "comparison.json", {k: v for k, v in summary.items() if k != "rows"})
    prov = {f"{mode}.{k}": v for mode, p in (summary.get("provenance") or {}).items() for k, v in p.items()}
    write_json_atomic(rep_dir / "summary.json", {**prov, **lean, **scope_labels(summary)})
    write_headlines(rep_dir / HEADLINE_DIR, summary)


#: The headline's short verdict words where the answer's are long: "1.23x [0.99, 1.52] inconclusive,
#: 3 launches" is no wider than its ``dvc exp show`` column header
#: (``reports/headline/eagle3_decode.json:headline``), so README's command fits 120 columns.
HEADLINE_WORDS = {"not distinguishable": "inconclusive"}


#: Where the compare stage's DVC metrics live: one small file per mode (``dvc metrics show``: one row each).
HEADLINE_DIR = "headline"


def headline_record(summary: dict[str, Any], mode: str) -> dict[str, Any]:
    """One mode's DVC headline (``reports/headline/<mode>.json``): the same keys in every file, so
    ``dvc metrics show`` prints one short row per mode and README's ``dvc exp show`` command one
    column per speculative mode, each within 120 columns:

    - ``headline``: the verdict of the catalog's headline metric at the mode's lowest closed-loop
      point (:func:`lab.report.answer.mode_headline`) with its interval and its scope, the scope
      in two words (:meth:`lab.analysis.estimates.Scope.short`, from the launch count the scope carries): ``"1.15x [1.07, 1.24] faster, 1 launch"``, "not distinguishable" said as
      ``inconclusive`` (:data:`HEADLINE_WORDS`: the column stays narrow) (``1 launch``: the interval is
      within one engine launch per mode; ``3 launches``: across three); for the baseline the
      metric's mean (``"82.1 decode tok/s (reference)"``);
    - ``point``: that point (``"c1"``);
    - ``source``: what the numbers stand on (:func:`lab.analysis.provenance.short_label`:
      ``"emulator"``, ``"sglang: random weights, simulated acceptance"``);
    - ``speedup``: the ratio alone (3 decimals), for ``dvc metrics diff`` and ``--sort-by``;
    - ``speedup_ctx<T>``: the same ratio at each other context length ``T`` of ``bench.context_tokens``
      (same concurrency, primary output length; :func:`context_speedups`), so the context axis
      reaches ``dvc metrics show`` / ``dvc exp show`` too.
    """
    from lab.analysis.provenance import short_label
    from lab.report.answer import mode_headline

    out: dict[str, Any] = {}
    h = mode_headline(summary, mode)
    if h is not None:
        out.update(headline=h.short(HEADLINE_WORDS), point=h.point, speedup=round(float(h.speedup.ratio), 3))
        out.update(context_speedups(summary, mode, h.point))
    else:
        m = catalog.headline_metric()
        points = sorted(((k, e) for k, e in (summary["modes"].get(mode) or {}).items()
                         if k == f"c{e.get('concurrency')}"), key=lambda kv: kv[1].get("concurrency") or 0)
        est = next((Estimate.from_dict(e.get(m.name)) for _, e in points if e.get(m.name)), None)
        role = "reference" if mode == summary.get("baseline") else "no baseline to compare with"
        out["headline"] = f"{est.mean:.{m.digits}f} {m.header} ({role})" if est is not None else f"no {m.header} ({role})"
        if points:
            out["point"] = points[0][0]
    out["source"] = short_label((summary.get("provenance") or {}).get(mode) or {"engine": "?"})
    return out


def context_speedups(summary: dict[str, Any], mode: str, point: str) -> dict[str, float]:
    """``{"speedup_ctx<T>": ratio}`` (3 decimals) of the verdict speedup at every off-primary
    context length ``T`` measured at ``point``'s concurrency and its output length (entries keyed
    ``c<N>_ctx<T>_out<M>``, :func:`lab.measure.point.level_key`); empty with one context length."""
    levels = summary["modes"].get(mode) or {}
    base = levels.get(point) or {}
    key = catalog.speedup_key(catalog.headline_metric().name, catalog.VERDICT_SPEEDUP)
    out = {}
    for k, e in levels.items():
        if (k == point or e.get("concurrency") != base.get("concurrency") or e.get("request_rate") is not None
                or e.get("max_new_tokens") != base.get("max_new_tokens") or e.get("context_tokens") is None):
            continue
        r = (e.get(key) or {}).get("ratio")
        if r is not None and r == r:
            out[f"speedup_ctx{int(e['context_tokens'])}"] = round(float(r), 3)
    return out


def write_headlines(out_dir: Path, summary: dict[str, Any]) -> list[Path]:
    """``<out_dir>/<mode>.json`` = :func:`headline_record` for every mode of the comparison,
    atomically; files of modes no longer compared are removed. Returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for mode in summary["modes"]:
        write_json_atomic(out_dir / f"{mode}.json", headline_record(summary, mode))
        paths.append(out_dir / f"{mode}.json")
    for stale in set(out_dir.glob("*.json")) - set(paths):
        stale.unlink()
    return paths


def table_columns(place: str) -> tuple[list[catalog.Metric], list[tuple[catalog.Metric, str]]]:
    """What a comparison table shows (:mod:`lab.catalog`): the metrics shown in ``place`` and,
    after them, each of their speedups as ``(metric, kind)``, in catalog order."""
    shown = catalog.shown_in(place)
    return shown, [(m, kind) for m in shown for kind in m.speedups]


def speedup_cell(r: Ratio | None, mode: str | None, baseline: str | None, row_scope: str | None = None) -> str:
    """A speedup as a table shows it: its text, ``"reference"`` on the baseline's rows, else ``"-"``.
    Its scope (what the interval spans) is said unless it is ``row_scope``, the one the row's
    "intervals" column states."""
    text = r.text(scope=r.scope != row_scope) if r is not None else None
    return text or ("reference" if baseline and mode == baseline else "-")


def summary_markdown(rows: list[dict[str, Any]], baseline: str | None = None) -> str:
    """The comparison as a Markdown table, one line per mode x measured point (README's table;
    ``lab summary`` prints it): the metrics :mod:`lab.catalog` shows in ``table`` (mean [95 %
    CI] for those compared with the baseline, the mean for the rest), then their speedups over
    the baseline with intervals. One verdict per point: the headline metric's per-repeat speedup
    (:data:`lab.catalog.VERDICT_SPEEDUP`) carries it; the others (decode tok/s paired prompt by
    prompt, :mod:`lab.analysis.paired`; output tok/s) are shown beside it as ratio and interval.

    The last column, "intervals", says what the row's intervals span (``interval_scope``: "within
    one launch", "across 3 launches"); a speedup whose interval spans something else (a launch
    spread borrowed from earlier launches) says so in its cell.

    :param rows: ``summarize(...)["rows"]`` or the rows of ``reports/summary.csv`` (strings
        are parsed; empty cells print as ``-``).
    :param baseline: the baseline mode's name (its rows say "reference").
    """
    metrics, speedups = table_columns(catalog.TABLE)
    head_metric = catalog.headline_metric()
    is_verdict = [m.name == head_metric.name and kind == catalog.VERDICT_SPEEDUP for m, kind in speedups]
    head = ["mode", "point", *(m.header + (" [95 % CI]" if m.speedups else "") for m in metrics),
            *(catalog.speedup_label(m, kind) + (" [95 % CI], verdict" if v else " [95 % CI]")
              for (m, kind), v in zip(speedups, is_verdict)), "intervals"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | --- | " + " | ".join(["---:"] * len(metrics) + ["---"] * len(speedups) + ["---"]) + " |"]
    for r in rows:
        scope = r.get("interval_scope") or None
        cells = [str(r.get("mode")), str(r.get("point") or f"c{r.get('concurrency')}")]
        for m in metrics:
            est = Estimate.from_columns(r, m.name)
            cells.append("-" if est is None else est.text(m.digits, interval=bool(m.speedups)))
        for (m, kind), v in zip(speedups, is_verdict):
            ratio = Ratio.from_columns(r, catalog.speedup_key(m.name, kind))
            if ratio is not None and not v:
                ratio = dataclasses.replace(ratio, verdict=None)  # beside the verdict, not one
            cells.append(speedup_cell(ratio, r.get("mode"), baseline, scope))
        cells.append(scope or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_summary_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of ``reports/summary.csv`` (as written by :func:`write_csv` in the compare stage).

    :raises FileNotFoundError: with the fix (run the compare stage first).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. Fix: run `dvc repro` (the compare stage writes it)")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summary_table(summary: dict[str, Any]) -> pd.DataFrame:
    """The comparison as a table (``compare.ipynb``): one row per mode x point with the mean and
    interval of each metric :mod:`lab.catalog` shows in ``report`` and each of its speedups."""
    import pandas as pd

    metrics, speedups = table_columns(catalog.REPORT)
    cols = ["mode", "point", "concurrency"]
    for m in metrics:
        cols += [f"{m.name}_mean", f"{m.name}_ci95_lo", f"{m.name}_ci95_hi"]
    for m, kind in speedups:
        k = catalog.speedup_key(m.name, kind)
        cols += [k, f"{k}_ci95_lo", f"{k}_ci95_hi"]
    df = pd.DataFrame(summary["rows"])
    return df[[c for c in cols if c in df]].round(3)
