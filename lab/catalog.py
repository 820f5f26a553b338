"""The metric catalog: every per-run metric of the lab declared once.

A :class:`Metric` says what a number is (name with its unit suffix, display label, unit, where
it comes from), how its 95 % interval over repeats is built (:data:`INTERVALS`), which way is
better, where it is shown (:data:`PLACES`), whether the regression sentinel watches it, how it
is compared with the baseline (:data:`SPEEDUPS`) and what the emulator's ground truth says
for it. Every consumer reads :data:`METRICS` when it runs (never a copy taken at import), so a
metric added here appears in each place it names:

- aggregation over repeats (:mod:`lab.analysis.aggregate`, :mod:`lab.analysis.stats`),
- the comparison (:mod:`lab.analysis.comparison`), the tables and summary files
  (:mod:`lab.report.tables`), ``report.html`` (:mod:`lab.report.html`), the answer
  (:mod:`lab.report.answer`) and the comparison's MLflow run,
- the sentinel (:mod:`lab.analysis.sentinel`) and the accuracy check against the emulator's
  ground truth (:mod:`lab.measure.accuracy`, :meth:`lab.emulator.truth.Truth.run_metrics`).

What a metric's *value per run* is stays with the code that measures it (the key of the
per-run summary, ``runs.json``): client metrics in :func:`lab.measure.records.summarize_run`,
server timing in :mod:`lab.measure.prometheus` and :mod:`lab.measure.server_info`, log
cross-checks in :mod:`lab.measure.crosscheck`, load metrics in :mod:`lab.measure.goodput`.
``tests/unit/test_catalog.py`` checks that each declared metric is produced there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Metric", "METRICS", "PLACES", "INTERVALS", "SPEEDUPS", "SOURCES", "RESULT", "SUMMARY", "REPORT",
           "TABLE", "ANSWER", "MLFLOW", "HEADLINE", "VERDICT_SPEEDUP", "metric", "shown_in", "headline_metric",
           "interval_kind", "sentinel_metrics", "truth_metrics", "speedup_key", "speedup_label"]

#: Where a metric is shown.
RESULT = "result"    # result.json levels (mean, interval, values per point), metrics.json and the mode's MLflow run
SUMMARY = "summary"  # comparison.json and reports/summary.csv: mean and interval per mode x point
REPORT = "report"    # a column of report.html's summary table (and its speedups)
TABLE = "table"      # a column of reports/summary.md and `lab summary` (README's table)
ANSWER = "answer"    # stated per point in the answer: its speedups if it has any, else its mean
MLFLOW = "mlflow"    # flat <mode>.<point>.<metric> means in reports/summary.json and the comparison's MLflow run
#: The verdict metric: the answer's one line per mode (its ``welch`` speedup at each point is the
#: verdict, :data:`VERDICT_SPEEDUP`), the DVC headline metrics (``reports/headline/<mode>.json``) and
#: the first metric columns of the MLflow runs table (``lab ui``). Exactly one metric is shown there.
HEADLINE = "headline"
PLACES = (RESULT, SUMMARY, REPORT, TABLE, ANSWER, MLFLOW, HEADLINE)

#: How the 95 % interval is built (:func:`lab.analysis.stats.metric_ci`) over the units: the repeats
#: of one launch, or the launch means with ``bench.launches`` >= 2 (:mod:`lab.analysis.launches`).
#: Units that all gave the same value get no interval (:func:`lab.analysis.stats.mean_ci`).
INTERVALS = {
    "mean": "Student-t interval of the mean, intersected with [0, inf)",
    "fraction": "Student-t interval of the mean, intersected with [0, 1] (a share)",
    "count": "exact Poisson (Garwood) interval of the mean count per repeat",
}
Interval = Literal["mean", "fraction", "count"]

#: How a metric is compared with the baseline, by the key its entry carries.
SPEEDUPS = {
    "welch": "mean(mode) / mean(baseline) over the launch means (one launch: its repeats, or the launch spread "
             "borrowed from earlier launches), Welch log-ratio interval (lab.analysis.launches.welch_speedup)",
    "per_prompt": "geometric mean of per-prompt ratios, t-interval across launches, repeats (above c1) or prompts "
                  "(c1, one launch) (lab.analysis.paired)",
    "per_repeat": "per-repeat ratios paired by the seeded arrivals, by launch round with two or more launches "
                  "(lab.analysis.load.goodput_speedup_launches)",
}
Speedup = Literal["welch", "per_prompt", "per_repeat"]
#: The speedup that gives a point its verdict. The per-repeat (Welch) interval is the verdict
#: because repeats are the unit the experiment replicates; the paired per-prompt estimate is
#: shown beside it, never as a second verdict: the requests of one repeat share batch
#: iterations above concurrency 1, so its degrees of freedom overstate the evidence
#: (docs/measurement.md; issue 22).
VERDICT_SPEEDUP = "welch"

#: Where a per-run value comes from.
SOURCES = {
    "client": "the client's streamed records (lab.measure.records.summarize_run)",
    "metrics": "the /metrics scrapes around the run (lab.measure.prometheus.server_timing)",
    "server_info": "/server_info step times (lab.measure.server_info)",
    "log": "the run's window of server.log (lab.measure.crosscheck)",
    "load": "the run's records judged under bench.slo (lab.measure.goodput.run_load_metrics)",
}
Source = Literal["client", "metrics", "server_info", "log", "load"]


@dataclass(frozen=True)
class Metric:
    """One per-run metric.

    :ivar name: its key in a run's summary (``runs.json``), result.json ``levels`` and the
        flat files; the unit is its suffix (``_ms``, ``_tok_s``, ``_req_s``) where it has one.
    :ivar label: the words tables and the answer use (``"verify"``); :attr:`header` adds the unit.
    :ivar unit: the physical unit (``"ms"``, ``"tok/s"``, ``"tokens/cycle"``, ``"share"``, ``"count"``).
    :ivar source: key of :data:`SOURCES`. :ivar interval: key of :data:`INTERVALS`.
    :ivar better: ``"higher"``, ``"lower"`` or None (neither: a configuration fact).
    :ivar shown: the :data:`PLACES` it appears in.
    :ivar sentinel: watched by the regression sentinel (``better`` gives a change its direction).
    :ivar speedups: keys of :data:`SPEEDUPS`, the comparisons with the baseline it gets.
    :ivar truth: the emulator's ground-truth counterpart, in words (None: none); computed by
        :meth:`lab.emulator.truth.Truth.run_metrics` under the same name.
    :ivar digits: decimals in tables and the answer. :ivar unit_in_header: headers say the unit.
    """

    name: str
    label: str
    unit: str
    source: Source
    interval: Interval = "mean"
    better: Literal["higher", "lower"] | None = "lower"
    shown: frozenset[str] = frozenset({RESULT})
    sentinel: bool = False
    speedups: tuple[Speedup, ...] = ()
    truth: str | None = None
    digits: int = 1
    unit_in_header: bool = True

    def __post_init__(self) -> None:
        bad = sorted(set(self.shown) - set(PLACES)) + [s for s in self.speedups if s not in SPEEDUPS]
        if bad or self.interval not in INTERVALS or self.source not in SOURCES:
            raise ValueError(f"metric {self.name}: unknown place, speedup, interval or source {bad or self.interval}. "
                             f"Fix: use {PLACES}, {sorted(SPEEDUPS)}, {sorted(INTERVALS)}, {sorted(SOURCES)}")
        if self.sentinel and self.better is None:
            raise ValueError(f"metric {self.name}: the sentinel needs a better direction. Fix: set better")

    @property
    def header(self) -> str:
        """Column header: ``"verify ms"``, ``"accept length"``."""
        return f"{self.label} {self.unit}" if self.unit_in_header else self.label

    @property
    def higher_is_better(self) -> bool:
        """True unless lower is better (a metric with no direction counts as higher-is-better)."""
        return self.better != "lower"

    def text(self, value: float) -> str:
        """``"verify 28.8 ms"``, ``"accept length 1.84"``: the value as the answer states it."""
        return f"{self.label} {value:.{self.digits}f}" + (f" {self.unit}" if self.unit_in_header else "")


_EVERYWHERE = frozenset(PLACES) - {HEADLINE}
_COMPARED = frozenset({RESULT, SUMMARY, REPORT})


def _declare(*metrics: Metric) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for m in metrics:
        if m.name in out:
            raise ValueError(f"metric {m.name} declared twice. Fix: declare each metric once")
        out[m.name] = m
    return out


#: Every metric, in the order tables and files list them (``name -> Metric``).
METRICS: dict[str, Metric] = _declare(
    Metric("decode_tok_s", "decode", "tok/s", "client", better="higher", shown=_EVERYWHERE | {HEADLINE}, sentinel=True,
           speedups=("welch", "per_prompt"), truth="median over requests of (N-1) / (last_token - first_token)"),
    Metric("output_tok_s", "output", "tok/s", "client", better="higher", shown=_EVERYWHERE, sentinel=True,
           speedups=("welch",), truth="sum N / (max last_token - min arrival)"),
    Metric("accept_length", "accept length", "tokens/cycle", "client", better="higher", shown=_EVERYWHERE,
           sentinel=True, truth="sum N / sum verify cycles of the truth request lines", digits=2,
           unit_in_header=False),
    Metric("verify_ms", "verify", "ms", "metrics", shown=_EVERYWHERE,
           truth="mean verify phase of the spec iterations between the scrapes"),
    Metric("draft_ms", "draft", "ms", "metrics", shown=_COMPARED,
           truth="mean draft phase of the spec iterations between the scrapes"),
    Metric("decode_ms", "decode", "ms", "metrics", shown=_COMPARED,
           truth="mean decode phase of the decode iterations between the scrapes"),
    Metric("cycle_ms", "cycle", "ms", "client", shown=_COMPARED | {TABLE}, sentinel=True,
           truth="median over requests of the truth decode span / truth verify count (or / (N-1))"),
    Metric("verify_graph_fraction", "verify graph fraction", "share", "metrics", interval="fraction", better=None,
           shown=frozenset({RESULT, SUMMARY}), unit_in_header=False),
    Metric("p50_ttft_ms", "TTFT p50", "ms", "client", shown=frozenset({RESULT, SUMMARY}), sentinel=True,
           truth="median over requests of first_token - arrival"),
    Metric("p50_itl_ms", "ITL p50", "ms", "client", shown=frozenset({RESULT, SUMMARY})),
    Metric("p50_icl_ms", "ICL p50", "ms", "client"),
    Metric("p50_tpot_ms", "TPOT p50", "ms", "client", shown=frozenset({RESULT, SUMMARY}),
           truth="median over requests of (last_token - first_token) / (N - 1)"),
    Metric("p99_itl_ms", "ITL p99", "ms", "client"),
    Metric("mean_icl_ms", "ICL mean", "ms", "client", shown=frozenset(),
           truth="mean gap between the ends of the iterations that gave a request tokens"),
    Metric("server_step_ms", "server step", "ms", "server_info"),
    Metric("error_rate", "error rate", "share", "client", interval="fraction",
           shown=frozenset({RESULT, SUMMARY, MLFLOW}), unit_in_header=False, digits=3),
    Metric("p50_dispatch_delay_ms", "dispatch delay p50", "ms", "client"),
    Metric("gpu_cycle_ms", "GPU cycle", "ms", "metrics"),
    Metric("log_verify_graph_fraction", "verify graph fraction (log)", "share", "log", interval="fraction",
           better=None, unit_in_header=False),
    Metric("crosscheck_disagreements", "cross-check disagreements", "count", "log", interval="count",
           unit_in_header=False, digits=0),
    Metric("p99_dispatch_delay_ms", "dispatch delay p99", "ms", "client"),
    Metric("goodput_req_s", "goodput", "req/s", "load", better="higher", digits=2,
           shown=frozenset({RESULT, SUMMARY, REPORT, MLFLOW}), speedups=("per_repeat",),
           truth="requests whose truth TTFT (from the scheduled send) and TPOT meet bench.slo / the truth window"),
    Metric("goodput_tok_s", "goodput", "tok/s", "load", better="higher", shown=frozenset({RESULT, SUMMARY, MLFLOW})),
    Metric("slo_attainment", "SLO attainment", "share", "load", interval="fraction", better="higher",
           shown=frozenset({RESULT, SUMMARY, MLFLOW}), unit_in_header=False, digits=2),
    Metric("request_throughput_req_s", "request throughput", "req/s", "load", better="higher", digits=2),
    Metric("output_tok_s_per_user", "output per user", "tok/s", "load", better="higher",
           shown=frozenset({RESULT, SUMMARY, MLFLOW})),
    Metric("p99_schedule_lag_ms", "schedule lag p99", "ms", "load"),
)


def metric(name: str) -> Metric:
    """The declaration of ``name``. :raises KeyError: naming the known metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a declared metric. Fix: declare it in lab/catalog.py "
                       f"(known: {', '.join(METRICS)})") from None


