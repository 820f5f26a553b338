"""Where the verify time goes, kernel by kernel: torch-profiler traces into per-cycle tables.

Modules: :mod:`~lab.profiling.trace` (parse a Chrome trace JSON, possibly gzipped, into
per-step and per-cycle rows; standard library only, so it runs on the device machine where
pydantic is absent) and :mod:`~lab.profiling.report` (Markdown table and figure for the
report). Taking a trace from a running engine (SGLang 0.5.23's ``/start_profile`` and
``/stop_profile`` around a few concurrency-1 requests, ``bench.trace``) is a measurement:
:mod:`lab.measure.trace_capture`.

Importing this package needs only the standard library.
"""

from lab.profiling.trace import (
    STEP_SPAN_RE,
    analyze_trace,
    load_trace,
    summarize_rows,
)

__all__ = ["STEP_SPAN_RE", "analyze_trace", "load_trace", "summarize_rows"]
