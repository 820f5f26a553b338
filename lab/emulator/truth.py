"""Ground truth of the emulator: what it actually did (docs/contracts.md, JSONL).

Written by :class:`TruthWriter` from the engine thread; read by tests and analysis through
:func:`load_truth`. Never read by the benchmark client. Times are ``time.perf_counter()``
seconds (CLOCK_MONOTONIC: comparable across processes of one machine).

Line kinds: ``header`` (first), ``prefill`` / ``decode`` / ``spec`` (one per iteration),
``request`` (one per finished request, with its task ``category`` when the emulator was given
a prompt file; ``diverged_from``: the token position from which the ``diverge-at`` fault
altered its output, or null) and ``sent`` (one per streamed request, written by
the HTTP layer: when its first and last content chunks were written to the socket).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

from lab.catalog import truth_metrics

__all__ = ["TruthWriter", "Truth", "load_truth", "PhaseFidelity"]

ITERATION_KINDS = ("prefill", "decode", "spec")


class TruthWriter:
    """Append-only JSONL writer; flushes on every request line and on :meth:`close`.

    Thread-safe (one lock). ``path`` None makes every method a no-op.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self._lock = threading.Lock()
        self._f = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._f = open(path, "w", buffering=1 << 16)

    def write(self, obj: dict[str, Any], flush: bool = False) -> None:
        """Write one line (``obj`` as compact JSON)."""
        if self._f is None:
            return
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            if self._f is None:
                return
            self._f.write(line)
            if flush:
                self._f.flush()

    def flush(self) -> None:
        with self._lock:
            if self._f is not None:
                self._f.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        with self._lock:
            if self._f is not None:
                self._f.flush()
                os.fsync(self._f.fileno())
                self._f.close()
                self._f = None


@dataclasses.dataclass(frozen=True)
class PhaseFidelity:
    """Actual vs planned duration of one iteration kind (milliseconds)."""

    kind: str
    n: int
    mean_planned_ms: float
    mean_actual_ms: float
    mean_abs_error_ms: float
    max_abs_error_ms: float


