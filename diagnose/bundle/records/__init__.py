"""What one record of each JSON Lines stream is, as a msgspec type: decoded once, checked once.

``Bundle.typed(SPEC)`` decodes every line of a stream straight into the type its spec names
(``StreamSpec.record``: the name of a class here), so readers use attributes instead of re-checking
dict keys. A stream may be hand-edited, torn or written by a hostile target: a line that is not
JSON is a torn line (``Bundle.torn_lines``), a record whose fields have the wrong types or values
out of range is dropped and counted (``Bundle.invalid_records``); unknown fields are ignored, so
older and newer producers stay readable. Where one bad part must not cost the whole record (a
py-spy window with an unusable clock origin), the field is typed loosely and checked by a property.
A stream read leniently (``LENIENT``: the process collector's readings, the spans) decodes each line
as JSON first and builds its record field by field, so one malformed field costs only itself.

Units are in the field names (``_ns`` Unix-epoch nanoseconds unless said, ``_s`` seconds, ``_us``
microseconds, ``_bytes``). Host side only: the in-target agent writes plain dicts of these shapes
(diagnose/bundle/streams.py, standard library only, names each type here by its class name).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from diagnose.bundle.records.agent import GcPauseRecord, TorchTraceRecord
from diagnose.bundle.records.base import Count, Finite, Record, UnixNs
from diagnose.bundle.records.gpu import DcgmRecord, GpmRecord, NvmlRecord
from diagnose.bundle.records.process import ProcessReading, process_reading
from diagnose.bundle.records.pyspy import PyspySourceRecord, PyspyWindowRecord, ThreadNameRecord
from diagnose.bundle.records.serving import ServingRecord
from diagnose.bundle.records.spans import SpanRecord, span_record

# Every record type a StreamSpec names (streams.py ``record``), by class name: one module per source.
# A stream that mixes kinds by a "kind" field names a Union of tagged Records, by its alias.
RECORD_TYPES: dict[str, Any] = {t.__name__: t for t in (
    PyspyWindowRecord, PyspySourceRecord, ThreadNameRecord, GcPauseRecord, TorchTraceRecord)}
RECORD_TYPES["ServingRecord"] = ServingRecord
RECORD_TYPES.update(NvmlRecord=NvmlRecord, GpmRecord=GpmRecord, DcgmRecord=DcgmRecord, ProcessReading=ProcessReading,
                    SpanRecord=SpanRecord)
# Record types read leniently: the reading of one decoded JSON object, None when it is not one.
LENIENT: dict[str, Callable[[dict[str, Any]], Any]] = {"ProcessReading": process_reading, "SpanRecord": span_record}


_FAST = msgspec.json.Decoder()


class LineDecoder(Protocol):
    def decode(self, line: bytes) -> Any:
        """One record; msgspec.DecodeError for a line that is not a JSON object (torn),
        msgspec.ValidationError for a record of the wrong shape."""


class LenientDecoder:
    """Decodes a line as ``Bundle.records`` reads it (msgspec first; what it refuses, such as NaN or
    invalid UTF-8, by the standard library with invalid UTF-8 replaced), then builds the record with
    ``read`` (one of LENIENT)."""

    def __init__(self, read: Callable[[dict[str, Any]], Any]):
        self._read = read

    def decode(self, line: bytes) -> Any:
        try:
            raw = _FAST.decode(line)
        except Exception:  # noqa: BLE001 - any refusal: the json module decides, as Bundle.records does
            try:
                raw = json.loads(line.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):
                raise msgspec.DecodeError("not a JSON line") from None
        if not isinstance(raw, dict):
            raise msgspec.DecodeError("not a JSON object")
        rec = self._read(raw)
        if rec is None:
            raise msgspec.ValidationError("not a record of this stream")
        return rec


def decoder(type_name: str) -> LineDecoder:
    """The line decoder of the record type ``type_name`` (a StreamSpec's ``record``)."""
    read = LENIENT.get(type_name)
    return msgspec.json.Decoder(RECORD_TYPES[type_name]) if read is None else LenientDecoder(read)


__all__ = ["LENIENT", "RECORD_TYPES", "Count", "Finite", "GcPauseRecord", "LenientDecoder", "LineDecoder",
           "ProcessReading", "PyspySourceRecord", "PyspyWindowRecord", "Record", "SpanRecord", "ThreadNameRecord",
           "TorchTraceRecord",
           "UnixNs", "decoder"]
