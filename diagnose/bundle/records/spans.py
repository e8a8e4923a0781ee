"""The SPANS stream: one ``SpanRecord`` per span, from the in-process agent, the OTLP receiver or
the importers (all write diagnose/agent/inproc/records.py ``make_record``'s shape; a target or a
hand edit can write anything).

Read leniently (``span_record``): every JSON object is a record, and one that cannot be placed on
the timeline says why in ``reject`` (one of REJECTS), so the analysis counts what it left out by
reason; the checks run in that order and the first that fails names the reason. A field of the
wrong type gets its default (names, kinds and statuses are read as text, as ``str`` writes them),
``attributes`` that is not an object is empty, and an event that is not an object is left out.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from diagnose.bundle.records.base import Record

MAX_SPAN_NS = 24 * 3600 * 10**9  # longer spans are clock or instrumentation errors
MAX_TIME_NS = 2**63 - 1  # Unix ns fit int64; a larger time is not a clock reading
MAX_NUMBER = 2.0**53  # a numeric attribute (tokens, bytes, seconds) past this is no measurement
# Why a span is left out, in the order checked: times that are not ints (no end: still open when
# the capture ended), times outside Unix ns, ids that are not text, an end before the start, > 24 h.
REJECTS = ("no_end_time", "bad_time", "time_out_of_range", "bad_id", "end_before_start", "longer_than_24h")


class SpanEvent(NamedTuple):
    """One span event: its name as text ("" when absent) and its time (Unix ns; None when not an int)."""

    name: str
    t_ns: int | None


class SpanRecord(Record):
    """One span (times Unix ns, ids in hex). ``reject``: why the analysis leaves it out (REJECTS),
    None for a span with both times, its ids and at most 24 h; only then are ``start_ns``/``end_ns``
    its times (0 otherwise) and ``events`` read. ``trace_id``/``span_id`` are "" when absent or not
    text, ``parent_span_id`` None for a root (absent, empty or not text)."""

    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str | None = None
    name: str = "?"
    kind: str = "internal"
    start_ns: int = 0
    end_ns: int = 0
    status: str = "unset"
    attributes: dict[str, Any] = {}
    events: tuple[SpanEvent, ...] = ()
    service: str | None = None
    source: str | None = None  # agent, otlp or import
    reject: str | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class _Line(msgspec.Struct):
    """A span line's fields as the producer wrote them (any JSON value), before they are checked."""

    trace_id: Any = None
    span_id: Any = None
    parent_span_id: Any = None
    name: Any = "?"
    kind: Any = None
    start_ns: Any = None
    end_ns: Any = None
    status: Any = None
    attributes: Any = None
    events: Any = None
    service: Any = None
    source: Any = None


class _EventLine(msgspec.Struct):
    name: Any = ""
    t_ns: Any = None


def _reject(w: _Line) -> str | None:
    start, end = w.start_ns, w.end_ns
    if type(start) is not int or type(end) is not int:
        return "no_end_time" if end is None else "bad_time"
    if not (0 < start <= MAX_TIME_NS and 0 < end <= MAX_TIME_NS):
        return "time_out_of_range"
    if not (isinstance(w.trace_id, str) and isinstance(w.span_id, str)
            and isinstance(w.parent_span_id, (str, type(None)))):
        return "bad_id"
    if end < start:
        return "end_before_start"
    if end - start > MAX_SPAN_NS:
        return "longer_than_24h"
    return None


def _events(raw: Any) -> tuple[SpanEvent, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for e in raw:
        if isinstance(e, dict):
            ev = msgspec.convert(e, _EventLine)
            out.append(SpanEvent(str(ev.name), ev.t_ns if type(ev.t_ns) is int else None))
    return tuple(out)


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def attribute_number(attrs: dict[str, Any], key: str, limit: float = MAX_NUMBER) -> float | None:
    """Attribute ``key`` as a number in [0, ``limit``], or None: absent, not a number (a bool is not),
    negative, NaN, infinite or past the limit (the target writes the attributes: an integer of 400
    digits has no float, and 1e308 s times 1e9 is infinite)."""
    v = attrs.get(key)
    if type(v) is int:
        return float(v) if 0 <= v <= limit else None
    if type(v) is float and 0.0 <= v <= limit:  # NaN compares false
        return v
    return None


def span_record(raw: dict[str, Any]) -> SpanRecord:
    """The record of one decoded span line (a JSON object); never None: see the module docstring."""
    w = msgspec.convert(raw, _Line)
    reject = _reject(w)
    ok = reject is None
    return SpanRecord(
        trace_id=w.trace_id if isinstance(w.trace_id, str) else "",
        span_id=w.span_id if isinstance(w.span_id, str) else "",
        parent_span_id=_text(w.parent_span_id) or None, name=str(w.name), kind=str(w.kind or "internal"),
        start_ns=w.start_ns if ok else 0, end_ns=w.end_ns if ok else 0, status=str(w.status or "unset"),
        attributes=w.attributes if isinstance(w.attributes, dict) else {}, events=_events(w.events) if ok else (),
        service=_text(w.service), source=_text(w.source), reject=reject)


__all__ = ["MAX_NUMBER", "MAX_SPAN_NS", "MAX_TIME_NS", "REJECTS", "SpanEvent", "SpanRecord", "attribute_number",
           "span_record"]
