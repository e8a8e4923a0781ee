"""The SPANS stream record shape (diagnose/bundle/streams.py SpanRecord) shared by every span
producer (agent, OTLP receiver, importers).

Pure helpers, standard library only (the agent runs them inside the target, whatever its
environment). Record shape (see the bundle conventions): trace_id (32 hex), span_id (16 hex),
parent_span_id (16 hex or None), name, kind, start_ns/end_ns (Unix-epoch ns; end_ns None while a
span is still open), status, attributes, events, service, source.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("internal", "server", "client", "producer", "consumer")
STATUSES = ("unset", "ok", "error")

# Bounds keep one pathological span from bloating the bundle or the target's memory.
MAX_ATTRIBUTES = 64
MAX_STRING_CHARS = 1024
MAX_LIST_ITEMS = 32
MAX_EVENTS = 32
MAX_NAME_CHARS = 256
LONG_SPAN_NS = 3600 * 10**9  # spans longer than an hour are kept but counted (e.g. a 24 h "serve" span)

_HEX = re.compile(r"^[0-9a-fA-F]+$")


class SpanRejected(ValueError):
    """A span that cannot be placed on the timeline; ``args[0]`` is the counter key."""


def format_id(value: Any, hex_chars: int) -> str | None:
    """Normalise a trace id (32 hex chars) or span id (16) given as int, bytes, hex, 0x-hex or base64.

    Returns None for an absent or all-zero id (OTLP's "no parent"). Raises SpanRejected("bad_id")
    when the value cannot be read as an id of that size.
    """
    if type(value) is int and 0 <= value < 1 << (4 * hex_chars):  # the SDK's ids: formatted, not copied
        return f"{value:0{hex_chars}x}" if value else None
    if value is None or value == "" or value == b"":
        return None
    nbytes = hex_chars // 2
    if isinstance(value, int):
        raw = value.to_bytes(nbytes, "big") if 0 <= value < 1 << (8 * nbytes) else None
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif isinstance(value, str):
        raw = _id_bytes(value.strip(), hex_chars)
    else:
        raw = None
    if raw is None or len(raw) != nbytes:
        raise SpanRejected("bad_id")
    return None if not any(raw) else raw.hex()


def _id_bytes(text: str, hex_chars: int) -> bytes | None:
    if text.lower().startswith("0x"):  # 0x-hex, or base64 that happens to start so ("0Xl0lLgXWOo=")
        digits = text[2:].rjust(hex_chars, "0")
        if len(digits) == hex_chars and _HEX.match(digits):
            return bytes.fromhex(digits)
    if len(text) == hex_chars and _HEX.match(text):
        return bytes.fromhex(text)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def bound_value(value: Any) -> Any:
    """A JSON-ready scalar or list within the size bounds (longer strings are cut, with a marker)."""
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING_CHARS else value[:MAX_STRING_CHARS] + "…"
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (bytes, bytearray)):
        return bound_value(bytes(value).hex())
    if isinstance(value, (list, tuple)):
        return [bound_value(v) for v in list(value)[:MAX_LIST_ITEMS]]
    return bound_value(str(value))


def bound_attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """At most MAX_ATTRIBUTES attributes, keys and values bounded."""
    out: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        if len(out) >= MAX_ATTRIBUTES:
            break
        out[str(key)[:MAX_NAME_CHARS]] = bound_value(value)
    return out


def bound_events(events: Iterable[tuple[str, int | None, Mapping[str, Any] | None]]) -> list[dict[str, Any]]:
    """``(name, t_ns, attributes)`` triples -> the record's bounded ``events`` list."""
    out: list[dict[str, Any]] = []
    for name, t_ns, attrs in events:
        if len(out) >= MAX_EVENTS:
            break
        out.append({"name": str(name)[:MAX_NAME_CHARS], "t_ns": t_ns, "attributes": bound_attributes(attrs)})
    return out


def _spellings(names: tuple[str, ...], enum: str, otlp: str) -> dict[str, str]:
    """The spellings of each name the SDK and OTLP give, looked up before the general reading."""
    return {spelled: n for n in names for spelled in (n, n.upper(), f"{enum}.{n.upper()}", f"{otlp}{n.upper()}")}


_KIND_NAMES = _spellings(KINDS, "SpanKind", "SPAN_KIND_")
_STATUS_NAMES = _spellings(STATUSES, "StatusCode", "STATUS_CODE_")


def norm_kind(kind: Any) -> str:
    """'SpanKind.SERVER', 'SPAN_KIND_SERVER', 2 (OTLP enum) or 'server' -> 'server'."""
    if type(kind) is str and kind in _KIND_NAMES:
        return _KIND_NAMES[kind]
    if isinstance(kind, int):
        # OTLP enum: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer
        return KINDS[kind - 1] if 1 <= kind <= 5 else "internal"
    text = str(kind or "").rsplit(".", 1)[-1].lower().replace("span_kind_", "")
    return text if text in KINDS else "internal"


def norm_status(code: Any) -> str:
    """'StatusCode.ERROR', 'STATUS_CODE_ERROR', 2 or 'error' -> 'error'."""
    if type(code) is str and code in _STATUS_NAMES:
        return _STATUS_NAMES[code]
    if isinstance(code, int):
        return STATUSES[code] if 0 <= code <= 2 else "unset"
    text = str(code or "").rsplit(".", 1)[-1].lower().replace("status_code_", "")
    return text if text in STATUSES else "unset"


@dataclass
class SpanCounts:
    """What happened to the spans a producer saw; goes into the manifest counts."""

    spans: int = 0
    open: int = 0
    long: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    first_start_ns: int | None = None  # the time range the kept spans cover (Unix ns)
    last_end_ns: int | None = None

    def reject(self, why: str) -> None:
        self.rejected[why] = self.rejected.get(why, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"spans": self.spans, "spans_open": self.open, "spans_over_1h": self.long,
                "spans_rejected": dict(self.rejected), "spans_first_start_ns": self.first_start_ns,
                "spans_last_end_ns": self.last_end_ns}


MAX_TIME_NS = 2**63 - 1


def make_record(*, trace_id: Any, span_id: Any, parent_span_id: Any, name: Any, kind: Any,
                start_ns: int | None, end_ns: int | None, status: Any,
                attributes: Mapping[str, Any] | None, events: list[dict[str, Any]],
                service: str | None, source: str) -> dict[str, Any]:
    """Build and check one SPANS record.

    Raises SpanRejected with the counter key: "bad_id", "no_start_time", "end_before_start",
    "time_out_of_range" (past int64 ns: OTLP's fixed64 allows it, no clock gives it).
    A span without an end time is kept with ``end_ns`` None (still open when the capture ended).
    """
    tid, sid = format_id(trace_id, 32), format_id(span_id, 16)
    if tid is None or sid is None:
        raise SpanRejected("bad_id")
    if not start_ns or start_ns <= 0:
        raise SpanRejected("no_start_time")
    end = int(end_ns) if end_ns else None
    if start_ns > MAX_TIME_NS or (end is not None and end > MAX_TIME_NS):
        raise SpanRejected("time_out_of_range")
    if end is not None and end < start_ns:
        raise SpanRejected("end_before_start")
    return {
        "trace_id": tid, "span_id": sid, "parent_span_id": format_id(parent_span_id, 16),
        "name": str(name or "")[:MAX_NAME_CHARS], "kind": norm_kind(kind),
        "start_ns": int(start_ns), "end_ns": end, "status": norm_status(status),
        "attributes": bound_attributes(attributes), "events": events,
        "service": str(service) if service is not None else None, "source": source,
    }


def count_record(counts: SpanCounts, record: dict[str, Any]) -> None:
    counts.spans += 1
    start, end = record["start_ns"], record["end_ns"]
    counts.first_start_ns = start if counts.first_start_ns is None else min(counts.first_start_ns, start)
    if end is not None:
        counts.last_end_ns = end if counts.last_end_ns is None else max(counts.last_end_ns, end)
    if record["end_ns"] is None:
        counts.open += 1
    elif record["end_ns"] - record["start_ns"] > LONG_SPAN_NS:
        counts.long += 1
