"""Tables for people: one mode's results as a pandas DataFrame (what ``bench.ipynb`` shows).

Display only: it formats the aggregates :mod:`lab.analysis.aggregate` computed and never
computes a number itself.
"""

from __future__ import annotations

from typing import Any

from lab.analysis.aggregate import HEADLINE_METRICS

__all__ = ["levels_table"]


def levels_table(result: dict[str, Any]):
    """A pandas table of one mode's results: one column per point, one row per metric, each
    cell ``mean [lo, hi]`` (the 95 % interval; the mean alone with one repeat).

    Emulator runs get ``truth_*`` rows: what the emulator actually delivered.

    :param result: ``result.json`` content (:meth:`lab.measure.result.ModeResult.to_dict`).
    :returns: ``pandas.DataFrame`` indexed by metric name, one column per point key.
    """
    import pandas as pd

    rows = []
    for key, agg in result.get("levels", {}).items():
        row: dict[str, Any] = {"point": key, "repeats": agg["repeats"]}
        for m in HEADLINE_METRICS:
            if m in agg:
                v = agg[m]
                row[m] = (f"{v['mean']:.2f} [{v['ci95_lo']:.2f}, {v['ci95_hi']:.2f}]"
                          if v["ci95_lo"] == v["ci95_lo"] else f"{v['mean']:.2f}")
        row["token_accounting_ok"] = agg.get("token_accounting_ok")
        row["degenerate_output"] = agg.get("degenerate_output")
        truth = result.get("ground_truth", {}).get(key, {})
        for m in ("decode_tok_s", "accept_length", "verify_ms"):
            if truth.get(m) is not None:
                row[f"truth_{m}"] = round(truth[m], 2)
        rows.append(row)
    return pd.DataFrame(rows).set_index("point").T
