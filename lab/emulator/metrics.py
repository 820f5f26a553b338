"""Prometheus metrics with SGLang 0.5.23's names (``sglang/srt/observability/metrics_collector.py``).

Own ``CollectorRegistry`` (no process/platform collectors). Scheduler series carry the labels of
SGLang's ``SchedulerMetricsCollector.init_new`` (``metrics_collector.py`` ~1383-1387: ``model_name``,
``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank``). Forward-pass counters
(``cuda_graph_passes_total``, gated only by ``enable_metrics`` in
``batch_result_processor.py`` ~993) and device-timer seconds are exported once per TP rank,
as every rank's scheduler does, and a series exists only once its mode or category has run
(prometheus-client creates a labelled child on first use: a real server that never ran an eager
decode exports no ``mode="decode_none"``); queue gauges by rank 0 only (the stats-logging rank,
``metrics_collector.py`` ~1361-1367). The request counters are the tokenizer's
(``TokenizerMetricsCollector``, labels ``model_name`` and ``engine_type``:
``tokenizer_metric_labels`` ~1804-1819); ``prompt_tokens_total`` and ``generation_tokens_total``
also carry ``is_streaming`` and are incremented when a request finishes
(``observe_one_finished_request``). ``forward_execution_seconds_total`` is only fed when
``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``, like SGLang. SGLang serves ``/metrics`` through
prometheus-client's multiprocess collector, which writes no ``_created`` samples (none in a real
0.5.16 scrape, ``tests/fixtures/sglang-0.5.16/*/*/metrics.*.txt``); neither does this exposition.
"""

from __future__ import annotations


from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["EmulatorMetrics", "CONTENT_TYPE_LATEST", "FORWARD_CATEGORIES"]

FORWARD_CATEGORIES = ("extend", "decode", "target_verify", "eagle_draft", "eagle_draft_extend")


class _Counter(Counter):
    """A prometheus-client ``Counter`` without the ``_created`` sample (SGLang's multiprocess
    exposition has none), leaving prometheus-client's process-wide setting alone."""

    def _child_samples(self):
        return tuple(s for s in super()._child_samples() if s.name != "_created")


class _PerRankForward(Collector):
    """``sglang:cuda_graph_passes_total`` and ``sglang:forward_execution_seconds_total``, one
    series per TP rank (every rank's scheduler exports its own, ``metrics_collector.py``
    ~1383-1387; ``batch_result_processor.py`` ~993), all ranks equal."""

    def __init__(self, m: "EmulatorMetrics") -> None:
        self.m = m

    def describe(self):
        return []

    def collect(self):
        keys = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        passes = CounterMetricFamily("sglang:cuda_graph_passes", "Total number of forward passes categorized by CUDA graph.",
                                     labels=keys + ["mode"])
        for (dec, g), v in list(self.m._passes.items()):
            if v <= 0:  # never ran: SGLang has no such series yet
                continue
            mode = ("decode_" if dec else "prefill_") + ("cuda_graph" if g else "none")
            for lab in self.m.rank_labels:
                passes.add_metric([lab[k] for k in keys] + [mode], v)
        yield passes
        if self.m.device_timer:
            fwd = CounterMetricFamily(
                "sglang:forward_execution_seconds",
                "Total time that GPU is busy executing model forward passes. Refer to ForwardMode for category labels.",
                labels=keys + ["category"])
            for cat, v in list(self.m._fwd.items()):
                if v <= 0:
                    continue
                for lab in self.m.rank_labels:
                    fwd.add_metric([lab[k] for k in keys] + [cat], v)
            yield fwd


class EmulatorMetrics:
    """Counters and gauges; safe to update from the engine thread."""

    def __init__(self, model_name: str, device_timer: bool, tp_size: int = 1) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.rank_labels = [{"model_name": model_name, "engine_type": "unified", "tp_rank": str(r), "pp_rank": "0",
                             "moe_ep_rank": "0"} for r in range(max(1, tp_size))]
        self.labels = self.rank_labels[0]
        self.device_timer = device_timer
        ln = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        tok = ["model_name", "engine_type"]  # tokenizer_metric_labels
        self.tokenizer_labels = {k: self.labels[k] for k in tok}
        r = self.registry
        self.num_running_reqs = Gauge("sglang:num_running_reqs", "The number of running requests.", ln, registry=r)
        self.num_queue_reqs = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", ln, registry=r)
        self.prompt_tokens_total = _Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                                            tok + ["is_streaming"], registry=r)
        self.generation_tokens_total = _Counter(
            "sglang:generation_tokens_total", "Number of generation tokens processed.", tok + ["is_streaming"], registry=r)
        self.spec_verify_calls_total = _Counter(
            "sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.", tok, registry=r)
        # SGLang 0.5.16 metrics_collector.py ~440-451 (set at each decode log line, metrics_reporter.py ~808-884):
        # the active tier of --speculative-adaptive, else the launch's steps; 0 without speculation
        self.spec_num_steps = Gauge("sglang:spec_num_steps", "Currently active speculative_num_steps.", ln, registry=r)
        self.spec_num_draft_tokens = Gauge("sglang:spec_num_draft_tokens",
                                           "Currently active speculative_num_draft_tokens.", ln, registry=r)
        self.num_running_reqs.labels(**self.labels).set(0)
        self.num_queue_reqs.labels(**self.labels).set(0)
        # Per-rank forward counters: the engine thread adds plain floats (every iteration, inside
        # a timed phase: 8 ranks x prometheus-client children would cost it ~0.1 ms), and the
        # collector writes one series per TP rank at scrape time. Keys exist from the start,
        # so a scrape never iterates a dict that grows.
        self._passes = {(dec, g): 0.0 for dec in (True, False) for g in (True, False)}
        self._fwd = {c: 0.0 for c in FORWARD_CATEGORIES} if device_timer else {}
        r.register(_PerRankForward(self))
        self._running = self.num_running_reqs.labels(**self.labels)
        self._queued = self.num_queue_reqs.labels(**self.labels)

    def on_forward(self, phases: dict[str, float], is_decode: bool, graph: bool) -> None:
        """One iteration: ``phases`` = {category: actual seconds}; one graph pass counted."""
        if self.device_timer:
            for cat, sec in phases.items():
                self._fwd[cat] += sec
        self._passes[(is_decode, graph)] += 1.0

    def on_finish(self, prompt_tokens: int, completion_tokens: int, spec_verify_ct: int, streaming: bool) -> None:
        """One finished request (SGLang ``observe_one_finished_request``)."""
        s = "true" if streaming else "false"
        self.prompt_tokens_total.labels(**self.tokenizer_labels, is_streaming=s).inc(prompt_tokens)
        self.generation_tokens_total.labels(**self.tokenizer_labels, is_streaming=s).inc(completion_tokens)
        if spec_verify_ct > 0:
            self.spec_verify_calls_total.labels(**self.tokenizer_labels).inc(spec_verify_ct)

    def set_spec_steps(self, steps: int, draft_tokens: int) -> None:
        """The active speculative tier (``sglang:spec_num_steps``, ``sglang:spec_num_draft_tokens``)."""
        self.spec_num_steps.labels(**self.labels).set(steps)
        self.spec_num_draft_tokens.labels(**self.labels).set(draft_tokens)

    def set_queues(self, running: int, queued: int) -> None:
        self._running.set(running)
        self._queued.set(queued)

    def render(self) -> bytes:
        """Prometheus text exposition."""
        return generate_latest(self.registry)
