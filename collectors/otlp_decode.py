"""OTLP trace payloads -> SPANS stream records.

Decoding uses opentelemetry-proto's ``ExportTraceServiceRequest``: ``FromString`` for protobuf,
``google.protobuf.json_format`` for JSON. OTLP/JSON writes trace and span ids as hex (not base64
as proto3's JSON mapping would), so ids are normalised first; hex, ``0x``-hex and base64 are all
accepted. Files may also hold the Python SDK's ConsoleSpanExporter output (``0x`` ids, ISO-8601
times), which is not OTLP and is read field by field. Several JSON documents may follow each other
in one file (the collector's file exporter writes one request per line).
"""
from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from diagnose.agent.inproc.records import SpanCounts, SpanRejected, bound_events, count_record, format_id, make_record

_ID_KEYS = {"traceId": 32, "trace_id": 32, "spanId": 16, "span_id": 16,
            "parentSpanId": 16, "parent_span_id": 16}
MAX_JSON_DEPTH = 100  # json_format.ParseDict's own default; deeper documents are refused before it


class OtlpDecodeError(ValueError):
    """The payload is not an OTLP trace request; the message says what is wrong."""


class OtlpNestedTooDeep(OtlpDecodeError):
    """Nested past MAX_JSON_DEPTH: a hostile shape, refused whole (never decoded span by span)."""


def _request_class():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ExportTraceServiceRequest


def decode_protobuf(body: bytes):
    """Raises OtlpDecodeError."""
    from google.protobuf.message import DecodeError

    try:
        return _request_class().FromString(body)
    except (DecodeError, RuntimeWarning) as exc:
        raise OtlpDecodeError(f"not an OTLP protobuf ExportTraceServiceRequest: {exc}") from None


