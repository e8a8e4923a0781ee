"""Decode an OTLP/JSON request span by span when it does not decode whole, so that one bad span
(a time above uint64 or negative, a name that is not a string) costs that span, not the file.

``json_format.ParseDict`` refuses a whole ExportTraceServiceRequest for one field it cannot
convert. When it does, each span is decoded again on its own, inside a copy of its resource and
scope, with the same decoder (otlp_decode.decode_json_doc); the spans that still fail are counted
in SpanCounts: ``time_out_of_range`` for a time that is no uint64 (negative, above 2**64 - 1, not
an integer), ``malformed_span`` for anything else.
"""
from __future__ import annotations

from typing import Any

from diagnose.agent.inproc.records import SpanCounts
from diagnose.collectors.otlp_decode import OtlpDecodeError, OtlpNestedTooDeep, decode_json_doc, members

_TIME_KEYS = ("startTimeUnixNano", "endTimeUnixNano", "start_time_unix_nano", "end_time_unix_nano")
_EVENT_TIME_KEYS = ("timeUnixNano", "time_unix_nano")


def _without(node: Any, *keys: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in keys} if isinstance(node, dict) else {}


def _uint64(value: Any) -> bool:
    """Whether an OTLP/JSON fixed64 time (an integer or its decimal string) fits uint64."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return len(value) <= 20 and int(value) < 2**64
    return type(value) is int and 0 <= value < 2**64


def rejection(span: Any) -> str:
    """The SpanCounts key for a span that does not decode: ``time_out_of_range`` when one of its
    times (or its events' times) is not a uint64, else ``malformed_span``."""
    if not isinstance(span, dict):
        return "malformed_span"
    events = [e for e in members(span, "events") if isinstance(e, dict)]
    times = [span.get(k) for k in _TIME_KEYS] + [e.get(k) for e in events for k in _EVENT_TIME_KEYS]
    return "time_out_of_range" if any(t is not None and not _uint64(t) for t in times) else "malformed_span"


def decode_json_spans(doc: Any, counts: SpanCounts) -> Any:
    """A parsed OTLP/JSON request -> ExportTraceServiceRequest holding every span that decodes;
    the others are counted in ``counts.rejected``. Raises OtlpDecodeError when the document is
    not a request at all (no resourceSpans list) or nested too deep."""
    try:
        return decode_json_doc(doc)
    except OtlpNestedTooDeep:
        raise  # a hostile shape, not one bad span: the request is refused
    except OtlpDecodeError as exc:
        whole = exc
    resources = members(doc, "resourceSpans", "resource_spans")
    if not resources:
        raise whole
    request = decode_json_doc({})
    for rs in resources:
        shell = _without(rs, "scopeSpans", "scope_spans")
        for ss in members(rs, "scopeSpans", "scope_spans"):
            scope = _without(ss, "spans")
            for span in members(ss, "spans"):
                one = {"resourceSpans": [{**shell, "scopeSpans": [{**scope, "spans": [span]}]}]}
                try:
                    request.MergeFrom(decode_json_doc(one))
                except OtlpDecodeError:
                    counts.reject(rejection(span))
    return request


__all__ = ["decode_json_spans", "rejection"]
