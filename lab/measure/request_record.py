"""One streamed request as the client recorded it: :class:`RequestRecord`.

The client (:mod:`lab.measure.client`) builds and fills one :class:`RequestRecord` per request;
everything downstream (:mod:`lab.measure.records`, :mod:`lab.measure.hygiene`,
:mod:`lab.measure.goodput`, the aggregates) reads its attributes. A dict exists only at the file
boundary: :meth:`RequestRecord.to_json` is one ``requests.jsonl`` line (docs/contracts.md,
"Client request record"), key for key and in the order the client has always written them, and
:meth:`RequestRecord.from_json` reads one back, also from a capture written before a key existed
(a missing key takes its default) or with keys this class does not know (kept in
:attr:`RequestRecord.extra`, written back last).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["RequestRecord", "as_record", "as_records"]

#: Keys written only when set (not None): the ones a caller adds to the client's record. At a
#: concurrency point ``request_rate`` is None and still written once ``point`` is set
#: (docs/contracts.md: "``request_rate`` (req/s; null at a concurrency point)").
_WHEN_SET = ("t_scheduled", "context_tokens", "max_new_tokens", "point", "request_rate", "counted_prompt_tokens",
             "warmup")


@dataclass(kw_only=True, eq=True)
class RequestRecord:
    """One request of a run, as streamed (docs/contracts.md, "Client request record").

    Times are ``time.perf_counter()`` seconds of the client's process (only differences mean
    anything); None where the moment never came (a request never sent has no ``t_send``).

    :ivar rid: request id sent to the server (``f"{rid_prefix}-{i}"``, unique in flight).
    :ivar mode: the mode name (``params.modes`` key). :ivar concurrency: closed-loop
        concurrency, or at an open-loop rate point the in-flight cap (0 = none).
    :ivar repeat: repeat index (0-based). :ivar prompt_index: index of the prompt in the dataset.
        (These five are None only in a record read from a file that lacks the key.)
    :ivar t_dispatch: when the request became due to be sent (s). :ivar t_send: just before the
        POST (s). :ivar t_end: when its stream ended or failed (s).
    :ivar chunks: content chunks ``[[t_s, n_tokens], ...]``: arrival time (s) and the new tokens
        it carried (>= 1).
    :ivar completion_tokens: the server's final ``meta_info.completion_tokens`` (tokens), None
        without a chunk. :ivar prompt_tokens: ``meta_info.prompt_tokens`` (tokens).
    :ivar meta_info: the last chunk's ``meta_info`` ({} before any), e.g. ``spec_verify_ct``.
    :ivar ok: the request completed. :ivar error: why not (HTTP status, timeout, server error,
        ``"not sent: ..."``), None when ok.
    :ivar output_text: the generated text. :ivar output_ids: the generated token ids, None when
        the server sent none (and in captures written before the key existed).
    :ivar t_scheduled: open loop: when the arrival schedule made it due (s).
    :ivar context_tokens: the prompt length the point padded to (tokens).
    :ivar max_new_tokens: the point's output length before spread (tokens).
    :ivar point: the point key (``c8``, ``c8_ctx4096_out64``, ``r4``).
    :ivar request_rate: the point's open-loop rate (requests/s), None at a concurrency point.
    :ivar counted_prompt_tokens: ``lab capture``: the prompt's length by the served model's
        tokenizer (tokens). :ivar warmup: ``lab capture``: a warm-up request.
    :ivar extra: keys of a record read from a file that this class has no field for.
    """

    rid: str | None = None
    mode: str | None = None
    concurrency: int | None = None
    repeat: int | None = None
    prompt_index: int | None = None
    t_dispatch: float | None = None
    t_send: float | None = None
    t_end: float | None = None
    chunks: list[list[float]] = field(default_factory=list)
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    meta_info: dict[str, Any] = field(default_factory=dict)
    ok: bool = False
    error: str | None = None
    output_text: str = ""
    output_ids: list[int] | None = None
    t_scheduled: float | None = None
    context_tokens: int | None = None
    max_new_tokens: int | None = None
    point: str | None = None
    request_rate: float | None = None
    counted_prompt_tokens: int | None = None
    warmup: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``requests.jsonl`` line as a dict: the sixteen keys the client always writes, in
        order, then those of :data:`_WHEN_SET` that are set, then :attr:`extra`. Values are the
        record's own objects (not copies)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            name = f.name
            if name == "extra":
                continue
            value = getattr(self, name)
            if name in _WHEN_SET and value is None and not (name == "request_rate" and self.point is not None):
                continue
            out[name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> RequestRecord:
        """One ``requests.jsonl`` line (parsed) as a record: a key it lacks takes its field's
        default (None, ``[]``, ``{}``, ``False``, ``""``), a key with no field goes to
        :attr:`extra`. Lists and dicts are shared with ``row``, not copied.

        :raises TypeError: ``row`` is not a mapping.
        """
        if not isinstance(row, Mapping):
            raise TypeError(f"a request record is a JSON object, got {type(row).__name__}")
        known = _FIELD_NAMES
        rec = cls(**{k: v for k, v in row.items() if k in known})
        rec.extra = {k: v for k, v in row.items() if k not in known}
        return rec

    def set(self, **values: Any) -> None:
        """Set fields by name (what a caller adds to the client's record, e.g. ``point``).

        :raises AttributeError: a name that is not a field.
        """
        for k, v in values.items():
            if k not in _FIELD_NAMES:
                raise AttributeError(f"RequestRecord has no field {k!r}")
            setattr(self, k, v)


_FIELD_NAMES = frozenset(f.name for f in fields(RequestRecord)) - {"extra"}


def as_record(record: RequestRecord | Mapping[str, Any]) -> RequestRecord:
    """``record`` itself, or a mapping (a ``requests.jsonl`` row read from a file) through
    :meth:`RequestRecord.from_json`."""
    return record if isinstance(record, RequestRecord) else RequestRecord.from_json(record)


def as_records(records: Iterable[RequestRecord | Mapping[str, Any]]) -> list[RequestRecord]:
    """:func:`as_record` of each."""
    return [as_record(r) for r in records]