def shown_in(place: str) -> list[Metric]:
    """The metrics shown in ``place`` (one of :data:`PLACES`), in catalog order."""
    if place not in PLACES:
        raise ValueError(f"place {place!r}: use one of {PLACES}")
    return [m for m in METRICS.values() if place in m.shown]


def headline_metric() -> Metric:
    """The one metric shown in :data:`HEADLINE` (the verdict metric).

    :raises ValueError: none or several are declared there (the fix names the catalog)."""
    found = shown_in(HEADLINE)
    if len(found) != 1 or VERDICT_SPEEDUP not in found[0].speedups:
        raise ValueError(f"the catalog shows {[m.name for m in found]} in {HEADLINE!r}: exactly one metric with a "
                         f"{VERDICT_SPEEDUP!r} speedup must be. Fix: lab/catalog.py")
    return found[0]


def interval_kind(name: str) -> str:
    """Key of :data:`INTERVALS` for ``name``; ``"mean"`` for a name the catalog does not declare."""
    m = METRICS.get(name)
    return m.interval if m else "mean"


def sentinel_metrics() -> dict[str, bool]:
    """``name -> higher is better`` of the metrics the regression sentinel watches."""
    return {m.name: m.higher_is_better for m in METRICS.values() if m.sentinel}


def truth_metrics() -> list[Metric]:
    """The metrics with a ground-truth counterpart, in catalog order."""
    return [m for m in METRICS.values() if m.truth]


def speedup_key(name: str, kind: str) -> str:
    """The entry key of a speedup: ``speedup_<name>`` (``welch``, ``per_repeat``) or
    ``paired_speedup_<name>`` (``per_prompt``)."""
    return f"paired_speedup_{name}" if kind == "per_prompt" else f"speedup_{name}"


def speedup_label(m: Metric, kind: str) -> str:
    """Column header of a speedup: ``"speedup, decode tok/s"``, ``"paired per prompt, decode tok/s"``."""
    return f"{'paired per prompt' if kind == 'per_prompt' else 'speedup'}, {m.header}"