def decode_json_doc(doc: Any):
    """A parsed OTLP/JSON document -> ExportTraceServiceRequest. Raises OtlpDecodeError (also for
    a document nested deeper than MAX_JSON_DEPTH)."""
    from google.protobuf import json_format

    if not isinstance(doc, dict):
        raise OtlpDecodeError("OTLP/JSON must be a JSON object with resourceSpans")
    rewritten = _ids_to_base64(doc, 0)  # raises OtlpNestedTooDeep itself
    try:
        return json_format.ParseDict(rewritten, _request_class()(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        raise OtlpDecodeError(f"not an OTLP/JSON trace request: {str(exc)[:200]}") from None
    except RecursionError:
        raise OtlpNestedTooDeep(f"OTLP/JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def load_json(body: bytes | bytearray) -> Any:
    """One JSON document. Raises OtlpDecodeError (also for nesting past the parser's recursion limit)."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OtlpDecodeError(f"malformed JSON: {str(exc)[:120]}") from None


def decode_json(body: bytes | bytearray):
    """Raises OtlpDecodeError."""
    return decode_json_doc(load_json(body))


def _ids_to_base64(node: Any, depth: int) -> Any:
    """Copy of ``node`` with every trace/span id as base64, what json_format expects for bytes.
    Raises OtlpNestedTooDeep past MAX_JSON_DEPTH levels."""
    if depth > MAX_JSON_DEPTH:
        raise OtlpNestedTooDeep(f"OTLP/JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(node, list):
        return [_ids_to_base64(v, depth + 1) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in _ID_KEYS and isinstance(value, str):
            try:
                hexid = format_id(value, _ID_KEYS[key])
            except SpanRejected:
                hexid = None  # left empty: the span is then rejected as "bad_id"
            out[key] = base64.b64encode(bytes.fromhex(hexid)).decode() if hexid else ""
        else:
            out[key] = _ids_to_base64(value, depth + 1)
    return out


def members(node: Any, *keys: str) -> list[Any]:
    """The list under the first of ``keys`` present in a JSON object, else []."""
    if isinstance(node, dict):
        for key in keys:
            if isinstance(node.get(key), list):
                return node[key]
    return []


def cap_json_spans(doc: Any, max_items: int) -> int:
    """Cut a parsed OTLP/JSON request (in place) to ``max_items`` resource, scope and span entries
    in all, before the costly conversion. Returns the spans cut (see cap_request_spans)."""
    return _cap(members(doc, "resourceSpans", "resource_spans"), max_items,
                lambda rs: members(rs, "scopeSpans", "scope_spans"), lambda ss: members(ss, "spans"))


def cap_request_spans(request: Any, max_items: int) -> int:
    """Cut an ExportTraceServiceRequest (in place) to ``max_items`` resource, scope and span entries
    in all, in order: walking a request costs per entry, empty or not (8 MiB of protobuf holds 4
    million empty ones). Returns the spans cut, at least: spans cut from a scope are counted, a
    resource or scope entry cut whole counts as one (counting its spans is the walk the cap avoids)."""
    return _cap(request.resource_spans, max_items, lambda rs: rs.scope_spans, lambda ss: ss.spans)


def _cap(resources: Any, room: int, scopes_of: Any, spans_of: Any) -> int:
    cut = 0
    for i, rs in enumerate(resources):
        if room <= 0:
            cut += len(resources) - i
            del resources[i:]
            break
        room -= 1
        scopes = scopes_of(rs)
        for j, ss in enumerate(scopes):
            if room <= 0:
                cut += len(scopes) - j
                del scopes[j:]
                break
            room -= 1
            spans = spans_of(ss)
            if len(spans) > room:
                cut += len(spans) - room
                del spans[room:]
            room -= len(spans)
    return cut


def any_value(value: Any) -> Any:
    """OTLP AnyValue -> JSON scalar/list/dict."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def request_records(request: Any, source: str, counts: SpanCounts) -> Iterator[dict[str, Any]]:
    """Records of every valid span in an ExportTraceServiceRequest; rejected ones are counted."""
    for rs in request.resource_spans:
        service = _attrs(rs.resource.attributes).get("service.name")
        for ss in rs.scope_spans:
            for span in ss.spans:
                try:
                    rec = make_record(
                        trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_span_id,
                        name=span.name, kind=int(span.kind),
                        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano or None,
                        status=int(span.status.code), attributes=_attrs(span.attributes),
                        events=bound_events((e.name, e.time_unix_nano, _attrs(e.attributes)) for e in span.events),
                        service=service, source=source)
                except SpanRejected as exc:
                    counts.reject(exc.args[0])
                    continue
                count_record(counts, rec)
                yield rec


def iso_ns(text: Any) -> int | None:
    """ISO-8601 time as the console exporter writes it ('2024-05-01T10:00:00.123456Z') -> Unix ns."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise SpanRejected("bad_time") from None
    whole = int(dt.timestamp())
    return whole * 10**9 + dt.microsecond * 1000


def console_record(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """One ConsoleSpanExporter span (``span.to_json()``) -> record. Raises SpanRejected."""
    ctx = doc.get("context") or {}
    resource = (doc.get("resource") or {}).get("attributes") or {}
    events = bound_events((e.get("name", ""), iso_ns(e.get("timestamp")), e.get("attributes"))
                          for e in doc.get("events") or [])
    return make_record(
        trace_id=ctx.get("trace_id"), span_id=ctx.get("span_id"), parent_span_id=doc.get("parent_id"),
        name=doc.get("name"), kind=doc.get("kind"), start_ns=iso_ns(doc.get("start_time")),
        end_ns=iso_ns(doc.get("end_time")), status=(doc.get("status") or {}).get("status_code"),
        attributes=doc.get("attributes"), events=events, service=resource.get("service.name"), source=source)


def is_console_span(doc: Any) -> bool:
    return isinstance(doc, dict) and "context" in doc and "name" in doc and "start_time" in doc


def is_otlp_doc(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc)


def json_documents(text: str) -> Iterator[Any]:
    """Every JSON value in ``text`` (one document, JSON Lines, or pretty-printed ones back to back).

    Raises OtlpDecodeError at the first unparsable position.
    """
    decoder = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            return
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            raise OtlpDecodeError(f"malformed JSON: {str(exc)[:200]}") from None
        yield doc


def file_records(text: str, source: str, counts: SpanCounts) -> Iterator[dict[str, Any]]:
    """Records from an OTLP/JSON export or console-exporter output; a span that does not decode
    is counted in ``counts`` and the others kept (otlp_tolerant.py). Raises OtlpDecodeError."""
    found = False
    for doc in json_documents(text):
        for item in doc if isinstance(doc, list) else [doc]:
            if is_otlp_doc(item):
                from diagnose.collectors.otlp_tolerant import decode_json_spans

                found = True
                yield from request_records(decode_json_spans(item, counts), source, counts)
            elif is_console_span(item):
                found = True
                try:
                    rec = console_record(item, source)
                except SpanRejected as exc:
                    counts.reject(exc.args[0])
                    continue
                count_record(counts, rec)
                yield rec
    if not found:
        raise OtlpDecodeError("no OTLP resourceSpans and no console-exporter spans in the file")
