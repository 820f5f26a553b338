"""The typed result path's file boundary: :class:`lab.measure.request_record.RequestRecord` and
``requests.jsonl``, :class:`lab.measure.records.RequestMetrics` / :class:`RunSummary` and
``runs.json``.

- A record the client fills (its own ``_one_request`` fed a real SGLang 0.5.16 stream through a
  stand-in session: no socket) and the bench appends (``lab.measure.point._appender``) is written
  with the key order of the committed H200 capture, and reads back as the same record.
- Every line of every committed capture (docs/benchmarks, tests/fixtures) parses, and writing it
  back gives the same JSON text (a capture written before ``output_ids`` existed gains only that
  key, as null).
- Keys a record does not know survive a round trip; missing ones take their defaults.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from lab.measure import client
from lab.measure.point import _appender
from lab.measure.prometheus import SERVER_TIMING_KEYS
from lab.measure.records import LATENCY_METRICS, RequestMetrics, RunSummary, request_metrics, summarize_run
from lab.measure.request_record import RequestRecord, as_record

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "docs" / "benchmarks" / "h200-sglang-0.5.16" / "results"
CAPTURES = sorted([*(ROOT / "docs" / "benchmarks").rglob("requests.jsonl"), *(ROOT / "tests" / "fixtures").rglob("*.jsonl")])
CLIENT_KEYS = ["rid", "mode", "concurrency", "repeat", "prompt_index", "t_dispatch", "t_send", "t_end", "chunks",
               "completion_tokens", "prompt_tokens", "meta_info", "ok", "error", "output_text", "output_ids"]


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


class _Response:
    """What ``_one_request`` reads of an aiohttp response: ``status`` and ``content`` lines."""

    def __init__(self, lines: list[bytes]) -> None:
        self.status = 200
        self._lines = lines

    @property
    def content(self):
        async def gen():
            for ln in self._lines:
                yield ln
        return gen()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Session:
    """An aiohttp session stand-in that answers one POST with a captured event stream."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines, self.posted = lines, []

    def post(self, url, json):  # noqa: A002 (aiohttp's name)
        self.posted.append(json)
        return _Response(self.lines)


def _client_record(folder: str = "tiny/eagle3_decode") -> RequestRecord:
    """One record as the client fills it, from a real SGLang 0.5.16 ``/generate`` stream."""
    lines = (ROOT / "tests" / "fixtures" / "sglang-0.5.16" / folder / "generate.stream.txt").read_bytes()
    rec = client._new_record("eagle3_decode-c8-r0-3", 5, "eagle3_decode", 8, 0)
    rec.t_dispatch = 0.0
    session = _Session(lines.splitlines(keepends=True))
    asyncio.run(client._one_request(session, "http://x/generate", {"rid": rec.rid}, rec))
    assert session.posted == [{"rid": rec.rid}]
    return rec


def test_a_client_record_written_by_the_bench_reads_back_as_the_same_record():
    rec = _client_record()
    assert rec.ok and rec.error is None and rec.completion_tokens == sum(n for _, n in rec.chunks) > 0
    assert rec.output_ids is not None and len(rec.output_ids) == rec.completion_tokens
    out, kept = io.StringIO(), []
    _appender(out, kept, concurrency=8, context_tokens=0, max_new_tokens=64, point="c8", request_rate=None)(rec)
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1 and kept == [rec]
    row = json.loads(line)
    # the key order of the committed H200 capture's concurrency-point lines
    committed = next(json.loads(x) for x in _lines(H200 / "baseline" / "requests.jsonl")
                     if json.loads(x)["request_rate"] is None)
    assert list(row) == list(committed) == CLIENT_KEYS + ["context_tokens", "max_new_tokens", "point", "request_rate"]
    assert row["point"] == "c8" and row["request_rate"] is None and row["chunks"] == rec.chunks
    back = RequestRecord.from_json(row)
    assert back == rec and back.extra == {}
    assert json.dumps(back.to_json()) + "\n" == line  # written, read, written: the same bytes
    assert request_metrics(back) == request_metrics(rec)