@dataclasses.dataclass
class Truth:
    """Parsed ground-truth file.

    :ivar header: the header object (``profile``, ``argv``, ``pid``).
    :ivar iterations: iteration lines in file order.
    :ivar requests: finished-request lines keyed by rid.
    :ivar sent: ``sent`` lines keyed by rid (``first_sent``, ``last_sent``: perf_counter s).
    """

    header: dict[str, Any]
    iterations: list[dict[str, Any]]
    requests: dict[str, dict[str, Any]]
    sent: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def decode_tok_s(self, rid: str) -> float | None:
        """Ground-truth decode throughput of one request (tok/s).

        ``(completion_tokens - 1) / (last_token - first_token)``; None when fewer than 2
        tokens or zero span. :raises KeyError: unknown rid.
        """
        r = self.requests[rid]
        span = r["last_token"] - r["first_token"]
        if r["completion_tokens"] < 2 or span <= 0:
            return None
        return (r["completion_tokens"] - 1) / span

    def accept_length(self, rids: Iterable[str] | None = None) -> float | None:
        """``sum(completion_tokens) / sum(spec_verify_ct)`` over ``rids`` (default all).

        Same definition as the lab's client-side accept_length (DESIGN.md). None when no
        verify happened. :raises KeyError: unknown rid.
        """
        rs = [self.requests[r] for r in rids] if rids is not None else list(self.requests.values())
        ct = sum(r["spec_verify_ct"] for r in rs)
        return sum(r["completion_tokens"] for r in rs) / ct if ct else None

    def accept_length_by_category(self, rids: Iterable[str] | None = None) -> dict[str | None, float | None]:
        """:meth:`accept_length` per task category (the ``category`` the emulator gave each
        request from its prompt file, :mod:`lab.emulator.categories`; None: unmapped), over
        ``rids`` (default all). :raises KeyError: unknown rid."""
        groups: dict[str | None, list[str]] = {}
        for rid in (rids if rids is not None else self.requests):
            groups.setdefault(self.requests[rid].get("category"), []).append(rid)
        return {cat: self.accept_length(ids) for cat, ids in groups.items()}

    def iterations_in(self, t0: float | None = None, t1: float | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Iterations with ``start >= t0`` and ``end <= t1`` (perf_counter s), optionally of one kind."""
        return [
            it for it in self.iterations
            if (t0 is None or it["start"] >= t0) and (t1 is None or it["end"] <= t1)
            and (kind is None or it["kind"] == kind)
        ]

    def mean_phase_s(self, t0: float | None = None, t1: float | None = None) -> dict[str, float | None]:
        """Mean actual seconds per decode iteration in a window.

        :returns: ``{"verify_s", "draft_s"}`` per spec cycle, ``{"decode_s"}`` per decode
            step and ``{"cycle_s"}`` per decode-or-spec iteration (end - start); None where
            the window holds no such iteration.
        """
        spec = self.iterations_in(t0, t1, "spec")
        dec = self.iterations_in(t0, t1, "decode")
        both = spec + dec

        def mean(xs: list[float]) -> float | None:
            return sum(xs) / len(xs) if xs else None

        return {
            "verify_s": mean([i["verify_s"] for i in spec]),
            "draft_s": mean([i["draft_s"] for i in spec]),
            "decode_s": mean([i["decode_s"] for i in dec]),
            "cycle_s": mean([i["end"] - i["start"] for i in both]),
        }

    def fidelity(self) -> dict[str, PhaseFidelity]:
        """Actual (end - start) vs planned_s per iteration kind: the emulator's own timing error."""
        out: dict[str, PhaseFidelity] = {}
        for kind in ITERATION_KINDS:
            its = [i for i in self.iterations if i["kind"] == kind]
            if not its:
                continue
            errs = [abs((i["end"] - i["start"]) - i["planned_s"]) * 1e3 for i in its]
            out[kind] = PhaseFidelity(
                kind=kind,
                n=len(its),
                mean_planned_ms=sum(i["planned_s"] for i in its) / len(its) * 1e3,
                mean_actual_ms=sum(i["end"] - i["start"] for i in its) / len(its) * 1e3,
                mean_abs_error_ms=sum(errs) / len(errs),
                max_abs_error_ms=max(errs),
            )
        return out

    def chunk_times(self) -> dict[str, list[tuple[float, int]]]:
        """Per rid, ``[(iteration end, tokens), ...]`` of the iterations that gave it tokens."""
        out: dict[str, list[tuple[float, int]]] = {}
        for it in self.iterations:
            for rid, n in it["tokens"].items():
                if n > 0:
                    out.setdefault(rid, []).append((it["end"], n))
        return out

    def run_metrics(self, rids: Sequence[str], *, t0: float | None = None, t1: float | None = None,
                    clock: str = "iteration") -> dict[str, float | None]:
        """The ground-truth counterpart of every metric :mod:`lab.catalog` gives one (its
        ``truth``), for one run (the requests ``rids``), aggregated as the client aggregates its
        own records (:func:`lab.measure.records.summarize_run`); the metrics judged under
        ``bench.slo`` (source ``load``) are left to the caller, who knows the SLO.

        :param t0, t1: perf_counter times bounding the run (the ``/metrics`` scrapes around it,
            or its first send and last end); phase means use the iterations between them (None:
            the requests' own span).
        :param clock: ``"iteration"``: first/last token at the end of the iteration that made it
            (what the engine did); ``"wire"``: when the HTTP layer wrote the first/last chunk to
            the socket (``sent`` lines), which removes the server's own delivery lag and leaves
            only the client's error (decode_tok_s, output_tok_s, cycle_ms and p50_ttft_ms change).
        :returns: ``{metric name: value or None}`` in catalog order.
        :raises KeyError: a rid missing from the file (or from its ``sent`` lines), or a catalog
            truth this method does not compute (declare it here too).
        :raises ValueError: an unknown ``clock``.
        """
        reqs = [self.requests[r] for r in rids]
        if clock == "wire":
            reqs = [{**q, "first_token": self.sent[q["rid"]]["first_sent"], "last_token": self.sent[q["rid"]]["last_sent"]}
                    for q in reqs]
        elif clock != "iteration":
            raise ValueError(f"clock={clock!r}: use 'iteration' or 'wire'")
        chunks = self.chunk_times()
        tok_s = [(q["completion_tokens"] - 1) / (q["last_token"] - q["first_token"]) for q in reqs
                 if q["completion_tokens"] >= 2 and q["last_token"] > q["first_token"]]
        tpot = [(q["last_token"] - q["first_token"]) * 1e3 / (q["completion_tokens"] - 1) for q in reqs
                if q["completion_tokens"] >= 2]
        cycles, gaps = [], []
        for r in reqs:
            n, vct = r["completion_tokens"], r["spec_verify_ct"]
            span = r["last_token"] - r["first_token"]
            steps = vct if vct else n - 1
            if n >= 2 and span > 0 and steps:
                cycles.append(span * 1e3 / steps)
            ts = [t for t, _ in chunks.get(r["rid"], [])]
            gaps += [(b - a) * 1e3 for a, b in zip(ts, ts[1:])]
        start = min(r["arrival"] for r in reqs) if reqs else None
        end = max(r["last_token"] for r in reqs) if reqs else None
        phases = self.mean_phase_s(t0 if t0 is not None else start, t1 if t1 is not None else end)
        ms = lambda s: s * 1e3 if s is not None else None  # noqa: E731
        values = {
            "decode_tok_s": statistics.median(tok_s) if tok_s else None,
            "output_tok_s": (sum(r["completion_tokens"] for r in reqs) / (end - start)
                             if reqs and end > start else None),
            "accept_length": self.accept_length(rids),
            "verify_ms": ms(phases["verify_s"]),
            "draft_ms": ms(phases["draft_s"]),
            "decode_ms": ms(phases["decode_s"]),
            "cycle_ms": statistics.median(cycles) if cycles else None,
            "p50_ttft_ms": statistics.median((r["first_token"] - r["arrival"]) * 1e3 for r in reqs) if reqs else None,
            "p50_tpot_ms": statistics.median(tpot) if tpot else None,
            "mean_icl_ms": sum(gaps) / len(gaps) if gaps else None,
        }
        return {m.name: values[m.name] for m in truth_metrics() if m.source != "load"}

    def tokens_by_rid(self) -> dict[str, list[int]]:
        """Per request, the tokens it received from each iteration (its chunk sizes), in order."""
        out: dict[str, list[int]] = {}
        for it in self.iterations:
            for rid, n in it["tokens"].items():
                out.setdefault(rid, []).append(n)
        return out


def load_truth(path: str | os.PathLike[str]) -> Truth:
    """Read a ground-truth JSONL file.

    A truncated last line (emulator killed mid-write) is ignored.
    :raises FileNotFoundError: no file. :raises ValueError: no header line first.
    """
    header: dict[str, Any] | None = None
    iterations: list[dict[str, Any]] = []
    requests: dict[str, dict[str, Any]] = {}
    sent: dict[str, dict[str, Any]] = {}
    with open(path) as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = obj.get("kind")
            if n == 0:
                if kind != "header":
                    raise ValueError(f"{path}: first line is not a header (kind={kind!r})")
                header = obj
            elif kind in ITERATION_KINDS:
                iterations.append(obj)
            elif kind == "request":
                requests[obj["rid"]] = obj
            elif kind == "sent":
                sent[obj["rid"]] = obj
    if header is None:
        raise ValueError(f"{path}: empty ground-truth file")
    return Truth(header=header, iterations=iterations, requests=requests, sent=sent)