def test_an_open_loop_record_keeps_the_committed_key_order():
    rec = _client_record()
    rec.t_scheduled = -0.001
    out = io.StringIO()
    _appender(out, [], concurrency=0, context_tokens=0, max_new_tokens=64, point="r4", request_rate=4.0)(rec)
    row = json.loads(out.getvalue())
    committed = next(json.loads(x) for x in _lines(H200 / "baseline" / "requests.jsonl")
                     if json.loads(x)["request_rate"] is not None)
    assert list(row) == list(committed) and list(row).index("t_scheduled") == len(CLIENT_KEYS)
    assert RequestRecord.from_json(row) == rec


def test_a_new_record_writes_the_client_keys_only():
    rec = client._new_record("m-c1-r0-0", 2, "m", 1, 0)
    assert list(rec.to_json()) == CLIENT_KEYS
    assert rec.to_json()["chunks"] == [] and rec.to_json()["meta_info"] == {} and rec.to_json()["ok"] is False
    rec.set(point="c1")  # a point set: request_rate is written, null at a concurrency point
    assert list(rec.to_json())[-2:] == ["point", "request_rate"] and rec.to_json()["request_rate"] is None
    with pytest.raises(AttributeError, match="no field 'pointt'"):
        rec.set(pointt="c1")


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_capture_line_parses_and_writes_back_unchanged(path):
    lines = _lines(path)
    assert lines
    for line in lines:
        row = json.loads(line)
        rec = RequestRecord.from_json(row)
        assert rec.extra == {}, sorted(rec.extra)  # every key a capture holds is a field
        written = rec.to_json()
        if "output_ids" not in row:  # written before the lossless check: gains the key, as null
            assert written.pop("output_ids") is None
        assert json.dumps(written) == line
        assert RequestRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
        assert rec.rid == row["rid"] and rec.chunks == row["chunks"] and rec.ok is row["ok"]


def test_unknown_keys_survive_and_missing_keys_take_defaults():
    row = {"rid": "a", "ok": True, "chunks": [[0.1, 1], [0.2, 2]], "completion_tokens": 3, "t_send": 0.0,
           "t_end": 0.3, "slot": 4, "launch": 2}
    rec = RequestRecord.from_json(row)
    assert rec.extra == {"slot": 4, "launch": 2} and rec.meta_info == {} and rec.output_text == ""
    assert rec.mode is None and rec.output_ids is None and rec.point is None
    assert list(rec.to_json())[-2:] == ["slot", "launch"] and rec.to_json()["slot"] == 4
    assert as_record(row) == rec and as_record(rec) is rec
    # request_metrics takes either: a Mapping read from a file goes through from_json
    assert request_metrics(row) == request_metrics(rec) and request_metrics(row).ttft_ms == pytest.approx(100.0)
    with pytest.raises(TypeError, match="JSON object"):
        RequestRecord.from_json([["rid", "a"]])


def test_metrics_and_summary_to_dict_carry_every_key_by_name():
    rec = _client_record()
    m = request_metrics(rec)
    assert isinstance(m, RequestMetrics)
    d = m.to_dict()
    assert d["accept_length"] == m.accept_length and d["icl_ms"] is m.icl_ms and d["ok"] is True
    assert {"ttft_ms", "itl_ms", "icl_ms", "tpot_ms", "e2e_ms", "dispatch_delay_ms", "decode_tok_s", "cycle_ms",
            "accept_length", "token_accounting_ok", "n_chunks", "chunk_tokens", "spec_verify_ct"} <= set(d)
    s = summarize_run([rec], wall_s=1.0, server={"verify_ms": 20.0, "step_time_ms": {"1": [10.0, 12.0]}})
    assert isinstance(s, RunSummary)
    row = s.to_dict()
    for metric in LATENCY_METRICS:
        for p in ("mean", "p50", "p90", "p99"):
            assert row[f"{p}_{metric}"] == getattr(s, f"{p}_{metric}")
    assert all(k in row for k in SERVER_TIMING_KEYS) and row["verify_ms"] == 20.0
    assert row["server_step_ms"] == pytest.approx(11.0) and row["server"]["verify_ms"] == 20.0
    assert (row["mode"], row["concurrency"], row["repeat"], row["requests"]) == ("eagle3_decode", 8, 0, 1)
    # the server fields sit together in SERVER_TIMING_KEYS' order (the runs.json key order)
    keys = list(row)
    i = keys.index(SERVER_TIMING_KEYS[0])
    assert tuple(keys[i:i + len(SERVER_TIMING_KEYS)]) == SERVER_TIMING_KEYS
    assert keys[-3:] == ["server_step_ms", "server_step_entries", "server"]
